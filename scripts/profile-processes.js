#!/usr/bin/env node
// Where the CPU of one background process goes (issue 34's profile): N processes of `true`, C at a time, started
// (1) by executeCommand (execd's /command: `bash -c`, the official client's path), (2) as a bare PTY session
// (POST /pty {command:'true'} + the pipe-mode WebSocket, no wrapper), (3) by sandbox.processes.spawn with
// stdinMode 'ignore' (the wrapper, no stdin decoder) and (4) with stdin (the decoder too). For each: wall, the
// client's CPU, and the server tree's CPU split into the dev server's Node, execd itself and the sandbox's processes
// (execd's children: their reaped time), per process. `node scripts/profile-processes.js [--n 300 --c 20]`.
import fs from 'node:fs';
import { parseArgs } from 'node:util';
import WebSocket from 'ws';
import { OpenSandboxSandbox } from '../lib/index.js';
import { now, startChildServer } from './lib/bench-util.js';

const { values: args } = parseArgs({ options: { n: { type: 'string', default: '300' }, c: { type: 'string', default: '20' }, cmd: { type: 'string', default: 'true' }, rounds: { type: 'string', default: '2' }, only: { type: 'string' } } });
const N = Number(args.n);
const C = Number(args.c);
const CMD = args.cmd;

function stat(pid) {
  try {
    const s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
    return { comm: s.slice(s.indexOf('(') + 1, s.lastIndexOf(')')), ppid: Number(f[1]), own: (Number(f[11]) + Number(f[12])) * 10, reaped: (Number(f[13]) + Number(f[14])) * 10 };
  } catch {
    return null;
  }
}
function tree(root) {
  const all = fs.readdirSync('/proc').filter((d) => /^\d+$/.test(d)).map(Number);
  const kids = new Map();
  for (const p of all) {
    const s = stat(p);
    if (s) (kids.get(s.ppid) ?? kids.set(s.ppid, []).get(s.ppid)).push(p);
  }
  const out = [];
  const walk = (p) => { for (const k of kids.get(p) ?? []) { out.push(k); walk(k); } };
  walk(root);
  return out;
}
/** CPU ms: node (the dev server's own), execd (own), sandbox (execd's reaped children + live descendants). */
function split(serverPid) {
  const r = { node: stat(serverPid).own, execd: 0, sandbox: 0, other: stat(serverPid).reaped };
  const ds = tree(serverPid);
  const execd = ds.find((p) => stat(p)?.comm === 'osb-execd');
  if (!execd) throw new Error('no osb-execd under the server');
  const under = new Set(tree(execd));
  for (const p of ds) {
    const s = stat(p);
    if (!s) continue;
    if (p === execd) { r.execd += s.own; r.sandbox += s.reaped; } else if (under.has(p)) r.sandbox += s.own + s.reaped;
    else r.other += s.own; // bwrap and the like
  }
  return r;
}

async function measure(server, name, one) {
  if (args.only && !name.includes(args.only)) return;
  const a = split(server.pid);
  const c0 = process.cpuUsage();
  const t = now();
  for (let i = 0; i < N; i += C) await Promise.all(Array.from({ length: Math.min(C, N - i) }, () => one()));
  const wall = now() - t;
  const c = process.cpuUsage(c0);
  const b = split(server.pid);
  const per = (k) => ((b[k] - a[k]) / N).toFixed(2);
  console.log(`${name.padEnd(34)} ${(wall / N).toFixed(2).padStart(7)} ${((c.user + c.system) / 1000 / N).toFixed(2).padStart(7)} ${per('node').padStart(7)} ${per('execd').padStart(7)} ${per('sandbox').padStart(8)} ${per('other').padStart(6)}`);
}

const server = await startChildServer();
const sandbox = new OpenSandboxSandbox({ domain: server.domain, apiKey: server.apiKey });
try {
  await sandbox._start();
  const ep = await sandbox.opensandbox.endpoint(44772);
  const base = `http://${ep.endpoint}`;
  const headers = { ...ep.headers, 'Content-Type': 'application/json' };
  const rawPty = async () => {
    const res = await fetch(`${base}/pty`, { method: 'POST', headers, body: JSON.stringify({ command: CMD }) });
    const { session_id: sid } = await res.json();
    await new Promise((resolve, reject) => {
      const ws = new WebSocket(`${base.replace(/^http/, 'ws')}/pty/${sid}/ws?pty=0`, { headers: ep.headers });
      ws.on('close', resolve);
      ws.on('error', reject);
    });
    await fetch(`${base}/pty/${sid}`, { method: 'DELETE', headers: ep.headers });
  };
  const background = async () => {
    const res = await fetch(`${base}/command`, { method: 'POST', headers, body: JSON.stringify({ command: CMD, background: true }) });
    const text = await res.text();
    const id = /"text":"([^"]+)"/.exec(text.split('\n').find((l) => l.includes('"init"')) ?? '')?.[1];
    if (!id) throw new Error(`no command id in ${text}`);
    for (;;) {
      await new Promise((r) => setTimeout(r, 50));
      await fetch(`${base}/command/${id}/logs?cursor=0`, { headers: ep.headers }).then((r) => r.arrayBuffer());
      const st = await (await fetch(`${base}/command/status/${id}`, { headers: ep.headers })).json();
      if (st.running === false) break;
    }
  };
  console.log(`${N} processes of \`${CMD}\`, ${C} at a time; ms per process (load average ${(await import('node:os')).loadavg().map((x) => x.toFixed(2)).join(' ')})`);
  console.log(`${'path'.padEnd(34)} ${'wall'.padStart(7)} ${'client'.padStart(7)} ${'server'.padStart(7)} ${'execd'.padStart(7)} ${'sandbox'.padStart(8)} ${'other'.padStart(6)}`);
  for (let round = 0; round < Number(args.rounds); round++) {
    await measure(server, 'background /command + logs (official)', background);
    await measure(server, 'executeCommand (/command, bash -c)', async () => { const r = await sandbox.executeCommand(CMD); if (r.exitCode !== 0) throw new Error('exit'); });
    await measure(server, 'bare PTY session (POST /pty + ws)', rawPty);
    await measure(server, "spawn, stdinMode 'ignore' (wrapper)", async () => { const r = await (await sandbox.processes.spawn(CMD, { stdinMode: 'ignore' })).wait(); if (r.exitCode !== 0) throw new Error('exit'); });
    await measure(server, 'spawn with stdin (wrapper+decoder)', async () => { const r = await (await sandbox.processes.spawn(CMD)).wait(); if (r.exitCode !== 0) throw new Error('exit'); });
  }
} finally {
  await sandbox._destroy().catch(() => {});
  await server.close();
}
