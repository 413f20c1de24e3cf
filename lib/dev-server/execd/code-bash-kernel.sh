# Bash kernel of the local execd's code interpreter, sourced by one long-lived
# `bash --norc --noprofile --noediting -i +m` per code context (see code-kernel.js).
# execd writes, per cell, two lines on stdin:  __osb_run '<quoted code>'  and  __osb_done '<marker>'.
# The interactive shell keeps variables, functions and cwd between cells, and SIGINT aborts the whole
# current line (the cell) and goes on with the next one, which reports the exit status ($? = 130) on fd 3
# after writing the marker to stdout and stderr.
set +o history +H
unset PROMPT_COMMAND HISTFILE
PS1='' PS2='' PS0='' PS4='+ '

__osb_run() {
  eval "$1" </dev/null 3>&- 8>&- 9>&-
}

# The marker goes to copies of stdout/stderr taken now, so `exec >file` in a cell cannot hang execd.
exec 8>&1 9>&2

__osb_done() {
  local rc=$?
  printf '%s' "$1" >&8
  printf '%s' "$1" >&9
  printf '{"type":"done","exit":%d}\n' "$rc" >&3
}

# execd gone (killed outside a sandbox): do not outlive it, even while a cell is busy.
(
  trap '' INT
  while kill -0 "$PPID" 2>/dev/null; do sleep 1; done
  kill -KILL -- "-$$"
) </dev/null >/dev/null 2>&1 3>&- 8>&- 9>&- &
disown $!

printf '{"type":"ready"}\n' >&3
