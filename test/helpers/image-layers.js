// Test helper: the two-layer busybox image of test/images-sandbox.test.js as an OCI image layout (pushed to the test's
// loopback docker-registry and pulled by the server's real image store): busybox-static with its applets, a marker,
// /etc/passwd and a setuid-marked file (l0); /app/top over it (l1).
// Run as a script (`node image-layers.js WORKDIR`, e.g. as nobody): starts a server with images 'run' (its image store
// under WORKDIR/data) and prints {"domain": ...} once listening; it stops when its stdin closes.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { makeTar, writeOciLayout } from './images.js';

export const BUSYBOX = ['/bin/busybox', '/usr/bin/busybox'].find((p) => fs.existsSync(p));

const APPLETS = ['sh', 'cat', 'ls', 'id', 'echo', 'env', 'pwd', 'touch', 'stat', 'mkdir', 'rm', 'sleep', 'test', 'mount', 'grep', 'readlink', 'ln', 'chmod'];

/** The image's config: Env (PATH, FROM_IMAGE, BOTH: the create's env wins), WorkingDir /app. */
export const IMAGE_CONFIG = { Env: ['PATH=/bin', 'FROM_IMAGE=1', 'BOTH=image'], WorkingDir: '/app' };

/** Writes the image at `dir` (an OCI layout, tag `bb`); returns its digests (writeOciLayout). */
export function writeLayerImage(dir) {
  const l0 = makeTar([
    ...['bin/', 'etc/', 'root/', 'app/', 'mnt/'].map((name) => ({ name, type: 'dir' })), { name: 'tmp/', type: 'dir', mode: 0o1777 },
    { name: 'bin/busybox', data: fs.readFileSync(BUSYBOX), mode: 0o755 },
    ...APPLETS.map((a) => ({ name: `bin/${a}`, type: 'symlink', linkname: 'busybox' })),
    { name: 'marker', data: 'from the image\n' }, { name: 'etc/passwd', data: 'root:x:0:0:root:/root:/bin/sh\n' },
    { name: 'bin/suid', data: '#!/bin/sh\nid -u\n', mode: 0o4755 }, // the unpack strips the setuid bit
  ]);
  const l1 = makeTar([{ name: 'app/', type: 'dir' }, { name: 'app/top', data: 'top layer\n' }]);
  return writeOciLayout(dir, { tag: 'bb', config: IMAGE_CONFIG, layers: [{ tar: l0 }, { tar: l1 }] });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { startServer } = await import('../../lib/dev-server/index.js');
  const work = process.argv[2];
  const server = await startServer({ images: 'run', dataDir: path.join(work, 'data'), unenforcedLimits: true, defaultNetworkPolicy: 'deny', log: () => {} });
  process.stdout.write(`${JSON.stringify({ domain: server.domain })}\n`);
  process.stdin.resume();
  process.stdin.on('end', () => server.close().then(() => process.exit(0)));
}
