#!/usr/bin/env python3
# Loads nft rulesets into sandboxes' network namespaces for the server (network.js NftHelper), without the cost of
# starting nsenter and nft for each (tens of milliseconds: the create's critical path): libnftables is loaded once
# (ctypes); as root this process enters each sandbox's network namespace in turn, otherwise each request forks a child
# that enters the sandbox's user namespace and then its network namespace.
# Protocol on stdin/stdout, one JSON object per line:
#   {"id": n, "open": p, "user": true|false}   opens the namespaces of process p once (/proc/p/ns/net, and with user
#     /proc/p/ns/user: a server that is not root enters the sandbox's user namespace, which owns its network namespace,
#     and its owner, the server's uid, gets CAP_NET_ADMIN there by entering it); later loads use these descriptors, so
#     a pid reused after the sandbox ended never leads them into another namespace
#   {"id": n, "handle": h, "rules": "<nft text>"}   loads rules into the namespaces opened by request h
#   {"id": n, "release": h}                          closes them
#   answer   {"id": n, "ok": true} or {"id": n, "error": "<text>"}
# The first line written is {"ready": true} once libnftables is loaded (or {"error": ...} and exit 1).
import ctypes
import json
import os
import sys

CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000


def main():
    try:
        nft = ctypes.CDLL('libnftables.so.1')
        nft.nft_ctx_new.restype = ctypes.c_void_p
        nft.nft_ctx_new.argtypes = [ctypes.c_uint32]
        nft.nft_ctx_buffer_error.argtypes = [ctypes.c_void_p]
        nft.nft_ctx_get_error_buffer.restype = ctypes.c_char_p
        nft.nft_ctx_get_error_buffer.argtypes = [ctypes.c_void_p]
        nft.nft_run_cmd_from_buffer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        nft.nft_ctx_free.argtypes = [ctypes.c_void_p]
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError as e:
        sys.stdout.write(json.dumps({'error': f'libnftables cannot be loaded: {e}'}) + '\n')
        sys.stdout.flush()
        sys.exit(1)
    sys.stdout.write('{"ready": true}\n')
    sys.stdout.flush()

    handles = {}  # request id -> {'net': fd, 'user': fd or None}
    home = os.open('/proc/self/ns/net', os.O_RDONLY | os.O_CLOEXEC)  # this process's own network namespace

    def enter(fd, nstype):
        if libc.setns(fd, nstype) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f'setns: {os.strerror(err)}')

    def load(h, rules):
        """Enters the network namespace h['net'] and loads rules there: '' or the error text."""
        enter(h['net'], CLONE_NEWNET)
        ctx = nft.nft_ctx_new(0)
        try:
            nft.nft_ctx_buffer_error(ctx)
            if nft.nft_run_cmd_from_buffer(ctx, rules.encode()) != 0:
                return (nft.nft_ctx_get_error_buffer(ctx) or b'').decode(errors='replace').strip() or 'nft failed'
            return ''
        finally:
            nft.nft_ctx_free(ctx)

    def run(req):
        """'' or the error text. Root: in this process (setns to a network namespace needs CAP_SYS_ADMIN only, which
        it keeps; a fork costs more than the load here). Otherwise in a forked child, which enters the sandbox's user
        namespace first (a process cannot leave a user namespace it entered)."""
        h = handles.get(req['handle'])
        if h is None:
            return 'unknown namespace handle'
        if h['user'] is None:
            try:
                return load(h, req['rules'])
            except OSError as e:
                return str(e)
            finally:
                enter(home, CLONE_NEWNET)  # back home: a sandbox's namespace is not kept alive by this process
        r, w = os.pipe()
        child = os.fork()
        if child == 0:
            os.close(r)
            msg = ''
            try:
                enter(h['user'], CLONE_NEWUSER)
                msg = load(h, req['rules'])
            except Exception as e:  # noqa: BLE001 - reported to the server, which fails the create
                msg = str(e) or 'failed'
            os.write(w, msg.encode()[:4000])
            os._exit(0)
        os.close(w)
        out = b''
        while True:
            b = os.read(r, 4096)
            if not b:
                break
            out += b
        os.close(r)
        _, status = os.waitpid(child, 0)
        if out:
            return out.decode(errors='replace')
        return '' if status == 0 else f'the helper\'s child ended with status {status}'

    for line in sys.stdin:
        rid = None  # a failed request is answered under its own id: the server's waiter must always hear back
        try:
            req = json.loads(line)
            rid = req.get('id') if isinstance(req, dict) else None
            if 'open' in req:
                pid = int(req['open'])
                net = os.open(f'/proc/{pid}/ns/net', os.O_RDONLY | os.O_CLOEXEC)
                try:
                    user = os.open(f'/proc/{pid}/ns/user', os.O_RDONLY | os.O_CLOEXEC) if req.get('user') else None
                except OSError:
                    os.close(net)
                    raise
                handles[req['id']] = {'net': net, 'user': user}
                err = ''
            elif 'release' in req:
                h = handles.pop(req['release'], None)
                for fd in (h or {}).values():
                    if fd is not None:
                        os.close(fd)
                err = ''
            else:
                err = run(req)
            ans = {'id': req['id'], 'ok': True} if not err else {'id': req['id'], 'error': err}
        except Exception as e:  # noqa: BLE001
            ans = {'id': rid, 'error': str(e) or type(e).__name__}
        sys.stdout.write(json.dumps(ans) + '\n')
        sys.stdout.flush()


main()
