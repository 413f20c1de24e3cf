#!/usr/bin/env bash
# execd-deps.sh SRC_DIR PREFIX CC: builds the static libraries of the prebuilt C execd osb-execd — libuv (only its
# static archive, no tests or benchmarks) and cJSON (one file) — from the unpacked Debian source packages in SRC_DIR
# (libuv1-*, cjson-*) with CC, the musl compiler made by scripts/prebuild.sh (gcc or the arm64 cross gcc with musl's
# specs: musl's headers, start files and libc.a), into PREFIX/{include,lib}. musl rather than glibc: see
# docs/ARCHITECTURE.md "Native build". The cache key of prebuild.sh includes this file.
set -euo pipefail
src=$1 prefix=$2 cc=$3
jobs=${MASTRA_OPENSANDBOX_PREBUILD_JOBS:-$(nproc)}
mkdir -p "$prefix/lib" "$prefix/include/cjson"
log=$prefix/build.log # the tools' output; shown when a step fails
trap 'status=$?; [ $status -eq 0 ] || { tail -30 "$log"; echo "execd-deps.sh: failed (whole log: $log)" >&2; }' EXIT
ar=${cc%/*}/ar # the wrapper directory holds the target's ar too

# cJSON: one file, as deps.sh builds it for the addon but against musl's headers.
cj=$(echo "$src"/cjson-*/)
"$cc" -std=c89 -O2 -c "$cj/cJSON.c" -o "$prefix/cJSON.o" >>"$log" 2>&1
"$ar" rcs "$prefix/lib/libcjson.a" "$prefix/cJSON.o"
rm "$prefix/cJSON.o"
cp "$cj/cJSON.h" "$prefix/include/cjson/"

# libuv: the uv_a target of its CMake build (the static archive), nothing else.
uv=$(echo "$src"/libuv1-*/)
cmake -S "$uv" -B "$prefix/build-uv" -G Ninja -Wno-dev -DCMAKE_BUILD_TYPE=Release -DCMAKE_SYSTEM_NAME=Linux \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_AR="$ar" -DCMAKE_RANLIB="${cc%/*}/ranlib" -DCMAKE_C_FLAGS="-O2" \
  -DLIBUV_BUILD_TESTS=OFF -DLIBUV_BUILD_BENCH=OFF >>"$log" 2>&1
ninja -C "$prefix/build-uv" -j"$jobs" uv_a >>"$log" 2>&1
cp "$prefix/build-uv/libuv_a.a" "$prefix/lib/libuv.a"
cp -r "$uv/include/uv.h" "$uv/include/uv" "$prefix/include/"
rm -rf "$prefix/build-uv"
