// Where an image comes from: a registry (registry.js), an OCI image layout directory (`oci:`) or a `docker save`
// archive (`docker-archive:`). Each source gives the top manifest of the reference, manifests and blobs by
// descriptor; resolveImage() walks index -> platform's manifest -> config, checking every digest and size.
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { ImagePullError, wantedPlatform } from './reference.js';
import { openDirChain } from '../volumes.js';

export const MT = {
  ociIndex: 'application/vnd.oci.image.index.v1+json',
  dockerList: 'application/vnd.docker.distribution.manifest.list.v2+json',
  ociManifest: 'application/vnd.oci.image.manifest.v1+json',
  dockerManifest: 'application/vnd.docker.distribution.manifest.v2+json',
  dockerConfig: 'application/vnd.docker.container.image.v1+json',
  ociConfig: 'application/vnd.oci.image.config.v1+json',
};
export const MANIFEST_ACCEPT = [MT.ociIndex, MT.dockerList, MT.ociManifest, MT.dockerManifest].join(', ');
const LAYER_TYPES = new Set([
  'application/vnd.oci.image.layer.v1.tar', 'application/vnd.oci.image.layer.v1.tar+gzip', 'application/vnd.oci.image.layer.v1.tar+zstd',
  'application/vnd.docker.image.rootfs.diff.tar.gzip', 'application/vnd.docker.image.rootfs.diff.tar', 'application/vnd.docker.image.rootfs.diff.tar.zstd',
  'application/vnd.oci.image.layer.nondistributable.v1.tar+gzip', 'application/vnd.docker.image.rootfs.foreign.diff.tar.gzip',
]);
const MAX_JSON = 4 << 20;

export function sha256(buf) { return `sha256:${crypto.createHash('sha256').update(buf).digest('hex')}`; }

export function checkDescriptor(desc, what) {
  if (!desc || typeof desc !== 'object' || typeof desc.digest !== 'string') throw new ImagePullError(`${what}: a descriptor without a digest`);
  if (!/^sha256:[a-f0-9]{64}$/.test(desc.digest)) throw new ImagePullError(`${what}: unsupported digest ${JSON.stringify(desc.digest.slice(0, 80))} (sha256 only)`);
  if (!Number.isSafeInteger(desc.size) || desc.size < 0) throw new ImagePullError(`${what}: descriptor ${desc.digest} without a valid size`);
  return desc;
}

/** Checks bytes against a descriptor (digest and size). */
export function verifyBytes(bytes, desc, what) {
  if (desc.size != null && bytes.length !== desc.size) throw new ImagePullError(`${what} ${desc.digest}: ${bytes.length} bytes, its descriptor says ${desc.size}`);
  const got = sha256(bytes);
  if (got !== desc.digest) throw new ImagePullError(`${what} digest mismatch: got ${got}, expected ${desc.digest}`);
  return bytes;
}

function parseJson(bytes, what) {
  try { return JSON.parse(bytes.toString('utf8')); } catch { throw new ImagePullError(`${what} is not valid JSON`); }
}

function isIndex(m, mediaType) {
  const t = m.mediaType ?? mediaType;
  return t === MT.ociIndex || t === MT.dockerList || (!t && Array.isArray(m.manifests) && !m.layers);
}

function pickPlatform(index, platform, where) {
  const want = wantedPlatform(platform);
  const list = (index.manifests ?? []).filter((d) => d && d.platform && d.platform.os !== 'unknown');
  const match = (d, strictVariant) => d.platform.os === want.os && d.platform.architecture === want.architecture &&
    (!strictVariant || !want.variant || !d.platform.variant || d.platform.variant === want.variant);
  let found = list.find((d) => match(d, true)) ?? list.find((d) => match(d, false));
  if (!found && !list.length && index.manifests?.length === 1) found = index.manifests[0];
  if (!found) {
    const have = list.map((d) => `${d.platform.os}/${d.platform.architecture}${d.platform.variant ? '/' + d.platform.variant : ''}`).join(', ');
    throw new ImagePullError(`${where}: no manifest for platform ${want.os}/${want.architecture} (the image has: ${have || 'none'})`);
  }
  return found;
}

