// Snapshots of the local server (the spec's Snapshots API): a snapshot is a copy of a sandbox's writable state
// (/workspace, /tmp, /root; for a sandbox on a container image, its overlay's writable layer with the whiteouts and
// opaque directories overlayfs keeps there, and the image it runs on, by digest) under <dataDir>/snapshots/<id>/data,
// with its record in <dataDir>/snapshots/<id>/snapshot.json, so snapshots outlive their source sandbox and a server
// restarted on the same dataDir. Capture stops the sandbox's processes (SIGSTOP) only while the directories are
// copied (reflinks where the filesystem has them), then lets them continue. A snapshot holds its image in the image
// store (no eviction) until it is deleted. States: Creating -> Ready | Failed; Deleting while the data is removed.
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { execFile } from 'node:child_process';
import { ApiError } from './validate.js';
import { findExecutable, removeTree } from './runner.js';

/** The sandbox directories a snapshot holds (names under a sandbox's dir and under a snapshot's data dir). */
export const SNAPSHOT_DIRS = ['workspace', 'tmp', 'home'];
/**
 * What a snapshot of a sandbox on an image holds instead: the overlay's writable layer (runner.js dirs.upper), its
 * whiteouts (character devices 0/0) and opaque directories (xattr user.overlay.opaque) included: `cp -a` keeps both
 * and follows no symlink.
 */
export const IMAGE_SNAPSHOT_DIRS = ['upper'];
/** The directories snapshot record `rec` holds: an image sandbox's writable layer, else the sandbox's own dirs. */
const dirsOf = (rec) => (rec.image ? IMAGE_SNAPSHOT_DIRS : SNAPSHOT_DIRS);
const RECORD = 'snapshot.json';
const IMAGE = 'disk.img'; // the sandbox's disk image, when it had a disk bound
const COPY_TIMEOUT_MS = 10 * 60 * 1000;

function iso(ms) {
  return new Date(ms).toISOString().replace(/Z$/, '000Z');
}

export function snapshotNotFound(id) {
  return new ApiError(404, 'SNAPSHOT::NOT_FOUND', `Snapshot ${id} not found`); // upstream's text, no period
}

function tool(name, args) {
  return new Promise((resolve, reject) => {
    execFile(name, args, { timeout: COPY_TIMEOUT_MS, maxBuffer: 1 << 20 }, (err, _out, stderr) => {
      if (err) reject(new Error(String(stderr || err.message).trim().split('\n').slice(0, 3).join('; ')));
      else resolve();
    });
  });
}

/**
 * A server that is not root copies as the root of a user namespace of its own mapping only its user (util-linux
 * `unshare --map-root-user`): a sandbox's files are all that user's, and that root also reads the ones the sandbox made
 * unreadable to their owner (mode 000), which a plain `cp` fails on. Resolves the unshare to use, or null: root, no
 * unshare, or one that cannot make that namespace here (tried once): a plain cp.
 */
let unshareProbe = null;
function copyUnshare() {
  unshareProbe ??= (async () => {
    const unshare = process.getuid() !== 0 ? findExecutable('unshare', ['/usr/bin', '/bin']) : null;
    if (!unshare) return null;
    return tool(unshare, ['--map-root-user', '--', 'true']).then(() => unshare, () => null);
  })();
  return unshareProbe;
}

/**
 * `cp -a` of the contents of src into dst (created), reflinked when the filesystem can; with `owner` ({ uid, gid }:
 * a restore for a sandbox with a host uid of its own) what was copied becomes the owner's, symlinks themselves
 * included (`chown -R -h`, which follows none: nothing runs in dst yet).
 */
export async function copyTree(src, dst, owner = null) {
  fs.mkdirSync(dst, { recursive: true, mode: 0o755 });
  if (!fs.existsSync(src)) return;
  const cp = ['cp', '-a', '--reflink=auto', '--', `${src}/.`, `${dst}/`];
  const unshare = await copyUnshare();
  await (unshare ? tool(unshare, ['--map-root-user', '--', ...cp]) : tool(cp[0], cp.slice(1)));
  if (owner) await tool('chown', ['-R', '-h', '--', `${owner.uid}:${owner.gid}`, dst]);
}

