// The content-addressed image store under the server's dataDir (<dataDir>/images):
//   layers/<hex>/root       an unpacked layer (hex of the blob's sha256), complete or absent: unpacked under tmp/ and
//                           renamed here when done, so a SIGKILL never leaves a half layer in use
//   layers/<hex>/meta.json  { digest, diffId, bytes, entries }
//   tmp/                    layers being unpacked or deleted; emptied by open()
//   index.json              the images: reference key -> { reference, digest, layers: [hex], config, bytes, lastUsed }
// Layers are shared by every image; concurrent acquires of one image (or one layer) pull once; images no sandbox
// holds are evicted least recently used first beyond maxImageBytes. See docs/dev-server.md (Images).
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { ImagePullError, parseReference } from './reference.js';
import { resolveImage, OciLayoutSource, DockerArchiveSource } from './sources.js';
import { unpackLayer, LayerError } from './unpack.js';

export { ImagePullError, parseReference };

const DEFAULT_MAX_ENTRIES = 500000;
const DEFAULT_MAX_UNPACKED = 64 * 2 ** 30;
const PARALLEL_LAYERS = 3;

function pickConfig(c) {
  const cfg = c?.config ?? {};
  const arr = (v) => (Array.isArray(v) ? v.map(String) : null);
  return {
    Env: arr(cfg.Env) ?? [], WorkingDir: typeof cfg.WorkingDir === 'string' ? cfg.WorkingDir : '',
    Entrypoint: arr(cfg.Entrypoint), Cmd: arr(cfg.Cmd), User: typeof cfg.User === 'string' ? cfg.User : '',
  };
}

async function removeTree(p) {
  try {
    await fs.promises.rm(p, { recursive: true, force: true, maxRetries: 2 });
  } catch {
    // directories without write permission (a layer's 0555 dirs, for a non-root server): make them writable
    const fix = async (d) => {
      let st;
      try { st = await fs.promises.lstat(d); } catch { return; }
      if (!st.isDirectory()) return;
      await fs.promises.chmod(d, 0o700).catch(() => {});
      for (const e of await fs.promises.readdir(d).catch(() => [])) await fix(path.join(d, e));
    };
    await fix(p);
    await fs.promises.rm(p, { recursive: true, force: true });
  }
}

export class ImageStore {
  /**
   * opts: { dir, maxImageBytes, insecureRegistries, owner: { uid, gid }, log, maxLayerEntries }
   * owner: the host uid/gid every unpacked file belongs to (default: this process's, which must not be root).
   */
  constructor({ dir, maxImageBytes, insecureRegistries = [], owner, log, maxLayerEntries } = {}) {
    if (!dir) throw new Error('ImageStore needs dir');
    this.dir = path.resolve(dir);
    this.maxImageBytes = maxImageBytes ?? null;
    this.insecureRegistries = [...insecureRegistries];
    this.owner = owner ?? { uid: process.getuid(), gid: process.getgid() };
    if (!Number.isInteger(this.owner.uid) || !Number.isInteger(this.owner.gid)) throw new Error('ImageStore owner needs integer uid and gid');
    if (this.owner.uid === 0) throw new Error('ImageStore owner must not be root: layers are unpacked as their owner in a user namespace (give owner: { uid, gid })');
    this.log = log ?? (() => {});
    this.maxLayerEntries = maxLayerEntries ?? DEFAULT_MAX_ENTRIES;
    this.images = new Map(); // key -> record
    this.holds = new Map(); // key -> count
    this.layerPins = new Map(); // hex -> count (pulls in progress that use the layer)
    this.inflight = new Map(); // key -> promise of record
    this.layerLocks = new Map(); // hex -> promise
    this.layerBytes = new Map(); // hex -> bytes (of complete layers on disk)
    this.saving = Promise.resolve();
    this.opened = false;
  }

  layerRoot(hex) { return path.join(this.dir, 'layers', hex, 'root'); }

