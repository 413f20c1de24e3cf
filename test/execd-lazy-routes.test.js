// execd loads its bash-session, PTY, code-interpreter and metrics routes on their first request (main.js
// lazyRoutes: a shorter start for every sandbox). A fresh execd process (a real one, over loopback TCP) must answer
// those first requests — concurrent ones, WebSocket upgrades, trailing slashes — exactly as later ones.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import WebSocket from 'ws';
import { request } from './helpers/raw.js';

const MAIN = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'lib', 'dev-server', 'execd', 'main.js');

/** A fresh execd on an ephemeral loopback port: { base, child, stop() }. */
async function startExecd(workspace) {
  const child = spawn(process.execPath, [MAIN, '--port', '0', '--workspace', workspace, '--command-tail-ms', '0'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stderr.on('data', (b) => { err += b; });
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`execd not ready within 15 s: ${err}`)), 15000);
    child.stdout.on('data', (b) => {
      out += b;
      const m = /execd ready (\d+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`execd exited (${code}): ${err}`));
    });
  });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  return {
    base: `http://127.0.0.1:${port}`,
    stderr: () => err,
    async stop() {
      child.kill('SIGKILL');
      await exited;
    },
  };
}

/** Opens a WebSocket; resolves { open: true } or { status, json } (null: no body) when the upgrade is refused. */
function upgrade(url) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url);
    ws.once('open', () => {
      ws.close();
      resolve({ open: true });
    });
    ws.once('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (d) => { body += d; });
      res.on('end', () => resolve({ status: res.statusCode, json: body === '' ? null : JSON.parse(body) }));
    });
    ws.once('error', reject);
  });
}

describe('execd: route modules loaded on first use', function () {
  this.timeout(30000);
  let dir;
  let execd;

  beforeEach(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'osb-lazy-'));
    execd = await startExecd(dir);
  });
  afterEach(async () => {
    await execd?.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('concurrent first requests to each lazily loaded module get the same answers as the requests after them', async () => {
    const calls = [
      ['GET', '/metrics'], ['GET', '/code/contexts'], ['DELETE', '/session/nope'], ['GET', '/pty/nope'], ['GET', '/metrics/'],
    ];
    const view = (r) => ({ status: r.status, body: r.status === 200 && r.json?.timestamp ? Object.keys(r.json).sort() : r.json ?? r.text });
    const first = await Promise.all(calls.map(([method, p]) => request(`${execd.base}${p}`, { method, endpointHeaders: false })));
    const again = await Promise.all(calls.map(([method, p]) => request(`${execd.base}${p}`, { method, endpointHeaders: false })));
    assert.deepEqual(first.map(view), again.map(view));
    assert.deepEqual(first.map((r) => r.status), [200, 200, 404, 404, 301]);
    assert.deepEqual(first[0].json && Object.keys(first[0].json).sort(), ['cpu_count', 'cpu_used_pct', 'mem_total_mib', 'mem_used_mib', 'timestamp']);
    assert.deepEqual(first[1].json, []);
    assert.deepEqual(first[2].json, { code: 'CONTEXT_NOT_FOUND', message: 'session nope not found' });
    assert.deepEqual(first[3].json, { code: 'CONTEXT_NOT_FOUND', message: 'pty session nope not found' });
    assert.equal(first[4].headers.location, '/metrics');
    assert.equal(execd.stderr(), '');
  });

  it('a WebSocket upgrade as the first PTY request is answered (404 for an unknown session), then a session connects', async () => {
    const ws = execd.base.replace(/^http/, 'ws');
    assert.deepEqual(await upgrade(`${ws}/pty/nope/ws`), { status: 404, json: { code: 'CONTEXT_NOT_FOUND', message: 'pty session nope not found' } });
    const created = await request(`${execd.base}/pty`, { method: 'POST', endpointHeaders: false });
    assert.equal(created.status, 201);
    assert.deepEqual(await upgrade(`${ws}/pty/${created.json.session_id}/ws?pty=0`), { open: true });
    // an upgrade no module takes is still a plain 404
    assert.deepEqual(await upgrade(`${ws}/nowhere`), { status: 404, json: null });
    assert.equal((await request(`${execd.base}/ping`, { endpointHeaders: false })).status, 200);
    assert.equal(execd.stderr(), '');
  });
});
