// Image references as upstream (Docker) and skopeo accept them, parsed once into a plain object.
import path from 'node:path';

const COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
const TAG = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/;
const DIGEST = /^sha256:[a-f0-9]{64}$/;

/** The error a bad reference or a failed pull throws: upstream's DOCKER::SANDBOX_IMAGE_PULL_FAILED. */
export class ImagePullError extends Error {
  constructor(message, { status = 500, cause } = {}) {
    super(message, cause ? { cause } : undefined);
    this.name = 'ImagePullError';
    this.status = status;
    this.code = 'DOCKER::SANDBOX_IMAGE_PULL_FAILED';
  }
}

function bad(ref, why) {
  return new ImagePullError(`invalid image reference ${JSON.stringify(String(ref).slice(0, 300))}: ${why}`, { status: 400 });
}

/**
 * Parses `reference`:
 * - `oci:<dir>[:<tag>]` (an OCI image layout) → { transport: 'oci', dir (absolute), tag|null, key }
 * - `docker-archive:<file>` (a `docker save` tar) → { transport: 'docker-archive', file (absolute), key }
 * - `[docker://]name[:tag][@sha256:…]`, `host[:port]/path[:tag]` → { transport: 'registry', registry ('docker.io' or
 *   host[:port]), repository, tag|null, digest|null, key (the normalized reference) }
 * Docker Hub short names are normalized: `python:3.11` = `docker.io/library/python:3.11`; no tag nor digest = `latest`.
 */
export function parseReference(reference) {
  if (typeof reference !== 'string' || !reference.trim()) throw bad(reference, 'empty');
  const ref = reference.trim();
  if (ref.length > 4096) throw bad(ref, 'too long');
  if (ref.startsWith('oci:')) {
    let rest = ref.slice(4);
    let tag = null;
    const colon = rest.lastIndexOf(':');
    if (colon > rest.lastIndexOf('/')) { tag = rest.slice(colon + 1); rest = rest.slice(0, colon); }
    if (!rest) throw bad(ref, 'oci: needs a directory');
    if (tag !== null && !/^[A-Za-z0-9_][A-Za-z0-9_.:@+-]{0,255}$/.test(tag)) throw bad(ref, 'bad oci: tag');
    const dir = path.resolve(rest);
    return { transport: 'oci', dir, tag, key: `oci:${dir}${tag !== null ? ':' + tag : ''}` };
  }
  if (ref.startsWith('docker-archive:')) {
    const rest = ref.slice('docker-archive:'.length);
    if (!rest) throw bad(ref, 'docker-archive: needs a file');
    const file = path.resolve(rest);
    return { transport: 'docker-archive', file, key: `docker-archive:${file}` };
  }
  let name = ref.startsWith('docker://') ? ref.slice(9) : ref;
  let digest = null;
  const at = name.indexOf('@');
  if (at >= 0) {
    digest = name.slice(at + 1);
    name = name.slice(0, at);
    if (!DIGEST.test(digest)) throw bad(ref, 'only sha256:<64 hex> digests are supported');
  }
  let tag = null;
  const colon = name.lastIndexOf(':');
  if (colon > name.lastIndexOf('/')) {
    tag = name.slice(colon + 1);
    name = name.slice(0, colon);
    if (!TAG.test(tag)) throw bad(ref, 'bad tag');
  }
  const parts = name.split('/');
  let registry = 'docker.io';
  const first = parts[0];
  if (parts.length > 1 && (first.includes('.') || first.includes(':') || first === 'localhost' || /[A-Z]/.test(first))) {
    registry = parts.shift();
    if (!/^(?:\[[0-9a-fA-F:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?)(?::[0-9]{1,5})?$/.test(registry)) throw bad(ref, 'bad registry host');
    if (registry === 'index.docker.io' || registry === 'registry-1.docker.io') registry = 'docker.io';
  }
  if (!parts.length || parts.some((p) => !COMPONENT.test(p))) throw bad(ref, 'bad repository name (lowercase letters, digits, separators)');
  if (registry === 'docker.io' && parts.length === 1) parts.unshift('library');
  const repository = parts.join('/');
  if (repository.length > 255) throw bad(ref, 'repository name too long');
  if (!tag && !digest) tag = 'latest';
  const key = `${registry}/${repository}${tag ? ':' + tag : ''}${digest ? '@' + digest : ''}`;
  return { transport: 'registry', registry, repository, tag, digest, key };
}

/** The host:port requests for `registry` go to (Docker Hub's API host for docker.io). */
export function registryEndpoint(registry) {
  return registry === 'docker.io' ? 'registry-1.docker.io' : registry;
}

/** { os, architecture, variant? } of this host, in the OCI image spec's names. */
export function hostPlatform() {
  const arch = { x64: 'amd64', arm64: 'arm64', arm: 'arm', ia32: '386', ppc64: 'ppc64le', s390x: 's390x', riscv64: 'riscv64' }[process.arch] ?? process.arch;
  const p = { os: 'linux', architecture: arch };
  if (arch === 'arm64') p.variant = 'v8';
  return p;
}

/** Normalizes a create's `platform` ({ os, arch|architecture, variant? } or 'os/arch[/variant]'), else the host's. */
export function wantedPlatform(platform) {
  if (!platform) return hostPlatform();
  if (typeof platform === 'string') {
    const [os, architecture, variant] = platform.split('/');
    return { os: os || 'linux', architecture: architecture || hostPlatform().architecture, ...(variant ? { variant } : {}) };
  }
  const architecture = platform.architecture ?? platform.arch ?? hostPlatform().architecture;
  return { os: platform.os ?? 'linux', architecture, ...(platform.variant ? { variant: platform.variant } : {}) };
}