  async open() {
    for (const d of ['', 'layers', 'tmp']) await fs.promises.mkdir(path.join(this.dir, d), { recursive: true, mode: 0o711 });
    for (const e of await fs.promises.readdir(path.join(this.dir, 'tmp'))) await removeTree(path.join(this.dir, 'tmp', e));
    for (const hex of await fs.promises.readdir(path.join(this.dir, 'layers'))) {
      const meta = await fs.promises.readFile(path.join(this.dir, 'layers', hex, 'meta.json'), 'utf8').then(JSON.parse).catch(() => null);
      if (!/^[a-f0-9]{64}$/.test(hex) || !meta) { await this.dropLayerDir(hex); continue; }
      this.layerBytes.set(hex, meta.bytes ?? 0);
    }
    let index = {};
    try { index = JSON.parse(await fs.promises.readFile(path.join(this.dir, 'index.json'), 'utf8')).images ?? {}; } catch {}
    for (const [key, rec] of Object.entries(index)) {
      if (Array.isArray(rec?.layers) && rec.layers.every((h) => this.layerBytes.has(h))) this.images.set(key, rec);
    }
    const used = new Set([...this.images.values()].flatMap((r) => r.layers));
    for (const hex of [...this.layerBytes.keys()]) if (!used.has(hex)) await this.dropLayer(hex);
    this.opened = true;
    await this.save();
  }

  /** Bytes of all unpacked layers on disk (each once). */
  totalBytes() { let n = 0; for (const b of this.layerBytes.values()) n += b; return n; }

  /** { images: [{ reference, digest, bytes, lastUsed, held }], bytes } */
  stats() {
    return {
      bytes: this.totalBytes(), layers: this.layerBytes.size,
      images: [...this.images.entries()].map(([key, r]) => ({ key, reference: r.reference, digest: r.digest, bytes: r.bytes, lastUsed: r.lastUsed, held: this.holds.get(key) ?? 0 })),
    };
  }

  save() {
    const write = async () => {
      const file = path.join(this.dir, 'index.json');
      const tmp = `${file}.${process.pid}.${crypto.randomBytes(4).toString('hex')}`;
      await fs.promises.writeFile(tmp, JSON.stringify({ version: 1, images: Object.fromEntries(this.images) }));
      await fs.promises.rename(tmp, file);
    };
    this.saving = this.saving.then(write, write);
    return this.saving;
  }

  async dropLayerDir(hex) {
    const from = path.join(this.dir, 'layers', hex);
    const to = path.join(this.dir, 'tmp', `del-${hex.slice(0, 40)}-${crypto.randomBytes(4).toString('hex')}`);
    try { await fs.promises.rename(from, to); } catch { return; }
    await removeTree(to);
  }

  async dropLayer(hex) {
    this.layerBytes.delete(hex);
    await this.dropLayerDir(hex);
  }

  sourceFor(ref, opts) {
    if (ref.transport === 'oci') return new OciLayoutSource(ref);
    if (ref.transport === 'docker-archive') return new DockerArchiveSource(ref);
    return import('./registry.js').then(({ RegistrySource }) => new RegistrySource(ref, { auth: opts.auth, insecureRegistries: this.insecureRegistries, log: this.log }));
  }

  /**
   * The image `reference`, pulled once into the store (or found there) and held until release().
   * opts: { auth: { username, password }, platform, onProgress({ layer, bytes, total }), signal }
   */
  async acquire(reference, opts = {}) {
    if (!this.opened) throw new Error('ImageStore.open() first');
    const ref = parseReference(reference);
    const p = opts.platform;
    const key = p ? `${ref.key}|${typeof p === 'string' ? p : `${p.os ?? ''}/${p.architecture ?? p.arch ?? ''}`}` : ref.key;
    let rec = this.images.get(key);
    if (!rec) {
      let pending = this.inflight.get(key);
      if (!pending) {
        const listeners = new Set();
        pending = this.pull(ref, key, opts, listeners).finally(() => this.inflight.delete(key));
        pending.listeners = listeners;
        this.inflight.set(key, pending);
      }
      if (opts.onProgress) pending.listeners.add(opts.onProgress); // every waiter of one pull sees its progress
      rec = await (opts.signal ? abortable(pending, opts.signal) : pending);
    }
    const handle = this.handle(key, rec);
    rec.lastUsed = Date.now();
    await this.save();
    await this.evict();
    return handle;
  }

