#!/usr/bin/env bash
# The whole test suite: the addon is rebuilt if its sources changed, the C tests run under
# ASan/UBSan and valgrind, then mocha runs every JS test against the local OpenSandbox-compatible server.
set -uo pipefail
cd "$(dirname "$0")/.."
export MASTRA_TELEMETRY_DISABLED=1
node scripts/build.js --incremental >/dev/null || { echo "addon build failed"; exit 1; }
c_rc=0
if [ -f test/c/Makefile ]; then
  make -s -C test/c check || c_rc=$?
fi
ts_rc=0
npx tsc -p examples || { echo "tsc -p examples (type check of the TypeScript examples) failed"; ts_rc=1; }
npx mocha --reporter spec "test/**/*.test.js"
js_rc=$?
[ "$c_rc" -eq 0 ] && [ "$ts_rc" -eq 0 ] && [ "$js_rc" -eq 0 ]
