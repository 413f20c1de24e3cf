#!/usr/bin/env bash
# npm run prebuild [-- --arch x64|arm64] [--stage]: the self-contained prebuilt addon that the npm package carries,
#   build/prebuild/linux-<arch>/mastra_opensandbox.node  + build/prebuild/linux-<arch>/NOTICES/
# and beside it the C execd, build/prebuild/linux-<arch>/osb-execd, a static executable (musl, libuv and cJSON linked
# in: no interpreter, no NEEDED, so it runs in any root file system; `osb-execd --version` is run, under qemu-user for
# arm64 on x64).
# --stage (prepack) also copies it to prebuilds/linux-<arch>/, which lib/native.js loads first and the package's
# "files" include; postpack removes prebuilds/ again, so a checkout keeps loading its own build/Release.
# curl (HTTP/HTTPS only), libwebsockets, cJSON and OpenSSL are built from Debian's source packages of the versions
# installed on this machine and linked in statically; the .node exports only the two Node-API entry points and
# needs nothing but glibc >= 2.28, libstdc++ and libgcc_s. The script fails when the binary breaks that promise
# (highest GLIBC_ version, NEEDED list, exported symbols).
#
# The static libraries are cached, keyed by the source versions, the compiler and scripts/prebuild/deps.sh, in
# $MASTRA_OPENSANDBOX_PREBUILD_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/mastra-opensandbox/prebuild): a cold run
# downloads ~18 MB of sources and compiles them (minutes), a warm one only links the addon. Needs: dpkg-dev
# (apt-get source), cmake, ninja-build, libssl-dev (its libssl.a/libcrypto.a) and the -dev packages whose versions
# are used, musl-tools (musl-dev: osb-execd's C library); --arch arm64 on x64 also gcc-aarch64-linux-gnu and
# g++-aarch64-linux-gnu (its OpenSSL and musl-dev are downloaded).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
arch=x64 stage=0
while [ $# -gt 0 ]; do
  case $1 in
    --arch) arch=${2:-}; shift 2 ;;
    --stage) stage=1; shift ;;
    *) echo "usage: npm run prebuild [-- --arch x64|arm64] [--stage]" >&2; exit 2 ;;
  esac
done
say() { echo "prebuild: $*"; }
die() { echo "prebuild: $*" >&2; exit 1; }

case $arch in
  x64) triplet=x86_64-linux-gnu; machine=x86_64; loader=ld-linux-x86-64.so.2; debarch=amd64 ;;
  arm64) triplet=aarch64-linux-gnu; machine=aarch64; loader=ld-linux-aarch64.so.1; debarch=arm64 ;;
  *) die "unknown --arch $arch (x64 or arm64)" ;;
esac
tp="" # binutils/compiler prefix: Debian's cross tools when the target is not this machine
[ "$(uname -m)" = "$machine" ] || tp=$triplet-
cc=${tp}gcc cxx=${tp}g++

# What the binary promises (README "Prebuilt binary"); checked at the end.
GLIBC_FLOOR=2.28
GLIBCXX_FLOOR=3.4.21
NEEDED_OK="libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 libstdc++.so.6 libgcc_s.so.1 $loader"
EXPORTS="napi_register_module_v1 node_api_module_get_api_version_v1"

# ---- 1. the static C libraries (cached)
ver() {
  local v
  v=$(dpkg-query -W -f='${source:Version}' "$1" 2>/dev/null) || die "$1 is not installed (apt-get install $1)"
  echo "$v"
}
# OpenSSL: the static libraries of the mirror's newest libssl-dev for the target architecture (its security
# updates: a machine image may hold an older one), its .deb downloaded and unpacked in the scratch directory, never
# installed: for arm64 on x64 multiarch would force the host's libssl-dev, libssl3 and openssl to the same version
# and add arm64 libc6 to the system. OPENSSL_VERSION in the cache and NOTICES/README.txt say which; the host's version
# is in the key, so updating the host's libssl-dev also rebuilds both.
curl_v=$(ver libcurl4-openssl-dev) lws_v=$(ver libwebsockets-dev) cjson_v=$(ver libcjson-dev) ssl_v=$(ver libssl-dev)
for t in cmake ninja "$cc" "$cxx" "${tp}ar" "${tp}nm" "${tp}strip" "${tp}readelf" dpkg-source; do
  command -v "$t" >/dev/null || die "$t not found${tp:+ (apt-get install gcc-$triplet g++-$triplet)}"
