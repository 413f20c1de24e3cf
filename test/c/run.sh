#!/usr/bin/env bash
# Driver of `make check`: starts the dev-server's execd standalone (node from PATH) on free loopback ports, runs
# every C test under ASan/UBSan and under valgrind, the threaded tests under TSan, runs the fuzz targets for a bounded
# number of runs, stops execd and prints the total as "N passed, N failed". Exit status 0 only when nothing failed.
# The runs go side by side in C_TEST_LANES lanes (default: one per core, at most 4; valgrind and the fuzzers are
# CPU-bound and single-threaded): each lane has an execd pair and a workspace of its own, so no two tests ever share
# an execd, and takes the next run from a queue; the results are printed in the queue's order at the end.
set -u
cd "$(dirname "$0")"
ROOT=$(cd ../.. && pwd)
B=build
FUZZ_RUNS=${FUZZ_RUNS:-20000}
LANES=${C_TEST_LANES:-$(nproc 2>/dev/null || echo 1)}
[ "$LANES" -ge 1 ] 2>/dev/null || LANES=1
[ "$LANES" -le 4 ] || LANES=4
passed=0
failed=0

tmp=$(mktemp -d)
execd_pids=()
cleanup() {
  for p in "${execd_pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT

# start_execd <var> <log> <workspace> [execd options…]: starts one execd on a free port and sets <var> to its URL
# ("" if it did not start).
start_execd() {
  local var=$1 log=$2 ws=$3 pid port=""
  shift 3
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
for lane in $(seq 0 $((LANES - 1))); do
  mkdir -p "$tmp/ws$lane"
  start_execd "EXECD_URL_$lane" "$B/execd-$lane.log" "$tmp/ws$lane"
  # a second execd relaying SIGPIPE to its foreground commands like upstream (only the tests that need it use it)
  start_execd "EXECD_FWD_URL_$lane" "$B/execd-fwd-$lane.log" "$tmp/ws$lane" --signal-forwarding
  u=EXECD_URL_$lane f=EXECD_FWD_URL_$lane
  if [ -z "${!u}" ] || [ -z "${!f}" ]; then
    echo "execd did not start:"; cat "$B"/execd*.log
    echo "0 passed, 1 failed"
    exit 1
  fi
done
# a port nothing listens on: bound, then released
export CLOSED_PORT=$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1
VG="valgrind -q --child-silent-after-fork=yes --leak-check=full --show-leak-kinds=all --errors-for-leak-kinds=all --error-exitcode=99"

# The queue: one entry per test binary (its ASan run, then its valgrind run, in one lane: a test may use fixed paths),
# per TSan run and per fuzz target, as "<kind>|<name>|<runs>".
jobs=()
for t in $(cd "$B/asan" && ls test_* | sort); do # every TESTS entry of the Makefile
  jobs+=("pair|$t|")
done
for t in "$B"/tsan/test_*; do
  [ -x "$t" ] && jobs+=("tsan|${t##*/}|")
done
# fuzz <target> <seed corpus> [runs]: a bounded run (new inputs go to build/, the committed seeds are only read);
# runs defaults to FUZZ_RUNS.
fuzz() {
  jobs+=("fuzz|$1|${3:-$FUZZ_RUNS}|$2")
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

# one <i> <tag> <command…>: runs one command of entry i; its output goes to $tmp/<i>.<tag>.out, its status to .rc
one() {
  local i=$1 tag=$2
  shift 2
  "$@" >"$tmp/$i.$tag.out" 2>&1
  echo $? >"$tmp/$i.$tag.rc"
}
# lane <n>: takes the next entry of the queue (a counter under flock) until none is left. The lane's execd pair is
# the one its tests see as EXECD_URL and EXECD_FWD_URL.
printf 0 >"$tmp/next"
lane() {
  local u=EXECD_URL_$1 f=EXECD_FWD_URL_$1 i kind name runs seeds
  export EXECD_URL=${!u} EXECD_FWD_URL=${!f}
  while :; do
    i=$(flock "$tmp/next" sh -c 'i=$(cat "$1"); echo $((i + 1)) >"$1"; echo "$i"' sh "$tmp/next")
    [ "$i" -lt "${#jobs[@]}" ] || return 0
    IFS='|' read -r kind name runs seeds <<<"${jobs[$i]}"
    case $kind in
      pair) one "$i" asan "$B/asan/$name"; one "$i" valgrind $VG "$B/plain/$name" ;;
      tsan) one "$i" tsan env TSAN_OPTIONS=halt_on_error=1 "$B/tsan/$name" ;;
      fuzz)
        [ -x "$B/$name" ] || continue
        mkdir -p "$B/$name-corpus"
        one "$i" fuzz "$B/$name" -runs="$runs" -max_len=4096 "$B/$name-corpus" "$seeds" ;;
    esac
  done
}
lane_pids=()
for n in $(seq 0 $((LANES - 1))); do
  lane "$n" &
  lane_pids+=($!)
done
wait "${lane_pids[@]}"

# report <label> <output file> <status file>: adds a test binary's "N passed, M failed" to the totals; a crash or
# sanitizer / valgrind error without a failing test counts as one failure.
report() {
  local label=$1 out rc p f
  out=$(cat "$2" 2>/dev/null)
  rc=$(cat "$3" 2>/dev/null || echo 125)
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
for i in "${!jobs[@]}"; do
  IFS='|' read -r kind name runs seeds <<<"${jobs[$i]}"
  case $kind in
    pair)
      report "asan $name" "$tmp/$i.asan.out" "$tmp/$i.asan.rc"
      report "valgrind $name" "$tmp/$i.valgrind.out" "$tmp/$i.valgrind.rc" ;;
    tsan) report "tsan $name" "$tmp/$i.tsan.out" "$tmp/$i.tsan.rc" ;;
    fuzz)
      if [ ! -x "$B/$name" ]; then
        echo "[$name] skipped: clang's libFuzzer runtime is missing (see $B/$name-build.log)"
      elif [ "$(cat "$tmp/$i.fuzz.rc" 2>/dev/null)" = 0 ]; then
        passed=$((passed + 1))
        echo "[$name] $runs runs: $(grep -o 'cov: [0-9]*' "$tmp/$i.fuzz.out" | tail -1), no crash"
      else
        failed=$((failed + 1))
        tail -40 "$tmp/$i.fuzz.out" 2>/dev/null
        echo "[$name] FAILED"
      fi ;;
  esac
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
