// One layer blob -> one unpacked layer directory: the blob's digest and size checked while it streams, decompressed
// here (gzip, zstd or none, by its first bytes), the uncompressed digest (diff_id) checked, the byte count bounded, and
// the tar unpacked by extract-layer.py under bubblewrap — a user namespace as the store's owner, no network, the host
// read-only; the only writable thing is the new layer's directory, passed as descriptor 3 (every write
// below it is *at() relative to it, never through a symlink). Never as host root writing through layer paths.
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { Transform, Duplex } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { fileURLToPath } from 'node:url';
import zlib from 'node:zlib';

const HERE = path.dirname(fileURLToPath(import.meta.url));
let extractorCode = null;
const PYTHON = ['/usr/bin/python3', '/bin/python3'];
const BWRAP = ['/usr/bin/bwrap', '/bin/bwrap', '/usr/local/bin/bwrap'];

class LayerError extends Error {}

/** A transform that hashes and counts what passes; `check()` after the end throws on a digest or size mismatch. */
function digestChecker({ digest, size, what, limit }) {
  const hash = crypto.createHash('sha256');
  let n = 0;
  const t = new Transform({
    transform(chunk, _enc, cb) {
      n += chunk.length;
      if (size != null && n > size) return cb(new LayerError(`${what} is larger than its descriptor's ${size} bytes`));
      if (limit != null && (limit.left -= chunk.length) < 0) return cb(new LayerError(limit.message));
      hash.update(chunk);
      cb(null, chunk);
    },
  });
  t.check = () => {
    if (size != null && n !== size) throw new LayerError(`${what} has ${n} bytes, its descriptor says ${size}`);
    const got = `sha256:${hash.digest('hex')}`;
    if (digest && got !== digest) throw new LayerError(`${what} digest mismatch: got ${got}, expected ${digest}`);
    return { bytes: n, digest: got };
  };
  return t;
}

function zstdDecompressor() {
  if (typeof zlib.createZstdDecompress === 'function') return zlib.createZstdDecompress();
  const p = spawn('zstd', ['-dc', '-q'], { stdio: ['pipe', 'pipe', 'ignore'] });
  p.on('error', () => {});
  return Duplex.from({ writable: p.stdin, readable: p.stdout });
}

/** Reads at least `n` bytes of `stream` (less at its end) and puts them back; resolves to them. */
async function peek(stream, n) {
  const chunks = [];
  let have = 0;
  while (have < n) {
    const c = stream.read();
    if (c === null) {
      if (stream.readableEnded || stream.destroyed) break;
      await new Promise((resolve, reject) => {
        const done = () => { stream.off('readable', done); stream.off('end', done); stream.off('error', fail); resolve(); };
        const fail = (e) => { stream.off('readable', done); stream.off('end', done); reject(e); };
        stream.on('readable', done); stream.on('end', done); stream.once('error', fail);
      });
      if (stream.readableEnded) break;
      continue;
    }
    chunks.push(c);
    have += c.length;
  }
  const head = Buffer.concat(chunks);
  if (head.length) stream.unshift(head);
  return head;
}

function bwrapPath() {
  return BWRAP.find((p) => fs.existsSync(p)) ?? null;
}

/**
 * Unpacks the blob `source` (a readable stream of the blob as stored: compressed or not) into `rootDir` (an empty
 * directory owned by `owner`). desc: { digest, size } of the blob; diffId: the expected uncompressed digest or null;
 * limit: { left, message } the uncompressed bytes still allowed, shared by the layers of one pull (decremented here); maxEntries; onBytes(n) per compressed chunk.
 * Resolves to { diffId, tarBytes, entries, bytes, skipped, notes }; throws LayerError with the reason.
 */