done
key="$arch curl=$curl_v libwebsockets=$lws_v cjson=$cjson_v openssl=$ssl_v(host; the mirror's newest linked) $($cc -dumpfullversion) deps.sh=$(sha256sum scripts/prebuild/deps.sh | cut -c1-16)"
cache=${MASTRA_OPENSANDBOX_PREBUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mastra-opensandbox/prebuild}
deps=$cache/deps-$arch-$(echo "$key" | sha256sum | cut -c1-16)
mkdir -p "$cache"

# The machine's own Debian mirrors as deb-src entries (and, for a cross build, deb entries for the target's
# binary packages) in a private apt directory (no change to /etc/apt or dpkg; removed with the scratch directory):
# one-line and deb822 sources whose URIs are Debian's or Ubuntu's, without their architecture restrictions.
debsrc() {
  local f t types="deb deb-src"
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    for t in $types; do
      [ -f "$f" ] && sed -n -E 's/^deb(\s+\[[^]]*\])?\s+((https?|file):[^ ]*(debian|ubuntu)[^ ]*\s.*)$/'$t'\1 \2/p' "$f" |
        sed -E 's/ arch=[^] ]*//; s/ \[ *\]//'
    done
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] && awk -v types="$types" 'BEGIN { RS=""; ORS="\n\n" } /(^|\n)URIs:[^\n]*(debian|ubuntu)/ && /(^|\n)Types:[^\n]*deb/ && !/(^|\n)Enabled: *no/ {
      sub(/(^|\n)Types:[^\n]*/, "\nTypes: " types); gsub(/\nArchitectures:[^\n]*/, ""); print }' "$f"
  done
}

scratches=()
# private_apt: a scratch directory ($scratch, removed on exit) with that private apt directory, updated; sets apt_opts.
private_apt() {
  scratch=$(mktemp -d "$cache/scratch.XXXXXX")
  scratches+=("$scratch")
  trap 'rm -rf "${scratches[@]}"' EXIT
  a=$scratch/apt
  mkdir -p "$a/sources.list.d" "$a/lists/partial" "$a/cache/archives/partial" "$scratch/src"
  debsrc > "$a/sources.list.d/deb-src.sources"
  grep -q deb-src "$a/sources.list.d/deb-src.sources" || die "no Debian/Ubuntu entry in /etc/apt to derive deb-src from"
  apt_opts=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$a/sources.list.d" -o "Dir::State::Lists=$a/lists"
    -o "Dir::Cache=$a/cache" -o "APT::Sandbox::User=$(id -un)" -qq)
  [ -z "$tp" ] || apt_opts+=(-o "APT::Architectures::=$arch")
  apt-get "${apt_opts[@]}" update || die "apt-get update of the deb-src entries failed"
}

if [ ! -f "$deps/.complete" ]; then
  start=$SECONDS
  say "building the static libraries ($key) into $deps"
  private_apt
  (cd "$scratch/src" && apt-get "${apt_opts[@]}" source curl="$curl_v" libwebsockets="$lws_v" cjson="$cjson_v" >/dev/null) ||
    die "apt-get source curl=$curl_v libwebsockets=$lws_v cjson=$cjson_v failed (is that version still on the mirror?)"
  ssl_v_host=$ssl_v
  ssl_v=$(apt-cache "${apt_opts[@]}" policy "libssl-dev:$debarch" | sed -n 's/^ *Candidate: //p')
  [ -n "$ssl_v" ] && [ "$ssl_v" != "(none)" ] || die "the mirror has no libssl-dev for $debarch"
  [ "$ssl_v" = "$ssl_v_host" ] || say "OpenSSL: the mirror's libssl-dev $ssl_v (this machine has $ssl_v_host)"
  (cd "$scratch" && apt-get "${apt_opts[@]}" download "libssl-dev:$debarch=$ssl_v") || die "apt-get download libssl-dev:$debarch=$ssl_v failed"
  dpkg-deb -x "$scratch"/libssl-dev_*.deb "$scratch/ssl"
  # one include directory: the common headers and this architecture's configuration.h
  ssl_inc=$scratch/ssl/include ssl_lib=$scratch/ssl/usr/lib/$triplet ssl_doc=$scratch/ssl/usr/share/doc/libssl-dev
  cp -r "$scratch/ssl/usr/include" "$ssl_inc"
  cp "$ssl_inc/$triplet"/openssl/* "$ssl_inc/openssl/"
  bash scripts/prebuild/deps.sh "$scratch/src" "$scratch/prefix" "$arch" "$ssl_inc" "$ssl_lib"
  # license notices of what gets linked in
  n=$scratch/prefix/NOTICES
  mkdir -p "$n"
  cp "$scratch"/src/curl-*/COPYING "$n/curl.txt"
  cp "$scratch"/src/cjson-*/LICENSE "$n/cJSON.txt"
  cp "$scratch"/src/libwebsockets-*/LICENSE "$n/libwebsockets.txt"
  for f in lib/misc/sha-1.c lib/misc/base64-decode.c; do # compiled in, under their own notices
    { echo "libwebsockets $f:"; sed -n '1,/\*\//p' "$scratch"/src/libwebsockets-*/"$f"; } > "$n/libwebsockets-$(basename "$f" .c).txt"
  done
  # OpenSSL 3 is under the Apache License 2.0 (its LICENSE.txt is that text): Debian's copyright file + the text
  cat "$ssl_doc/copyright" /usr/share/common-licenses/Apache-2.0 > "$n/OpenSSL.txt"
  echo "$key" > "$scratch/prefix/VERSIONS"
  echo "$ssl_v" > "$scratch/prefix/OPENSSL_VERSION"
  rm -rf "$deps"
  mv "$scratch/prefix" "$deps"
  touch "$deps/.complete"
  say "static libraries built in $((SECONDS - start)) s"
