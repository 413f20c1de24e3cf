// sandbox.processes under faults, against the local OpenSandbox-compatible server: the execd PTY exit race
// (startServer({ ptyExitRace: true })) loses nothing and runs nothing twice; a WebSocket cut mid-process reconnects
// and replays from the last byte received (also when execd still thinks the old client holds the session: 409 ->
// takeover); another client taking the session over settles the handle with a clear message; a sandbox deleted
// under running processes settles every handle and the addon's counters return to baseline; and processes survive
// the client: a child Node process spawns and exits, this process reattaches by pid. Flow control: a JS consumer
// slower than the process pauses its socket (server in a child process, so that it is not slowed by our JS thread).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import WebSocket from 'ws';
import { startServer } from '../lib/dev-server/index.js';
import { OpenSandboxSandbox, OpenSandboxTransportError } from '../lib/index.js';
import { OpenSandboxProcessManager } from '../lib/process-manager.js';
import { stats } from '../lib/native.js';
import { waitFor } from './helpers/poll.js';
import { runNode } from './helpers/run-node.js';

const here = path.dirname(fileURLToPath(import.meta.url));

// Runs helpers/process-child.js in a child Node (spawns a process in the sandbox with this logical id, prints
// {"pid"} and exits without stopping anything; mode: see the helper) and returns what it printed.
async function spawnInChild(domain, logicalId, mode) {
  const { code, out } = await runNode(path.join(here, 'helpers', 'process-child.js'), {
    args: [domain, logicalId, ...(mode ? [mode] : [])],
    timeoutMs: 30000,
  });
  assert.equal(code, 0, out);
  return JSON.parse(out.split('\n').filter((l) => l.startsWith('{"pid"')).pop());
}
const lines = (n) => Array.from({ length: n }, (_, i) => `line-${i + 1}\n`).join('');

/**
 * A TCP forwarder between the client and execd, to inject what the real server cannot produce on demand: a
 * connection cut. cut() drops every connection; cut({ keepUpstream: true }) drops only the client side, so execd
 * still believes the old client holds its session. `sabotage(requestLine)` (set by a test) may return 'drop' (the
 * connection is accepted, then dropped right after execd's first answer) or 'garbage' (an invalid WebSocket frame
 * follows execd's first answer) for a new connection.
 */
