# Unpacks one image layer (an uncompressed tar on stdin) into the directory of descriptor 3, as lib/dev-server/images/unpack.js
# runs it: under bubblewrap, in a user namespace of its own as the store's owner, where the only writable place is the
# new layer's directory (the current directory). Layer content is hostile input; the rules (docs/dev-server.md, Images):
# - a name that is absolute or has a `..` component refuses the layer (exit 3, the reason on stderr);
# - nothing is ever written through a symlink: every directory on the way is opened with O_NOFOLLOW, an entry whose
#   parent is a symlink or not a directory is skipped (contained) and reported;
# - hardlinks only to regular files of this layer already unpacked (else skipped); device nodes, FIFOs, sockets skipped;
# - setuid/setgid bits stripped; owners flattened (every file belongs to whoever runs this); xattrs not copied;
# - whiteouts `.wh.<name>` become a character device 0/0 `<name>`, `.wh..wh..opq` the xattr user.overlay.opaque=y on
#   its directory (overlayfs with `userxattr`);
# - more than argv[1] entries refuses the layer (the bound on "a million tiny files"); the bytes are bounded by the
#   caller, which stops the stream.
# Prints one JSON line: {"entries", "bytes", "skipped", "notes"}.
import json, os, resource, stat, sys, tarfile

resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))  # a hostile pax header must not take the host's memory

MAX_ENTRIES = int(sys.argv[1])
notes = []
skipped = 0
entries = 0
nbytes = 0
dir_modes = {(): (0o755, None)}  # tuple(components) -> (mode, mtime); the layer's root is 0755 unless the tar says otherwise


class Refused(Exception):
    pass


def note(msg):
    global skipped
    skipped += 1
    if len(notes) < 20:
        notes.append(msg[:300])


def components(name, what):
    if name.startswith('/'):
        raise Refused('%s %r is absolute' % (what, name[:200]))
    parts = [p for p in name.split('/') if p not in ('', '.')]
    if '..' in parts:
        raise Refused('%s %r has a .. component' % (what, name[:200]))
    return parts


os.fchdir(3)  # the new layer's directory (the caller's descriptor; the mounts here are all read-only)
ROOT = os.open('.', os.O_RDONLY | os.O_DIRECTORY)
os.close(3)


dir_cache = {}  # tuple(parts) -> descriptor of a directory opened by open_dir (emptied whenever a directory is removed)


def cached_dir(parts):
    key = tuple(parts)
    fd = dir_cache.get(key)
    if fd is None:
        fd = open_dir(parts, True)
        if fd is None:
            return None
        if len(dir_cache) >= 64:
            clear_cache()
        dir_cache[key] = fd
    return fd


def forget(prefix):
    """Closes the cached descriptors of `prefix` and below (a directory about to be removed)."""
    n = len(prefix)
    for key in [k for k in dir_cache if k[:n] == prefix]:
        os.close(dir_cache.pop(key))


def clear_cache():
    for fd in dir_cache.values():
        os.close(fd)
    dir_cache.clear()