/**
 * Resolves the image of `source` for `platform`: { digest (of the top manifest), manifest, config (parsed),
 * configBytes, layers: [descriptors, bottom first], diffIds }. Every manifest and the config checked by digest.
 */
export async function resolveImage(source, { platform } = {}) {
  let { bytes, digest, mediaType } = await source.top();
  const topDigest = digest;
  let m = parseJson(bytes, `manifest of ${source.name}`);
  for (let depth = 0; isIndex(m, mediaType); depth++) {
    if (depth > 2) throw new ImagePullError(`${source.name}: image indexes nested too deep`);
    const desc = checkDescriptor(pickPlatform(m, platform, source.name), `index of ${source.name}`);
    bytes = verifyBytes(await source.manifest(desc, 'manifest'), desc, `manifest of ${source.name}`);
    digest = desc.digest;
    mediaType = desc.mediaType;
    m = parseJson(bytes, `manifest of ${source.name}`);
  }
  if (m.schemaVersion === 1) throw new ImagePullError(`${source.name}: Docker schema 1 manifests are not supported`);
  const t = m.mediaType ?? mediaType;
  if (!Array.isArray(m.layers) || !m.config || (t && t !== MT.ociManifest && t !== MT.dockerManifest)) {
    throw new ImagePullError(`${source.name}: not an image manifest (media type ${t ?? 'unknown'})`);
  }
  const cdesc = checkDescriptor(m.config, `config of ${source.name}`);
  if (cdesc.size > MAX_JSON) throw new ImagePullError(`${source.name}: image config larger than ${MAX_JSON} bytes`);
  const configBytes = verifyBytes(await source.manifest(cdesc, 'config'), cdesc, `config of ${source.name}`);
  const config = parseJson(configBytes, `config of ${source.name}`);
  const layers = m.layers.map((d, i) => {
    checkDescriptor(d, `layer ${i} of ${source.name}`);
    if (d.mediaType && !LAYER_TYPES.has(d.mediaType)) throw new ImagePullError(`${source.name}: layer ${d.digest} has unsupported media type ${d.mediaType}`);
    return d;
  });
  const diffIds = config.rootfs?.diff_ids;
  if (!Array.isArray(diffIds) || diffIds.length !== layers.length) throw new ImagePullError(`${source.name}: the config's rootfs.diff_ids do not match the manifest's ${layers.length} layers`);
  return { digest: topDigest, manifestDigest: digest, manifest: m, config, configBytes, layers, diffIds };
}

/**
 * Opens file `abs` (absolute) for reading without following a symbolic link anywhere on its path: each directory from
 * "/" is looked up in its parent's descriptor with O_NOFOLLOW (volumes.js openDirChain), the file in the last one. The
 * server checked the resolved path against allowedHostPaths; this makes what it reads that path's own files, even when
 * a directory on the way (or inside an OCI layout: blobs/, blobs/sha256/) is a link or is swapped for one meanwhile.
 */
async function openNoFollow(abs, what) {
  const file = path.resolve(abs);
  const dir = path.dirname(file);
  let chain;
  try {
    chain = openDirChain(dir);
  } catch (e) {
    throw new ImagePullError(`${what}: ${e.walkRefusal ?? e.code ?? e.message}`);
  }
  try {
    if (chain.at(-1).path !== dir) throw new ImagePullError(`${what}: ENOENT`);
    return await fs.promises.open(`/proc/self/fd/${chain.at(-1).fd}/${path.basename(file)}`, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW);
  } catch (e) {
    if (e instanceof ImagePullError) throw e;
    throw new ImagePullError(`${what}: ${e.code === 'ELOOP' ? 'is a symbolic link' : e.code ?? e.message}`);
  } finally {
    for (const { fd } of chain) fs.closeSync(fd);
  }
}

