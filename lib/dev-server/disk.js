// Per-sandbox disk bound of the local server (root only): a sandbox's host directory (<dataDir>/sb/<id>: workspace,
// tmp, home, run) is the mount of a sparse ext4 image of its own (<dataDir>/disks/<server instance>/<id>.img, loop
// device, nosuid,nodev), sized by resourceLimits["ephemeral-storage"] or the server's diskLimit. Writes past it fail
// with ENOSPC ("No space left on device") inside that sandbox only. The image is unmounted (the loop device clears
// itself) and deleted with the sandbox; images and mounts of servers that died are swept at start. mkfs runs once per
// size (a template image, made at start for the default size); each sandbox's image is a sparse copy of it
// (about 8 ms instead of mkfs's 35 ms for 10Gi), made ahead of the create that takes it (one spare per size). A
// restore copies the snapshot's image instead; for the SNAPSHOT_SPARES snapshots restored (or captured) last, the copy
// for their next restore is made ahead as well (keepSpare), its journal replayed and its files already the next
// sandbox's uid.
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFile, execFileSync } from 'node:child_process';
import { mounts } from './cgroups.js';
import { findExecutable } from './runner.js';
import { deadInstances, instanceName, processExists } from './proctree.js';

/** Where mkfs.ext4 and mount live when PATH lacks the sbin directories (a non-login root shell). */
const SBIN = ['/usr/sbin', '/sbin', '/usr/bin', '/bin'];

const TOOL_TIMEOUT_MS = 15000;
/** An image of ours, wherever its data dir: <dataDir>/disks/<server pid>-<random>/<sandbox id>.img */
const IMAGE_PATH = /\/disks\/(\d+)-[0-9a-f]{8}\/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.img$/;
/**
 * A copy made ahead, in a mount namespace of its own (unshare): mounted (its journal replayed, if any), its files
 * given to `owner` (uid:gid, or none: `chown -R -h` follows no symlink), unmounted. $1-$3: mount, chown, umount; $4
 * owner, $5 the mount point, $6 the image. The mount is in no other process's mount table and goes with the
 * namespace however the server ends.
 */
const PREPARE = `"$1" -o loop,nosuid,nodev,noexec,noinit_itable "$6" "$5" || exit 1
rc=0
[ -z "$4" ] || "$2" -R -h -- "$4" "$5" || rc=1
"$3" "$5" || exit 1
exit $rc`;
/** How many snapshots' images keep a copy made ahead for their next restore (the ones restored last). */
export const SNAPSHOT_SPARES = 2;

/** Runs a tool (rejects with its exit status as `code`); `background`: work made ahead, at the lowest CPU priority. */
function run(tool, args, { background = false } = {}) {
  return new Promise((resolve, reject) => {
    const child = execFile(tool, args, { timeout: TOOL_TIMEOUT_MS }, (err, _out, stderr) => {
      if (err) reject(Object.assign(new Error(`${path.basename(tool)} ${args.at(-1)}: ${String(stderr || err.message).trim().split('\n')[0]}`), { code: err.code }));
      else resolve();
    });
    // the lowest CPU priority: work made ahead yields to the creates it overlaps
    try {
      if (background && child.pid) os.setPriority(child.pid, 19);
    } catch { /* exited already */ }
  });
}

/** Attached loop devices: [{ device: '/dev/loopN', backing: path (without " (deleted)"), deleted: whether it was }]. */
export function loopDevices() {
  let names = [];
  try {
    names = fs.readdirSync('/sys/block').filter((n) => n.startsWith('loop'));
  } catch { /* no sysfs */ }
  const out = [];
  for (const n of names) {
    try {
      const file = fs.readFileSync(`/sys/block/${n}/loop/backing_file`, 'utf8').trim();
      const deleted = file.endsWith(' (deleted)');
      out.push({ device: `/dev/${n}`, backing: deleted ? file.slice(0, -' (deleted)'.length) : file, deleted });
    } catch { /* not attached */ }
  }
  return out;
}

