#!/usr/bin/env node
// Benchmark of image sandboxes (`npm run bench`, sixth part; issue 33): create -> first command result of a sandbox on
// a cached image (images 'run': the overlay root of src/execd/rootfs.c over the store's layers, pulled once before the
// runs) against a bare create (the host's root) of a server with images 'host', each against its own local server,
// alternating; then a create from a snapshot of an image sandbox (its writable layer over the same image: the disk
// image's copy made ahead, as any restore). Figures: the medians' differences, the image against the bare create and
// the restore against the image (targets <= 30 ms). --runs N (default 15; --smoke 3).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { startServer } from '../lib/dev-server/index.js';
import { OpenSandboxSandbox } from '../lib/index.js';
import { busyboxTar, pushImage, startRegistry, writeOciLayout } from '../test/helpers/images.js';
import { now, quantiles, reportFigure } from './lib/bench-util.js';

// Images 'run' needs a statically linked osb-execd. The source build (node scripts/build.js) is dynamic; the test
// command's prebuild (build/prebuild/linux-<arch>/, what the package ships) is static: used when it is there and
// neither MASTRA_OPENSANDBOX_EXECD nor MASTRA_OPENSANDBOX_ADDON chooses another.
const prebuiltExecd = fileURLToPath(new URL(`../build/prebuild/linux-${process.arch}/osb-execd`, import.meta.url));
if (!process.env.MASTRA_OPENSANDBOX_EXECD && !process.env.MASTRA_OPENSANDBOX_ADDON && fs.existsSync(prebuiltExecd))
  process.env.MASTRA_OPENSANDBOX_EXECD = prebuiltExecd;
const { values: args } = parseArgs({ options: { runs: { type: 'string' }, smoke: { type: 'boolean', default: false } } });
const runs = Number(args.runs ?? (args.smoke ? 3 : 15));
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-image-run-'));
let registry;
let imageServer;
let hostServer;
// `from`: { image } or { snapshotId }, or none (the server's default)
const firstCommand = async (domain, from = {}, expected = 'hi') => {
  const s = new OpenSandboxSandbox({ domain, ...from });
  try {
    const t = now();
    await s._start();
    const r = await s.executeCommand('cat /hi 2>/dev/null || echo hi');
    if (r.stdout.trim() !== expected) throw new Error(`unexpected ${JSON.stringify(r)}`);
    return now() - t;
  } finally {
    await s._destroy().catch(() => {});
  }
};
try {
  registry = await startRegistry();
  writeOciLayout(path.join(tmp, 'oci'), { tag: 'bb', config: { Env: ['PATH=/bin'] }, layers: [{ tar: busyboxTar() }] });
  await pushImage(path.join(tmp, 'oci'), 'bb', registry, 'bench/bb:1');
  const image = `${registry.host}/bench/bb:1`;
  imageServer = await startServer({ images: 'run', dataDir: path.join(tmp, 'run') });
  hostServer = await startServer({ dataDir: path.join(tmp, 'host') });
  await firstCommand(imageServer.domain, { image }); // the pull, and a warm-up of each
  await firstCommand(hostServer.domain);
  // a snapshot of an image sandbox that wrote /hi (and deleted the image's /marker)
  const src = new OpenSandboxSandbox({ domain: imageServer.domain, image });
  await src._start();
  await src.executeCommand('echo restored > /hi; busybox rm /marker');
  const { id: snapshotId } = await src.opensandbox.createSnapshot({ wait: true, timeoutMs: 60000 });
  await src._destroy();
  await firstCommand(imageServer.domain, { snapshotId }, 'restored');
  const cached = [];
  const bare = [];
  const restored = [];
  for (let i = 0; i < runs; i++) {
    cached.push(await firstCommand(imageServer.domain, { image }));
    bare.push(await firstCommand(hostServer.domain));
    restored.push(await firstCommand(imageServer.domain, { snapshotId }, 'restored'));
  }
  const c = quantiles(cached);
  const b = quantiles(bare);
  const r = quantiles(restored);
  const fmt = (x) => x.toFixed(1);
  console.log(`create -> first command, ${runs} runs (load average ${os.loadavg()[0].toFixed(2)})`);
  console.log(`  cached image (busybox, images 'run')   median ${fmt(c.median)} ms  p95 ${fmt(c.p95)} ms`);
  console.log(`  bare create (host root, images 'host') median ${fmt(b.median)} ms  p95 ${fmt(b.p95)} ms`);
  console.log(`  from a snapshot of an image sandbox    median ${fmt(r.median)} ms  p95 ${fmt(r.p95)} ms`);
  reportFigure('create -> first command from a cached image minus a bare create, median', c.median - b.median, 'ms', '<= 30', `${fmt(c.median)} vs ${fmt(b.median)} ms`);
  reportFigure('create -> first command from an image sandbox\'s snapshot minus from its cached image, median', r.median - c.median, 'ms', '<= 30', `${fmt(r.median)} vs ${fmt(c.median)} ms`);
} finally {
  await imageServer?.close();
  await hostServer?.close();
  await registry?.stop();
  fs.rmSync(tmp, { recursive: true, force: true });
}
