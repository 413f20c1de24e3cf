#!/usr/bin/env node
// Benchmark (`npm run bench`): sandbox create -> first command latency, then end-to-end latency of
// executeCommand('true') through our native addon, through the official @alibaba-group/opensandbox client, through
// curl and through a minimal Node HTTP reader, all against one local OpenSandbox-compatible server and one sandbox;
// then 200 concurrent executeCommands, every byte verified.
//
// Fairness: every path sends the same POST /command to the same execd. "curl" spawns one curl process per run and
// stops at the terminal event; its process start-up (measured alone as `curl --version`) is reported and subtracted
// for the ratio. "node reader" is one keep-alive http.request per run that stops at the terminal event (the protocol
// floor in Node). The official client waits for execd's 1 s stream tail,
// which is what its users get. Then templates: time to a ready sandbox created from a template's snapshot vs a fresh
// sandbox that runs the same steps itself. Also the resident memory of an idle sandbox (execd and its helpers).
// Options: --runs N (default 200), --official-runs N (default 5), --create-runs N (default 10), --template-runs N (default 5), --template-files N
// (default 3000), --smoke (tiny sizes: seconds), --phases (where the create -> first command time goes: the client's
// steps as the in-process server sees them, and the server's create phases from its log line; medians).
import http from 'node:http';
import { spawn } from 'node:child_process';
import { parseArgs } from 'node:util';
import { startServer } from '../lib/dev-server/index.js';
import { OpenSandboxSandbox, Template } from '../lib/index.js';
import { now, quantiles as stats, sandboxRss, officialSandbox, reportFigure, sizeOf } from './lib/bench-util.js';

const { values: args } = parseArgs({
  options: {
    runs: { type: 'string' },
    'create-runs': { type: 'string' },
    'official-runs': { type: 'string' },
    concurrent: { type: 'string' },
    'template-runs': { type: 'string' },
    'template-files': { type: 'string' },
    smoke: { type: 'boolean', default: false },
    phases: { type: 'boolean', default: false },
  },
});
const size = sizeOf(args);
const RUNS = size('runs', 200, 5);
const OFFICIAL_RUNS = size('official-runs', 5, 1);
const CONCURRENT = size('concurrent', 200, 10);
const TEMPLATE_RUNS = size('template-runs', 5, 1);
const TEMPLATE_FILES = size('template-files', 3000, 30);
const CREATE_RUNS = size('create-runs', 10, 5);
const BUILD_LOOP = args.smoke ? 1e5 : 1e8;
const BODY = JSON.stringify({ command: 'true', cwd: '/workspace' });
const TERMINAL = /"type":"(execution_complete|error)"/;

async function measure(runs, fn, warmup = Math.min(10, runs)) {
  for (let i = 0; i < warmup; i++) await fn();
  const samples = [];
  for (let i = 0; i < runs; i++) {
    const t = now();
    await fn();
    samples.push(now() - t);
  }
  return stats(samples);
}

/** One POST /command with curl; resolves when the terminal event arrives, then kills curl (no 1 s tail). */
function curlOnce(baseUrl, headers) {
  return new Promise((resolve, reject) => {
    const h = Object.entries(headers).flatMap(([k, v]) => ['-H', `${k}: ${v}`]);
    const p = spawn('curl', ['-sN', '-X', 'POST', '-H', 'Content-Type: application/json', ...h, '--data-binary', BODY, `${baseUrl}/command`], { stdio: ['ignore', 'pipe', 'ignore'] });
    let out = '';
    let done = false;
    p.stdout.on('data', d => {
      out += d;
      if (!done && TERMINAL.test(out)) {
        done = true;
        resolve();
        p.kill('SIGKILL');
      }
    });
    p.on('error', reject);
    p.on('close', () => done || reject(new Error(`curl ended without a terminal event: ${out.slice(0, 200)}`)));
  });
}

/** Spawns `curl --version` and waits for its exit: the process start-up cost included in every curl run. */
function curlSpawnOnce() {
  return new Promise((resolve, reject) => {
    const p = spawn('curl', ['--version'], { stdio: 'ignore' });
    p.on('error', reject);
    p.on('close', resolve);
  });
}

