#!/usr/bin/env bash
# The whole test suite: the addon is rebuilt if its sources changed, the C tests run under ASan/UBSan, valgrind and
# TSan (plus a bounded fuzz run), the TypeScript examples are type-checked, the package is packed with its prebuilt
# addons and smoke-tested as a user installs it (scripts/test-packed.sh: no compiler, no C libraries; the arm64 one
# under qemu-user), then mocha runs
# every JS test against the local OpenSandbox-compatible server — loading that prebuilt .node
# (MASTRA_OPENSANDBOX_ADDON) and, in the sandboxes, the prebuilt C execd osb-execd beside it (execd-binary.js), so the
# binaries that ship are the ones the whole suite exercises; the source build is
# exercised by the C tests and compiled here. Every benchmark then runs at smoke size (`scripts/bench-all.js --smoke`,
# seconds) so that none breaks unnoticed. The last line sums everything up as "N passed, N failed, N skipped".
set -uo pipefail
cd "$(dirname "$0")/.."
export MASTRA_TELEMETRY_DISABLED=1
node scripts/build.js --incremental >/dev/null || { echo "addon build failed"; echo "0 passed, 1 failed"; exit 1; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT

c_rc=0
make -s -j"$(nproc)" -C test/c check 2>&1 | tee "$log" || c_rc=1
c_pass=$(sed -n 's/^\([0-9][0-9]*\) passed, \([0-9][0-9]*\) failed$/\1/p' "$log" | tail -1)
c_fail=$(sed -n 's/^\([0-9][0-9]*\) passed, \([0-9][0-9]*\) failed$/\2/p' "$log" | tail -1)

ts_rc=0
npx tsc -p examples || { echo "tsc -p examples (type check of the TypeScript examples) failed"; ts_rc=1; }

packed_rc=0
bash scripts/test-packed.sh || packed_rc=1
prebuilt=$PWD/build/prebuild/linux-$(node -p process.arch)/mastra_opensandbox.node
if [ "$packed_rc" -eq 0 ] && [ -f "$prebuilt" ]; then
  echo "mocha runs against the prebuilt addon $prebuilt"
  export MASTRA_OPENSANDBOX_ADDON=$prebuilt
fi

npx mocha --reporter spec "test/**/*.test.js" 2>&1 | tee "$log"
js_rc=${PIPESTATUS[0]}
js_pass=$(sed -n 's/^ *\([0-9][0-9]*\) passing.*/\1/p' "$log" | tail -1)
js_fail=$(sed -n 's/^ *\([0-9][0-9]*\) failing.*/\1/p' "$log" | tail -1)
js_skip=$(sed -n 's/^ *\([0-9][0-9]*\) pending.*/\1/p' "$log" | tail -1)

bench_rc=0
node scripts/bench-all.js --smoke || { echo "the benchmarks at smoke size (scripts/bench-all.js --smoke) failed"; bench_rc=1; }

passed=$(( ${c_pass:-0} + ${js_pass:-0} + (ts_rc == 0 ? 1 : 0) + (packed_rc == 0 ? 1 : 0) + (bench_rc == 0 ? 1 : 0) ))
failed=$(( ${c_fail:-0} + ${js_fail:-0} + ts_rc + packed_rc + bench_rc ))
# a runner that died without its own count still fails the suite
[ "$c_rc" -ne 0 ] && [ "${c_fail:-0}" -eq 0 ] && failed=$((failed + 1))
[ "$js_rc" -ne 0 ] && [ "${js_fail:-0}" -eq 0 ] && failed=$((failed + 1))
echo
echo "${passed} passed, ${failed} failed, ${js_skip:-0} skipped"
[ "$failed" -eq 0 ]
