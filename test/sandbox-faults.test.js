// Failure paths of OpenSandboxSandbox: every fault ends in a rejected Promise with a typed error carrying the
// server's message (never a hang, never a crash, never a secret in the message).
// Against the real local server (with an API key): unreachable server, 401, 404 / sandbox deleted behind our back,
// 5xx. A stream cut mid-command and a malformed event cannot be produced by a real server, so for those two only
// a tiny raw TCP execd peer is used; the lifecycle calls still go to the real server through a forwarder that
// points the execd endpoint at the peer. The recovery cases (a sandbox deleted or paused behind our back) run against
// the local server and against it emulating upstream's Docker and Kubernetes runtimes (test/helpers/profiles.js).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import { startServer } from '../lib/dev-server/index.js';
import { LOCAL, PROFILES, startProfileServer, clientOnly } from './helpers/profiles.js';
import { waitFor } from './helpers/poll.js';
import {
  OpenSandboxSandbox,
  OpenSandboxApiError,
  OpenSandboxNotFoundError,
  OpenSandboxSandboxGoneError,
  OpenSandboxTransportError,
  OpenSandboxProtocolError,
  OpenSandboxError,
  createCodeInterpreterTools,
} from '../lib/index.js';

const API_KEY = `test-api-key-${randomUUID()}`;

/** A port on loopback with nothing listening. */
async function deadPort() {
  const srv = net.createServer();
  await new Promise(r => srv.listen(0, '127.0.0.1', r));
  const { port } = srv.address();
  await new Promise(r => srv.close(r));
  return port;
}

/**
 * Raw TCP execd peer: answers GET /ping, POST /directories (the working directory at start) and DELETE /command with
 * 200; POST /command gets the
 * current mode: 'ok' = init + execution_complete (used while the sandbox starts); 'cut' = init + one stdout event, then the connection is dropped;
 * 'malformed' = init + a line that is not JSON, connection left open. POST /code/context makes "peer-ctx"; POST /code
 * answers init and then ends the response cleanly without the cell's end (a cell cut under its sandbox).
 */
