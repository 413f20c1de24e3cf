// Test helper: image layers in the unpacked format of lib/dev-server/images/ (IMAGE format: one directory per layer,
// bottom first), made from the host's busybox-static, and a source with the image store's acquire() interface over them.
// Run as a script (`node image-layers.js WORKDIR`, e.g. as nobody): starts a server with images 'run' on such layers
// and prints {"domain": ...} once listening; it stops when its stdin closes.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const BUSYBOX = ['/bin/busybox', '/usr/bin/busybox'].find((p) => fs.existsSync(p));

/** Two layers under dir: busybox, a marker, /etc/passwd (l0); /app/top and a setuid-marked script (l1). */
export function makeLayers(dir) {
  const l0 = path.join(dir, 'l0');
  const l1 = path.join(dir, 'l1');
  for (const d of ['bin', 'etc', 'tmp', 'root', 'app', 'mnt']) fs.mkdirSync(path.join(l0, d), { recursive: true });
  fs.copyFileSync(BUSYBOX, path.join(l0, 'bin', 'busybox'));
  fs.chmodSync(path.join(l0, 'bin', 'busybox'), 0o755);
  for (const t of ['sh', 'cat', 'ls', 'id', 'echo', 'env', 'pwd', 'touch', 'stat', 'mkdir', 'rm', 'sleep', 'test', 'mount', 'grep'])
    fs.symlinkSync('busybox', path.join(l0, 'bin', t));
  fs.writeFileSync(path.join(l0, 'marker'), 'from the image\n');
  fs.writeFileSync(path.join(l0, 'etc', 'passwd'), 'root:x:0:0:root:/root:/bin/sh\n');
  fs.chmodSync(path.join(l0, 'tmp'), 0o1777);
  fs.mkdirSync(path.join(l1, 'app'), { recursive: true });
  fs.writeFileSync(path.join(l1, 'app', 'top'), 'top layer\n');
  return [l0, l1];
}

export function chownTree(p, uid, gid) {
  fs.lchownSync(p, uid, gid);
  if (fs.lstatSync(p).isDirectory()) for (const n of fs.readdirSync(p)) chownTree(path.join(p, n), uid, gid);
}

/**
 * A source with ImageStore's acquire() and hold() interface: every reference is these layers (digest sha256:0); one
 * naming "missing" fails as a pull does.
 */
export function layerSource(layers, counts = { acquired: 0, released: 0 }) {
  const handle = (ref) => {
    counts.acquired++;
    let released = false;
    const release = () => {
      if (!released) counts.released++;
      released = true;
    };
    return { reference: ref, digest: 'sha256:0', key: ref, layers, config: { Env: ['PATH=/bin', 'FROM_IMAGE=1', 'BOTH=image'], WorkingDir: '/app' }, release };
  };
  return {
    counts,
    async acquire(ref) {
      if (ref.includes('missing')) throw Object.assign(new Error('404 MANIFEST_UNKNOWN from registry localhost:5000'), { status: 500, code: 'DOCKER::SANDBOX_IMAGE_PULL_FAILED' });
      return handle(ref);
    },
    hold: ({ key, digest }) => (digest === 'sha256:0' ? handle(key) : null),
  };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { startServer } = await import('../../lib/dev-server/index.js');
  const work = process.argv[2];
  const server = await startServer({ images: 'run', imageSource: layerSource(makeLayers(work)), dataDir: path.join(work, 'data'), unenforcedLimits: true, defaultNetworkPolicy: 'deny', log: () => {} });
  process.stdout.write(`${JSON.stringify({ domain: server.domain })}\n`);
  process.stdin.resume();
  process.stdin.on('end', () => server.close().then(() => process.exit(0)));
}