fi

# ---- 1b. osb-execd's toolchain and libraries: musl (statically linked: no interpreter, no NEEDED, runs in any root
# file system; docs/ARCHITECTURE.md "Native build" says why musl and not glibc's -static), libuv and cJSON built for
# it from the Debian source packages of the installed libuv1-dev and libcjson-dev (scripts/prebuild/execd-deps.sh).
# musl is Debian's musl-dev of the version installed here: for a native build this machine's own, for a cross build
# the target's musl-dev .deb downloaded and unpacked (never installed). The compiler is gcc (or the cross gcc) with
# musl's specs file, its paths pointed at that musl: $xd/bin/cc. Cached by architecture and versions.
musl_v=$(ver musl-dev) uv_v=$(ver libuv1-dev)
mtriplet=${triplet%-gnu}-musl
xd_key="$arch musl=$musl_v libuv=$uv_v cjson=$cjson_v $($cc -dumpfullversion) execd-deps.sh=$(sha256sum scripts/prebuild/execd-deps.sh | cut -c1-16)"
xd=$cache/execd-$arch-$(echo "$xd_key" | sha256sum | cut -c1-16)
if [ ! -f "$xd/.complete" ]; then
  start=$SECONDS
  say "building osb-execd's static libraries ($xd_key) into $xd"
  rm -rf "$xd" "$xd.partial"
  mkdir -p "$xd.partial/bin" "$xd.partial/NOTICES"
  private_apt
  (cd "$scratch/src" && apt-get "${apt_opts[@]}" source libuv1="$uv_v" cjson="$cjson_v" >/dev/null) ||
    die "apt-get source libuv1=$uv_v cjson=$cjson_v failed (is that version still on the mirror?)"
  if [ -z "$tp" ]; then
    musl_root=
  else
    (cd "$scratch" && apt-get "${apt_opts[@]}" download "musl-dev:$debarch=$musl_v") || die "apt-get download musl-dev:$debarch=$musl_v failed"
    dpkg-deb -x "$scratch"/musl-dev_*.deb "$xd.partial/musl"
    musl_root=$xd/musl
  fi
  specs=${musl_root:-}/usr/lib/$mtriplet/musl-gcc.specs
  [ -f "${musl_root:+$xd.partial/musl}/usr/lib/$mtriplet/musl-gcc.specs" ] || die "no $specs (apt-get install musl-tools)"
  sed -e "s| /usr/| ${musl_root}/usr/|g; s|-L/usr/|-L${musl_root}/usr/|g" \
    "${musl_root:+$xd.partial/musl}/usr/lib/$mtriplet/musl-gcc.specs" > "$xd.partial/musl-gcc.specs"
  printf '#!/bin/sh\nexec %s "$@" -specs "%s"\n' "$(command -v "$cc")" "$xd/musl-gcc.specs" > "$xd.partial/bin/cc"
  chmod +x "$xd.partial/bin/cc"
  ln -s "$(command -v "${tp}ar")" "$xd.partial/bin/ar"
  ln -s "$(command -v "${tp}ranlib")" "$xd.partial/bin/ranlib"
  mv "$xd.partial" "$xd" # the specs and cc name $xd: the libraries are built in place
  bash scripts/prebuild/execd-deps.sh "$scratch/src" "$xd" "$xd/bin/cc" || { rm -rf "$xd"; die "osb-execd's libraries failed"; }
  cp "$scratch"/src/libuv1-*/debian/copyright "$xd/NOTICES/libuv.txt"
  cp "${musl_root:+$xd/musl}/usr/share/doc/musl-dev/copyright" "$xd/NOTICES/musl.txt"
  echo "$xd_key" > "$xd/VERSIONS"
  touch "$xd/.complete"
  say "osb-execd's static libraries built in $((SECONDS - start)) s"
