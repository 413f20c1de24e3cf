#!/usr/bin/env node
// Benchmark of background processes (sandbox.processes), standalone: `node scripts/bench-processes.js`.
// Rows, against one local OpenSandbox-compatible server and one sandbox:
//   1. N concurrent background processes (default 500) each printing L lines (default 1000): every line verified,
//      wall time, JS-thread busy time (event-loop utilisation), process CPU (all threads) and peak RSS;
//   2. spawn-to-first-output latency (median / p95);
//   3. stdin round-trip latency into a running `cat` (median / p95);
// each next to the official @alibaba-group/opensandbox client doing the same with background commands
// (POST /command background:true) and log polling (GET /command/{id}/logs?cursor=, every --poll-ms); the official
// client has no stdin API, so row 3 has no counterpart.
// The server runs in a child process so that the JS-thread and RSS numbers are the client's alone.
// Options: --processes N, --lines L, --runs R (latency samples, default 30), --poll-ms P (default 50),
//          --no-official (skip the official client).
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { performance } from 'node:perf_hooks';
import { OpenSandboxSandbox } from '../lib/index.js';

const { values: args } = parseArgs({
  options: {
    processes: { type: 'string', default: '500' },
    lines: { type: 'string', default: '1000' },
    runs: { type: 'string', default: '30' },
    'poll-ms': { type: 'string', default: '50' },
    'no-official': { type: 'boolean', default: false },
  },
});
const N = Number(args.processes);
const L = Number(args.lines);
const RUNS = Number(args.runs);
const POLL_MS = Number(args['poll-ms']);

const now = () => Number(process.hrtime.bigint()) / 1e6;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const cmdFor = (i) => `seq 1 ${L} | sed 's/^/p${i}-/'`;
const expected = (i) => Array.from({ length: L }, (_, j) => `p${i}-${j + 1}\n`).join('');

function quantiles(samples) {
  const s = [...samples].sort((a, b) => a - b);
  const at = (q) => s[Math.min(s.length - 1, Math.ceil(q * s.length) - 1)];
  return { n: s.length, median: at(0.5), p95: at(0.95) };
}

/** Runs fn while measuring wall time, JS-thread busy time, process CPU and peak RSS. */
async function profile(fn) {
  const elu0 = performance.eventLoopUtilization();
  const cpu0 = process.cpuUsage();
  let peak = process.memoryUsage().rss;
  const rss0 = peak;
  const sampler = setInterval(() => { peak = Math.max(peak, process.memoryUsage().rss); }, 50);
  const t = now();
  try {
    const value = await fn();
    const elu = performance.eventLoopUtilization(elu0);
    const cpu = process.cpuUsage(cpu0);
    return { value, wallMs: now() - t, jsBusyMs: elu.active, cpuMs: (cpu.user + cpu.system) / 1000, rssStartMb: rss0 / 2 ** 20, rssPeakMb: peak / 2 ** 20 };
  } finally {
    clearInterval(sampler);
  }
}

// ---------------------------------------------------------------- ours

async function oursBulk(pm) {
  let chunks = 0;
  const hs = await Promise.all(Array.from({ length: N }, (_, i) => pm.spawn(cmdFor(i), { onStdout: () => { chunks++; } })));
  const rs = await Promise.all(hs.map((h) => h.wait()));
  let bad = 0;
  rs.forEach((r, i) => { if (r.exitCode !== 0 || r.stdout !== expected(i)) bad++; });
  hs.forEach((h) => pm.release(h.pid));
  return { bad, chunks };
}

async function oursFirstOutput(pm) {
  const samples = [];
  for (let i = 0; i < RUNS; i++) {
    const t = now();
    let first;
    const h = await pm.spawn('echo ready; sleep 5', { onStdout: () => { first ??= now(); } });
    while (first === undefined) await sleep(1);
    samples.push(first - t);
    await h.kill();
    pm.release(h.pid);
  }
  return quantiles(samples);
}

async function oursStdinRoundTrip(pm) {
  const samples = [];
  let waiter = null;
  let buf = '';
  const h = await pm.spawn('cat', {
    onStdout: (d) => {
      buf += d;
      if (waiter && buf.includes(waiter.want)) waiter.resolve();
    },
  });
  for (let i = 0; i < RUNS; i++) {
    const want = `ping-${i}\n`;
    const t = now();
    const seen = new Promise((resolve) => { waiter = { want, resolve }; });
    await h.sendStdin(want);
    if (!buf.includes(want)) await seen;
    samples.push(now() - t);
  }
  await h.kill();
  pm.release(h.pid);
  return quantiles(samples);
}

// ---------------------------------------------------------------- the official client (background + log polling)

async function officialSandbox(domain, sandboxId) {
  process.env.OPENSANDBOX_DISABLE_METRICS = '1';
  const mod = await import('@alibaba-group/opensandbox');
  return mod.Sandbox.connect({ sandboxId, connectionConfig: { domain, protocol: 'http', disableMetrics: true } });
}