async function forwarder(host, port) {
  const conns = new Set();
  const fwd = { sabotage: () => null };
  const server = net.createServer((c) => {
    const u = net.connect(port, host);
    const pair = { c, u, keepUpstream: false };
    conns.add(pair);
    let mode;
    c.on('data', (d) => {
      mode ??= fwd.sabotage(d.toString('latin1').split('\r\n')[0]) ?? null;
      u.write(d);
    });
    u.on('data', (d) => {
      c.write(d);
      if (mode === 'drop') setTimeout(() => c.destroy(), 30);
      else if (mode === 'garbage') c.write(Buffer.from([0x8b, 0x00])); // FIN + reserved opcode 0xB
      mode = null;
    });
    const end = () => {
      conns.delete(pair);
      c.destroy();
      if (!pair.keepUpstream) u.destroy();
    };
    c.on('error', end);
    u.on('error', end);
    c.on('close', end);
    u.on('close', end);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return Object.assign(fwd, {
    port: server.address().port,
    cut({ keepUpstream = false } = {}) {
      const n = conns.size;
      for (const p of [...conns]) {
        p.keepUpstream = keepUpstream;
        p.c.destroy();
      }
      return n;
    },
    async close() {
      for (const p of conns) {
        p.c.destroy();
        p.u.destroy();
      }
      await new Promise((resolve) => server.close(resolve));
    },
  });
}

describe('OpenSandboxProcessManager under faults', function () {
  this.timeout(60000);
  let server;
  let sandbox;

  before(async function () {
    server = await startServer({ port: 0 });
    sandbox = new OpenSandboxSandbox({ domain: server.domain });
    await sandbox._start();
  });

  after(async function () {
    await sandbox?._destroy();
    await server?.close();
  });

  describe('through a connection the test can cut', () => {
    let fwd;
    let pm;
    let execdHeaders;

    before(async () => {
      const ep = await sandbox.opensandbox.endpoint(44772);
      const [hostPort, ...rest] = ep.endpoint.split('/');
      const [host, port] = hostPort.split(':');
      fwd = await forwarder(host, Number(port));
      execdHeaders = ep.headers;
      const baseUrl = `http://127.0.0.1:${fwd.port}${rest.length ? `/${rest.join('/')}` : ''}`;
      const connection = () => ({ baseUrl, headers: ep.headers });
      pm = new OpenSandboxProcessManager({ connection });
      pm.connection = connection;
      pm.sandbox = sandbox;
      pm.execdBase = `http://${ep.endpoint}`;
    });

    after(async () => {
      await pm?.killAll();
      await fwd?.close();
    });

    it('WebSocket closed mid-process: reconnects and replays from the last byte, nothing lost or doubled', async () => {
      const h = await pm.spawn('for i in $(seq 1 40); do echo line-$i; sleep 0.03; done');
      await waitFor(() => h.stdout.includes('line-5\n'), { message: 'first lines' });
      assert.ok(fwd.cut() >= 1);
      const r = await h.wait();
      assert.equal(r.exitCode, 0);
      assert.equal(r.stdout, lines(40));
    });

    it('cut while execd still holds the old socket: 409, then takeover, still exact', async () => {
      const h = await pm.spawn('for i in $(seq 1 40); do echo line-$i; sleep 0.03; done');
      await waitFor(() => h.stdout.includes('line-5\n'), { message: 'first lines' });
      assert.ok(fwd.cut({ keepUpstream: true }) >= 1);
      const r = await h.wait();
      assert.equal(r.exitCode, 0);
      assert.equal(r.stdout, lines(40));
    });

    it('reconnects that are accepted then dropped, or answered with an invalid frame, end after the 10 s window with a typed error', async function () {
      this.timeout(60000);
      const hs = await Promise.all(['a', 'b'].map((t) => pm.spawn(`echo up-${t}; sleep 60`)));
      await waitFor(() => hs.every((h, i) => h.stdout === `up-${'ab'[i]}\n`), { message: 'both running' });
      const sids = hs.map((h) => h.pid.split('.')[0]);
      fwd.sabotage = (line) => (line.includes(`/pty/${sids[0]}/ws`) ? 'drop' : line.includes(`/pty/${sids[1]}/ws`) ? 'garbage' : null);
      try {
        assert.ok(fwd.cut() >= 2);
        const rs = await Promise.all(hs.map((h) => h.wait()));
        for (const [i, r] of rs.entries()) {
          assert.equal(r.exitCode, -1);
          assert.equal(r.success, false);
          assert.match(r.errorText, /could not reconnect within 10 s/);
          assert.ok(r.error instanceof OpenSandboxTransportError, String(r.error));
          assert.equal(r.error.code, 'PROCESS_CONNECTION_LOST');
          assert.equal(hs[i].error, r.error);
        }
        // nothing left: no process in the native table, no WebSocket, no pending promise holding the event loop
        await waitFor(() => {
          const s = stats();
          return s.processes === 0 && s.wsConnections === 0 && s.pendingPromises === 0;
        }, { timeoutMs: 15000, message: `nothing left (${JSON.stringify(stats())})` });
      } finally {
        fwd.sabotage = () => null;
        const pm2 = new OpenSandboxProcessManager({ connection: pm.connection }); // the sleeps still run remotely
        pm2.sandbox = sandbox;
        for (const h of hs) await pm2.get(h.pid).then((g) => g?.kill()).catch(() => {});
      }
    });

    it('another client takes the session over: wait() settles failed with a clear message', async () => {
      const h = await pm.spawn('echo up; sleep 30');
      await waitFor(() => h.stdout === 'up\n');
      const sid = h.pid.split('.')[0];
      const other = new WebSocket(`${pm.execdBase.replace(/^http/, 'ws')}/pty/${sid}/ws?pty=0&takeover=1&since=999999`, { headers: execdHeaders });
      await new Promise((resolve, reject) => {
        other.once('open', resolve);
        other.once('error', reject);
      });
      const r = await h.wait();
      assert.equal(r.success, false);
      assert.equal(r.exitCode, -1);
      assert.match(r.errorText, /another client took over/);
      assert.match(r.stderr, /another client took over/);
      other.close();
      // the remote process is still there: a reattach by pid can still kill it
      assert.equal(await h.kill(), false);
      const pm2 = new OpenSandboxProcessManager({ connection: pm.connection });
      pm2.sandbox = sandbox;
      const again = await pm2.get(h.pid);
      assert.ok(again);
      assert.equal(await again.kill(), true);
    });
  });

  it('exit race switch on: many fast processes lose no output, and each command ran exactly once', async function () {
    const race = await startServer({ port: 0, ptyExitRace: true });
    const sb = new OpenSandboxSandbox({ domain: race.domain });
    try {
      await sb._start();
      const n = 40;
      const hs = await Promise.all(Array.from({ length: n }, (_, i) => sb.processes.spawn(
        `echo out-${i}; echo err-${i} >&2; echo ${i} >> /tmp/runs; printf tail-${i}`)));
      // every exit within a deadline (a process that never settles is named, and the server still closes)
      const rs = [];
      hs.forEach((h, i) => h.wait().then((r) => { rs[i] = r; }, (err) => { rs[i] = err; }));
      await waitFor(() => rs.filter(Boolean).length === n, { timeoutMs: 30000, message: 'every process settles' }).catch((err) => {
        const unsettled = hs.filter((_, i) => !rs[i]).map((h) => JSON.stringify([h.stdout, h.stderr]));
        throw new Error(`${err.message}; unsettled (stdout, stderr): ${unsettled.join(', ')}`);
      });
      rs.forEach((r, i) => {
        assert.equal(r.stdout, `out-${i}\ntail-${i}`);
        assert.equal(r.stderr, `err-${i}\n`);
        assert.equal(r.exitCode, 0);
      });
      const runs = await sb.executeCommand('sort -n /tmp/runs');
      assert.equal(runs.stdout, Array.from({ length: n }, (_, i) => `${i}\n`).join(''));
    } finally {
      await sb._destroy();
      await race.close();
    }
  });

  it('processes survive the client: a child Node process spawns and exits, this one reattaches by pid', async () => {
    const logicalId = `reattach-${process.pid}-${Date.now()}`;
    const info = await spawnInChild(server.domain, logicalId);
    const sb = new OpenSandboxSandbox({ domain: server.domain, id: logicalId });
    try {
      assert.deepEqual(await sb._start(), { outcome: 'connected' });
      const h = await sb.processes.get(info.pid);
      assert.ok(h, 'reattached');
      assert.equal(h.pid, info.pid);
      // get() resolves after execd's replay frame (it comes before its connected frame): the output is there at once
      assert.ok(h.stdout.startsWith('started\n'), `stdout right after get(): ${JSON.stringify(h.stdout)}`);
      // output produced while no client was attached is replayed
      await waitFor(() => h.stdout.includes('tick-3\n'), { message: `replayed output (got ${JSON.stringify(h.stdout)})` });
      assert.ok(h.stdout.startsWith('started\ntick-1\ntick-2\ntick-3\n'), h.stdout);
      assert.equal(h.exitCode, undefined);
      await h.sendStdin('after-restart\n');
      await waitFor(() => h.stdout.includes('got after-restart\n'), { message: 'stdin round trip after reattach' });
      assert.equal(await h.kill(), true);
      const r = await h.wait();
      assert.equal(r.killed, true);
      const runs = await sb.executeCommand(`cat /tmp/${logicalId}.runs`);
      assert.equal(runs.stdout, 'ran\n', 'the command ran exactly once');
    } finally {
      await sb._destroy();
    }
  });

  it('a process whose first client died before it started is started by the reattaching client', async () => {
    const logicalId = `reattach-early-${process.pid}-${Date.now()}`;
    const info = await spawnInChild(server.domain, logicalId, 'early');
    const sb = new OpenSandboxSandbox({ domain: server.domain, id: logicalId });
    try {
      await sb._start();
      const h = await sb.processes.get(info.pid);
      assert.ok(h);
      const r = await h.wait();
      assert.equal(r.exitCode, 7);
      assert.equal(r.stdout, 'early-output\n');
    } finally {
      await sb._destroy();
    }
  });

  it('a process that ended with nobody attached, past its ack wait: reattach reports its status, never runs it again', async () => {
    const logicalId = `reattach-late-${process.pid}-${Date.now()}`;
    const info = await spawnInChild(server.domain, logicalId, 'ackwait');
    const sb = new OpenSandboxSandbox({ domain: server.domain, id: logicalId });
    try {
      await sb._start();
      // wait until execd reports the session ended (the wrapper stopped waiting for an ack)
      const ep = await sb.opensandbox.endpoint(44772);
      const sid = info.pid.split('.')[0];
      await waitFor(async () => {
        const res = await fetch(`http://${ep.endpoint}/pty/${sid}`, { headers: ep.headers });
        return res.status === 200 && (await res.json()).running === false;
      }, { message: 'session ended on execd' });
      // connecting again makes execd start the session's wrapper again: it waits for a go line it never gets (the
      // replay has output), the status comes from the replay's markers, and the client's ack ends the new run
      const h = await sb.processes.get(info.pid);
      assert.ok(h);
      const r = await h.wait();
      assert.equal(r.exitCode, 9);
      assert.equal(r.stdout, 'started\ndone\n');
      const runs = await sb.executeCommand(`cat /tmp/${logicalId}.runs`);
      assert.equal(runs.stdout, 'ran\n', 'the command ran exactly once');
    } finally {
      await sb._destroy();
    }
  });

  it('a process whose wrapper was killed with nobody attached: reattach settles -1 (status unknown), never runs it again', async () => {
    const logicalId = `reattach-killed-${process.pid}-${Date.now()}`;
    const info = await spawnInChild(server.domain, logicalId, 'selfkill');
    const sb = new OpenSandboxSandbox({ domain: server.domain, id: logicalId });
    try {
      await sb._start();
      const ep = await sb.opensandbox.endpoint(44772);
      const sid = info.pid.split('.')[0];
      const running = async () => {
        const res = await fetch(`http://${ep.endpoint}/pty/${sid}`, { headers: ep.headers });
        return res.status === 404 ? false : (await res.json()).running; // 404: the client deleted the session
      };
      await waitFor(async () => (await running()) === false, { message: 'session ended on execd' });
      const h = await sb.processes.get(info.pid);
      assert.ok(h);
      const r = await h.wait();
      assert.equal(r.exitCode, -1);
      assert.equal(r.error.code, 'PROCESS_ENDED_UNSEEN');
      assert.match(r.errorText, /no exit status/);
      assert.ok(r.stdout.startsWith('started\n'), r.stdout);
      // the run execd started again at the reconnect got the ack instead of a go line and ended
      await waitFor(async () => (await running()) === false, { message: 'the second run ended' });
      const runs = await sb.executeCommand(`cat /tmp/${logicalId}.runs`);
      assert.equal(runs.stdout, 'ran\n', 'the command ran exactly once');
    } finally {
      await sb._destroy();
    }
  });

  it('flow control: a slow JS consumer pauses the socket, the writer waits, nothing is lost', async () => {
    const cli = path.join(here, '..', 'lib', 'dev-server', 'cli.js');
    const apiKey = randomUUID();
    const child = spawn(process.execPath, [cli, '--port', '0', '--quiet'], { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, OPENSANDBOX_SERVER_API_KEY: apiKey } });
    try {
      let out = '';
      child.stdout.on('data', (d) => { out += d; });
      const domain = await waitFor(() => /^(\S+:\d+)$/m.exec(out)?.[1], { timeoutMs: 20000, message: 'dev-server child started' });
      const sb = new OpenSandboxSandbox({ domain, apiKey });
      await sb._start();
      try {
        const size = 30 * 1024 * 1024;
        let received = 0;
        let sawPaused = false;
        const h = await sb.processes.spawn(`head -c ${size} /dev/zero | tr '\\0' 'b'`, {
          maxRetainedBytes: 1024,
          onStdout: (d) => {
            received += d.length;
            if (stats().processesPaused > 0) sawPaused = true;
            const until = Date.now() + 10; // a slow consumer: the JS thread is busy 10 ms per batch
            while (Date.now() < until);
          },
        });
        const r = await h.wait();
        assert.equal(r.exitCode, 0);
        assert.equal(received, size);
        assert.equal(r.stdout, 'b'.repeat(1024));
        assert.equal(sawPaused, true, 'the socket was paused at some point');
        await waitFor(() => stats().processesPaused === 0, { message: 'no process left paused' });
      } finally {
        await sb._destroy();
      }
    } finally {
      await new Promise((resolve) => {
        child.once('exit', resolve);
        child.kill('SIGTERM');
      });
    }
  });

  it('sandbox deleted under running processes: every handle settles, counters return to baseline', async () => {
    // the stdin holder of earlier tests' processes retires once unused (3 s): gone first
    const base = await waitFor(() => {
      const s = stats();
      return s.stdinHolders === 0 ? s : null;
    }, { timeoutMs: 20000, message: `no stdin holder before the test (${JSON.stringify(stats())})` });
    const sb = new OpenSandboxSandbox({ domain: server.domain });
    await sb._start();
    const hs = await Promise.all([1, 2, 3].map((i) => sb.processes.spawn(`echo p${i}; sleep 60`)));
    await waitFor(() => hs.every((h, i) => h.stdout === `p${i + 1}\n`), { message: 'all running' });
    // deleted behind the sandbox object's back (another client, the TTL, an operator)
    await sb.opensandbox.lifecycle.delete(sb.opensandbox.sandboxId);
    const rs = await Promise.all(hs.map((h) => h.wait()));
    for (const r of rs) {
      assert.equal(r.success, false);
      assert.equal(r.exitCode, -1);
      assert.match(r.errorText, /no longer exists|lost the connection|execd does not answer/);
    }
    await waitFor(() => {
      const s = stats();
      return s.processes === base.processes && s.wsConnections === base.wsConnections && s.operations === base.operations;
    }, { timeoutMs: 15000, message: `counters back to baseline (${JSON.stringify(stats())} vs ${JSON.stringify(base)})` });
    assert.equal(stats().wsThreads, 1);
    await sb._destroy().catch(() => {});
  });
});