/** One POST /command with node:http on a keep-alive agent; stops reading at the terminal event. */
function nodeReaderOnce(baseUrl, headers, agent) {
  return new Promise((resolve, reject) => {
    const u = new URL(`${baseUrl}/command`);
    const req = http.request(u, { method: 'POST', agent, headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(BODY), ...headers } }, res => {
      let out = '';
      res.setEncoding('utf8');
      res.on('data', d => {
        out += d;
        if (TERMINAL.test(out)) {
          resolve();
          res.destroy(); // like our client: the terminal event ends the command, the tail is not awaited
        }
      });
      res.on('error', () => {});
    });
    req.on('error', e => (e.code === 'ECONNRESET' ? undefined : reject(e)));
    req.end(BODY);
  });
}

async function officialClient(domain, sandboxId) {
  const sbx = await officialSandbox(domain, undefined, sandboxId); // the in-process server needs no API key
  if (!sbx) return null;
  try {
    return await measure(OFFICIAL_RUNS, () => sbx.commands.run('true'), 1);
  } finally {
    await sbx.close?.().catch(() => {});
  }
}

async function concurrentRun(sandbox) {
  const lines = 20;
  const t = now();
  const results = await Promise.all(Array.from({ length: CONCURRENT }, (_, i) =>
    sandbox.executeCommand(`for j in $(seq 1 ${lines}); do echo "cmd-${i}-line-$j"; done`)));
  const ms = now() - t;
  let bad = 0;
  results.forEach((r, i) => {
    const expected = Array.from({ length: lines }, (_, j) => `cmd-${i}-line-${j + 1}\n`).join('');
    if (r.exitCode !== 0 || r.stdout !== expected) bad++;
  });
  return { ms, bad, bytes: results.reduce((n, r) => n + Buffer.byteLength(r.stdout), 0) };
}

/**
 * A template whose steps work on the local server (no network, host system read-only): a dependency tree of
 * TEMPLATE_FILES small files (300 directories) and a CPU-bound build step. Fresh = start + the same commands; template = start from its snapshot.
 */
async function templateBench(domain) {
  const template = Template()
    .setWorkdir('/workspace/app')
    .setEnvs({ BUILD_MODE: 'release' })
    .runCmd(`mkdir -p node_modules/pkg{0..299} && for i in $(seq 1 ${TEMPLATE_FILES}); do echo "module.exports = $i" > node_modules/pkg$((i % 300))/f$i.js; done`)
    .runCmd(`node -e "let h = 0; for (let i = 0; i < ${BUILD_LOOP}; i++) h = (h * 31 + i) | 0; require('fs').writeFileSync('build.out', process.env.BUILD_MODE + ' ' + h)"`)
    .withFamily('bench');
  const plan = template.buildPlan();
  const check = async s => {
    const r = await s.executeCommand('cat build.out; echo; ls node_modules | wc -l', [], { cwd: '/workspace/app' });
    if (r.exitCode !== 0 || !/^release -?\d+\n300\n$/.test(r.stdout)) throw new Error(`template bench: unexpected state ${JSON.stringify(r.stdout + r.stderr)}`);
  };
  const t0 = now();
  const built = await template.build({ domain });
  const buildMs = now() - t0;
  const fresh = [];
  const fromTemplate = [];
  const bare = [];
  for (let i = 0; i < TEMPLATE_RUNS; i++) {
    const c = new OpenSandboxSandbox({ domain });
    try {
      const t = now();
      await c._start();
      bare.push(now() - t);
    } finally {
      await c._destroy().catch(() => {});
    }
    // before the fresh sandbox: the server's work after a restore (disk.js keepSpare, at nice 19) then overlaps that
    // one's steps, not the bare create the restore is compared with
    const b = new OpenSandboxSandbox({ domain, template });
    try {
      const t = now();
      const r = await b._start();
      fromTemplate.push(now() - t);
      if (r.restoredFrom?.snapshotId !== built.snapshotId) throw new Error(`template bench: not started from the template (${JSON.stringify(r)})`);
      await check(b);
    } finally {
      await b._destroy().catch(() => {});
    }
    const a = new OpenSandboxSandbox({ domain });
    try {
      const t = now();
      await a._start();
      for (const step of plan) {
        const r = await a.executeCommand(step.command, [], { cwd: step.cwd, env: step.envs });
        if (r.exitCode !== 0) throw new Error(`template bench: ${step.description} failed: ${r.stderr}`);
      }
      fresh.push(now() - t);
      await check(a);
    } finally {
      await a._destroy().catch(() => {});
    }
  }
  return { buildMs, fresh: stats(fresh), fromTemplate: stats(fromTemplate), bare: stats(bare) };
}