/** What tells one file from another at the same path: device, inode, size and modification time. */
function fileSignature(file) {
  const st = fs.statSync(file, { bigint: true });
  return `${st.dev}:${st.ino}:${st.size}:${st.mtimeNs}`;
}

/** Which tools are missing for the disk bound, or null when it can be given (root, mkfs.ext4, mount, loop devices). */
export function detectDisk() {
  if (process.getuid?.() !== 0) return { tools: null, why: 'the server does not run as root (loop-mounted images need it)' };
  const names = { mkfs: 'mkfs.ext4', mount: 'mount', umount: 'umount', cp: 'cp', sync: 'sync', chown: 'chown' };
  const tools = Object.fromEntries(Object.entries(names).map(([k, name]) => [k, findExecutable(name, SBIN)]));
  const missing = Object.keys(names).filter((k) => !tools[k]).map((k) => names[k]);
  if (missing.length) return { tools: null, why: `${missing.join(', ')} not found (Debian: e2fsprogs, mount, coreutils)` };
  if (!fs.existsSync('/dev/loop-control')) return { tools: null, why: 'no loop devices (/dev/loop-control is missing)' };
  // optional: without e2fsck each restore's mount replays the journal (Disks.settle), without unshare (util-linux)
  // no restore's disk is made ahead (Disks.keepSpare)
  tools.e2fsck = findExecutable('e2fsck', SBIN);
  tools.unshare = findExecutable('unshare', SBIN);
  tools.sh = findExecutable('sh', SBIN);
  return { tools, why: null };
}

export class Disks {
  /**
   * tools from detectDisk(); dataDir: the server's (images under <dataDir>/disks/<instance>/); identities: the
   * sandboxes' (security.js SandboxIdentities) or null: a snapshot's spare holds the uid its files were given.
   */
  constructor({ tools, dataDir, log, identities = null }) {
    this.tools = tools;
    this.log = log;
    this.identities = identities;
    this.base = path.join(dataDir, 'disks');
    this.instance = instanceName();
    this.dir = path.join(this.base, this.instance);
    this.templates = new Map(); // bytes -> Promise of a formatted, never mounted image (root's root directory)
    this.spares = new Map(); // bytes -> Promise of the path of a copy of that template made ahead (freshImage)
    this.spareCount = 0;
    this.snapshotSpares = new Map(); // snapshot image path -> spare (keepSpare), the least recently restored first
    this.closing = false;
    this.sweep();
    fs.mkdirSync(this.dir, { recursive: true, mode: 0o700 });
  }

  /**
   * Unmounts and deletes the images of servers that are gone (a server killed before its close()): every mounted
   * image of ours on this machine whatever its data dir (a killed server's temp data dir is never reused), then
   * the unmounted leftovers under this data dir.
   */
  sweep() {
    const all = mounts();
    for (const { device, backing } of loopDevices()) {
      const m = IMAGE_PATH.exec(backing);
      if (!m || processExists(Number(m[1]))) continue;
      for (const mp of all.filter((x) => x.source === device).map((x) => x.mountPoint)) {
        this.log?.(`unmounting the disk of a sandbox of a dead server: ${mp}`);
        try {
          execFileSync(this.tools.umount, ['-l', mp], { timeout: TOOL_TIMEOUT_MS, stdio: 'ignore' });
        } catch (err) {
          this.log?.(`stale disk ${mp}: ${err.message}`);
        }
      }
      fs.rmSync(path.dirname(backing), { recursive: true, force: true });
    }
    for (const name of deadInstances(this.base)) fs.rmSync(path.join(this.base, name), { recursive: true, force: true });
  }

  /**
   * The formatted template image of `bytes`: made once (mkfs), then copied per sandbox (whose own uid then gets its
   * root directory). A failed mkfs is forgotten so that the next sandbox tries again.
   */
  template(bytes) {
    const key = bytes;
    if (!this.templates.has(key)) {
      const image = path.join(this.dir, `template-${key}.img`);
      const made = (async () => {
        fs.writeFileSync(image, '', { mode: 0o600 });
        fs.truncateSync(image, bytes);
        await run(this.tools.mkfs, ['-q', '-F', '-m', '0', '-E', 'lazy_itable_init=1,lazy_journal_init=1,root_owner=0:0', image]);
        return image;
      })();
      made.catch(() => this.templates.delete(key));
      this.templates.set(key, made);
    }
    return this.templates.get(key);
  }