fi

# ---- 2. the addon, linked in a copy of the package's build files (the developer's build/Release stays as it is);
# incremental while the libraries, the link files and the compilers stay the same
work=$root/build/prebuild-work-$arch
out=$root/build/prebuild/linux-$arch
link_key="$deps $xd $cc $cxx $(cat scripts/prebuild/exports.map scripts/prebuild/glibc-compat.c | sha256sum)"
[ "$(cat "$work/.link-key" 2>/dev/null)" = "$link_key" ] || rm -rf "$work"
rm -rf "$out"
mkdir -p "$work/scripts" "$work/static" "$out"
rm -rf "$work/src"
cp -a binding.gyp src package.json "$work/" # timestamps kept: make recompiles only what changed
cp -a scripts/build.js "$work/scripts/"
if [ ! -f "$work/.link-key" ]; then
  ln -s "$deps/include" "$deps/lib" "$work/static/"
  cp scripts/prebuild/exports.map "$work/static/"
  "$cc" -std=gnu11 -Wall -Wextra -Werror -O2 -fPIC -c scripts/prebuild/glibc-compat.c -o "$work/static/glibc-compat.o"
  "${tp}nm" "$work/static/glibc-compat.o" | sed -n 's/.* T __wrap_//p' > "$work/static/wrap.txt"
  ln -s "$xd" "$work/static/execd" # osb-execd: musl's compiler, libuv and cJSON (build.js links it -static)
fi
gyp_arch=()
[ "$arch" = x64 ] || gyp_arch=(--arch=arm64)
(cd "$work" && CC=$cc CXX=$cxx AR=${tp}ar MASTRA_OPENSANDBOX_STATIC_DEPS=$work/static \
  node scripts/build.js --incremental "${gyp_arch[@]}" > "$work/build.log" 2>&1) || { tail -40 "$work/build.log"; die "addon build failed"; }
echo "$link_key" > "$work/.link-key"
node=$out/mastra_opensandbox.node
"${tp}strip" --strip-unneeded -o "$node" "$work/build/Release/mastra_opensandbox.node"
execd=$out/osb-execd
"${tp}strip" -o "$execd" "$work/build/Release/osb-execd"

ssl_v=$(cat "$deps/OPENSSL_VERSION" 2>/dev/null || echo "$ssl_v") # what the build took (the mirror's)

# ---- 3. the promise: glibc floor, NEEDED, exports; osb-execd static (no program interpreter, no dynamic section)
newest() { "${tp}readelf" -W --version-info "$2" | grep -o "Name: $1[0-9.]*" | sed "s/Name: $1//" | sort -V | tail -1; }
le() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | tail -1)" = "$2" ]; }
glibc=$(newest GLIBC_ "$node") glibcxx=$(newest GLIBCXX_ "$node")
le "$glibc" "$GLIBC_FLOOR" || die "the addon needs GLIBC_$glibc > $GLIBC_FLOOR: $("${tp}readelf" -W --dyn-syms "$node" | grep -o "[a-z_0-9]*@GLIBC_$glibc" | sort -u | tr '\n' ' ')"
le "${glibcxx:-0}" "$GLIBCXX_FLOOR" || die "needs GLIBCXX_$glibcxx > $GLIBCXX_FLOOR"
needed_of() { "${tp}readelf" -W -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort | tr '\n' ' '; }
needed=$(needed_of "$node")
for l in $needed; do
  case " $NEEDED_OK " in *" $l "*) ;; *) die "needs $l (allowed: $NEEDED_OK)" ;; esac