const fmt = n => (n === undefined ? '-' : n.toFixed(2));

/**
 * --phases: the create -> first command runs split into steps, from the in-process server's log (its answer lines
 * and the create's phases, lib/dev-server/sandboxes.js phasesText) and the bench's own marks; medians per step.
 */
function phaseTrace() {
  const runs = [];
  let run = null;
  const mark = (name, ms) => run?.marks.push([name, ms ?? now() - run.t0]);
  const ANSWER = /^(GET|POST) \/v1\/sandboxes(\/[^/]+\/endpoints\/\d+)? -> \d+$/;
  return {
    log(line) {
      const a = ANSWER.exec(line);
      if (a) return mark(a[2] ? 'execd endpoint answered' : a[1] === 'GET' ? 'sandbox list answered (logical id look-up)' : 'create answered');
      const c = / created .* in [\d.]+ ms: (.*)$/.exec(line);
      if (c && run) run.server = c[1].split(', ').map(p => p.split(' ')).map(([n, ms]) => [n, Number(ms)]);
    },
    begin() {
      run = { t0: now(), marks: [], server: [] };
    },
    mark,
    end() {
      runs.push(run);
      run = null;
    },
    print() {
      const med = xs => stats(xs).median;
      const byName = (list, name) => list.filter(r => r.some(([n]) => n === name)).map(r => r.find(([n]) => n === name)[1]);
      // client steps as time since the previous step
      const steps = runs.map(r => r.marks.map(([n, t], i) => [n, t - (i ? r.marks[i - 1][1] : 0)]));
      console.log(`\ncreate -> first command, where the time goes (median of ${runs.length} runs, ms):`);
      for (const [name] of runs[0]?.marks ?? []) {
        console.log(`  ${name}`.padEnd(54), fmt(med(byName(steps, name))).padStart(11));
        if (name !== 'create answered') continue;
        for (const [phase] of runs[0].server) console.log(`    server: ${phase}`.padEnd(54), fmt(med(byName(runs.map(r => r.server), phase))).padStart(11));
      }
      console.log('  total'.padEnd(54), fmt(med(runs.map(r => r.marks.at(-1)[1]))).padStart(11));
    },
  };
}