  /** Formats the template of the default size, and a copy of it, ahead of the first create (errors surface there). */
  prepare(bytes) {
    this.template(bytes).catch(() => {});
    this.refill(bytes);
  }

  /**
   * Puts a new image of `bytes` at `dst`: the copy of the template made ahead (renamed: the sparse copy, ~8 ms, is
   * off the create's path), else a copy made now; then makes the next one ahead.
   */
  async freshImage(bytes, dst) {
    const key = bytes;
    const spare = this.spares.get(key);
    this.spares.delete(key);
    let renamed = false;
    if (spare) {
      try {
        fs.renameSync(await spare, dst);
        renamed = true;
      } catch { /* its copy failed: copy now */ }
    }
    if (!renamed) await run(this.tools.cp, ['--sparse=always', await this.template(bytes), dst]);
    // the next one once this create has spawned its mount: starting cp (a fork of this process) costs the create 3-9 ms
    // when done first; afterwards it runs while the create waits for mount(8)
    setImmediate(() => this.refill(bytes));
  }

  /** Starts the copy ahead of the template of `bytes`, unless there is one or the server is closing. */
  refill(bytes) {
    const key = bytes;
    if (this.closing || this.spares.has(key)) return;
    const image = path.join(this.dir, `spare-${key}-${this.spareCount++}.img`);
    const made = (async () => {
      await run(this.tools.cp, ['--sparse=always', await this.template(bytes), image]);
      return image;
    })();
    made.catch(() => {
      fs.rmSync(image, { force: true });
      if (this.spares.get(key) === made) this.spares.delete(key);
    });
    this.spares.set(key, made);
  }

  /**
   * Makes `mountPoint` the mount of a new `bytes`-sized image, owned by `identity` ({ uid, gid }, or root), mode 0700:
   * a sparse copy of the template, or of `from` ({ image, bytes }: a snapshot's image, see copyTo) when that has the
   * same size — a restore that costs a copy of the image's allocated blocks, whatever the number of files (with
   * `identity`, its files then become that uid's: `chown -R -h`, which follows no symlink, before anything runs in it).
   * `spare` (takeSpare's, for this `from` and `identity`): that copy made ahead is renamed into place instead, already
   * owned; used or not, its file is gone afterwards.
   * Resolves { image, bytes, restored (whether `from` was used), copyTo(dst), release() }: copyTo
   * writes a sparse copy of the mounted image to dst after a syncfs (the caller stops the sandbox's processes first:
   * the copy is crash-consistent, its journal replayed by settle(), or else when it is mounted); release unmounts and
   * deletes the image (idempotent).
   */
  async mount(id, mountPoint, bytes, identity, from = null, spare = null) {
    const restored = Boolean(from && from.bytes === bytes && fs.existsSync(from.image));
    const image = path.join(this.dir, `${id}.img`);
    const fd = fs.openSync(image, 'wx', 0o600);
    fs.closeSync(fd);
    let mounted = false;
    const release = async () => {
      if (mounted) {
        try {
          await run(this.tools.umount, [mountPoint]);
        } catch (err) {
          // still busy (a process that outlived the sandbox's kill): detach it from the tree at least
          this.log?.(`disk of sandbox ${id}: ${err.message}; detaching it lazily`);
          await run(this.tools.umount, ['-l', mountPoint]);
        }
        mounted = false;
      }
      fs.rmSync(image, { force: true });
    };
    try {
      // the copy of the snapshot's image made ahead when it is of this very file (and owned by this identity)
      const ready = spare ? await this.use(spare) : null;
      let fromSpare = Boolean(ready && restored && spare.from.image === from.image && spare.identity === identity
        && ready.signature === fileSignature(from.image));
      if (fromSpare) {
        try {
          fs.renameSync(ready.file, image);
        } catch {
          fromSpare = false; // copied now instead
        }
      }
      if (ready && !fromSpare) fs.rmSync(ready.file, { force: true });
      // a sparse copy: only the few MiB of metadata are written (cp finds the holes)
      if (!restored) await this.freshImage(bytes, image);
      else if (!fromSpare) await run(this.tools.cp, ['--sparse=always', from.image, image]);
      if (restored) {
        this.log?.(`disk of sandbox ${id}: snapshot ${from.id}'s image, ${fromSpare ? 'the copy made ahead' : 'copied now'}`);
      }
      fs.mkdirSync(mountPoint, { recursive: true, mode: 0o700 });
      // noinit_itable: no background zeroing of inode tables (the sparse image reads as zeros already)
      await run(this.tools.mount, ['-o', 'loop,nosuid,nodev,noinit_itable', image, mountPoint]);
      mounted = true;
      if (identity && restored && !fromSpare) await run(this.tools.chown, ['-R', '-h', '--', `${identity.uid}:${identity.gid}`, mountPoint]);
      else if (identity) fs.chownSync(mountPoint, identity.uid, identity.gid);
      fs.chmodSync(mountPoint, 0o700);
    } catch (err) {
      await release().catch(() => {});
      throw new Error(`cannot make the sandbox's disk (${bytes} bytes): ${err.message}`);
    }
    const copyTo = async (dst) => {
      await run(this.tools.sync, ['-f', mountPoint]);
      await run(this.tools.cp, ['--sparse=always', image, dst]);
    };
    return { image, bytes, restored, copyTo, release };
  }

