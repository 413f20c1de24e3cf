#!/usr/bin/python3
# PTY helper of execd's PTY WebSocket API (local OpenSandbox-compatible server). Node has no pseudo-terminal, so
# execd runs this with Debian's python3 for PTY-mode sessions:
#
#   python3 pty-helper.py COLS ROWS PROGRAM [ARGS...]
#
# It forks PROGRAM on a new pseudo-terminal (new session, the PTY as controlling terminal, window COLS x ROWS,
# signal dispositions reset to default) and relays bytes:  fd 0 -> PTY input,  PTY output -> fd 1.
# fd 3 (control, read):  lines "resize COLS ROWS".
# fd 4 (status, write):  "pid N" once the child runs; "exit N" (N = exit code, -1 when killed by a signal) after
#                        the child exited AND its output was drained (until EIO, or 100 ms of silence when a
#                        background process keeps the terminal open, at most 2 s).
# EOF on fd 0 means execd is gone or the session was deleted: the child's process group is killed.
import errno
import fcntl
import os
import select
import signal
import struct
import sys
import termios
import time


def set_size(fd, cols, rows):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack('HHHH', rows, cols, 0, 0))


def write_all(fd, data):
    while data:
        try:
            n = os.write(fd, data)
        except InterruptedError:
            continue
        data = data[n:]


def status(line):
    try:
        write_all(4, (line + '\n').encode())
    except OSError:
        pass


def main():
    cols, rows, argv = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    master, slave = os.openpty()
    set_size(master, cols, rows)
    # SIGCHLD wakes select through a self-pipe. Set up before the fork: a child that exits at once must not exit
    # while SIGCHLD is still ignored (the exit would never be seen). Both pipe ends are close-on-exec.
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    pid = os.fork()
    if pid == 0:
        try:
            os.close(master)
            os.setsid()
            fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
            for fd in (0, 1, 2):
                os.dup2(slave, fd)
            if slave > 2:
                os.close(slave)
            os.closerange(3, 256)
            for sig in (signal.SIGPIPE, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGHUP,
                        signal.SIGCHLD, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU, signal.SIGXFSZ):
                signal.signal(sig, signal.SIG_DFL)
            os.execvp(argv[0], argv)
        except BaseException as exc:  # exec failed: report on the terminal and exit like a shell would
            try:
                os.write(2, f'pty-helper: {argv[0]}: {exc}\r\n'.encode())
            finally:
                os._exit(127)
    os.close(slave)
    status(f'pid {pid}')
    os.set_blocking(master, False)

    pending = b''          # stdin bytes not yet accepted by the PTY
    ctl = b''
    stdin_open = True
    ctl_open = True
    exit_code = None
    master_open = True

    def read_master():
        nonlocal master_open
        try:
            data = os.read(master, 65536)
        except BlockingIOError:
            return False
        except OSError as exc:
            if exc.errno == errno.EIO:  # every slave fd closed
                master_open = False
                return False
            raise
        if not data:
            master_open = False
            return False
        write_all(1, data)
        return True

    while exit_code is None:
        # a master at EOF stays readable: leave it out, or the loop would spin until SIGCHLD
        rl = [wake_r] + ([master] if master_open else []) + ([0] if stdin_open else []) + ([3] if ctl_open else [])
        wl = [master] if pending else []
        try:
            r, w, _ = select.select(rl, wl, [])
        except InterruptedError:
            continue
        if wake_r in r:
            try:
                os.read(wake_r, 512)
            except BlockingIOError:
                pass
            done, st = os.waitpid(pid, os.WNOHANG)
            if done == pid:
                exit_code = os.waitstatus_to_exitcode(st)
                if exit_code < 0:
                    exit_code = -1
        if master in r and master_open:
            read_master()
        if master in w and pending:
            try:
                n = os.write(master, pending)
                pending = pending[n:]
            except BlockingIOError:
                pass
            except OSError:
                pending = b''
        if stdin_open and 0 in r:
            data = os.read(0, 65536)
            if data:
                pending += data
            else:
                stdin_open = False
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass
        if ctl_open and 3 in r:
            data = os.read(3, 4096)
            if not data:
                ctl_open = False
            ctl += data
            while b'\n' in ctl:
                line, ctl = ctl.split(b'\n', 1)
                parts = line.split()
                if len(parts) == 3 and parts[0] == b'resize':
                    try:
                        set_size(master, int(parts[1]), int(parts[2]))
                    except (ValueError, OSError, struct.error):
                        pass

    # Drain what the child wrote before exiting.
    deadline = time.monotonic() + 2.0
    quiet_since = time.monotonic()
    while master_open and time.monotonic() < deadline:
        r, _, _ = select.select([master], [], [], 0.02)
        if r and read_master():
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since > 0.1:
            break
    status(f'exit {exit_code}')


if __name__ == '__main__':
    try:
        main()
    except BrokenPipeError:
        pass