/** Bytes of the files under dir (allocated blocks; reflinked/shared extents count in full). */
function diskBytes(dir) {
  let total = 0;
  const walk = (d) => {
    let entries;
    try {
      entries = fs.readdirSync(d, { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else {
        try {
          total += fs.lstatSync(p).blocks * 512;
        } catch { /* vanished */ }
      }
    }
  };
  walk(dir);
  return total;
}

export class Snapshots {
  /**
   * options: { dataDir, sandboxes, log, maxBytes (total bytes of all snapshots' data and of the copies of their images
   * made ahead for restores; undefined = no limit), profile
   * (the emulated upstream deployment, upstream.js) }
   */
  constructor({ dataDir, sandboxes, log, maxBytes, profile }) {
    this.dir = path.join(dataDir, 'snapshots');
    this.profile = profile ?? sandboxes.profile;
    this.sandboxes = sandboxes;
    this.log = log;
    this.maxBytes = maxBytes;
    this.items = new Map();
    this.captures = new Set(); // capture promises in flight (close() waits for them)
    this.imageHolds = new Map(); // snapshot id -> its image's hold in the image store (snapshots of image sandboxes)
    fs.mkdirSync(this.dir, { recursive: true });
    this.load();
  }

  /** Reads the records of an earlier run: a capture cut by the restart failed; an interrupted delete finishes. */
  load() {
    for (const id of fs.readdirSync(this.dir)) {
      const dir = path.join(this.dir, id);
      let rec;
      try {
        rec = JSON.parse(fs.readFileSync(path.join(dir, RECORD), 'utf8'));
      } catch {
        removeTree(dir); // no complete record: a half-written entry
        continue;
      }
      if (rec?.id !== id) continue;
      if (rec.status?.state === 'Deleting') {
        removeTree(dir);
        continue;
      }
      if (rec.status?.state === 'Creating') {
        removeTree(path.join(dir, 'data'));
        this.transition(rec, 'Failed', 'snapshot_recovery_failed', 'The server stopped while the snapshot was being captured.');
      }
      this.items.set(id, rec);
      // its image stays in the store while the snapshot exists (the store opened before: nothing evicted meanwhile);
      // a server not running images has no store (its restores are refused)
      if (rec.image && rec.status.state === 'Ready' && this.imageStore) this.holdImage(rec);
    }
  }

  /** The server's image store (images 'run'), or null. */
  get imageStore() {
    return this.sandboxes.options.images?.store ?? null;
  }

  /**
   * Holds the image of snapshot record `rec` ({ reference, digest, key }) in the image store until release (remove()
   * or a failed capture): no LRU eviction takes it while a restore may need it. Logs when the store lost it (its
   * restores then fail saying so).
   */
  holdImage(rec) {
    const held = this.imageStore?.hold(rec.image) ?? null;
    if (held) this.imageHolds.set(rec.id, held);
    else this.log?.(`snapshot ${rec.id}: its image ${rec.image.reference} (${rec.image.digest}) is not in this server's image store`);
  }

  releaseImage(id) {
    this.imageHolds.get(id)?.release();
    this.imageHolds.delete(id);
  }

  persist(rec) {
    const dir = path.join(this.dir, rec.id);
    fs.mkdirSync(dir, { recursive: true });
    const tmp = path.join(dir, `.${RECORD}.tmp`);
    const { restoring: _inMemoryOnly, ...stored } = rec;
    fs.writeFileSync(tmp, JSON.stringify(stored));
    fs.renameSync(tmp, path.join(dir, RECORD));
  }

  transition(rec, state, reason, message) {
    rec.status = { state, reason, message, lastTransitionAt: iso(Date.now()) };
    this.persist(rec);
  }

  get(id) {
    const rec = this.items.get(id);
    if (!rec) throw snapshotNotFound(id);
    return rec;
  }

  view(rec) {
    const v = { id: rec.id, sandboxId: rec.sandboxId };
    if (rec.name !== undefined) v.name = rec.name;
    v.status = rec.status;
    v.createdAt = iso(rec.createdAt);
    return v;
  }

  /** Total bytes of the snapshots' data on disk and of the copies of their images made ahead (for disk limits). */
  bytesUsed() {
    let n = this.disks?.spareBytes() ?? 0;
    for (const rec of this.items.values()) n += rec.sizeBytes ?? 0;
    return n;
  }

  /** POST /sandboxes/{id}/snapshots: accepted at once (Creating); the capture runs in the background. */
  create(sandboxId, { name }) {
    const sb = this.sandboxes.get(sandboxId);
    if (sb.status.state !== 'Running') {
      throw new ApiError(409, 'SNAPSHOT::INVALID_SOURCE_STATE', 'Snapshot can only be created from a Running sandbox.');
    }
    const rec = { id: crypto.randomUUID(), sandboxId, ...(name !== undefined ? { name } : {}), createdAt: Date.now(), sizeBytes: 0 };
    // a sandbox on an image: its writable layer, over that image (held from now on, by digest: docker commit's image)
    if (sb.imageHandle) {
      const { reference, digest, key } = sb.imageHandle;
      rec.image = { reference, digest, key };
      this.holdImage(rec);
    }
    // docker commit keeps the container's labels: sandboxes restored from it inherit the source's metadata
    if (this.profile.snapshotLabels) rec.labels = { ...sb.metadata };
    this.transition(rec, 'Creating', 'snapshot_accepted', 'Snapshot creation accepted.');
    this.items.set(rec.id, rec);
    // captures of one sandbox run one after the other: each stops and continues the sandbox around its own copy
    const run = (sb.captureChain ?? Promise.resolve())
      .then(() => this.capture(rec, sb))
      .catch((err) => this.log?.(`snapshot ${rec.id}: ${err.message}`)) // e.g. its record could not be written
      .finally(() => this.captures.delete(run));
    sb.captureChain = run;
    this.captures.add(run);
    return rec;
  }

  async capture(rec, sb) {
    const data = path.join(this.dir, rec.id, 'data');
    const resumeAfter = !sb.proc.paused;
    const dirs = dirsOf(rec);
    try {
      if (rec.image && !this.imageHolds.has(rec.id)) throw new Error(`its image ${rec.image.reference} is not in the image store`);
      sb.proc.pause(); // consistent copy: nothing in the sandbox writes while it is taken
      if (this.maxBytes !== undefined) {
        const need = dirs.reduce((n, d) => n + diskBytes(sb.proc.dirs[d]), 0);
        // the copies of images made ahead for restores give their room to a capture that needs it
        if (this.bytesUsed() + need > this.maxBytes) await this.disks?.dropSpares();
        const used = this.bytesUsed();
        if (used + need > this.maxBytes) {
          throw new Error(`the sandbox's ${need} bytes would exceed the server's snapshot disk limit (${used} of ${this.maxBytes} bytes used)`);
        }
      }
      for (const d of dirs) await copyTree(sb.proc.dirs[d], path.join(data, d));
      // with a disk bound, also the sandbox's whole image: a restore into a disk of the same size mounts a copy of
      // it instead of copying files one by one (Disks.mount)
      if (sb.disk) {
        await sb.disk.copyTo(path.join(this.dir, rec.id, IMAGE));
        rec.disk = { bytes: sb.disk.bytes };
      }
    } catch (err) {
      removeTree(data);
      fs.rmSync(path.join(this.dir, rec.id, IMAGE), { force: true });
      delete rec.disk;
      this.releaseImage(rec.id);
      if (this.items.has(rec.id)) this.transition(rec, 'Failed', 'snapshot_runtime_failed', `Capture failed: ${err.message}`);
      this.log?.(`snapshot ${rec.id} of sandbox ${sb.id} failed: ${err.message}`);
      return;
    } finally {
      // a pause requested through the API meanwhile wins; a deleted sandbox has nothing to continue
      if (resumeAfter && !sb.deleting && sb.status.state === 'Running') sb.proc.resume();
    }
    // the image's journal replayed once now, not by every restore's mount (an image e2fsck fails on is not kept);
    // then it is kept only where the snapshot disk limit has room for it as well (its metadata alone is a few MiB)
    if (rec.disk) {
      const image = path.join(this.dir, rec.id, IMAGE);
      const settled = await this.disks.settle(image);
      if (!settled || (this.maxBytes !== undefined && this.bytesUsed() + diskBytes(data) + fs.statSync(image).blocks * 512 > this.maxBytes)) {
        fs.rmSync(image, { force: true });
        delete rec.disk;
      }
    }
    rec.sizeBytes = diskBytes(data) + (rec.disk ? fs.statSync(path.join(this.dir, rec.id, IMAGE)).blocks * 512 : 0);
    if (this.profile.delays.snapshot) await new Promise((resolve) => setTimeout(resolve, this.profile.delays.snapshot)); // the emulated commit
    if (this.items.has(rec.id)) this.transition(rec, 'Ready', 'snapshot_runtime_ready', this.profile.snapshotReadyMessage);
    // its first restore's disk made ahead too, where no spare of a snapshot restored since has to go for it
    this.keepSpare(rec.id, { evict: false });
    this.log?.(`snapshot ${rec.id} of sandbox ${sb.id} ready (${rec.sizeBytes} bytes)`);
  }

  list({ sandboxId, states, page, pageSize }) {
    const wanted = states.map((s) => s.toLowerCase());
    const all = [...this.items.values()] // Deleting ones too, as upstream's repository lists every record
      .filter((r) => sandboxId === null || r.sandboxId === sandboxId)
      .filter((r) => wanted.length === 0 || wanted.includes(r.status.state.toLowerCase()))
      .sort((a, b) => b.createdAt - a.createdAt);
    const totalPages = Math.ceil(all.length / pageSize);
    return {
      items: all.slice((page - 1) * pageSize, page * pageSize).map((r) => this.view(r)),
      pagination: { page, pageSize, totalItems: all.length, totalPages, hasNextPage: page < totalPages },
    };
  }

  async remove(id) {
    const rec = this.get(id);
    if (rec.status.state === 'Creating') {
      throw new ApiError(409, 'SNAPSHOT::INVALID_STATE', `Snapshot ${id} is still being created and cannot be deleted`);
    }
    if (rec.status.state === 'Deleting' && !rec.deleteConflict) throw snapshotNotFound(id);
    if (rec.restoring > 0) {
      throw new ApiError(409, 'SNAPSHOT::IN_USE', `Snapshot ${id} is being restored into a sandbox right now; delete it afterwards.`);
    }
    if (rec.status.state !== 'Deleting') this.transition(rec, 'Deleting', 'snapshot_delete_requested', 'Snapshot deletion requested.');
    await this.disks?.forget(path.join(this.dir, id, IMAGE)); // its copy made ahead for the next restore (disk.js)
    // Docker: `docker rmi` of an image a container was created from fails; the record stays Deleting, a later
    // delete (once those sandboxes are gone) goes on
    if (this.profile.snapshotDeleteConflict && [...this.sandboxes.items.values()].some((sb) => !sb.deleting && sb.snapshotId === id)) {
      rec.deleteConflict = true;
      throw new ApiError(409, 'SNAPSHOT::DELETE_CONFLICT', 'snapshot image cannot be deleted due to a conflict');
    }
    const dir = path.join(this.dir, id);
    // off the event loop; what its owner cannot list (a non-root server, a mode 000 directory) once more as removeTree does
    await fs.promises.rm(dir, { recursive: true, force: true }).catch((err) => {
      if (err.code !== 'EACCES' && err.code !== 'EPERM') throw err;
      removeTree(dir);
    });
    this.items.delete(id);
    this.releaseImage(id); // the store may evict its image now
  }

  /**
   * For a create with snapshotId: 404 unknown, 409 not Ready. Resolves { image, containerImage, restoreInto(dirs,
   * owner), release() }: image is { image, bytes } of the snapshot's disk image (for Disks.mount) or null;
   * containerImage() a new hold on the container image the snapshot's sandbox ran on (as the image store's acquire()
   * gives it; its release() is the caller's), or null: it ran on the host's root; restoreInto copies the snapshot's
   * directories into a new sandbox's dirs ({ workspace, tmp, home } paths, or { upper } for an image sandbox's), owned
   * by `owner` ({ uid, gid } or null: as captured). The snapshot cannot be deleted until release().
   */
  acquire(id) {
    const rec = this.items.get(id);
    if (!rec || rec.status.state === 'Deleting') throw snapshotNotFound(id);
    if (rec.status.state !== 'Ready') {
      throw new ApiError(409, 'SNAPSHOT::NOT_READY', `Snapshot ${id} is not ready for restore.`);
    }
    const data = path.join(this.dir, id, 'data');
    rec.restoring = (rec.restoring ?? 0) + 1;
    let released = false;
    return {
      image: this.imageOf(rec),
      containerImage: () => (rec.image ? this.holdContainerImage(rec) : null),
      restoreInto: async (dirs, owner = null) => {
        for (const d of dirsOf(rec)) await copyTree(path.join(data, d), dirs[d], owner);
      },
      release: () => {
        if (!released) rec.restoring--;
        released = true;
      },
    };
  }

  /**
   * A new hold on the image snapshot record `rec` was taken on (for a sandbox restored from it); 400 on a server not
   * running images, 500 when the store no longer has it.
   */
  holdContainerImage(rec) {
    const { reference, digest } = rec.image;
    const store = this.imageStore;
    if (!store) {
      throw new ApiError(400, 'SNAPSHOT::NOT_SUPPORTED', `Snapshot ${rec.id} is of a sandbox on the image ${reference}; this server does not run images (start it with images 'run', --images run).`);
    }
    const held = store.hold(rec.image);
    if (!held) throw new ApiError(500, 'DOCKER::SANDBOX_START_FAILED', `Failed to restore snapshot ${rec.id}: its image ${reference} (${digest}) is no longer in the server's image store.`);
    return held;
  }

  /** The server's disk bound (disk.js Disks), or null. */
  get disks() {
    return this.sandboxes.options.limits?.disks ?? null;
  }

  /** { id, image, bytes } of the disk image of snapshot record `rec` (for Disks.mount), or null: it has none. */
  imageOf(rec) {
    return rec.disk ? { id: rec.id, image: path.join(this.dir, rec.id, IMAGE), bytes: rec.disk.bytes } : null;
  }

  /**
   * For a create from snapshot `id` into a disk of `bytes`: the copy of its image made ahead (Disks.takeSpare; its
   * identity becomes the sandbox's), or null (none, the snapshot is not Ready, has no image or one of another size).
   */
  takeSpare(id, bytes) {
    const rec = this.items.get(id);
    const from = rec?.status.state === 'Ready' ? this.imageOf(rec) : null;
    return from && from.bytes === bytes ? this.disks?.takeSpare(from) ?? null : null;
  }

  /**
   * After a restore from snapshot `id`'s image (or its capture: `evict` false): its next restore's copy is made ahead
   * while the snapshot is Ready and the snapshot disk limit has room for it (Disks.keepSpare).
   */
  keepSpare(id, { evict = true } = {}) {
    const rec = this.items.get(id);
    const from = rec?.status.state === 'Ready' ? this.imageOf(rec) : null;
    if (!from || !this.disks) return;
    // within the snapshot disk limit, which counts the copies too
    if (this.maxBytes !== undefined && !this.disks.hasSpare(from.image)) {
      let bytes = 0;
      try {
        bytes = fs.statSync(from.image).blocks * 512;
      } catch { /* its copy fails */ }
      if (this.bytesUsed() + bytes > this.maxBytes) {
        this.log?.(`no copy of snapshot ${id}'s image made ahead: its ${bytes} bytes would exceed the server's snapshot disk limit (${this.bytesUsed()} of ${this.maxBytes} bytes used)`);
        return;
      }
    }
    this.disks.keepSpare(from, { evict });
  }

  /** The metadata a sandbox restored from snapshot `id` inherits ({} where the runtime keeps none). */
  labelsOf(id) {
    return this.items.get(id)?.labels ?? {};
  }

  /** Waits for the captures in flight (server close). */
  async drain() {
    await Promise.all([...this.captures]);
  }
}