  /**
   * Makes ahead the copy of snapshot image `from` ({ id, image, bytes }, as for mount) that its next restore takes
   * (takeSpare), unless there is one (which then counts as the most recently restored); the spare of the snapshot
   * restored longest ago goes beyond SNAPSHOT_SPARES. With `evict` false (a capture: a snapshot nobody restored yet)
   * only where fewer than SNAPSHOT_SPARES are kept. The copy is mounted once in a mount namespace of its own
   * (PREPARE) and its files given a uid reserved for the sandbox that takes it, so that restore only renames and
   * mounts it. Nothing without unshare.
   */
  keepSpare(from, { evict = true } = {}) {
    if (this.closing || !this.tools.unshare || !this.tools.sh) return;
    const had = this.snapshotSpares.get(from.image);
    if (!had && !evict && this.snapshotSpares.size >= SNAPSHOT_SPARES) return;
    this.snapshotSpares.delete(from.image);
    this.snapshotSpares.set(from.image, had ?? this.prepareSpare(from));
    for (const [key, old] of this.snapshotSpares) {
      if (this.snapshotSpares.size <= SNAPSHOT_SPARES) break;
      this.snapshotSpares.delete(key);
      this.discard(old).catch((err) => this.log?.(`copy of snapshot ${old.from.id}'s image: ${err.message}`));
    }
  }

  /**
   * A spare of `from` in the making: { from, identity, bytes (the disk space it takes), made: Promise of { file,
   * signature } or null (failed) }.
   */
  prepareSpare(from) {
    let identity = null;
    try {
      identity = this.identities?.allocate() ?? null;
    } catch (err) {
      this.log?.(`no copy of snapshot ${from.id}'s image made ahead: ${err.message}`);
      return { from, identity, made: Promise.resolve(null), used: false, bytes: 0 };
    }
    const name = `spare-${crypto.randomUUID()}`;
    const file = path.join(this.dir, `${name}.img`);
    const mnt = path.join(this.dir, `${name}.d`);
    let bytes = 0;
    try {
      bytes = fs.statSync(from.image).blocks * 512; // what its sparse copy takes
    } catch { /* gone: its copy fails below */ }
    const spare = { from, identity, used: false, bytes };
    spare.made = (async () => {
      try {
        const signature = fileSignature(from.image);
        fs.closeSync(fs.openSync(file, 'wx', 0o600));
        const background = { background: true };
        await run(this.tools.cp, ['--sparse=always', from.image, file], background);
        fs.mkdirSync(mnt, { mode: 0o700 });
        const owner = identity ? `${identity.uid}:${identity.gid}` : '';
        const { mount, chown, umount, sh } = this.tools;
        const script = [sh, '-c', PREPARE, 'prepare', mount, chown, umount, owner, mnt, file];
        await run(this.tools.unshare, ['--mount', '--propagation', 'private', ...script], background);
        if (fileSignature(from.image) !== signature) throw new Error('the snapshot image changed while it was copied');
        return { file, signature };
      } catch (err) {
        fs.rmSync(file, { force: true });
        this.log?.(`no copy of snapshot ${from.id}'s image made ahead: ${err.message}`);
        return null;
      } finally {
        try {
          fs.rmdirSync(mnt);
        } catch { /* never made */ }
      }
    })();
    return spare;
  }