/** Starts a background command and polls its log until done(content) or the command ended. */
async function officialRun(sbx, command, { until } = {}) {
  const ex = await sbx.commands.run(command, { background: true });
  const id = ex.id;
  let content = '';
  let cursor = 0;
  for (;;) {
    const logs = await sbx.commands.getBackgroundCommandLogs(id, cursor);
    content += logs.content ?? '';
    cursor = logs.cursor ?? cursor;
    if (until?.(content)) return { id, content };
    const st = await sbx.commands.getCommandStatus(id);
    if (!st.running) {
      const rest = await sbx.commands.getBackgroundCommandLogs(id, cursor);
      return { id, content: content + (rest.content ?? '') };
    }
    await sleep(POLL_MS);
  }
}

async function officialBulk(sbx) {
  const rs = await Promise.all(Array.from({ length: N }, (_, i) => officialRun(sbx, cmdFor(i))));
  let bad = 0;
  rs.forEach((r, i) => { if (r.content !== expected(i)) bad++; });
  return { bad };
}

async function officialFirstOutput(sbx) {
  const samples = [];
  for (let i = 0; i < RUNS; i++) {
    const t = now();
    const r = await officialRun(sbx, 'echo ready; sleep 5', { until: (c) => c.includes('ready') });
    samples.push(now() - t);
    await sbx.commands.interrupt(r.id).catch(() => {});
  }
  return quantiles(samples);
}

// ---------------------------------------------------------------- the server, in a child process

async function startServerProcess() {
  const cli = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'lib', 'dev-server', 'cli.js');
  const apiKey = randomBytes(24).toString('hex');
  const child = spawn(process.execPath, [cli, '--port', '0', '--quiet'], { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, OPENSANDBOX_SERVER_API_KEY: apiKey } });
  const domain = await new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error('the dev-server did not start within 30 s')), 30000);
    child.stdout.on('data', (d) => {
      out += d;
      const line = out.split('\n').find((l) => /^\S+:\d+$/.test(l.trim()));
      if (line) {
        clearTimeout(timer);
        resolve(line.trim());
      }
    });
    child.once('exit', (code) => reject(new Error(`the dev-server exited (${code})`)));
  });
  return {
    domain,
    apiKey,
    close: () => new Promise((resolve) => {
      child.once('exit', resolve);
      child.kill('SIGTERM');
    }),
  };
}

// ---------------------------------------------------------------- report

const f = (n) => (n === undefined ? '-' : n.toFixed(1));

async function main() {
  const server = await startServerProcess();
  const sandbox = new OpenSandboxSandbox({ domain: server.domain, apiKey: server.apiKey });
  try {
    await sandbox._start();
    const pm = sandbox.processes;
    console.log(`server ${server.domain}, sandbox ${sandbox.opensandbox.sandboxId}; ${N} processes x ${L} lines, ${RUNS} latency samples\n`);

    const lines = N * L;
    const header = () => {
      console.log(`${N} concurrent processes x ${L} lines (${lines} lines)`);
      console.log('  client                       lines ok   wall ms  JS-thread busy ms  process CPU ms  RSS start -> peak MB');
    };
    const row = (name, p, bad) => console.log(`  ${name.padEnd(28)} ${String(lines - bad * L).padStart(8)} ${f(p.wallMs).padStart(9)} ${f(p.jsBusyMs).padStart(18)} ${f(p.cpuMs).padStart(15)}   ${f(p.rssStartMb)} -> ${f(p.rssPeakMb)}`);
    const lat = (name, q) => console.log(`  ${name.padEnd(32)} ${f(q.median).padStart(7)} ${f(q.p95).padStart(7)}`);

    const bulk = await profile(() => oursBulk(pm));
    header();
    row('ours (PTY WebSocket, C)', bulk, bulk.value.bad);
    console.log(`  ours: ${bulk.value.chunks} output batches reached JS for ${lines} lines`);
    const first = await oursFirstOutput(pm);
    const stdin = await oursStdinRoundTrip(pm);

    let failed = bulk.value.bad !== 0;
    let oFirst = null;
    if (!args['no-official']) {
      const sbx = await officialSandbox(server.domain, sandbox.opensandbox.sandboxId);
      try {
        const oBulk = await profile(() => officialBulk(sbx));
        row(`official (logs every ${POLL_MS} ms)`, oBulk, oBulk.value.bad);
        failed ||= oBulk.value.bad !== 0;
      } catch (err) {
        console.log(`  official (logs every ${POLL_MS} ms)  failed: ${err.message}`);
      }
      try {
        oFirst = await officialFirstOutput(sbx);
      } catch (err) {
        console.log(`  official spawn -> first output failed: ${err.message}`);
      }
    }
    console.log('\nlatency (ms)                        median     p95');
    lat('spawn -> first output, ours', first);
    if (oFirst) lat('spawn -> first output, official', oFirst);
    lat('stdin round trip, ours', stdin);
    console.log('  stdin round trip, official             -       -   (no stdin API)');
    if (failed) {
      console.log('\nFAILED: lines missing');
      process.exitCode = 1;
    }
  } finally {
    await sandbox._destroy().catch(() => {});
    await server.close();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
