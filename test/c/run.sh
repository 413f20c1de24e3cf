#!/usr/bin/env bash
# Driver of `make check`: starts the dev-server's execd standalone (node from PATH) on a free loopback port, runs
# every C test under ASan/UBSan and under valgrind, the threaded tests under TSan, runs the fuzz targets for a bounded number of runs, stops execd
# and prints the total as "N passed, N failed". Exit status 0 only when nothing failed.
set -u
cd "$(dirname "$0")"
ROOT=$(cd ../.. && pwd)
B=build
FUZZ_RUNS=${FUZZ_RUNS:-20000}
passed=0
failed=0

ws=$(mktemp -d)
execd_pids=()
cleanup() {
  for p in "${execd_pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  rm -rf "$ws"
}
trap cleanup EXIT

# start_execd <var> <log> [execd options…]: starts one execd on a free port and sets <var> to its URL ("" if it
# did not start).
start_execd() {
  local var=$1 log=$2 pid port=""
  shift 2
  "${OSB_EXECD:-$ROOT/build/Release/osb-execd}" --port 0 --workspace "$ws" --code-kernels "$ROOT/lib/dev-server/execd" "$@" >"$log" 2>&1 &
  pid=$!
  execd_pids+=("$pid")
  for _ in $(seq 1 100); do # up to 10 s for "execd ready <port>"
    port=$(sed -n 's/^execd ready \([0-9][0-9]*\)$/\1/p' "$log")
    [ -n "$port" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  printf -v "$var" '%s' "${port:+http://127.0.0.1:$port}"
}
start_execd EXECD_URL "$B/execd.log"
# a second execd relaying SIGPIPE to its foreground commands like upstream (only the tests that need it use it)
start_execd EXECD_FWD_URL "$B/execd-fwd.log" --signal-forwarding
if [ -z "$EXECD_URL" ] || [ -z "$EXECD_FWD_URL" ]; then
  echo "execd did not start:"; cat "$B"/execd*.log
  echo "0 passed, 1 failed"
  exit 1
fi
export EXECD_URL EXECD_FWD_URL
# a port nothing listens on: bound, then released
export CLOSED_PORT=$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')

# run <label> <command...>: adds the test binary's "N passed, M failed" to the totals; a crash or sanitizer /
# valgrind error without a failing test counts as one failure.
run() {
  local label=$1
  shift
  local out rc p f
  out=$("$@" 2>&1)
  rc=$?
  p=$(printf '%s\n' "$out" | sed -n 's/^\([0-9][0-9]*\) passed, \([0-9][0-9]*\) failed$/\1/p' | tail -1)
  f=$(printf '%s\n' "$out" | sed -n 's/^\([0-9][0-9]*\) passed, \([0-9][0-9]*\) failed$/\2/p' | tail -1)
  p=${p:-0}
  f=${f:-0}
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
  passed=$((passed + p))
  failed=$((failed + f))
  if [ "$rc" -ne 0 ]; then
    printf '%s\n' "$out" | sed "s/^/[$label] /"
    echo "[$label] FAILED (exit $rc)"
  else
    echo "[$label] $p passed"
  fi
}

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1
VG="valgrind -q --child-silent-after-fork=yes --leak-check=full --show-leak-kinds=all --errors-for-leak-kinds=all --error-exitcode=99"
for t in $(cd "$B/asan" && ls test_* | sort); do # every TESTS entry of the Makefile
  run "asan $t" "$B/asan/$t"
  run "valgrind $t" $VG "$B/plain/$t"
done

for t in "$B"/tsan/test_*; do
  [ -x "$t" ] && run "tsan ${t##*/}" env TSAN_OPTIONS=halt_on_error=1 "$t"
done

# fuzz <target> <seed corpus> [runs]: a bounded run (new inputs go to build/, the committed seeds are only read);
# runs defaults to FUZZ_RUNS.
fuzz() {
  local t=$1 seeds=$2 runs=${3:-$FUZZ_RUNS} out
  if [ ! -x "$B/$t" ]; then
    echo "[$t] skipped: clang's libFuzzer runtime is missing (see $B/$t-build.log)"
    return
  fi
  mkdir -p "$B/$t-corpus"
  out=$("$B/$t" -runs="$runs" -max_len=4096 "$B/$t-corpus" "$seeds" 2>&1)
  if [ $? -eq 0 ]; then
    passed=$((passed + 1))
    echo "[$t] $runs runs: $(printf '%s\n' "$out" | grep -o 'cov: [0-9]*' | tail -1), no crash"
  else
    failed=$((failed + 1))
    printf '%s\n' "$out" | tail -40
    echo "[$t] FAILED"
  fi
}
fuzz fuzz_events corpus
fuzz fuzz_process corpus-process
fuzz fuzz_target corpus-target
fuzz fuzz_wsproto corpus-wsproto
fuzz fuzz_multipart corpus-multipart
fuzz fuzz_codeproto corpus-codeproto
fuzz fuzz_proxy corpus-proxy
fuzz fuzz_glob corpus-glob
fuzz fuzz_fsedit corpus-fsedit
fuzz fuzz_upmeta corpus-upmeta
fuzz fuzz_sessions corpus-sessions
fuzz fuzz_http corpus-http $((FUZZ_RUNS / 4)) # each input is a real connection: a few ms

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