  /**
   * The spare of snapshot image `from` for the restore of a create, or null: taken out of the kept ones, its
   * identity (null without identities) is the new sandbox's from now on; hand it to mount(), or to drop().
   */
  takeSpare(from) {
    const spare = this.snapshotSpares.get(from.image);
    if (!spare || spare.from.bytes !== from.bytes) return null;
    this.snapshotSpares.delete(from.image);
    return spare;
  }

  /** Marks a taken spare used; resolves its copy ({ file, signature }) or null. Once per spare. */
  use(spare) {
    if (spare.used) return Promise.resolve(null);
    spare.used = true;
    return spare.made;
  }

  /** Deletes the copy of a taken spare that no mount() used (its identity went with the create that took it). */
  async drop(spare) {
    const ready = await this.use(spare);
    if (ready) fs.rmSync(ready.file, { force: true });
  }

  /** Deletes a kept spare nobody took, and gives its uid back. */
  async discard(spare) {
    await this.drop(spare);
    if (spare.identity) this.identities.release(spare.identity);
  }

  /** Whether snapshot image `image` has a spare kept. */
  hasSpare(image) {
    return this.snapshotSpares.has(image);
  }

  /** Bytes of disk the kept spares take (allocated blocks; for the snapshot disk limit). */
  spareBytes() {
    let n = 0;
    for (const spare of this.snapshotSpares.values()) n += spare.bytes;
    return n;
  }

  /** Deletes every kept spare (resolves once their files are gone). */
  async dropSpares() {
    const kept = [...this.snapshotSpares.values()];
    this.snapshotSpares.clear();
    await Promise.all(kept.map((s) => this.discard(s)));
  }

  /** Snapshot image `image` is being deleted: its spare goes (resolves once the file is gone). */
  async forget(image) {
    const spare = this.snapshotSpares.get(image);
    if (!spare) return;
    this.snapshotSpares.delete(image);
    await this.discard(spare);
  }

  /**
   * Replays the journal of `image`, a copy made by copyTo that nothing mounts (`e2fsck -p -E journal_only`: no other
   * check or repair), so that the mounts of its copies need not (about 10 ms instead of 30-45 ms each). Resolves
   * false when e2fsck failed (the image is not to be used), true otherwise (also without e2fsck: nothing done).
   */
  async settle(image) {
    if (!this.tools.e2fsck) return true;
    try {
      await run(this.tools.e2fsck, ['-p', '-E', 'journal_only', image], { background: true });
    } catch (err) {
      // exit 1: "file system errors corrected", which is what replaying a journal reports on some versions
      if (err.code === 1) return true;
      this.log?.(err.message);
      return false;
    }
    return true;
  }

  /** Removes this instance's image directory (every sandbox already released; templates in the making awaited). */
  async close() {
    this.closing = true;
    await Promise.allSettled([...this.templates.values(), ...this.spares.values(), this.dropSpares()]);
    fs.rmSync(this.dir, { recursive: true, force: true });
    try {
      fs.rmdirSync(this.base);
    } catch { /* images of another server on this data dir */ }
  }
}