async function startExecdPeer() {
  const sockets = new Set();
  const peer = { mode: 'ok', commands: 0, cells: 0, heads: [] };
  const server = net.createServer(sock => {
    sockets.add(sock);
    sock.on('close', () => sockets.delete(sock));
    sock.on('error', () => {});
    let buf = Buffer.alloc(0);
    sock.on('data', chunk => {
      buf = Buffer.concat([buf, chunk]);
      for (;;) {
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0) return;
        const head = buf.subarray(0, end).toString('latin1');
        peer.heads.push(head);
        const len = Number(/\r\ncontent-length:\s*(\d+)/i.exec(head)?.[1] ?? 0);
        if (buf.length < end + 4 + len) return;
        buf = buf.subarray(end + 4 + len);
        const [method, target] = head.split(' ');
        const path = target.replace(/^\/execd/, '').split('?')[0];
        if (method === 'POST' && path === '/command') {
          peer.commands++;
          sock.write('HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n');
          const chunk = s => sock.write(`${Buffer.byteLength(s).toString(16)}\r\n${s}\r\n`);
          chunk('{"type":"init","text":"peer-command-1"}\n\n');
          if (peer.mode === 'ok') {
            chunk('{"type":"execution_complete","execution_time":1}\n\n');
          } else if (peer.mode === 'cut') {
            chunk('{"type":"stdout","text":"partial-before-cut"}\n\n');
            setImmediate(() => sock.destroy());
          } else {
            chunk('{"type":"stdout","text": this is not json at all\n\n');
          }
          return;
        }
        if (method === 'POST' && path === '/code/context') {
          const body = '{"id":"peer-ctx","language":"python"}';
          sock.write(`HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
          continue;
        }
        if (method === 'POST' && path === '/code') { // init, then the response ends cleanly without the cell's end
          peer.cells++;
          const x = '{"type":"init","text":"peer-ctx"}\n\n';
          sock.write(`HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n${x.length.toString(16)}\r\n${x}\r\n0\r\n\r\n`);
          continue;
        }
        const ok = (method === 'GET' && path === '/ping') || (method === 'POST' && path === '/directories') || (method === 'DELETE' && path === '/command');
        sock.write(ok ? 'HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n'
          : 'HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}');
      }
    });
  });
  await new Promise(r => server.listen(0, '127.0.0.1', r));
  peer.port = server.address().port;
  peer.close = async () => {
    for (const s of sockets) s.destroy();
    await new Promise(r => server.close(r));
  };
  return peer;
}

/** Forwards lifecycle requests to the real server, except execd endpoints, which point at the peer. */
async function startForwarder(target, peerPort) {
  const server = http.createServer((req, res) => {
    if (/\/sandboxes\/[^/]+\/endpoints\/44772$/.test(req.url.split('?')[0])) {
      const body = JSON.stringify({ endpoint: `127.0.0.1:${peerPort}/execd`, headers: {} });
      res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) });
      return res.end(body);
    }
    const up = http.request({ host: '127.0.0.1', port: target.port, method: req.method, path: req.url, headers: req.headers }, upRes => {
      res.writeHead(upRes.statusCode, upRes.headers);
      upRes.pipe(res);
    });
    up.on('error', () => res.destroy());
    req.pipe(up);
  });
  await new Promise(r => server.listen(0, '127.0.0.1', r));
  return {
    domain: `127.0.0.1:${server.address().port}`,
    close: () => new Promise(r => server.close(r)),
  };
}

const noSecret = err => {
  assert.ok(!err.message.includes(API_KEY), 'API key leaked into the message');
  assert.ok(!JSON.stringify(err.details ?? {}).includes(API_KEY), 'API key leaked into details');
};

describe('OpenSandboxSandbox faults', function () {
  this.timeout(30000);
  let server;
  let dataDir;
  const cleanup = [];
  const make = (options = {}) => {
    const s = new OpenSandboxSandbox({ domain: server.domain, apiKey: API_KEY, ...options });
    cleanup.push(s);
    return s;
  };

  before(async function () {
    this.timeout(60000);
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'osb-faults-'));
    server = await startServer({ port: 0, apiKey: API_KEY, dataDir });
  });

  after(async function () {
    this.timeout(60000);
    for (const s of cleanup) await s._destroy().catch(() => {});
    await server?.close();
    if (dataDir) fs.rmSync(dataDir, { recursive: true, force: true });
  });

  it('server unreachable: typed transport error, status error, retry possible', async () => {
    // idempotent lifecycle GETs are retried on connection failure until requestTimeoutMs
    const s = make({ domain: `127.0.0.1:${await deadPort()}`, requestTimeoutMs: 1500 });
    await assert.rejects(s._start(), err => {
      assert.ok(err instanceof OpenSandboxTransportError, String(err));
      assert.equal(err.kind, 'transport');
      assert.ok(err.attempts > 1, `attempts ${err.attempts}`);
      assert.match(err.message, /list sandboxes/);
      noSecret(err);
      return true;
    });
    assert.equal(s.status, 'error');
    await assert.rejects(s.executeCommand('echo x'), OpenSandboxTransportError);
  });

  it('wrong or missing API key: 401 with the server code and message, key not echoed', async () => {
    const wrong = make({ apiKey: `wrong-${API_KEY}` });
    await assert.rejects(wrong._start(), err => {
      assert.ok(err instanceof OpenSandboxApiError, String(err));
      assert.equal(err.status, 401);
      assert.equal(err.code, 'INVALID_API_KEY');
      assert.match(err.message, /Invalid API key/);
      noSecret(err);
      assert.ok(!err.message.includes(`wrong-${API_KEY}`));
      return true;
    });
    const missing = new OpenSandboxSandbox({ domain: server.domain });
    cleanup.push(missing);
    await assert.rejects(missing._start(), err => err instanceof OpenSandboxApiError && err.status === 401 && err.code === 'MISSING_API_KEY');
  });

  it('5xx from the server: typed API error with the server message', async () => {
    // a server that cannot write its sandbox directory (a file where the directory was) fails the create with a 500
    const sb = path.join(dataDir, 'sb');
    fs.renameSync(sb, `${sb}.saved`);
    fs.writeFileSync(sb, 'not a directory');
    try {
      const s = make();
      await assert.rejects(s._start(), err => {
        assert.ok(err instanceof OpenSandboxApiError, String(err));
        assert.equal(err.status, 500);
        assert.equal(err.code, 'GENERAL::UNKNOWN_ERROR');
        assert.match(err.message, /create sandbox/);
        assert.match(err.serverMessage, /^ENOTDIR: not a directory/);
        noSecret(err);
        return true;
      });
      assert.equal(s.status, 'error');
    } finally {
      fs.rmSync(sb);
      fs.renameSync(`${sb}.saved`, sb);
    }
  });

  it('4xx validation error (422) carries the detail summary', async () => {
    const s = make({ volumes: [{ name: 'Not_A_DNS_Label!', mountPath: '/data', pvc: { claimName: 'x' } }] });
    await assert.rejects(s._start(), err => err instanceof OpenSandboxApiError && err.status >= 400 && err.status < 500 && err.message.length > 0);
  });

  for (const profile of [LOCAL, ...PROFILES]) describe(`sandbox deleted behind our back (dead-sandbox recovery, lib/recovery.js)${profile.title}`, () => {
    let target; // this profile's server (the suite's own for the local profile)
    before(async function () {
      this.timeout(60000);
      target = profile === LOCAL ? server : await startProfileServer(profile, { apiKey: API_KEY });
    });
    after(async function () {
      this.timeout(60000);
      if (target !== server) await target?.close();
    });
    const deleteRemote = async s => {
      const del = await fetch(`${target.baseUrl}/v1/sandboxes/${s.opensandbox.sandboxId}`, { method: 'DELETE', headers: { 'OPEN-SANDBOX-API-KEY': API_KEY } });
      assert.equal(del.status, 204);
    };
    const started = async (options = {}) => {
      const outcomes = [];
      const s = make({ domain: target.domain, id: `gone-${randomUUID()}`, onStart: ({ outcome }) => outcomes.push(outcome), ...options });
      await s._start();
      return { s, outcomes, first: s.opensandbox.sandboxId };
    };

    it('executeCommand right after the delete: provisions again and succeeds, status running', async () => {
      const { s, outcomes, first } = await started();
      await deleteRemote(s);
      const r = await s.executeCommand('echo', ['recovered']);
      assert.equal(r.exitCode, 0);
      assert.equal(r.stdout, 'recovered\n');
      assert.equal(s.status, 'running');
      assert.notEqual(s.opensandbox.sandboxId, first);
      assert.deepEqual(outcomes, ['created', 'created']);
      await s._destroy();
    });

    it('processes.spawn and processes.get right after the delete: provisioned again, spawn runs, the old pid is unknown', async () => {
      const { s, first } = await started();
      const old = await s.processes.spawn('echo old; sleep 30');
      await deleteRemote(s);
      const h = await s.processes.spawn('echo recovered');
      assert.equal((await h.wait()).stdout, 'recovered\n');
      assert.equal(s.status, 'running');
      const second = s.opensandbox.sandboxId;
      assert.notEqual(second, first);
      await deleteRemote(s);
      const [sid, nonce] = old.pid.split('.');
      assert.equal(await s.processes.get(`${sid}x.${nonce}`), undefined); // untracked: asks execd, which is gone
      assert.equal(s.status, 'running');
      assert.notEqual(s.opensandbox.sandboxId, second);
      await s._destroy();
    });

    it('writeFiles and getPortUrl right after the delete: provisioned again, then done', async () => {
      const { s, first } = await started();
      await deleteRemote(s);
      await s.writeFiles([{ path: 'note.txt', content: 'kept' }]);
      assert.notEqual(s.opensandbox.sandboxId, first);
      assert.equal((await s.executeCommand('cat note.txt')).stdout, 'kept\n');
      const second = s.opensandbox.sandboxId;
      await deleteRemote(s);
      assert.match(await s.networking.getPortUrl(8080), /^http:\/\//);
      assert.notEqual(s.opensandbox.sandboxId, second);
      assert.equal(s.status, 'running');
      await s._destroy();
    });

    clientOnly(profile)('run_code of the code interpreter tools right after the delete: provisioned again, a new default context', async () => {
      const { s, first } = await started();
      const tools = createCodeInterpreterTools(s, { languages: ['bash'], defaultLanguage: 'bash' });
      assert.match((await tools.run_code.execute({ code: 'echo one' }, {})).stdout, /^one\n?$/);
      await deleteRemote(s);
      assert.match((await tools.run_code.execute({ code: 'echo two' }, {})).stdout, /^two\n?$/);
      assert.notEqual(s.opensandbox.sandboxId, first);
      assert.equal(s.status, 'running');
      await s._destroy();
    });

    clientOnly(profile)('run_code (python) right after the delete: the real result of the cell on the new sandbox, or a typed error', async () => {
      const { s, first } = await started();
      const tools = createCodeInterpreterTools(s, { languages: ['python'] });
      assert.equal((await tools.run_code.execute({ code: 'x = 1' }, {})).success, true);
      await deleteRemote(s);
      const r = await tools.run_code.execute({ code: '6 * 7' }, {});
      assert.equal(r.success, true);
      assert.equal(r.result, '42');
      assert.equal(typeof r.executionCount, 'number');
      assert.notEqual(s.opensandbox.sandboxId, first);
      await s._destroy();
    });

    it('a command that had started when the sandbox went away is not run again: typed "gone" error, handle reset', async () => {
      const { s, first } = await started();
      const pending = s.executeCommand('echo began; sleep 30', [], { onStdout: () => deleteRemote(s) });
      await assert.rejects(pending, err => {
        assert.ok(err instanceof OpenSandboxSandboxGoneError, String(err));
        assert.ok(err instanceof OpenSandboxNotFoundError);
        assert.equal(err.sandboxId, first);
        assert.match(err.message, /no longer exists/);
        noSecret(err);
        return true;
      });
      assert.equal(s.status, 'stopped');
      assert.equal(s.opensandbox.sandboxId, undefined);
      assert.equal((await s.executeCommand('echo again')).stdout, 'again\n');
      await s._destroy();
    });

    // a pause that freezes (local, Docker) keeps execd's connection open and silent: the frozen case below (resumed
    // by lib/pause-watch.js; the silent-stream timeout itself: native.test.js STREAM_IDLE)
    if (!profile.keepsProcesses) {
      it('paused behind our back (the pod is gone, execd refuses connections): resumed, the command runs once', async () => {
        const { s, outcomes, first } = await started();
        const state = async () => (await s.opensandbox.get()).status.state;
        await s.opensandbox.pause(); // another process pauses it: this handle still thinks it runs
        await waitFor(async () => (await state()) === 'Paused', { timeoutMs: 20000, intervalMs: 50, message: 'Paused' });
        const r = await s.executeCommand('echo resumed >> /workspace/runs; cat /workspace/runs');
        assert.deepEqual([r.exitCode, r.stdout], [0, 'resumed\n']);
        assert.equal(s.status, 'running');
        assert.equal(s.opensandbox.sandboxId, first);
        assert.equal(await state(), 'Running');
        assert.deepEqual(outcomes, ['created', 'connected']);
        await s._destroy();
      });
    }
  });

  it('a sandbox frozen behind our back: the waiting call finds it Paused, resumes it and completes (lib/pause-watch.js)', async () => {
    const s = make();
    await s._start();
    await s.opensandbox.pause(); // the raw handle bypasses status: execd is frozen but we still think it runs
    assert.equal((await s.opensandbox.get()).status.state, 'Paused');
    const r = await s.executeCommand('echo frozen');
    assert.deepEqual([r.exitCode, r.stdout], [0, 'frozen\n']);
    assert.equal((await s.opensandbox.get()).status.state, 'Running');
    assert.equal(s.status, 'running');
  });

  describe('broken execd streams (raw TCP peer)', () => {
    let peer;
    let fwd;
    let s;
    before(async () => {
      peer = await startExecdPeer();
      fwd = await startForwarder(server, peer.port);
      s = make({ domain: fwd.domain });
      await s._start();
    });
    after(async () => {
      await s?._destroy().catch(() => {});
      await fwd?.close();
      await peer?.close();
    });

    it('stream cut mid-command: transport error, sandbox still usable', async () => {
      peer.mode = 'cut';
      const chunks = [];
      await assert.rejects(s.executeCommand('echo x', [], { onStdout: d => chunks.push(d) }), err => {
        assert.ok(err instanceof OpenSandboxTransportError || err instanceof OpenSandboxProtocolError, String(err));
        assert.ok(!(err instanceof OpenSandboxSandboxGoneError));
        assert.match(err.message, /run command/);
        noSecret(err);
        return true;
      });
      assert.equal(chunks.join(''), 'partial-before-cut\n');
      assert.equal(s.status, 'running');
    });

    it('malformed event: protocol error, no hang', async () => {
      peer.mode = 'malformed';
      await assert.rejects(s.executeCommand('echo x'), err => {
        assert.ok(err instanceof OpenSandboxProtocolError, String(err));
        assert.equal(err.kind, 'protocol');
        noSecret(err);
        return true;
      });
    });

    it('never sends the lifecycle API key to execd', () => {
      assert.ok(peer.heads.length >= 3);
      for (const head of peer.heads) {
        assert.ok(!/open-sandbox-api-key/i.test(head), head);
        assert.ok(!head.includes(API_KEY), head);
      }
    });

    it('a code cell whose stream ends without its end: typed transport error (never success); after a delete: typed "gone"', async () => {
      const tools = createCodeInterpreterTools(s, { languages: ['python'] });
      const cells = peer.cells;
      await assert.rejects(tools.run_code.execute({ code: '6 * 7' }, {}), err => {
        assert.ok(err instanceof OpenSandboxTransportError, String(err));
        assert.ok(!(err instanceof OpenSandboxSandboxGoneError));
        assert.equal(err.code, 'CODE_STREAM_CUT');
        return true;
      });
      assert.equal(s.status, 'running');
      // the sandbox deleted through the lifecycle API, its execd still answering for a moment (the real execd's
      // case): the cell may have run, so it is not run again; the handle is reset
      const s2 = make({ domain: fwd.domain });
      await s2._start();
      const gone = s2.opensandbox.sandboxId;
      const tools2 = createCodeInterpreterTools(s2, { languages: ['python'] });
      const del = await fetch(`${server.baseUrl}/v1/sandboxes/${gone}`, { method: 'DELETE', headers: { 'OPEN-SANDBOX-API-KEY': API_KEY } });
      assert.equal(del.status, 204);
      await assert.rejects(tools2.run_code.execute({ code: '6 * 7' }, {}), err => {
        assert.ok(err instanceof OpenSandboxSandboxGoneError, String(err));
        assert.equal(err.sandboxId, gone);
        noSecret(err);
        return true;
      });
      assert.equal(s2.status, 'stopped');
      assert.equal(peer.cells, cells + 2); // each cell sent once
    });

    it('every error is an OpenSandboxError with a stable code', async () => {
      peer.mode = 'cut';
      const err = await s.executeCommand('echo x').catch(e => e);
      assert.ok(err instanceof OpenSandboxError);
      assert.equal(typeof err.code, 'string');
    });
  });
});
