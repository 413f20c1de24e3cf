// One execd (issue 32, "Done when" 1): every route class answered in one sandbox of the local server — a command, a
// background command and its logs, a PTY session over its WebSocket, every files route, directories, the code
// interpreter (python), a bash session, metrics, the proxy — and then the sandbox's processes listed: below the C execd
// runs nothing of ours (no Node, no Python, no shell script of the package) but the kernel the code interpreter started.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { startServer } from '../lib/dev-server/index.js';
import { execdBinary } from '../lib/dev-server/execd-binary.js';
import { descendants } from '../lib/dev-server/proctree.js';
import { waitFor } from './helpers/poll.js';
import { request, parseEvents, endpointHeadersFor } from './helpers/raw.js';

function cmdline(pid) {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
  } catch {
    return [];
  }
}

function multipart(parts) {
  const boundary = 'oneexecd7d3f';
  const chunks = [];
  for (const p of parts) {
    const fname = p.filename === undefined ? '' : `; filename="${p.filename}"`;
    chunks.push(Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="${p.name}"${fname}\r\n\r\n`), Buffer.from(p.data), Buffer.from('\r\n'));
  }
  chunks.push(Buffer.from(`--${boundary}--\r\n`));
  return { body: Buffer.concat(chunks), headers: { 'Content-Type': `multipart/form-data; boundary=${boundary}` } };
}

/** Writes `bytes` on a new connection to 127.0.0.1:port and reads until `done(text)`; resolves the text (latin1). */
function exchange(port, bytes, done, timeoutMs = 15000) {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    let got = '';
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no complete answer within ${timeoutMs} ms: ${JSON.stringify(got)}`));
    }, timeoutMs);
    socket.on('error', reject);
    socket.on('data', (d) => {
      got += d.toString('latin1');
      if (done(got)) {
        clearTimeout(timer);
        socket.destroy();
        resolve(got);
      }
    });
    socket.write(bytes);
  });
}

