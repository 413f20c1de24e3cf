// Per-sandbox disk bound of the local server (root only): a sandbox's host directory (<dataDir>/sb/<id>: workspace,
// tmp, home, run) is the mount of a sparse ext4 image of its own (<dataDir>/disks/<server instance>/<id>.img, loop
// device, nosuid,nodev), sized by resourceLimits["ephemeral-storage"] or the server's diskLimit. Writes past it fail
// with ENOSPC ("No space left on device") inside that sandbox only. The image is unmounted (the loop device clears
// itself) and deleted with the sandbox; images and mounts of servers that died are swept at start. mkfs runs once per
// size (a template image, made at start for the default size); each sandbox's image is a sparse copy of it
// (about 8 ms instead of mkfs's 35 ms for 10Gi), made ahead of the create that takes it (one spare per size).
import fs from 'node:fs';
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

function run(tool, args) {
  return new Promise((resolve, reject) => {
    execFile(tool, args, { timeout: TOOL_TIMEOUT_MS }, (err, _out, stderr) => {
      if (err) reject(new Error(`${path.basename(tool)} ${args.at(-1)}: ${String(stderr || err.message).trim().split('\n')[0]}`));
      else resolve();
    });
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

/** Which tools are missing for the disk bound, or null when it can be given (root, mkfs.ext4, mount, loop devices). */
export function detectDisk() {
  if (process.getuid?.() !== 0) return { tools: null, why: 'the server does not run as root (loop-mounted images need it)' };
  const names = { mkfs: 'mkfs.ext4', mount: 'mount', umount: 'umount', cp: 'cp', sync: 'sync', chown: 'chown' };
  const tools = Object.fromEntries(Object.entries(names).map(([k, name]) => [k, findExecutable(name, SBIN)]));
  const missing = Object.keys(names).filter((k) => !tools[k]).map((k) => names[k]);
  if (missing.length) return { tools: null, why: `${missing.join(', ')} not found (Debian: e2fsprogs, mount, coreutils)` };
  if (!fs.existsSync('/dev/loop-control')) return { tools: null, why: 'no loop devices (/dev/loop-control is missing)' };
  return { tools, why: null };
}

export class Disks {
  /** tools from detectDisk(); dataDir: the server's (images under <dataDir>/disks/<instance>/). */
  constructor({ tools, dataDir, log }) {
    this.tools = tools;
    this.log = log;
    this.base = path.join(dataDir, 'disks');
    this.instance = instanceName();
    this.dir = path.join(this.base, this.instance);
    this.templates = new Map(); // bytes -> Promise of a formatted, never mounted image (root's root directory)
    this.spares = new Map(); // bytes -> Promise of the path of a copy of that template made ahead (freshImage)
    this.spareCount = 0;
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
   * Resolves { image, bytes, restored (whether `from` was used), copyTo(dst), release() }: copyTo
   * writes a sparse copy of the mounted image to dst after a syncfs (the caller stops the sandbox's processes first:
   * the copy is crash-consistent, its journal replayed when it is mounted); release unmounts and deletes the image
   * (idempotent).
   */
  async mount(id, mountPoint, bytes, identity, from = null) {
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
      // a sparse copy: only the few MiB of metadata are written (cp finds the holes)
      if (restored) await run(this.tools.cp, ['--sparse=always', from.image, image]);
      else await this.freshImage(bytes, image);
      fs.mkdirSync(mountPoint, { recursive: true, mode: 0o700 });
      // noinit_itable: no background zeroing of inode tables (the sparse image reads as zeros already)
      await run(this.tools.mount, ['-o', 'loop,nosuid,nodev,noinit_itable', image, mountPoint]);
      mounted = true;
      if (identity && restored) await run(this.tools.chown, ['-R', '-h', '--', `${identity.uid}:${identity.gid}`, mountPoint]);
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

  /** Removes this instance's image directory (every sandbox already released; templates in the making awaited). */
  async close() {
    this.closing = true;
    await Promise.allSettled([...this.templates.values(), ...this.spares.values()]);
    fs.rmSync(this.dir, { recursive: true, force: true });
    try {
      fs.rmdirSync(this.base);
    } catch { /* images of another server on this data dir */ }
  }
}