  /**
   * The image stored under `key` (an acquire() handle's key) if it still is `digest`, held until release() like
   * acquire()'s, without any pull (a snapshot of a sandbox on it keeps it from eviction, and restores onto it); null
   * when the store no longer has it.
   */
  hold({ key, digest }) {
    const rec = this.images.get(key);
    if (!rec || rec.digest !== digest) return null;
    return this.handle(key, rec);
  }

  /** A hold on image record `rec` (under `key`): { reference, digest, key, layers, config, bytes, release() }. */
  handle(key, rec) {
    this.holds.set(key, (this.holds.get(key) ?? 0) + 1);
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      const n = (this.holds.get(key) ?? 1) - 1;
      if (n > 0) this.holds.set(key, n); else this.holds.delete(key);
      this.evict().catch((e) => this.log(`images: eviction failed: ${e.message}`));
    };
    return {
      reference: rec.reference, digest: rec.digest, key, layers: rec.layers.map((h) => this.layerRoot(h)),
      config: structuredClone(rec.config), bytes: rec.bytes, release,
    };
  }

  async pull(ref, key, opts, listeners) {
    const started = Date.now();
    const source = await this.sourceFor(ref, opts);
    const pins = [];
    try {
      let img;
      try {
        img = await resolveImage(source, { platform: opts.platform });
      } catch (e) {
        throw e instanceof ImagePullError ? e : new ImagePullError(`pulling ${ref.key}: ${e.message}`, { cause: e });
      }
      const hexes = img.layers.map((d) => d.digest.slice(7));
      for (const h of hexes) { this.layerPins.set(h, (this.layerPins.get(h) ?? 0) + 1); pins.push(h); }
      const total = img.layers.reduce((n, d) => n + d.size, 0);
      this.log(`images: pulling ${ref.key} (${img.digest}): ${img.layers.length} layers, ${total} bytes`);
      const max = this.maxImageBytes ?? DEFAULT_MAX_UNPACKED;
      // the uncompressed bytes of this image's layers, shared by the layers unpacking at once (a decompression bomb stops here)
      const budget = { left: max, message: `image ${ref.key} unpacks to more than ${max} bytes (maxImageBytes)` };
      const queue = img.layers.map((d, i) => ({ d, i }));
      const work = async () => {
        for (let item = queue.shift(); item; item = queue.shift()) {
          const { d, i } = item;
          await this.ensureLayer(d, img.diffIds[i], source, { budget, listeners, signal: opts.signal, refKey: ref.key });
        }
      };
      await Promise.all(Array.from({ length: Math.min(PARALLEL_LAYERS, queue.length) }, work));
      const bytes = hexes.reduce((n, h) => n + (this.layerBytes.get(h) ?? 0), 0);
      if (this.maxImageBytes != null && bytes > this.maxImageBytes) {
        throw new ImagePullError(`image ${ref.key} unpacks to ${bytes} bytes, more than maxImageBytes (${this.maxImageBytes})`);
      }
      const rec = { reference: ref.key, digest: img.digest, layers: hexes, config: pickConfig(img.config), bytes, lastUsed: Date.now() };
      this.images.set(key, rec);
      await this.save();
      this.log(`images: ${ref.key} ready in ${Date.now() - started} ms (${bytes} bytes unpacked)`);
      return rec;
    } finally {
      for (const h of pins) { const n = this.layerPins.get(h) - 1; if (n > 0) this.layerPins.set(h, n); else this.layerPins.delete(h); }
      await source.close?.();
    }
  }

  /** Makes layer `desc` present (unpacking it once, whoever asks); resolves to its unpacked bytes. */
  async ensureLayer(desc, diffId, source, { budget, listeners, signal, refKey }) {
    const hex = desc.digest.slice(7);
    for (;;) {
      if (this.layerBytes.has(hex)) {
        for (const l of listeners) l({ layer: desc.digest, bytes: desc.size, total: desc.size, cached: true });
        return 0;
      }
      const lock = this.layerLocks.get(hex);
      if (!lock) break;
      await lock.catch(() => {});
    }
    const p = this.unpack(desc, diffId, source, { budget, listeners, signal, refKey });
    this.layerLocks.set(hex, p);
    try {
      return await p;
    } finally {
      this.layerLocks.delete(hex);
    }
  }

  async unpack(desc, diffId, source, { budget, listeners, signal, refKey }) {
    const hex = desc.digest.slice(7);
    const tmp = path.join(this.dir, 'tmp', `${hex.slice(0, 40)}-${crypto.randomBytes(6).toString('hex')}`);
    const root = path.join(tmp, 'root');
    await fs.promises.mkdir(root, { recursive: true, mode: 0o700 });
    await fs.promises.chmod(tmp, 0o711);
    if (process.getuid() === 0) await fs.promises.chown(root, this.owner.uid, this.owner.gid);
    let done = 0;
    let lastLog = 0;
    const short = desc.digest.slice(0, 19);
    try {
      const stream = await source.blob(desc);
      const res = await unpackLayer(stream, {
        rootDir: root, desc, diffId, owner: this.owner, maxEntries: this.maxLayerEntries, signal,
        what: `layer ${desc.digest} of ${refKey}`,
        limit: budget,
        onBytes: (n) => {
          done += n;
          for (const l of listeners) l({ layer: desc.digest, bytes: done, total: desc.size });
          if (Date.now() - lastLog > 2000) { lastLog = Date.now(); this.log(`images: ${short}: ${done}/${desc.size} bytes`); }
        },
      });
      if (res.skipped) this.log(`images: layer ${short}: ${res.skipped} entries skipped (${res.notes.slice(0, 3).join('; ')})`);
      const bytes = Math.max(res.tarBytes, res.bytes);
      await fs.promises.writeFile(path.join(tmp, 'meta.json'), JSON.stringify({ digest: desc.digest, diffId: res.diffId, bytes, entries: res.entries, skipped: res.skipped }));
      await fs.promises.rename(tmp, path.join(this.dir, 'layers', hex));
      this.layerBytes.set(hex, bytes);
      this.log(`images: layer ${short} unpacked: ${desc.size} bytes -> ${bytes} bytes, ${res.entries} entries`);
      return bytes;
    } catch (e) {
      await removeTree(tmp);
      if (e instanceof ImagePullError) throw e;
      if (e instanceof LayerError) throw new ImagePullError(e.message, { cause: e });
      if (signal?.aborted) throw e;
      throw new ImagePullError(`layer ${desc.digest} of ${refKey}: ${e.message}`, { cause: e });
    }
  }

  /** Evicts images no one holds, least recently used first, until the store fits maxImageBytes. */
  async evict() {
    if (this.maxImageBytes == null) return;
    let changed = false;
    while (this.totalBytes() > this.maxImageBytes) {
      const victims = [...this.images.entries()].filter(([k]) => !this.holds.get(k)).sort((a, b) => a[1].lastUsed - b[1].lastUsed);
      if (!victims.length) break;
      const [key, rec] = victims[0];
      this.images.delete(key);
      changed = true;
      const used = new Set([...this.images.values()].flatMap((r) => r.layers));
      for (const h of rec.layers) {
        if (!used.has(h) && !this.layerPins.has(h) && this.layerBytes.has(h)) await this.dropLayer(h);
      }
      this.log(`images: evicted ${rec.reference} (${rec.bytes} bytes)`);
    }
    if (changed) await this.save();
  }
}

function abortable(promise, signal) {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then((v) => { signal.removeEventListener('abort', onAbort); resolve(v); }, (e) => { signal.removeEventListener('abort', onAbort); reject(e); });
  });
}