async function readSmall(file, max, what) {
  let fh;
  try {
    fh = await openNoFollow(file, what);
    const st = await fh.stat();
    if (!st.isFile()) throw new ImagePullError(`${what}: not a regular file`);
    if (st.size > max) throw new ImagePullError(`${what}: larger than ${max} bytes`);
    return await fh.readFile();
  } catch (e) {
    if (e instanceof ImagePullError) throw e;
    throw new ImagePullError(`${what}: ${e.code ?? e.message}`);
  } finally {
    await fh?.close();
  }
}

/** An OCI image layout directory (skopeo's `oci:<dir>[:<tag>]`). */
export class OciLayoutSource {
  constructor(ref) {
    this.dir = ref.dir;
    this.tag = ref.tag;
    this.name = `OCI layout ${ref.dir}`;
  }
  blobPath(digest) { return path.join(this.dir, 'blobs', 'sha256', digest.slice(7)); }
  async top() {
    const layout = parseJson(await readSmall(path.join(this.dir, 'oci-layout'), MAX_JSON, `${this.name}: oci-layout`), `${this.name}: oci-layout`);
    if (!layout.imageLayoutVersion) throw new ImagePullError(`${this.name}: not an OCI image layout (no imageLayoutVersion)`);
    const index = parseJson(await readSmall(path.join(this.dir, 'index.json'), MAX_JSON, `${this.name}: index.json`), `${this.name}: index.json`);
    const list = Array.isArray(index.manifests) ? index.manifests : [];
    const refName = (d) => d?.annotations?.['org.opencontainers.image.ref.name'];
    let desc;
    if (this.tag !== null) {
      desc = list.find((d) => refName(d) === this.tag);
      if (!desc) throw new ImagePullError(`${this.name}: no image tagged ${JSON.stringify(this.tag)} (tags: ${list.map(refName).filter(Boolean).join(', ') || 'none'})`);
    } else if (list.length === 1) desc = list[0];
    else throw new ImagePullError(`${this.name}: ${list.length} images in the layout; name one as oci:<dir>:<tag>`);
    checkDescriptor(desc, this.name);
    const bytes = verifyBytes(await this.manifest(desc), desc, `manifest of ${this.name}`);
    return { bytes, digest: desc.digest, mediaType: desc.mediaType };
  }
  async manifest(desc) { return readSmall(this.blobPath(desc.digest), MAX_JSON, `${this.name}: blob ${desc.digest}`); }
  async blob(desc) {
    const fh = await openNoFollow(this.blobPath(desc.digest), `${this.name}: blob ${desc.digest}`);
    return fh.createReadStream({ highWaterMark: 1 << 20 });
  }
}