async function main() {
  const trace = args.phases ? phaseTrace() : null;
  const server = await startServer({ port: 0, ...(trace ? { log: trace.log } : {}) });
  const sandbox = new OpenSandboxSandbox({ domain: server.domain });
  try {
    await sandbox._start();
    const { sandboxId, execdUrl } = sandbox.opensandbox;
    // the endpoint headers (the sandbox's own access token), sent back by every path like a client does
    const { headers } = await (await fetch(`${server.baseUrl}/v1/sandboxes/${sandboxId}/endpoints/44772`)).json();
    console.log(`server ${server.baseUrl}, sandbox ${sandboxId}, execd ${execdUrl}; ${RUNS} runs (official client: ${OFFICIAL_RUNS})\n`);
    // sandbox create -> first command result (what a user waits for at start), sequentially
    const firstSamples = [];
    for (let i = 0; i < CREATE_RUNS; i++) {
      const s = new OpenSandboxSandbox({ domain: server.domain });
      trace?.begin();
      const t = now();
      await s._start();
      trace?.mark('_start() resolved (execd /ping, working directory)');
      await s.executeCommand('true');
      firstSamples.push(now() - t);
      trace?.mark('first command result');
      trace?.end();
      await s._destroy();
    }
    const firstCommand = stats(firstSamples);
    trace?.print();
    // an idle sandbox's processes (execd and its helpers), after one command and a second of rest
    await sandbox.executeCommand('true');
    await new Promise(r => setTimeout(r, 1000));
    const idle = sandboxRss(sandboxId);

    const ours = await measure(RUNS, () => sandbox.executeCommand('true'));
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const reader = await measure(RUNS, () => nodeReaderOnce(execdUrl, headers, agent));
    agent.destroy();
    const curl = await measure(Math.min(RUNS, 100), () => curlOnce(execdUrl, headers));
    const spawnCost = await measure(Math.min(RUNS, 100), curlSpawnOnce);
    const curlNet = { n: curl.n, median: Math.max(0.01, curl.median - spawnCost.median), p95: Math.max(0.01, curl.p95 - spawnCost.median) };
    const official = await officialClient(server.domain, sandboxId);

    const rows = [
      ['sandbox create -> first command result (sequential)', firstCommand],
      ['mastra-opensandbox executeCommand', ours],
      ['curl (one process per run, stops at final event)', curl],
      ['  curl process start-up alone (curl --version)', spawnCost],
      ['  curl minus start-up (median)', curlNet],
      ['node http reader (keep-alive, stops at final event)', reader],
      ['official client commands.run (waits 1 s tail)', official],
    ];
    console.log('path'.padEnd(54), 'n'.padStart(5), 'median ms'.padStart(11), 'p95 ms'.padStart(10));
    for (const [name, s] of rows) {
      console.log(name.padEnd(54), String(s?.n ?? '-').padStart(5), fmt(s?.median).padStart(11), fmt(s?.p95).padStart(10));
    }
    console.log('');
    console.log(`ours / curl minus start-up (median): ${(ours.median / curlNet.median).toFixed(2)}x   (target <= 1.5x)`);
    console.log(`ours / curl incl. start-up (median): ${(ours.median / curl.median).toFixed(2)}x`);
    console.log(`ours / node reader         (median): ${(ours.median / reader.median).toFixed(2)}x`);
    if (official) console.log(`official / ours            (median): ours ${(official.median / ours.median).toFixed(1)}x faster   (target >= 20x)`);
    else console.log('official client: not installed, skipped');

    if (idle) console.log(`idle sandbox: ${idle.mb.toFixed(1)} MiB resident (${idle.processes.map(p => `${p.comm} ${p.mb.toFixed(1)}`).join(', ')})`);
    reportFigure('sandbox create -> first command result, median', firstCommand.median, 'ms', '<= 150', `p95 ${fmt(firstCommand.p95)} ms`);
    if (idle) reportFigure('idle sandbox resident memory (summed RSS of its processes)', idle.mb, 'MiB', '<= 15', idle.processes.map(p => p.comm).join(', '));
    reportFigure("executeCommand('true'): ours / keep-alive node reader (median)", ours.median / reader.median, 'x', '<= 1.1', `${fmt(ours.median)} vs ${fmt(reader.median)} ms`);

    const c = await concurrentRun(sandbox);
    console.log(`\n${CONCURRENT} concurrent executeCommands (20 numbered lines each, ${c.bytes} bytes): ${c.ms.toFixed(0)} ms total, ` +
      `${c.bad === 0 ? 'every byte verified in order' : `${c.bad} WRONG`}`);
    if (c.bad) process.exitCode = 1;

    const t = await templateBench(server.domain);
    console.log(`\ntemplate (${TEMPLATE_FILES}-file tree + CPU build step), ${TEMPLATE_RUNS} runs each, built once in ${t.buildMs.toFixed(0)} ms; ms:`);
    console.log('  ready sandbox from the template snapshot'.padEnd(54), fmt(t.fromTemplate.median).padStart(11), fmt(t.fromTemplate.p95).padStart(10));
    console.log('  fresh sandbox + the same steps'.padEnd(54), fmt(t.fresh.median).padStart(11), fmt(t.fresh.p95).padStart(10));
    console.log('  (fresh sandbox alone, no steps)'.padEnd(54), fmt(t.bare.median).padStart(11), fmt(t.bare.p95).padStart(10));
    console.log(`  template / fresh (median): ${(t.fromTemplate.median / t.fresh.median).toFixed(2)}x`);
    reportFigure(`ready from a template snapshot (${TEMPLATE_FILES} files) minus a bare create, median`, t.fromTemplate.median - t.bare.median, 'ms', '<= 50', `${fmt(t.fromTemplate.median)} vs ${fmt(t.bare.median)} ms`);
  } finally {
    await sandbox._destroy().catch(() => {});
    await server.close();
  }
}

main().catch(err => {
  console.error(err);
  process.exit(1);
});
