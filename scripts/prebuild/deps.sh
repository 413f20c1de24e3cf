#!/usr/bin/env bash
# deps.sh SRC_DIR PREFIX ARCH SSL_INCLUDE SSL_LIBDIR: builds the static, position-independent C libraries of the prebuilt addon from the
# unpacked Debian source packages in SRC_DIR (curl-*, libwebsockets-*, cjson-*) into PREFIX/{include,lib}, each
# configured for what the addon uses: curl speaks HTTP and HTTPS only; libwebsockets is the HTTP/1 + WebSocket
# client/server core. OpenSSL is Debian's own static libssl.a/libcrypto.a (in SSL_LIBDIR, headers in SSL_INCLUDE:
# for a cross build those of the target's libssl-dev .deb). The cache key of prebuild.sh includes
# this file, so a change here rebuilds the libraries.
set -euo pipefail
src=$1 prefix=$2 arch=$3 ssl_inc=$4 ssl_lib=$5
case $arch in
  x64) triplet=x86_64-linux-gnu ;;
  arm64) triplet=aarch64-linux-gnu ;;
  *) echo "deps.sh: unknown arch $arch" >&2; exit 2 ;;
esac
jobs=${MASTRA_OPENSANDBOX_PREBUILD_JOBS:-$(nproc)}
cc=gcc
cross=()
if [ "$arch" = arm64 ] && [ "$(uname -m)" != aarch64 ]; then
  cc=$triplet-gcc
  # Debian's cross compiler and its sysroot; nothing of the host's libraries or CMake packages may be found
  cross=(-DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64 -DCMAKE_C_COMPILER=$cc
    -DCMAKE_CXX_COMPILER=$triplet-g++ -DCMAKE_AR="$(command -v $triplet-ar)" -DCMAKE_RANLIB="$(command -v $triplet-ranlib)"
    -DCMAKE_FIND_ROOT_PATH=/usr/$triplet -DCMAKE_FIND_ROOT_PATH_MODE_PROGRAM=NEVER
    -DCMAKE_FIND_ROOT_PATH_MODE_LIBRARY=ONLY -DCMAKE_FIND_ROOT_PATH_MODE_INCLUDE=ONLY -DCMAKE_FIND_ROOT_PATH_MODE_PACKAGE=ONLY)
fi
common=(-G Ninja -Wno-dev -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_LIBDIR=lib
  -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DBUILD_SHARED_LIBS=OFF -DCMAKE_C_FLAGS="-O2 -fvisibility=hidden"
  "${cross[@]}")
mkdir -p "$prefix/lib" "$prefix/include"
log=$prefix/build.log # the tools' output; shown when a step fails
trap 'status=$?; [ $status -eq 0 ] || { tail -30 "$log"; echo "deps.sh: failed (whole log: $log)" >&2; }' EXIT
cp "$ssl_lib/libssl.a" "$ssl_lib/libcrypto.a" "$prefix/lib/"

# cJSON: one file.
cj=$(echo "$src"/cjson-*/)
"$cc" -std=c89 -O2 -fPIC -fvisibility=hidden -c "$cj/cJSON.c" -o "$prefix/cJSON.o"
"${cc%gcc}ar" rcs "$prefix/lib/libcjson.a" "$prefix/cJSON.o"
rm "$prefix/cJSON.o"
mkdir -p "$prefix/include/cjson"
cp "$cj/cJSON.h" "$prefix/include/cjson/"

# curl: HTTP(S) only, OpenSSL, threaded resolver; no compression, IDN, PSL, HTTP/2, SSH, LDAP, GSSAPI, RTMP.
# The CA bundle/path are chosen at run time by the addon (src/core/tls_ca.c), so none is compiled in.
cmake -S "$(echo "$src"/curl-*/)" -B "$prefix/build-curl" "${common[@]}" \
  -DBUILD_CURL_EXE=OFF -DBUILD_TESTING=OFF -DENABLE_MANUAL=OFF -DPICKY_COMPILER=OFF \
  -DHTTP_ONLY=ON -DCURL_DISABLE_LDAP=ON -DCURL_DISABLE_LDAPS=ON -DCURL_DISABLE_ALTSVC=ON -DCURL_DISABLE_HSTS=ON \
  -DCURL_DISABLE_COOKIES=ON -DCURL_DISABLE_NETRC=ON -DCURL_DISABLE_MIME=ON -DCURL_DISABLE_DOH=ON \
  -DCURL_USE_OPENSSL=ON -DOPENSSL_USE_STATIC_LIBS=TRUE -DOPENSSL_INCLUDE_DIR="$ssl_inc" \
  -DOPENSSL_SSL_LIBRARY="$ssl_lib/libssl.a" -DOPENSSL_CRYPTO_LIBRARY="$ssl_lib/libcrypto.a" \
  -DUSE_NGHTTP2=OFF -DUSE_LIBIDN2=OFF -DCURL_USE_LIBPSL=OFF -DCURL_USE_LIBSSH2=OFF -DCURL_USE_LIBSSH=OFF \
  -DCURL_USE_GSSAPI=OFF -DCURL_BROTLI=OFF -DCURL_ZSTD=OFF -DCMAKE_DISABLE_FIND_PACKAGE_ZLIB=ON -DUSE_LIBRTMP=OFF \
  -DENABLE_THREADED_RESOLVER=ON -DCURL_CA_BUNDLE=none -DCURL_CA_PATH=none -DCURL_CA_FALLBACK=OFF >>"$log" 2>&1
ninja -C "$prefix/build-curl" -j"$jobs" >>"$log" 2>&1
cmake --install "$prefix/build-curl" >>"$log" 2>&1

# libwebsockets: client + server core over OpenSSL; no HTTP/2, extensions (zlib), plugins, event-loop libraries,
# libcap or test apps.
cmake -S "$(echo "$src"/libwebsockets-*/)" -B "$prefix/build-lws" "${common[@]}" \
  -DLWS_WITH_SHARED=OFF -DLWS_WITH_STATIC=ON -DLWS_STATIC_PIC=ON \
  -DLWS_WITHOUT_TESTAPPS=ON -DLWS_WITH_MINIMAL_EXAMPLES=OFF -DLWS_WITHOUT_EXTENSIONS=ON -DLWS_WITH_ZLIB=OFF \
  -DLWS_WITH_HTTP2=OFF -DLWS_IPV6=ON -DLWS_WITH_EVLIB_PLUGINS=OFF -DLWS_WITH_LIBUV=OFF -DLWS_WITH_LIBEV=OFF \
  -DLWS_WITH_LIBEVENT=OFF -DLWS_WITH_GLIB=OFF -DLWS_WITH_PLUGINS=OFF -DLWS_WITH_PLUGINS_API=OFF \
  -DLWS_ROLE_RAW_FILE=OFF -DLWS_HAVE_LIBCAP=OFF -DDISABLE_WERROR=ON \
  -DLWS_WITH_SSL=ON -DLWS_OPENSSL_INCLUDE_DIRS="$ssl_inc" \
  -DLWS_OPENSSL_LIBRARIES="$ssl_lib/libssl.a;$ssl_lib/libcrypto.a" >>"$log" 2>&1
ninja -C "$prefix/build-lws" -j"$jobs" >>"$log" 2>&1
cmake --install "$prefix/build-lws" >>"$log" 2>&1
rm -rf "$prefix/build-curl" "$prefix/build-lws" "$prefix/share" "$prefix/bin" "$prefix/lib/cmake" "$prefix/lib/pkgconfig"