/** Member offsets of a tar file (headers only): Map name -> { offset, size }. Plain, ustar, pax and GNU long names. */
async function indexTar(fh, what) {
  const members = new Map();
  const st = await fh.stat();
  const head = Buffer.alloc(512);
  let pos = 0;
  let longName = null;
  for (let n = 0; n < 100000 && pos + 512 <= st.size; n++) {
    await fh.read(head, 0, 512, pos);
    if (head.every((b) => b === 0)) break;
    const str = (a, b) => head.subarray(a, b).toString('utf8').replace(/\0.*$/s, '');
    let size;
    if (head[124] & 0x80) size = Number(head.subarray(125, 136).readBigUInt64BE?.(3) ?? 0n);
    else size = parseInt(str(124, 136).trim() || '0', 8);
    if (!Number.isSafeInteger(size) || size < 0) throw new ImagePullError(`${what}: a bad tar header`);
    const type = String.fromCharCode(head[156] || 48);
    let name = str(0, 100);
    if (str(257, 263).startsWith('ustar')) { const prefix = str(345, 500); if (prefix) name = `${prefix}/${name}`; }
    const data = pos + 512;
    if (type === 'x' || type === 'L') {
      if (size > 1 << 20) throw new ImagePullError(`${what}: a tar extended header too large`);
      const buf = Buffer.alloc(size);
      await fh.read(buf, 0, size, data);
      if (type === 'L') longName = buf.toString('utf8').replace(/\0.*$/s, '');
      else { const m = /(?:^|\n)\d+ path=([^\n]*)\n/.exec(buf.toString('utf8')); if (m) longName = m[1]; }
    } else {
      if (longName !== null) { name = longName; longName = null; }
      if (type === '0' || type === '\0' || type === '7') members.set(path.posix.normalize(name).replace(/^\.\//, ''), { offset: data, size });
    }
    pos = data + Math.ceil(size / 512) * 512;
  }
  return members;
}

/** A `docker save` archive (skopeo's `docker-archive:<file>`): the first image of its manifest.json. */
export class DockerArchiveSource {
  constructor(ref) {
    this.file = ref.file;
    this.name = `docker archive ${ref.file}`;
    this.blobs = new Map(); // digest -> member
  }
  async open() {
    if (this.fh) return;
    this.fh = await openNoFollow(this.file, this.name);
    this.members = await indexTar(this.fh, this.name);
  }
  async member(name, max) {
    const m = this.members.get(path.posix.normalize(name).replace(/^\.\//, ''));
    if (!m) throw new ImagePullError(`${this.name}: no ${JSON.stringify(name)} in the archive`);
    if (max != null && m.size > max) throw new ImagePullError(`${this.name}: ${name} larger than ${max} bytes`);
    return m;
  }
  async readMember(m) {
    const buf = Buffer.alloc(m.size);
    await this.fh.read(buf, 0, m.size, m.offset);
    return buf;
  }
  async top() {
    await this.open();
    const list = parseJson(await this.readMember(await this.member('manifest.json', MAX_JSON)), `${this.name}: manifest.json`);
    if (!Array.isArray(list) || !list.length) throw new ImagePullError(`${this.name}: manifest.json names no image`);
    const img = list[0];
    const cm = await this.member(String(img.Config), MAX_JSON);
    const configBytes = await this.readMember(cm);
    const config = { mediaType: MT.dockerConfig, digest: sha256(configBytes), size: configBytes.length };
    this.blobs.set(config.digest, cm);
    const diffIds = parseJson(configBytes, `${this.name}: config`).rootfs?.diff_ids ?? [];
    const layers = [];
    for (const [i, name] of (img.Layers ?? []).entries()) {
      const m = await this.member(String(name));
      const hex = /(?:^|\/)blobs\/sha256\/([a-f0-9]{64})$/.exec(String(name))?.[1];
      const digest = hex ? `sha256:${hex}` : diffIds[i];
      if (typeof digest !== 'string') throw new ImagePullError(`${this.name}: no digest for layer ${name}`);
      this.blobs.set(digest, m);
      layers.push({ mediaType: 'application/vnd.docker.image.rootfs.diff.tar', digest, size: m.size });
    }
    const bytes = Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: MT.dockerManifest, config, layers }));
    return { bytes, digest: sha256(bytes), mediaType: MT.dockerManifest };
  }
  async manifest(desc) {
    const m = this.blobs.get(desc.digest);
    if (!m) throw new ImagePullError(`${this.name}: no blob ${desc.digest}`);
    return this.readMember(m);
  }
  async blob(desc) {
    const m = this.blobs.get(desc.digest);
    if (!m) throw new ImagePullError(`${this.name}: no blob ${desc.digest}`);
    return fs.createReadStream(null, { fd: this.fh, autoClose: false, start: m.offset, end: m.offset + m.size - 1, highWaterMark: 1 << 20 });
  }
  async close() { await this.fh?.close(); this.fh = null; }
}
