#!/usr/bin/env node
// Benchmark of image pulls (`npm run bench`, fifth part; issue 33): the first create of an image pulls it. Measured:
// ImageStore.acquire of an image from a local registry (Debian's docker-registry on loopback, no auth) into an empty
// store — fetch, digest checks, decompression and unpacking under bubblewrap — against `skopeo copy docker://… oci:…`
// of the same image from the same registry (which only fetches and writes the blobs) and `skopeo copy docker://…
// containers-storage:…` (what `podman pull` does: fetched, verified and unpacked into containers/storage's overlay
// layers, the same work as ours). Figure: MB/s of compressed image (the ratio ours/skopeo into containers-storage,
// target >= 1.0; the blob-only ratio is printed beside it). The image: busybox-static plus a layer of this host's Python standard library
// (tens of MB); --smoke: busybox alone. Rounds alternate which goes first (--rounds R, 3); the median is reported.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { parseArgs } from 'node:util';
import { ImageStore } from '../lib/dev-server/images/store.js';
import { removeTree } from '../lib/dev-server/runner.js';
import { busyboxTar, tarOfDir, writeOciLayout, startRegistry, pushImage } from '../test/helpers/images.js';
import { now, reportFigure, sizeOf } from './lib/bench-util.js';

const { values: args } = parseArgs({ options: { rounds: { type: 'string' }, smoke: { type: 'boolean', default: false } } });
const rounds = sizeOf(args)('rounds', 3, 1);
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-images-'));
const owner = process.getuid() === 0 ? { uid: 65534, gid: 65534 } : undefined;
const median = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];

const run = (cmd, argv) => new Promise((resolve, reject) => {
  const p = spawn(cmd, argv, { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  p.stderr.on('data', (d) => { err += d; });
  p.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`${cmd} failed: ${err.slice(-300)}`))));
});

let registry;
try {
  const layers = [{ tar: busyboxTar() }];
  const pyLib = fs.readdirSync('/usr/lib').find((d) => /^python3\.\d+$/.test(d));
  if (!args.smoke && pyLib) layers.push({ tar: tarOfDir(`/usr/lib/${pyLib}`, `usr/lib/${pyLib}`) });
  const layout = path.join(tmp, 'layout');
  writeOciLayout(layout, { tag: 'img', layers });
  const blobBytes = fs.readdirSync(path.join(layout, 'blobs/sha256')).reduce((n, f) => n + fs.statSync(path.join(layout, 'blobs/sha256', f)).size, 0);
  registry = await startRegistry();
  await pushImage(layout, 'img', registry, 'bench/img:1');
  const ref = `${registry.host}/bench/img:1`;
  const ours = [];
  const theirs = [];
  let unpacked = [];
  for (let r = 0; r < rounds; r++) {
    const order = r % 2 ? ['skopeo', 'storage', 'ours'] : ['ours', 'storage', 'skopeo'];
    for (const who of order) {
      const dir = path.join(tmp, `${who}-${r}`);
      const t0 = now();
      if (who === 'ours') {
        const store = new ImageStore({ dir, owner });
        await store.open();
        const img = await store.acquire(ref);
        ours.push(now() - t0);
        img.release();
      } else if (who === 'skopeo') {
        await run('skopeo', ['copy', '-q', '--src-tls-verify=false', `docker://${ref}`, `oci:${dir}:img`]);
        theirs.push(now() - t0);
      } else if (unpacked !== null) {
        // what `podman pull` does: containers/image pulls into containers/storage, which unpacks each layer (overlay)
        fs.mkdirSync(dir);
        const argv = ['copy', '-q', '--src-tls-verify=false', `docker://${ref}`, `containers-storage:[overlay@${dir}/graph+${dir}/run]bench/img:1`];
        try {
          // in a mount namespace of its own: the overlay driver's private mount of its graph root goes with it
          await run('unshare', [...(process.getuid() === 0 ? [] : ['--map-root-user']), '--mount', 'skopeo', ...argv]);
          unpacked.push(now() - t0);
        } catch (err) {
          console.log(`skopeo copy -> containers-storage: not measured (${err.message.split('\n')[0]})`);
          unpacked = null;
        }
      }
      removeTree(dir);
    }
  }
  const mb = blobBytes / 1e6;
  const oursMbs = mb / (median(ours) / 1000);
  const skopeoMbs = mb / (median(theirs) / 1000);
  console.log(`image: ${layers.length} layers, ${mb.toFixed(1)} MB compressed (gzip)`);
  console.log(`ImageStore.acquire (pull + verify + unpack): median ${median(ours).toFixed(0)} ms = ${oursMbs.toFixed(1)} MB/s  [${ours.map((x) => x.toFixed(0)).join(', ')}]`);
  console.log(`skopeo copy docker:// -> oci: (pull + verify): median ${median(theirs).toFixed(0)} ms = ${skopeoMbs.toFixed(1)} MB/s  [${theirs.map((x) => x.toFixed(0)).join(', ')}]`);
  console.log(`ratio ours/skopeo: ${(oursMbs / skopeoMbs).toFixed(2)}x (load average ${os.loadavg().map((x) => x.toFixed(2)).join(' ')})`);
  const storageMbs = unpacked?.length ? mb / (median(unpacked) / 1000) : null;
  if (storageMbs !== null) {
    console.log(`skopeo copy docker:// -> containers-storage: (pull + verify + unpack, overlay): median ${median(unpacked).toFixed(0)} ms = ${storageMbs.toFixed(1)} MB/s  [${unpacked.map((x) => x.toFixed(0)).join(', ')}]`);
    console.log(`ratio ours/skopeo into containers-storage: ${(oursMbs / storageMbs).toFixed(2)}x`);
  }
  reportFigure('first create with a pull: ImageStore.acquire MB/s', oursMbs, 'MB/s', undefined, `${mb.toFixed(1)} MB image`);
  // the like-for-like figure: skopeo into containers-storage unpacks too; into oci: it only writes the blobs
  if (storageMbs !== null) reportFigure('first create with a pull: ours / skopeo copy into containers-storage (pull + unpack, same registry)', oursMbs / storageMbs, 'x', '>= 1.0', `skopeo ${storageMbs.toFixed(1)} MB/s`);
  reportFigure('first create with a pull: ours / skopeo copy into oci: (blobs only, no unpack)', oursMbs / skopeoMbs, 'x', undefined, `skopeo ${skopeoMbs.toFixed(1)} MB/s`);
} finally {
  await registry?.stop();
  fs.rmSync(tmp, { recursive: true, force: true });
}