done
[ "$("${tp}readelf" -W -h "$execd" | sed -n 's/^ *Type: *\([A-Z]*\).*/\1/p')" = EXEC ] || die "osb-execd is not a static ELF executable"
! "${tp}readelf" -W -l "$execd" | grep -q INTERP || die "osb-execd has a program interpreter: $("${tp}readelf" -W -l "$execd" | grep -A1 INTERP)"
"${tp}readelf" -W -d "$execd" | grep -q 'no dynamic section' || die "osb-execd has a dynamic section (NEEDED: $(needed_of "$execd"))"
exports=$("${tp}readelf" -W --dyn-syms "$node" | awk '$7 != "UND" && ($5 == "GLOBAL" || $5 == "WEAK") && $4 != "SECTION" { print $8 }' | sed 's/@.*//' | sort | tr '\n' ' ')
[ "$exports" = "$(echo $EXPORTS | tr ' ' '\n' | sort | tr '\n' ' ')" ] || die "exports '$exports', expected '$EXPORTS'"

# ---- 4. notices, a load test where the binary runs here
cp -r "$deps/NOTICES" "$out/NOTICES"
cp "$xd/NOTICES/libuv.txt" "$xd/NOTICES/musl.txt" "$out/NOTICES/"
cp node_modules/node-addon-api/LICENSE.md "$out/NOTICES/node-addon-api.txt"
sed -n '/^GCC RUNTIME LIBRARY EXCEPTION/,/requirements of the license of GCC\./p' /usr/share/doc/libgcc-s1/copyright > "$out/NOTICES/gcc-runtime-library-exception.txt"
cat > "$out/NOTICES/README.txt" <<EOF
mastra_opensandbox.node (linux-$arch) contains, linked statically:
  curl/libcurl $curl_v (Debian source package; HTTP and HTTPS only)  -> curl.txt
  libwebsockets $lws_v (MIT; also compiles in the files of libwebsockets-sha-1.txt and libwebsockets-base64-decode.txt) -> libwebsockets*.txt
  cJSON $cjson_v (MIT) -> cJSON.txt
  OpenSSL $ssl_v (Apache License 2.0) -> OpenSSL.txt
  node-addon-api (MIT) -> node-addon-api.txt
  startup code and helpers of GCC's runtime (GPL-3.0 with the GCC Runtime Library Exception) -> gcc-runtime-library-exception.txt
It links dynamically to glibc, libstdc++ and libgcc_s of the system it runs on.

osb-execd (linux-$arch), the local server's execd inside a sandbox, contains, linked statically:
  musl $musl_v (Debian's musl-dev; MIT, Debian's copyright file) -> musl.txt
  libuv $uv_v (Debian source package; MIT and others, Debian's copyright file) -> libuv.txt
  cJSON $cjson_v (MIT) -> cJSON.txt
  startup code and helpers of GCC's runtime (GPL-3.0 with the GCC Runtime Library Exception) -> gcc-runtime-library-exception.txt
It needs no library of the system it runs on (a static executable for the Linux kernel's $machine system calls).
EOF
if [ "$arch" = x64 ] && [ "$(uname -m)" = x86_64 ]; then
  node -e "const m = require(process.argv[1]); if (typeof m.versions !== 'function') process.exit(1)" "$node" || die "$node does not load"
fi
# osb-execd runs: here, or under qemu-user (static: no library root needed)
pkg_v=$(node -p "require('./package.json').version")
run_execd=("$execd")
[ -z "$tp" ] || run_execd=("qemu-$machine" "$execd")
if [ -z "$tp" ] || command -v "qemu-$machine" >/dev/null; then
  v=$("${run_execd[@]}" --version) || die "$execd --version failed"
  [ "$v" = "osb-execd $pkg_v" ] || die "$execd --version printed '$v', expected 'osb-execd $pkg_v'"
else
  say "qemu-$machine not found: osb-execd --version not run"
fi
size=$(stat -c %s "$node")
say "$node: $((size / 1024)) KiB, GLIBC_$glibc, GLIBCXX_${glibcxx:-none}, NEEDED $needed"
say "$execd: $(($(stat -c %s "$execd") / 1024)) KiB, static ($machine, musl $musl_v; no interpreter, no dynamic section)"
if [ "$stage" = 1 ]; then
  rm -rf "prebuilds/linux-$arch"
  mkdir -p prebuilds
  cp -r "$out" "prebuilds/linux-$arch"
fi
