#!/usr/bin/python3
# Writes the local server's sandbox seccomp filter (a BPF program for `bwrap --seccomp FD`) to stdout, built with
# libseccomp (Debian: python3-seccomp) for the native architecture. Default allow; the system calls below fail
# with EPERM (ENOSYS for clone3 and openat2, so libc falls back to clone and openat, whose arguments can be
# checked). See docs/dev-server-security.md for why each is blocked.
import errno
import os
import sys

import seccomp

DENY = [
    # file handles: open_by_handle_at reads any file of a mounted file system, past every bind mount
    'open_by_handle_at', 'name_to_handle_at',
    # mounts and namespaces: the sandbox's view of the host is fixed at start
    'mount', 'umount', 'umount2', 'pivot_root', 'chroot', 'move_mount', 'open_tree', 'fsopen', 'fsconfig', 'fsmount',
    'fspick', 'mount_setattr', 'setns',
    # kernel keyring, BPF, perf, userfaultfd, io_uring: large kernel attack surface no sandboxed job needs
    'keyctl', 'add_key', 'request_key', 'bpf', 'perf_event_open', 'userfaultfd', 'io_uring_setup', 'io_uring_enter',
    'io_uring_register',
    # the machine itself
    'kexec_load', 'kexec_file_load', 'init_module', 'finit_module', 'delete_module', 'reboot', 'swapon', 'swapoff',
    'acct', 'settimeofday', 'clock_settime', 'clock_adjtime', 'adjtimex', 'syslog', 'quotactl', 'quotactl_fd',
    'iopl', 'ioperm', 'lookup_dcookie', 'nfsservctl', 'uselib', 'ustat', 'sysfs', 'vhangup', 'personality',
    # other processes' memory
    'ptrace', 'process_vm_readv', 'process_vm_writev', 'kcmp', 'pidfd_getfd',
]

# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME
CLONE_NEW = [0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000, 0x00000080]
TIOCSTI = 0x5412
TIOCLINUX = 0x541C


def main():
    f = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    eperm = seccomp.ERRNO(errno.EPERM)
    for name in DENY:
        try:
            f.add_rule(eperm, name)
        except (RuntimeError, ValueError):
            pass  # not a system call on this architecture
    # new namespaces (user, mount, pid, net, ...): unshare/clone with any CLONE_NEW* flag
    f.add_rule(eperm, 'unshare')
    for bit in CLONE_NEW:
        f.add_rule(eperm, 'clone', seccomp.Arg(0, seccomp.MASKED_EQ, bit, bit))
    # clone3 passes its flags in memory seccomp cannot read: ENOSYS makes libc use clone
    f.add_rule(seccomp.ERRNO(errno.ENOSYS), 'clone3')
    # typing into a terminal that is not the sandbox's
    f.add_rule(eperm, 'ioctl', seccomp.Arg(1, seccomp.MASKED_EQ, 0xFFFFFFFF, TIOCSTI))
    f.add_rule(eperm, 'ioctl', seccomp.Arg(1, seccomp.MASKED_EQ, 0xFFFFFFFF, TIOCLINUX))
    # setuid/setgid files: never made inside a sandbox (they could be run from a host volume)
    f.add_rule(eperm, 'chmod', seccomp.Arg(1, seccomp.MASKED_EQ, 0o4000, 0o4000))
    f.add_rule(eperm, 'chmod', seccomp.Arg(1, seccomp.MASKED_EQ, 0o2000, 0o2000))
    f.add_rule(eperm, 'fchmod', seccomp.Arg(1, seccomp.MASKED_EQ, 0o4000, 0o4000))
    f.add_rule(eperm, 'fchmod', seccomp.Arg(1, seccomp.MASKED_EQ, 0o2000, 0o2000))
    f.add_rule(eperm, 'fchmodat', seccomp.Arg(2, seccomp.MASKED_EQ, 0o4000, 0o4000))
    f.add_rule(eperm, 'fchmodat', seccomp.Arg(2, seccomp.MASKED_EQ, 0o2000, 0o2000))
    try:
        f.add_rule(eperm, 'fchmodat2', seccomp.Arg(2, seccomp.MASKED_EQ, 0o4000, 0o4000))
        f.add_rule(eperm, 'fchmodat2', seccomp.Arg(2, seccomp.MASKED_EQ, 0o2000, 0o2000))
    except (RuntimeError, ValueError):
        pass
    # ... nor created with those bits: the mode argument of mknod/mknodat/creat always, of open/openat when they
    # create (O_CREAT or O_TMPFILE; otherwise the mode is unused and libc may pass anything)
    for name, mode_arg, flags_arg in [('mknod', 1, None), ('mknodat', 2, None), ('creat', 1, None), ('open', 2, 1), ('openat', 3, 2)]:
        for bit in (0o4000, 0o2000):
            try:
                if flags_arg is None:
                    f.add_rule(eperm, name, seccomp.Arg(mode_arg, seccomp.MASKED_EQ, bit, bit))
                    continue
                for creating in (os.O_CREAT, os.O_TMPFILE & ~os.O_DIRECTORY):
                    f.add_rule(eperm, name, seccomp.Arg(flags_arg, seccomp.MASKED_EQ, creating, creating), seccomp.Arg(mode_arg, seccomp.MASKED_EQ, bit, bit))
            except (RuntimeError, ValueError):
                pass  # not a system call on this architecture (open, creat, mknod on arm64)
    # openat2 passes its mode in memory seccomp cannot read: ENOSYS makes libc and runtimes use openat
    f.add_rule(seccomp.ERRNO(errno.ENOSYS), 'openat2')
    sys.stdout.flush()
    f.export_bpf(sys.stdout)


if __name__ == '__main__':
    main()