describe('one execd: every route class in one sandbox, nothing of ours running but a code kernel', function () {
  this.timeout(120000);
  let server;
  let work;
  let base; // http://<execd endpoint>
  let port;
  let execdPid;

  const ex = (p, opts = {}) => request(`${base}${p}`, { timeoutMs: 30000, ...opts, headers: { 'Content-Type': 'application/json', ...opts.headers } });

  before(async function () {
    if (!execdBinary()) throw new Error('no osb-execd binary: build it first (node scripts/build.js)');
    work = fs.mkdtempSync(path.join(os.tmpdir(), 'osb-one-'));
    server = await startServer({ dataDir: path.join(work, 'data'), commandTailMs: 0 });
    const api = (p, opts = {}) => request(`${server.baseUrl}${p}`, { ...opts, headers: { 'Content-Type': 'application/json' } });
    const r = await api('/v1/sandboxes', { method: 'POST', body: { image: { uri: 'x' }, entrypoint: ['tail', '-f', '/dev/null'], resourceLimits: {} } });
    assert.equal(r.status, 202, r.text);
    const ep = (await api(`/v1/sandboxes/${r.json.id}/endpoints/44772`)).json;
    base = `http://${ep.endpoint}`;
    port = Number(ep.endpoint.split(':').at(-1));
    await waitFor(async () => (await ex('/ping', { timeoutMs: 2000 })).status === 200, { timeoutMs: 30000, message: 'execd ping' });
    const name = path.basename(execdBinary());
    const found = descendants(process.pid).filter((pid) => path.basename(cmdline(pid)[0] ?? '') === name);
    assert.equal(found.length, 1, 'exactly one C execd in this process tree');
    execdPid = found[0];
  });
  after(async () => {
    await server?.close();
    if (work) fs.rmSync(work, { recursive: true, force: true });
  });

  it('answers every route class, then runs nothing of ours but the python kernel', async () => {
    const failures = [];
    const step = async (what, fn) => {
      try {
        await fn();
      } catch (err) {
        failures.push(`${what}: ${err.message}`);
      }
    };

    await step('command', async () => {
      const r = await ex('/command', { method: 'POST', body: { command: 'echo hi' } });
      assert.equal(r.status, 200, r.text);
      assert.deepEqual(parseEvents(r.text).filter((e) => e.type === 'stdout').map((e) => e.text), ['hi']);
    });
    await step('background command, status and logs', async () => {
      const r = await ex('/command', { method: 'POST', body: { command: 'echo bg', background: true } });
      assert.equal(r.status, 200, r.text);
      const id = parseEvents(r.text).find((e) => e.type === 'init').text;
      await waitFor(async () => (await ex(`/command/status/${id}`)).json?.running === false, { timeoutMs: 10000, message: 'background command done' });
      const logs = await ex(`/command/${id}/logs`);
      assert.equal(logs.status, 200, logs.text);
      assert.match(logs.text, /bg/);
    });
    await step('PTY session and its WebSocket', async () => {
      const pty = await ex('/pty', { method: 'POST', body: { command: 'tty' } });
      assert.equal(pty.status, 201, pty.text);
      const secure = Object.entries(endpointHeadersFor(base)).map(([k, v]) => `${k}: ${v}\r\n`).join('');
      const ws = await exchange(port, `GET /pty/${pty.json.session_id}/ws HTTP/1.1\r\nHost: execd\r\n${secure}`
        + 'Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n', (t) => t.includes('"type":"exit"'));
      assert.match(ws, /^HTTP\/1\.1 101 /);
      assert.match(ws, /\/dev\/pts\/\d+/);
    });
    await step('directories: make, list, delete', async () => {
      assert.equal((await ex('/directories', { method: 'POST', body: { '/workspace/one/d': { mode: 755 } } })).status, 200);
      const list = await ex('/directories/list?path=/workspace/one');
      assert.equal(list.status, 200, list.text);
      assert.ok(list.json.some((e) => e.path === '/workspace/one/d'), list.text);
      assert.equal((await ex('/directories?path=/workspace/one/d', { method: 'DELETE' })).status, 200);
    });
    await step('files: upload, info, download, search, replace, mv, permissions, delete', async () => {
      const form = multipart([{ name: 'metadata', filename: 'metadata', data: '{"path":"/workspace/one/a.txt"}' }, { name: 'file', filename: 'a.txt', data: 'hello one' }]);
      const up = await ex('/files/upload', { method: 'POST', body: form.body, headers: form.headers });
      assert.equal(up.status, 200, up.text);
      const info = await ex('/files/info?path=/workspace/one/a.txt');
      assert.equal(info.status, 200, info.text);
      assert.equal(info.json['/workspace/one/a.txt'].size, 9);
      const dl = await ex('/files/download?path=/workspace/one/a.txt');
      assert.deepEqual([dl.status, dl.text], [200, 'hello one']);
      const search = await ex('/files/search?path=/workspace/one&pattern=a.txt');
      assert.equal(search.status, 200, search.text);
      assert.deepEqual(search.json.map((f) => f.path), ['/workspace/one/a.txt']);
      assert.equal((await ex('/files/replace', { method: 'POST', body: { '/workspace/one/a.txt': { old: 'one', new: 'two' } } })).status, 200);
      assert.equal((await ex('/files/mv', { method: 'POST', body: [{ src: '/workspace/one/a.txt', dest: '/workspace/one/b.txt' }] })).status, 200);
      assert.equal((await ex('/files/permissions', { method: 'POST', body: { '/workspace/one/b.txt': { mode: 600 } } })).status, 200);
      assert.equal((await ex('/files/download?path=/workspace/one/b.txt')).text, 'hello two');
      assert.equal((await ex('/files?path=/workspace/one/b.txt', { method: 'DELETE' })).status, 200);
      assert.equal((await ex('/files/info?path=/workspace/one/b.txt')).status, 404);
    });
    await step('code interpreter (python)', async () => {
      const ctx = await ex('/code/context', { method: 'POST', body: { language: 'python' } });
      assert.equal(ctx.status, 200, ctx.text);
      const run = await ex('/code', { method: 'POST', body: { context: { id: ctx.json.id, language: 'python' }, code: 'print(6 * 7)' } });
      assert.equal(run.status, 200, run.text);
      assert.match(parseEvents(run.text).filter((e) => e.type === 'stdout').map((e) => e.text).join(''), /42/);
    });
    await step('bash session', async () => {
      const s = await ex('/session', { method: 'POST', body: {} });
      assert.equal(s.status, 200, s.text);
      const run = await ex(`/session/${s.json.session_id}/run`, { method: 'POST', body: { command: 'X=5; echo "x=$X"' } });
      assert.equal(run.status, 200, run.text);
      assert.match(run.text, /x=5/);
      assert.equal((await ex(`/session/${s.json.session_id}`, { method: 'DELETE' })).status, 200);
    });
    await step('metrics', async () => {
      const m = await ex('/metrics');
      assert.equal(m.status, 200, m.text);
      assert.equal(typeof m.json.cpu_count, 'number', m.text);
    });
    await step('proxy to execd itself', async () => {
      const p = await ex('/proxy/44772/ping');
      assert.equal(p.status, 200, p.text);
    });

    // what runs below execd now: the python kernel the code interpreter started, nothing else of ours
    const procs = descendants(execdPid).map((pid) => ({ pid, argv: cmdline(pid) })).filter((p) => p.argv.length);
    const isKernel = (p) => p.argv.some((a) => /\/code-(python|node|bash)-kernel\.(py|js|sh)$/.test(a));
    const ours = procs.filter((p) => !isKernel(p) && (p.argv.some((a) => a.includes('lib/dev-server')) || p.argv[0] === process.execPath
      || /(^|\/)(node|python3?(\.\d+)?)$/.test(p.argv[0])));
    assert.deepEqual(ours, [], `processes of ours below execd: ${JSON.stringify(procs)}`);
    assert.ok(procs.some(isKernel), `the python kernel runs: ${JSON.stringify(procs)}`);
    assert.deepEqual(failures, []);
  });
});
