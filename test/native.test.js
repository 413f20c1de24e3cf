// Native API (lib/native.js over the C core) against the local OpenSandbox-compatible server: lifecycle calls and
// error mapping, execd readiness, foreground commands (output, exit codes, cwd/env, final-event resolution without
// the idle tail, timeout, cancel, retention, 200 concurrent runs), faults from a tiny raw TCP peer, secrets, and
// leak checks through stats().
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import tls from 'node:tls';
import { execFileSync, spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { startServer } from '../lib/dev-server/index.js';
import { checkExecdBinary } from '../lib/dev-server/execd-binary.js';
import { Lifecycle, Execd, stats } from '../lib/native.js';
import { OpenSandboxProcessManager, OpenSandboxSandbox } from '../lib/index.js';
import { uploadFiles } from '../lib/files.js';
import { waitFor } from './helpers/poll.js';
import { request } from './helpers/raw.js';
import { runNodeCode } from './helpers/run-node.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const API_KEY = 'test-key-5f1e2d3c4b5a';
const CREATE = {
  image: { uri: 'debian:12' }, entrypoint: ['tail', '-f', '/dev/null'], timeout: 600,
  resourceLimits: { cpu: '1', memory: '1Gi' }, metadata: { 'mastra.ai/workspace': 'native-test' },
};

async function rejection(promise) {
  try {
    await promise;
  } catch (err) {
    return err;
  }
  throw new Error('expected a rejection');
}

/** A one-shot raw HTTP peer for faults the real server cannot produce: answers every request with `reply(reqText)`. */
async function rawPeer(reply) {
  const seen = [];
  const sockets = new Set();
  const server = net.createServer((sock) => {
    sockets.add(sock);
    sock.on('close', () => sockets.delete(sock));
    let buf = '';
    sock.on('data', (d) => {
      buf += d.toString('latin1');
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      const head = buf.slice(0, end);
      const len = Number(/content-length:\s*(\d+)/i.exec(head)?.[1] ?? 0);
      if (buf.length < end + 4 + len) return;
      seen.push(buf);
      const text = buf;
      buf = '';
      reply(sock, text);
    });
    sock.on('error', () => {});
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    seen,
    close: () => new Promise((r) => { for (const s of sockets) s.destroy(); server.close(r); }),
  };
}

const streamHead = 'HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n';
const chunk = (s) => `${Buffer.byteLength(s).toString(16)}\r\n${s}\r\n`;

describe('native API (C core) against the local server', function () {
  this.timeout(30000);
  let srv;
  let lc;
  let sb;
  let ex;
  let execdBase;
  let execdHeaders;

  before(async () => {
    srv = await startServer({ port: 0, apiKey: API_KEY });
    lc = new Lifecycle({ baseUrl: srv.baseUrl + '/v1', apiKey: API_KEY, requestTimeoutMs: 15000 });
    sb = await lc.create(CREATE);
    const ep = await lc.endpoint(sb.id, 44772);
    execdBase = `http://${ep.endpoint}`;
    execdHeaders = ep.headers;
    ex = new Execd({ baseUrl: execdBase, headers: execdHeaders });
    await ex.waitReady(15000);
  });

  after(async () => {
    if (sb) await lc.delete(sb.id).catch(() => {});
    await srv?.close();
  });

  describe('lifecycle', () => {
    it('create resolves the 202 body; get and list find the sandbox by metadata and state', async () => {
      assert.match(sb.id, /^[0-9a-f-]{36}$/);
      assert.equal(sb.status.state, 'Running');
      const got = await lc.get(sb.id);
      assert.equal(got.id, sb.id);
      assert.deepEqual(got.metadata, CREATE.metadata);
      const list = await lc.list({ metadata: { 'mastra.ai/workspace': 'native-test' }, states: ['Running', 'Paused'], page: 1, pageSize: 50 });
      assert.deepEqual(list.items.map((i) => i.id), [sb.id]);
      assert.equal(list.pagination.pageSize, 50);
      const none = await lc.list({ metadata: { 'mastra.ai/workspace': 'other&x=y' } });
      assert.deepEqual(none.items, []);
    });

    it('endpoint resolves { endpoint, headers }; patchMetadata, renew, pause/resume', async () => {
      const ep = await lc.endpoint(sb.id, 44772);
      assert.match(ep.endpoint, /^127\.0\.0\.1:\d+$/);
      assert.deepEqual(Object.keys(ep.headers), ['OpenSandbox-Secure-Access']);
      const patched = await lc.patchMetadata(sb.id, { extra: 'v1' });
      assert.equal(patched.metadata.extra, 'v1');
      const removed = await lc.patchMetadata(sb.id, { extra: null });
      assert.equal(removed.metadata.extra, undefined);
      const at = new Date(Date.now() + 3600_000);
      const renewed = await lc.renew(sb.id, at.toISOString());
      assert.equal(new Date(renewed.expiresAt).getTime(), at.getTime());
      assert.equal(await lc.pause(sb.id), undefined);
      assert.equal((await lc.get(sb.id)).status.state, 'Paused');
      assert.equal(await lc.resume(sb.id), undefined);
      assert.equal((await lc.get(sb.id)).status.state, 'Running');
    });

    it('snapshots: create resolves the 202 Snapshot, get polls it to Ready, list filters and pages, delete', async () => {
      const created = await lc.createSnapshot(sb.id, { name: 'native snap' });
      assert.deepEqual([created.sandboxId, created.name, created.status.state], [sb.id, 'native snap', 'Creating']);
      let snap = created;
      for (let i = 0; i < 150 && snap.status.state === 'Creating'; i++) {
        await new Promise((r) => setTimeout(r, 100));
        snap = await lc.getSnapshot(created.id);
      }
      assert.equal(snap.status.state, 'Ready');
      const unnamed = await lc.createSnapshot(sb.id);
      assert.equal('name' in unnamed, false);
      const list = await lc.listSnapshots({ sandboxId: sb.id, states: ['Ready', 'Creating', 'Failed'], page: 1, pageSize: 1 });
      assert.deepEqual(list.items.map((i) => i.id), [unnamed.id]);
      assert.deepEqual(list.pagination, { page: 1, pageSize: 1, totalItems: 2, totalPages: 2, hasNextPage: true });
      assert.deepEqual((await lc.listSnapshots({ sandboxId: 'a&sandboxId=b' })).items, []);
      for (let i = 0; i < 150 && (await lc.getSnapshot(unnamed.id)).status.state === 'Creating'; i++) await new Promise((r) => setTimeout(r, 100));
      assert.equal(await lc.deleteSnapshot(unnamed.id), undefined);
      assert.equal(await lc.deleteSnapshot(created.id), undefined);
      const err = await rejection(lc.getSnapshot(created.id));
      assert.deepEqual([err.kind, err.status, err.code], ['api', 404, 'SNAPSHOT::NOT_FOUND']);
      await assert.rejects(lc.createSnapshot(sb.id, { name: '' }), { name: 'TypeError', message: 'snapshot name must not be empty' });
      await assert.rejects(lc.getSnapshot(''), { name: 'TypeError', message: 'snapshot id must be a non-empty string' });
      // the id travels escaped in the path: the server sees it whole
      // the id is percent-encoded whole (a '/' in it too; the server refuses an encoded separator with 400)
      const odd = await rejection(lc.getSnapshot('s 1?x=#&%'));
      assert.deepEqual([odd.status, odd.code, odd.message], [404, 'SNAPSHOT::NOT_FOUND', 'Snapshot s 1?x=#&% not found']);
      const slash = await rejection(lc.getSnapshot('s 1/2'));
      assert.deepEqual([slash.status, slash.code], [400, 'GENERAL::BAD_REQUEST']);
    });

    it('onServerDate reports the HTTP Date header of answers, success and error, with the local instants', async () => {
      const seen = [];
      const dated = new Lifecycle({ baseUrl: srv.baseUrl + '/v1', apiKey: API_KEY, onServerDate: (...a) => seen.push(a) });
      const before = Date.now();
      const list = await dated.list({ page: 1, pageSize: 1 });
      assert.ok(Array.isArray(list.items));
      const err = await rejection(dated.get('00000000-0000-4000-8000-000000000000'));
      assert.equal(err.status, 404);
      assert.equal(seen.length, 2);
      for (const [date, sentAt, receivedAt] of seen) {
        assert.match(date, /^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT$/);
        assert.ok(before <= sentAt && sentAt <= receivedAt && receivedAt <= Date.now());
      }
      assert.throws(() => new Lifecycle({ baseUrl: srv.baseUrl, onServerDate: 'x' }), /onServerDate must be a function/);
    });

    it('maps a 404 body {code,message} with the X-Request-ID', async () => {
      const err = await rejection(lc.get('00000000-0000-4000-8000-000000000000'));
      assert.equal(err.kind, 'api');
      assert.equal(err.status, 404);
      assert.equal(err.code, 'DOCKER::SANDBOX_NOT_FOUND');
      assert.match(err.message, /not found/);
      assert.match(err.requestId, /^[0-9a-f]{32}$/);
      assert.equal(err.attempts, 1);
    });

    it('maps 401 from a key-protected server and never puts the key in the message', async () => {
      const bad = new Lifecycle({ baseUrl: srv.baseUrl + '/v1', apiKey: 'wrong-key-123' });
      const err = await rejection(bad.get(sb.id));
      assert.deepEqual([err.kind, err.status, err.code], ['api', 401, 'INVALID_API_KEY']);
      const none = new Lifecycle({ baseUrl: srv.baseUrl + '/v1' });
      const err2 = await rejection(none.get(sb.id));
      assert.deepEqual([err2.kind, err2.status, err2.code], ['api', 401, 'MISSING_API_KEY']);
      assert.ok(!err.message.includes('wrong-key-123'));
    });

    it('summarises FastAPI 422 detail (loc + msg)', async () => {
      const err = await rejection(lc.create({ image: { uri: 'x' }, entrypoint: ['true'], timeout: 5, resourceLimits: { cpu: '1', memory: '1Gi' } }));
      assert.equal(err.kind, 'api');
      assert.equal(err.status, 422);
      assert.equal(err.code, 'HTTP_422');
      assert.match(err.message, /body\.timeout: Input should be greater than or equal to 60/);
    });

    it('delete answers 204 -> undefined, then get is 404', async () => {
      const other = await lc.create({ ...CREATE, metadata: {} });
      assert.equal(await lc.delete(other.id), undefined);
      const err = await rejection(lc.get(other.id));
      assert.equal(err.status, 404);
    });

    it('an unreachable port is a transport error after retries of the idempotent GET', async () => {
      const probe = net.createServer();
      await new Promise((r) => probe.listen(0, '127.0.0.1', r));
      const port = probe.address().port;
      await new Promise((r) => probe.close(r)); // nothing listens there now
      const dead = new Lifecycle({ baseUrl: `http://127.0.0.1:${port}/v1`, requestTimeoutMs: 1500 });
      const err = await rejection(dead.get('x'));
      assert.equal(err.kind, 'transport');
      assert.equal(err.code, 'TRANSPORT');
      assert.equal(err.status, 0);
      assert.ok(err.attempts >= 2, `attempts ${err.attempts}`);
      assert.match(err.message, /connect/i);
      const post = await rejection(dead.create(CREATE)); // POST is never retried
      assert.equal(post.kind, 'transport');
      assert.equal(post.attempts, 1);
    });

    it('rejects bad arguments with TypeErrors (constructors throw, async methods reject)', async () => {
      assert.throws(() => new Lifecycle({ baseUrl: 'ftp://x' }), TypeError);
      assert.throws(() => new Lifecycle({ baseUrl: 'http://x', apiKey: 'a\r\nX: y' }), TypeError);
      await assert.rejects(lc.get(''), TypeError);
      await assert.rejects(lc.endpoint(sb.id, 70000), TypeError);
      await assert.rejects(lc.get(42), TypeError);
      assert.throws(() => new Execd({ baseUrl: execdBase, headers: { 'OPEN-SANDBOX-API-KEY': 'k' } }), /API key/);
      assert.throws(() => ex.run({ command: '' }), TypeError);
    });
  });

  describe('execd', () => {
    it('runs a command: stdout/stderr reconstruction, exit code from error.evalue, cwd and env', async () => {
      const batches = [];
      const cmd = ex.run({ command: 'echo hello; echo; echo err >&2; echo "$A:$(pwd)"; printf partial; exit 3', cwd: '/tmp', envs: { A: 'x y' } }, (b) => batches.push(b));
      const r = await cmd.result;
      assert.equal(r.exitCode, 3);
      assert.equal(r.stdout, 'hello\n\nx y:/tmp\npartial\n');
      assert.equal(r.stderr, 'err\n');
      assert.equal(r.errorText, 'exit status 3');
      assert.equal(r.timedOut, false);
      assert.equal(r.cancelled, false);
      assert.match(r.commandId, /^[0-9a-f]{32}$/);
      assert.equal(batches.map((b) => b.stdout ?? '').join(''), r.stdout);
      assert.equal(batches.map((b) => b.stderr ?? '').join(''), r.stderr);
      const ok = await ex.run({ command: 'true' }).result;
      assert.equal(ok.exitCode, 0);
      assert.equal(ok.errorText, null);
      assert.equal(ok.stdout, '');
    });

    it('a missing cwd is an api error before the stream', async () => {
      const err = await rejection(ex.run({ command: 'true', cwd: '/does/not/exist' }).result);
      assert.deepEqual([err.kind, err.status, err.code], ['api', 400, 'INVALID_REQUEST_BODY']);
      assert.match(err.message, /working directory does not exist/);
    });

    it('resolves at the final event, never waiting for the idle tail', async () => {
      const slow = await startServer({ port: 0, commandTailMs: 120_000 });
      const l2 = new Lifecycle({ baseUrl: slow.baseUrl });
      try {
        const s = await l2.create(CREATE);
        const ep = await l2.endpoint(s.id, 44772);
        const x = new Execd({ baseUrl: `http://${ep.endpoint}`, headers: ep.headers });
        await x.waitReady(15000);
        const r = await x.run({ command: 'echo tail' }).result; // the test timeout (30 s) is far below the tail
        assert.equal(r.stdout, 'tail\n');
        await waitFor(() => stats().requestsInFlight === 0, { message: 'the stream was not closed' });
      } finally {
        await slow.close();
      }
    });

    it('timeoutMs: DELETE /command then timedOut:true, and the remote command is stopped', async () => {
      const r = await ex.run({ command: 'echo started; sleep 30', timeoutMs: 500 }).result;
      assert.equal(r.timedOut, true);
      assert.equal(r.cancelled, false);
      assert.equal(r.exitCode, -1);
      assert.equal(r.stdout, 'started\n');
      const st = await request(`${execdBase}/command/status/${r.commandId}`, { headers: execdHeaders });
      assert.equal(st.status, 200);
      assert.equal(st.json.running, false);
    });

    it('cancel(): DELETE /command, the result resolves cancelled:true with the partial output', async () => {
      const seen = [];
      const cmd = ex.run({ command: 'echo one; sleep 30; echo two' }, (b) => seen.push(b.stdout ?? ''));
      await waitFor(() => seen.join('') === 'one\n', { message: 'first line not seen' });
      await cmd.cancel();
      const r = await cmd.result;
      assert.equal(r.cancelled, true);
      assert.equal(r.timedOut, false);
      assert.equal(r.stdout, 'one\n');
      const st = await request(`${execdBase}/command/status/${r.commandId}`, { headers: execdHeaders });
      assert.equal(st.json.running, false);
      await cmd.cancel(); // settled already: resolves at once
    });

    it('retention keeps the newest maxRetainedBytes in C while callbacks get every byte', async () => {
      const all = [];
      const r = await ex.run({ command: 'seq 1 20000', maxRetainedBytes: 1000 }, (b) => all.push(b.stdout ?? '')).result;
      const expected = Array.from({ length: 20000 }, (_, i) => `${i + 1}\n`).join('');
      assert.equal(all.join(''), expected);
      assert.equal(r.stdout, expected.slice(-1000));
      assert.equal(r.stdoutDroppedBytes, expected.length - 1000);
      assert.equal(r.stderrDroppedBytes, 0);
      const zero = await ex.run({ command: 'echo x', maxRetainedBytes: 0 }).result;
      assert.equal(zero.stdout, '');
      assert.equal(zero.stdoutDroppedBytes, 2);
      const unbounded = await ex.run({ command: 'seq 1 20000', maxRetainedBytes: -1 }).result;
      assert.equal(unbounded.stdout, expected);
      // 10 x "é" (2 bytes each) + "\n" = 21 bytes; the newest 6 start inside a character: realigned to 5
      const utf8 = await ex.run({ command: "printf '\\303\\251%.0s' 1 2 3 4 5 6 7 8 9 10; echo", maxRetainedBytes: 6 }).result;
      assert.equal(utf8.stdout, 'éé\n');
      assert.equal(utf8.stdoutDroppedBytes, 16);
    });

    it('200 concurrent runs deliver every byte in order', async function () {
      this.timeout(120000);
      const N = 200;
      // 200 spawns at once on a loaded 2-core machine can hold a stream's first byte back longer than the default
      // 10 s idle watchdog (seen at load average 10+): this test is about bytes and order, so the watchdog is wide.
      const wide = new Execd({ baseUrl: execdBase, headers: execdHeaders, idleTimeoutMs: 120000 });
      const runs = Array.from({ length: N }, (_, i) => {
        const parts = [];
        const cmd = wide.run({ command: `for j in $(seq 1 50); do echo "r${i}-$j"; done` }, (b) => parts.push(b.stdout ?? ''));
        return cmd.result.then((r) => ({ r, streamed: parts.join('') }));
      });
      const results = await Promise.all(runs);
      results.forEach(({ r, streamed }, i) => {
        const expected = Array.from({ length: 50 }, (_, j) => `r${i}-${j + 1}\n`).join('');
        assert.equal(r.exitCode, 0);
        assert.equal(r.stdout, expected);
        assert.equal(streamed, expected);
      });
    });

    it('flow control: a JS thread that falls behind pauses the stream; every byte still arrives in order', async () => {
      // The dev server relays execd through this process, which a blocked JS thread would stall too: use a
      // standalone execd child process as the peer here.
      const ws = fs.mkdtempSync(path.join(os.tmpdir(), 'osb-native-'));
      const child = spawn(checkExecdBinary(), ['--port', '0', '--workspace', ws],
        { stdio: ['ignore', 'pipe', 'inherit'] });
      try {
        let out = '';
        child.stdout.on('data', (d) => { out += d; });
        const port = await waitFor(() => /execd ready (\d+)/.exec(out)?.[1], { message: 'execd did not start' });
        const x = new Execd({ baseUrl: `http://127.0.0.1:${port}` });
        const parts = [];
        let sawPause = false;
        const cmd = x.run({ command: 'seq 1 100000', maxRetainedBytes: 0, outputHighWaterBytes: 16384 }, (b) => {
          if (parts.length === 0) { // hold the JS thread until the engine pauses the transfer (bounded)
            const deadline = Date.now() + 10000;
            while (stats().pausedStreams === 0 && Date.now() < deadline) { /* busy: the JS thread is "slow" */ }
            sawPause = stats().pausedStreams === 1;
          }
          parts.push(b.stdout ?? '');
        });
        const r = await cmd.result;
        const expected = Array.from({ length: 100000 }, (_, i) => `${i + 1}\n`).join('');
        assert.equal(sawPause, true);
        assert.equal(parts.join(''), expected);
        assert.equal(r.stdoutDroppedBytes, expected.length);
        assert.equal(r.exitCode, 0);
        await waitFor(() => stats().pausedStreams === 0, { message: 'a transfer stayed paused' });
      } finally {
        child.kill();
        await new Promise((r) => (child.exitCode !== null ? r() : child.once('exit', r)));
        fs.rmSync(ws, { recursive: true, force: true });
      }
    });

    it('waitReady: a wrong execd token fails at once with the {"error": …} body', async () => {
      const tok = await startServer({ port: 0, execdAccessToken: 'tok-abcdef' });
      const l2 = new Lifecycle({ baseUrl: tok.baseUrl });
      try {
        const s = await l2.create(CREATE);
        const ep = await l2.endpoint(s.id, 44772);
        const bad = new Execd({ baseUrl: `http://${ep.endpoint}`, headers: { ...ep.headers, 'X-EXECD-ACCESS-TOKEN': 'nope' } });
        const err = await rejection(bad.waitReady(10000));
        assert.deepEqual([err.kind, err.status, err.code], ['api', 401, 'HTTP_401']);
        assert.match(err.message, /Unauthorized/);
        const good = new Execd({ baseUrl: `http://${ep.endpoint}`, headers: { ...ep.headers, 'X-EXECD-ACCESS-TOKEN': 'tok-abcdef' } });
        await good.waitReady(15000);
        assert.equal((await good.run({ command: 'echo ok' }).result).stdout, 'ok\n');
      } finally {
        await tok.close();
      }
    });

    it('waitReady: an endpoint that never answers times out with READY_TIMEOUT', async () => {
      const probe = net.createServer();
      await new Promise((r) => probe.listen(0, '127.0.0.1', r));
      const port = probe.address().port;
      await new Promise((r) => probe.close(r));
      const err = await rejection(new Execd({ baseUrl: `http://127.0.0.1:${port}` }).waitReady(700));
      assert.deepEqual([err.kind, err.code], ['timeout', 'READY_TIMEOUT']);
      assert.match(err.message, /not ready within 700 ms/);
    });
  });

  describe('https', () => {
    let dir;
    let proxies = [];
    // A TLS-terminating proxy (like an ingress) in front of a real upstream port.
    async function tlsProxy(upstreamPort) {
      const server = tls.createServer({ key: fs.readFileSync(path.join(dir, 'key.pem')), cert: fs.readFileSync(path.join(dir, 'cert.pem')) }, (s) => {
        const up = net.connect(upstreamPort, '127.0.0.1');
        s.on('error', () => up.destroy());
        up.on('error', () => s.destroy());
        s.pipe(up).pipe(s);
      });
      const sockets = new Set();
      server.on('secureConnection', (s) => { sockets.add(s); s.on('close', () => sockets.delete(s)); });
      await new Promise((r) => server.listen(0, '127.0.0.1', r));
      proxies.push({ server, sockets });
      return server.address().port;
    }
    before(() => {
      dir = fs.mkdtempSync(path.join(os.tmpdir(), 'osb-tls-'));
      execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
        '-keyout', path.join(dir, 'key.pem'), '-out', path.join(dir, 'cert.pem'), '-days', '1', '-subj', '/CN=127.0.0.1',
        '-addext', 'subjectAltName=IP:127.0.0.1'], { stdio: 'ignore' });
    });
    after(async () => {
      for (const p of proxies) {
        for (const s of p.sockets) s.destroy();
        await new Promise((r) => p.server.close(r));
      }
      proxies = [];
      fs.rmSync(dir, { recursive: true, force: true });
    });

    it('lifecycle and execd over TLS with caFile; an untrusted certificate is a transport error', async () => {
      const caFile = path.join(dir, 'cert.pem');
      const lcPort = await tlsProxy(Number(new URL(srv.baseUrl).port));
      const secure = new Lifecycle({ baseUrl: `https://127.0.0.1:${lcPort}/v1`, apiKey: API_KEY, caFile });
      assert.equal((await secure.get(sb.id)).id, sb.id);
      const untrusted = new Lifecycle({ baseUrl: `https://127.0.0.1:${lcPort}/v1`, apiKey: API_KEY, requestTimeoutMs: 2000 });
      const err = await rejection(untrusted.get(sb.id));
      assert.deepEqual([err.kind, err.code], ['transport', 'TRANSPORT']);
      assert.match(err.message, /certificate/i);
      assert.equal(err.attempts, 1); // a TLS failure is not a connection failure: no retry
      const exPort = await tlsProxy(Number(new URL(execdBase).port));
      const x = new Execd({ baseUrl: `https://127.0.0.1:${exPort}`, headers: execdHeaders, caFile });
      await x.waitReady(10000);
      const r = await x.run({ command: 'echo over-tls' }).result;
      assert.equal(r.stdout, 'over-tls\n');
      assert.throws(() => new Execd({ baseUrl: execdBase, caFile: path.join(dir, 'missing.pem') }), /caFile/);
    });

    /** An OpenSandboxSandbox on the local server whose process manager reaches execd through a TLS proxy. */
    async function processesOverTls(extra) {
      const sandbox = new OpenSandboxSandbox({ domain: new URL(srv.baseUrl).host, apiKey: API_KEY });
      await sandbox._start();
      const conn = sandbox[Symbol.for('mastra-opensandbox.execdConnection')]();
      const u = new URL(conn.baseUrl);
      const baseUrl = `https://127.0.0.1:${await tlsProxy(Number(u.port))}${u.pathname.replace(/\/$/, '')}`;
      const pm = new OpenSandboxProcessManager({ connection: () => ({ ...conn, baseUrl, ...extra }) });
      pm.sandbox = sandbox;
      return { sandbox, pm, baseUrl, headers: conn.headers };
    }

    it('processes (https + wss) and uploads with caFile; without it they fail on the certificate', async () => {
      const caFile = path.join(dir, 'cert.pem');
      const { sandbox, pm, baseUrl, headers } = await processesOverTls({ caFile });
      try {
        await uploadFiles({ baseUrl, headers, caFile }, { paths: ['/workspace/tls.txt'], modes: [644], buffers: [Buffer.from('uploaded')] });
        const h = await pm.spawn('read line; echo "got $line"; cat /workspace/tls.txt');
        await h.sendStdin('over-wss\n');
        const r = await h.wait();
        assert.deepEqual([r.exitCode, r.stdout], [0, 'got over-wss\nuploaded']);
        const one = { paths: ['/workspace/x'], modes: [644], buffers: [Buffer.from('x')] };
        await assert.rejects(uploadFiles({ baseUrl, headers, requestTimeoutMs: 2000 }, one), /certificate/i);
        await assert.rejects(uploadFiles({ baseUrl, headers, caFile: path.join(dir, 'missing.pem') }, one), /caFile/);
        for (const [extra, re] of [[{ requestTimeoutMs: 2000 }, /certificate/i], [{ caFile: path.join(dir, 'missing.pem') }, /caFile/]]) {
          const other = new OpenSandboxProcessManager({ connection: () => ({ baseUrl, headers, ...extra }) });
          other.sandbox = sandbox;
          await assert.rejects(other.spawn('echo x'), re);
        }
      } finally {
        await sandbox._destroy();
      }
    });

    it('without caFile, SSL_CERT_FILE names the CA bundle for https and wss', async () => {
      const { sandbox, baseUrl, headers } = await processesOverTls({});
      const lcUrl = `https://127.0.0.1:${await tlsProxy(Number(new URL(srv.baseUrl).port))}/v1`;
      const code = `
        import { Lifecycle, binding } from ${JSON.stringify(pathToFileURL(path.join(root, 'lib/native.js')).href)};
        const lc = new Lifecycle({ baseUrl: ${JSON.stringify(lcUrl)}, apiKey: ${JSON.stringify(API_KEY)}, requestTimeoutMs: 5000 });
        console.log('lifecycle', (await lc.get(${JSON.stringify(sb.id)})).id);
        const kv = ${JSON.stringify(Object.entries(headers).flat())};
        const p = binding.processStart(${JSON.stringify(baseUrl)}, kv, 5000, 65536, 'echo env-ca', null, [], true, 0, 0, null, 0, null);
        await p.started;
        console.log('process', (await p.exited).stdout.toString().trim());`;
      try {
        const trusted = await runNodeCode(code, { env: { SSL_CERT_FILE: path.join(dir, 'cert.pem') } });
        assert.equal(trusted.out, `lifecycle ${sb.id}\nprocess env-ca\n`);
        assert.equal(trusted.code, 0);
        const other = await runNodeCode(code, { env: { SSL_CERT_FILE: path.join(dir, 'key.pem') } });
        assert.notEqual(other.code, 0);
        assert.match(other.out, /certificate|CA/i);
      } finally {
        await sandbox._destroy();
      }
    });
  });

  describe('faults from a raw peer', () => {
    it('a malformed event is a protocol error', async () => {
      const peer = await rawPeer((s) => s.write(streamHead + chunk('{"type":"init","text":"abc"}\n\n') + chunk('{not json\n\n')));
      try {
        const err = await rejection(new Execd({ baseUrl: peer.url }).run({ command: 'x' }).result);
        assert.deepEqual([err.kind, err.code], ['protocol', 'MALFORMED_STREAM']);
        assert.match(err.message, /not JSON/);
        await waitFor(() => peer.seen.some((r) => r.startsWith('DELETE /command?id=abc HTTP/1.1')), { message: 'no DELETE' });
      } finally {
        await peer.close();
      }
    });

    it('a stream cut before the final event rejects; a type-less {code,message} is a stream error', async () => {
      const cut = await rawPeer((s) => s.end(streamHead + chunk('{"type":"init","text":"abc"}\n\n{"type":"stdout","text":"partial"}\n\n')));
      const bare = await rawPeer((s) => s.write(streamHead + chunk('{"type":"init","text":"abc"}\n\n{"code":"RUNTIME_ERROR","message":"session is busy"}\n\n')));
      try {
        const err = await rejection(new Execd({ baseUrl: cut.url }).run({ command: 'x' }).result);
        assert.equal(err.kind, 'transport');
        const err2 = await rejection(new Execd({ baseUrl: bare.url }).run({ command: 'x' }).result);
        assert.deepEqual([err2.kind, err2.code, err2.message], ['stream', 'RUNTIME_ERROR', 'session is busy']);
      } finally {
        await cut.close();
        await bare.close();
      }
    });

    it('a silent stream trips the idle watchdog', async () => {
      const peer = await rawPeer((s) => s.write(streamHead + chunk('{"type":"init","text":"abc"}\n\n')));
      try {
        const err = await rejection(new Execd({ baseUrl: peer.url, idleTimeoutMs: 300 }).run({ command: 'x' }).result);
        assert.deepEqual([err.kind, err.code], ['timeout', 'STREAM_IDLE']);
        // the command execd started is stopped too
        await waitFor(() => peer.seen.some((r) => r.startsWith('DELETE /command?id=abc HTTP/1.1')), { message: 'no DELETE' });
      } finally {
        await peer.close();
      }
    });

    it('secrets are redacted from error messages; execd never receives the API key', async () => {
      const peer = await rawPeer((s, req) => {
        const body = JSON.stringify({ code: 'ECHO', message: req });
        s.write(`HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nX-Request-ID: rid-1\r\n\r\n${body}`);
      });
      try {
        const l = new Lifecycle({ baseUrl: peer.url, apiKey: API_KEY });
        const err = await rejection(l.get('abc'));
        assert.equal(err.code, 'ECHO');
        assert.equal(err.requestId, 'rid-1');
        assert.ok(peer.seen[0].includes(`OPEN-SANDBOX-API-KEY: ${API_KEY}`));
        assert.match(peer.seen[0], /^GET \/sandboxes\/abc HTTP\/1\.1\r\n/);
        assert.match(peer.seen[0], /\r\nX-Request-ID: [0-9a-f]{32}\r\n/);
        assert.match(peer.seen[0], /\r\nAccept: application\/json\r\n/);
        await rejection(l.list({ metadata: { 'a/b': 'x y', k: 'v&w=' }, states: ['Running', 'Paused'], page: 2, pageSize: 5 }));
        // metadata is ONE parameter: the url-encoding of "a%2Fb=x%20y&k=v%26w%3D"; state repeats
        assert.match(peer.seen.at(-1), /^GET \/sandboxes\?metadata=a%252Fb%3Dx%2520y%26k%3Dv%2526w%253D&state=Running&state=Paused&page=2&pageSize=5 HTTP\/1\.1\r\n/);
        await rejection(l.pause('abc')); // a body-less POST: no form content type
        assert.match(peer.seen.at(-1), /^POST \/sandboxes\/abc\/pause HTTP\/1\.1\r\n/);
        assert.ok(!/content-type/i.test(peer.seen.at(-1)), peer.seen.at(-1));
        // a sandbox id is escaped into the path (execd's 404 no longer echoes the path, so test_engine cannot see it)
        await rejection(l.get('a b/c'));
        assert.match(peer.seen.at(-1), /^GET \/sandboxes\/a%20b%2Fc HTTP\/1\.1\r\n/);
        assert.ok(!err.message.includes(API_KEY), err.message);
        assert.match(err.message, /OPEN-SANDBOX-API-KEY: \*\*\*/);
        const x = new Execd({ baseUrl: peer.url, headers: { 'X-EXECD-ACCESS-TOKEN': 'tok-secret-9' } });
        const err2 = await rejection(x.run({ command: 'x' }).result);
        assert.ok(!err2.message.includes('tok-secret-9'));
        assert.ok(!peer.seen.at(-1).includes(API_KEY));
      } finally {
        await peer.close();
      }
    });
  });

  describe('resources', () => {
    it('stats() returns to baseline: no request, operation or promise left', async () => {
      await waitFor(() => {
        const s = stats();
        return s.requestsInFlight === 0 && s.operations === 0 && s.pendingPromises === 0;
      }, { message: `stats not at baseline: ${JSON.stringify(stats())}` });
      const s = stats();
      assert.equal(s.engineThreads, 1);
      assert.ok(s.sockets <= 32, `sockets ${s.sockets}`);
    });

    it('an idle addon does not hold the process open; exit with a command in flight is clean', async () => {
      const script = (body) => `import { Execd } from ${JSON.stringify(path.join(root, 'lib/native.js'))};
        const ex = new Execd({ baseUrl: ${JSON.stringify(execdBase)}, headers: ${JSON.stringify(execdHeaders)} });
        await ex.waitReady(10000);
        ${body}`;
      const runNode = (code) => runNodeCode(code, { timeoutMs: 20000 });
      const idle = await runNode(script(`const r = await ex.run({ command: 'echo hi' }).result; console.log(r.stdout.trim());`));
      assert.deepEqual([idle.code, idle.signal, idle.out.trim()], [0, null, 'hi']);
      const busy = await runNode(script(`ex.run({ command: 'sleep 20' }); setTimeout(() => process.exit(7), 100);`));
      assert.deepEqual([busy.code, busy.signal], [7, null]);
    });

    it('terminating workers while their output is being delivered never aborts the process (regression)', async () => {
      // deliveries queued for a worker whose JS can no longer run used to throw out of the threadsafe-function
      // callback and abort the whole process ("terminate called after throwing an instance of 'Napi::Error'")
      const native = pathToFileURL(path.join(root, 'lib/native.js')).href;
      const child = await runNodeCode(`
        import { Worker } from 'node:worker_threads';
        for (let i = 0; i < 15; i++) {
          // an ES module like its parent (the worker inherits --input-type=module)
          const w = new Worker(\`import { parentPort } from 'node:worker_threads';
            const { Execd } = await import(${JSON.stringify(native)});
            const ex = new Execd({ baseUrl: ${JSON.stringify(execdBase)}, headers: ${JSON.stringify(execdHeaders)} });
            for (let j = 0; j < 5; j++) ex.run({ command: 'seq 1 2000; sleep 5' }, () => {}).result.catch(() => {});
            ex.run({ command: 'echo go' }, () => parentPort.postMessage('out')).result.catch(() => {});\`, { eval: true });
          await new Promise((resolve, reject) => { w.once('message', resolve); w.once('error', reject); });
          await new Promise((r) => setTimeout(r, i % 5));
          await w.terminate();
        }
        console.log('all workers terminated');`, { timeoutMs: 60000 });
      assert.deepEqual([child.code, child.signal, child.out.trim()], [0, null, 'all workers terminated']);
    });

    it('works in worker_threads, and a terminated worker leaves the main addon usable', async () => {
      const { Worker } = await import('node:worker_threads');
      const code = `const { parentPort } = require('node:worker_threads');
        (async () => {
          const { Execd } = await import(${JSON.stringify(pathToFileURL(path.join(root, 'lib/native.js')).href)});
          const ex = new Execd({ baseUrl: ${JSON.stringify(execdBase)}, headers: ${JSON.stringify(execdHeaders)} });
          const r = await ex.run({ command: 'echo from-worker' }).result;
          parentPort.postMessage(r.stdout);
          ex.run({ command: 'sleep 20' });
        })();`;
      const w = new Worker(code, { eval: true });
      const msg = await new Promise((resolve, reject) => { w.once('message', resolve); w.once('error', reject); });
      assert.equal(msg, 'from-worker\n');
      await w.terminate();
      assert.equal((await ex.run({ command: 'echo main' }).result).stdout, 'main\n');
    });
  });
});