export async function unpackLayer(source, { rootDir, desc, diffId, owner, limit, maxEntries, onBytes, signal, what }) {
  const bwrap = bwrapPath();
  if (!bwrap) throw new LayerError('unpacking image layers needs bubblewrap (bwrap), which is not installed');
  const python = PYTHON.find((p) => fs.existsSync(p));
  if (!python) throw new LayerError('unpacking image layers needs /usr/bin/python3');
  extractorCode ??= fs.readFileSync(path.join(HERE, 'extract-layer.py'), 'utf8');
  const dirFd = fs.openSync(rootDir, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY | fs.constants.O_NOFOLLOW);
  const args = ['--unshare-all', '--die-with-parent', '--new-session', '--uid', '0', '--gid', '0', '--cap-drop', 'ALL',
    '--ro-bind', '/usr', '/usr'];
  for (const d of ['/lib', '/lib64', '/lib32', '/bin', '/etc/ld.so.cache']) args.push('--ro-bind-try', d, d);
  args.push('--proc', '/proc', '--dev', '/dev', '--tmpfs', '/tmp', '--chdir', '/',
    '--', python, '-I', '-S', '-c', extractorCode, String(maxEntries));
  const asOwner = process.getuid() === 0 ? { uid: owner.uid, gid: owner.gid } : {};
  let child;
  try {
    child = spawn(bwrap, args, { stdio: ['pipe', 'pipe', 'pipe', dirFd], env: { PATH: '/usr/bin:/bin', LANG: 'C.UTF-8' }, ...asOwner });
  } finally {
    fs.closeSync(dirFd);
  }
  let out = '';
  let err = '';
  child.stdout.setEncoding('utf8').on('data', (d) => { if (out.length < 65536) out += d; });
  child.stderr.setEncoding('utf8').on('data', (d) => { if (err.length < 65536) err += d; });
  const exited = new Promise((resolve) => {
    child.on('error', (e) => resolve({ code: -1, error: e }));
    child.on('close', (code, sig) => resolve({ code, sig }));
  });
  const onAbort = () => { try { child.kill('SIGKILL'); } catch {} };
  signal?.addEventListener('abort', onAbort, { once: true });
  child.stdin.on('error', () => {}); // EPIPE when the extractor refuses early: its reason wins below

  // the blob is read here to its end even when unpacking fails (bounded by its descriptor's size), so that a corrupt
  // blob is reported as a digest mismatch, not as whatever its broken tar made the extractor say
  const blobHash = crypto.createHash('sha256');
  let blobBytes = 0;
  const tar = digestChecker({ digest: diffId, size: null, what: `${what} (uncompressed)`, limit });
  let streamError = null;
  let downstreamError = null;
  const onAbortSource = () => source.destroy(signal.reason);
  signal?.addEventListener('abort', onAbortSource, { once: true });
  try {
    const head = await peek(source, 4);
    const stages = [];
    if (head.length >= 2 && head[0] === 0x1f && head[1] === 0x8b) stages.push(zlib.createGunzip({ chunkSize: 1 << 18 }));
    else if (head.length >= 4 && head.readUInt32LE(0) === 0xfd2fb528) stages.push(zstdDecompressor());
    stages.push(tar, child.stdin);
    const entry = stages[0];
    const downstream = pipeline(stages).catch((e) => { downstreamError = e; });
    for await (const c of source) {
      blobBytes += c.length;
      if (blobBytes > desc.size) throw new LayerError(`${what} is larger than its descriptor's ${desc.size} bytes`);
      blobHash.update(c);
      onBytes?.(c.length);
      if (!downstreamError && !entry.destroyed && !entry.write(c)) {
        await new Promise((resolve) => { entry.once('drain', resolve); downstream.then(resolve); });
      }
    }
    if (!downstreamError) { entry.end(); await downstream; }
  } catch (e) {
    streamError = e;
  }
  if (!child.stdin.destroyed && (streamError || downstreamError)) child.stdin.destroy();
  const res = await exited;
  signal?.removeEventListener('abort', onAbort);
  signal?.removeEventListener('abort', onAbortSource);
  if (signal?.aborted) throw signal.reason ?? new LayerError('aborted');
  if (streamError instanceof LayerError) throw streamError;
  if (streamError) throw new LayerError(`${what}: ${streamError.message}`);
  if (blobBytes !== desc.size) throw new LayerError(`${what} has ${blobBytes} bytes, its descriptor says ${desc.size}`);
  const got = `sha256:${blobHash.digest('hex')}`;
  if (got !== desc.digest) throw new LayerError(`${what} digest mismatch: got ${got}, expected ${desc.digest}`);
  if (downstreamError instanceof LayerError) throw downstreamError;
  if (res.code !== 0) {
    const reason = (err.match(/refused: (.*)/)?.[1] ?? err.trim().split('\n').slice(-3).join(' ')) || (res.error?.message ?? `exit ${res.code ?? res.sig}`);
    throw new LayerError(`${what} refused: ${reason}`);
  }
  if (downstreamError) throw new LayerError(`${what}: ${downstreamError.message}`);
  const sums = { digest: got };
  const t = tar.check();
  let report;
  try { report = JSON.parse(out.trim().split('\n').pop()); } catch { throw new LayerError(`${what}: the extractor gave no report`); }
  return { digest: sums.digest, diffId: t.digest, tarBytes: t.bytes, ...report };
}

export { LayerError };