def open_dir(parts, create):
    """A descriptor of the directory `parts` (from the layer root), never through a symlink; None if a component is a
    symlink or not a directory (or missing and create is False)."""
    fd = os.dup(ROOT)
    try:
        for i, p in enumerate(parts):
            try:
                nfd = os.open(p, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    return None
                os.mkdir(p, 0o700, dir_fd=fd)
                dir_modes.setdefault(tuple(parts[:i + 1]), (0o755, None))
                nfd = os.open(p, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except (NotADirectoryError, OSError) as e:
                if isinstance(e, OSError) and e.errno not in (20, 40):  # ENOTDIR, ELOOP
                    raise
                return None
            os.close(fd)
            fd = nfd
        res, fd = fd, None
        return res
    finally:
        if fd is not None:
            os.close(fd)


def remove_tree(dfd, name):
    """Removes `name` in directory dfd, whatever it is, without following symlinks."""
    try:
        st = os.lstat(name, dir_fd=dfd)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dfd)
        try:
            os.fchmod(sub, 0o700)
            for child in os.listdir(sub):
                remove_tree(sub, child)
        finally:
            os.close(sub)
        os.rmdir(name, dir_fd=dfd)
    else:
        os.unlink(name, dir_fd=dfd)


BUF = bytearray(1 << 20)
INP = sys.stdin.buffer
NUL = bytes(512)
left = 0  # data bytes of the current member not yet read
tail = 0  # its padding to the next 512-byte block


def read_exact(n):
    b = INP.read(n)
    if len(b) != n:
        raise Refused('truncated layer')
    return b


def padded(n):
    return (n + 511) // 512 * 512


def pax_records(buf):
    recs = {}
    pos = 0
    while pos < len(buf) and buf[pos] != 0:
        sp = buf.find(b' ', pos)
        if sp < 0:
            raise Refused('bad pax header')
        try:
            length = int(buf[pos:sp])
        except ValueError:
            raise Refused('bad pax header')
        if length <= 0 or pos + length > len(buf):
            raise Refused('bad pax header')
        rec = buf[sp + 1:pos + length - 1]
        k, _, v = rec.partition(b'=')
        recs[k.decode('utf-8', 'surrogateescape')] = v.decode('utf-8', 'surrogateescape')
        pos += length
    return recs


def members():
    """The tar's members (tarfile.TarInfo, pax and GNU long names applied), read straight from stdin: tarfile's own
    stream reader copies its buffer on every read."""
    global left, tail
    glob = {}
    pending = {}
    while True:
        skip = left + tail  # the current member's unread data and its padding
        data_left = left
        left = 0
        tail = 0
        while skip:
            n = INP.readinto(memoryview(BUF)[:min(skip, len(BUF))])
            if not n:
                if skip <= 511 and data_left == 0:
                    return  # only the last member's padding is missing (umoci 0.4 writes such layers): the end
                raise Refused('truncated layer')
            skip -= n
            data_left = max(0, data_left - n)
        block = INP.read(512)
        if not block:
            return
        if len(block) != 512:
            raise Refused('truncated layer')
        if block == NUL:
            return
        info = tarfile.TarInfo.frombuf(block, 'utf-8', 'surrogateescape')
        t = info.type
        if t in (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE, tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK):
            if info.size > (1 << 20):
                raise Refused('a tar extended header larger than 1 MiB')
            data = read_exact(padded(info.size))[:info.size]
            if t == tarfile.GNUTYPE_LONGNAME:
                pending['path'] = data.rstrip(b'\0').decode('utf-8', 'surrogateescape')
            elif t == tarfile.GNUTYPE_LONGLINK:
                pending['linkpath'] = data.rstrip(b'\0').decode('utf-8', 'surrogateescape')
            elif t == tarfile.XGLTYPE:
                glob.update(pax_records(data))
            else:
                pending.update(pax_records(data))
            continue
        if t == tarfile.GNUTYPE_SPARSE:
            raise Refused('GNU sparse files are not supported')
        for k, v in list(glob.items()) + list(pending.items()):
            if k == 'path':
                info.name = v
            elif k == 'linkpath':
                info.linkname = v
            elif k == 'size':
                try:
                    info.size = int(v)
                except ValueError:
                    raise Refused('bad pax size')
            elif k == 'mtime':
                try:
                    info.mtime = int(float(v))
                except ValueError:
                    pass
            elif k.startswith('GNU.sparse.'):
                raise Refused('GNU sparse files are not supported')
        pending = {}
        if info.size < 0:
            raise Refused('bad size')
        left = info.size  # data (of any type) the caller does not read is skipped
        tail = padded(info.size) - info.size
        yield info


def copy_data(size, fd):
    global left
    mv = memoryview(BUF)
    while left > 0:
        n = INP.readinto(mv[:min(left, len(BUF))])
        if not n:
            raise Refused('truncated layer')
        view = mv[:n]
        while view:
            w = os.write(fd, view)
            view = view[w:]
        left -= n


def main():
    global entries, nbytes
    for m in members():
        entries += 1
        if entries > MAX_ENTRIES:
            raise Refused('more than %d entries in one layer' % MAX_ENTRIES)
        parts = components(m.name, 'entry')
        if not parts:  # the layer's root itself
            if m.isdir():
                dir_modes[()] = (m.mode & 0o1777, m.mtime)
            continue
        base = parts[-1]
        parent = parts[:-1]
        if m.isdir() and base.startswith('.wh.'):
            raise Refused('directory %r is named as a whiteout' % m.name[:200])
        pfd = cached_dir(parent)
        if pfd is None:
            note('skipped %s: a parent is a symlink or not a directory' % m.name[:200])
            continue
        try:
            if base == '.wh..wh..opq':
                os.setxattr(pfd, 'user.overlay.opaque', b'y')
                continue
            if base.startswith('.wh.'):
                target = base[4:]
                if not target or target in ('.', '..'):
                    raise Refused('bad whiteout %r' % m.name[:200])
                forget(tuple(parent) + (target,))
                remove_tree(pfd, target)
                os.mknod(target, stat.S_IFCHR | 0o600, os.makedev(0, 0), dir_fd=pfd)
                continue
            if m.isdir():
                try:
                    st = os.lstat(base, dir_fd=pfd)
                    if not stat.S_ISDIR(st.st_mode):
                        forget(tuple(parts))
                        remove_tree(pfd, base)
                        os.mkdir(base, 0o700, dir_fd=pfd)
                except FileNotFoundError:
                    os.mkdir(base, 0o700, dir_fd=pfd)
                dir_modes[tuple(parts)] = (m.mode & 0o1777, m.mtime)
                continue
            if not (m.isreg() or m.issym() or m.islnk()):
                note('skipped %s: a device node, FIFO or other special file' % m.name[:200])
                continue
            src = None
            if m.islnk():
                lparts = components(m.linkname, 'hardlink target')
                if not lparts:
                    note('skipped %s: a hardlink to the root' % m.name[:200])
                    continue
                sfd = open_dir(lparts[:-1], False)
                if sfd is None:
                    note('skipped %s: hardlink target %s not in this layer' % (m.name[:200], m.linkname[:200]))
                    continue
                try:
                    st = os.lstat(lparts[-1], dir_fd=sfd)
                except FileNotFoundError:
                    os.close(sfd)
                    note('skipped %s: hardlink target %s not in this layer' % (m.name[:200], m.linkname[:200]))
                    continue
                if not stat.S_ISREG(st.st_mode):
                    os.close(sfd)
                    note('skipped %s: hardlink target %s is not a regular file' % (m.name[:200], m.linkname[:200]))
                    continue
                src = (sfd, lparts[-1])
            forget(tuple(parts))
            remove_tree(pfd, base)
            if m.isreg():
                fd = os.open(base, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=pfd)
                try:
                    copy_data(m.size, fd)
                    nbytes += m.size
                    os.fchmod(fd, m.mode & 0o1777)  # no setuid/setgid
                    os.utime(fd, (m.mtime, m.mtime))
                finally:
                    os.close(fd)
            elif m.issym():
                os.symlink(m.linkname, base, dir_fd=pfd)
                try:
                    os.utime(base, (m.mtime, m.mtime), dir_fd=pfd, follow_symlinks=False)
                except OSError:
                    pass
            else:
                try:
                    os.link(src[1], base, src_dir_fd=src[0], dst_dir_fd=pfd, follow_symlinks=False)
                finally:
                    os.close(src[0])
        finally:
            pass
    clear_cache()
    # directories get their modes (without setuid/setgid) and times last, deepest first
    for parts in sorted(dir_modes, key=len, reverse=True):
        mode, mtime = dir_modes[parts]
        fd = open_dir(list(parts), False)
        if fd is None:
            continue
        try:
            os.fchmod(fd, mode)
            if mtime is not None:
                os.utime(fd, (mtime, mtime))
        finally:
            os.close(fd)


try:
    main()
except Refused as e:
    sys.stderr.write('refused: %s\n' % e)
    sys.exit(3)
except tarfile.TarError as e:
    sys.stderr.write('refused: not a valid tar: %s\n' % e)
    sys.exit(3)
while INP.readinto(BUF):  # the tar's padding after its end: the caller checks the whole blob's digest
    pass
sys.stdout.write(json.dumps({'entries': entries, 'bytes': nbytes, 'skipped': skipped, 'notes': notes}) + '\n')
