#!/usr/bin/env node
// Benchmark of image pulls (`npm run bench`, fifth part; issue 33): the first create of an image pulls it. Measured:
// ImageStore.acquire of an image from a local registry (Debian's docker-registry on loopback, no auth) into an empty
// store — fetch, digest checks, decompression and unpacking under bubblewrap — against `skopeo copy docker://… oci:…`
// of the same image from the same registry (which only fetches and writes the blobs). Figure: MB/s of compressed image
// (the ratio ours/skopeo, target >= 1.0). The image: busybox-static plus a layer of this host's Python standard library
// (tens of MB); --smoke: busybox alone. Rounds alternate which goes first (--rounds R, 3); the median is reported.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { parseArgs } from 'node:util';
import { ImageStore } from '../lib/dev-server/images/store.js';
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
  for (let r = 0; r < rounds; r++) {
    const order = r % 2 ? ['skopeo', 'ours'] : ['ours', 'skopeo'];
    for (const who of order) {
      const dir = path.join(tmp, `${who}-${r}`);
      const t0 = now();
      if (who === 'ours') {
        const store = new ImageStore({ dir, owner });
        await store.open();
        const img = await store.acquire(ref);
        ours.push(now() - t0);
        img.release();
      } else {
        await run('skopeo', ['copy', '-q', '--src-tls-verify=false', `docker://${ref}`, `oci:${dir}:img`]);
        theirs.push(now() - t0);
      }
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }
  const mb = blobBytes / 1e6;
  const oursMbs = mb / (median(ours) / 1000);
  const skopeoMbs = mb / (median(theirs) / 1000);
  console.log(`image: ${layers.length} layers, ${mb.toFixed(1)} MB compressed (gzip)`);
  console.log(`ImageStore.acquire (pull + verify + unpack): median ${median(ours).toFixed(0)} ms = ${oursMbs.toFixed(1)} MB/s  [${ours.map((x) => x.toFixed(0)).join(', ')}]`);
  console.log(`skopeo copy docker:// -> oci: (pull + verify): median ${median(theirs).toFixed(0)} ms = ${skopeoMbs.toFixed(1)} MB/s  [${theirs.map((x) => x.toFixed(0)).join(', ')}]`);
  console.log(`ratio ours/skopeo: ${(oursMbs / skopeoMbs).toFixed(2)}x (load average ${os.loadavg().map((x) => x.toFixed(2)).join(' ')})`);
  reportFigure('first create with a pull: ImageStore.acquire MB/s', oursMbs, 'MB/s', undefined, `${mb.toFixed(1)} MB image`);
  reportFigure('first create with a pull: ours / skopeo copy (same registry)', oursMbs / skopeoMbs, 'x', '>= 1.0', `skopeo ${skopeoMbs.toFixed(1)} MB/s`);
} finally {
  await registry?.stop();
  fs.rmSync(tmp, { recursive: true, force: true });
}
