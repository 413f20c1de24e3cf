// Test helper: a host file handed to a server at a descriptor above stdio without close-on-exec (as a careless parent
// would), and the shell probe run in a sandbox that must not find it (execd closes every inherited descriptor).
export const INHERITED_FD = 40;

// stdio entries after the first three for spawn(): INHERITED_FD is `fd`, the ones between are closed
export function inheritedStdio(fd) {
  return [...Array(INHERITED_FD - 3).fill('ignore'), fd];
}

// prints which sandbox processes hold the descriptor, then tries to write to it: "rc=1" and "Bad file descriptor"
export const INHERITED_FD_PROBE =
  `for p in /proc/[0-9]*; do [ -e $p/fd/${INHERITED_FD} ] && echo "$p holds ${INHERITED_FD}"; done; ` +
  `echo written >&${INHERITED_FD}; echo "rc=$?"`;
