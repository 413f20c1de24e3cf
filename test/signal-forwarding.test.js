// Upstream execd relays the signals it receives to the running foreground command, SIGPIPE from a write to a
// command stream its client closed included (transcript 06-sigpipe-forwarding). The local server reproduces that
// with `signalForwarding: true`; a client that closes /command streams at their final event gets later commands
// killed, ours reads every stream to its end in the background (after a final event, a timeout or an abort).
import assert from 'node:assert/strict';
import http from 'node:http';
import { startServer } from '../lib/dev-server/index.js';
import { OpenSandboxSandbox, OpenSandboxFilesystem } from '../lib/index.js';
import { request, parseEvents, endpointHeadersFor } from './helpers/raw.js';
import { waitFor } from './helpers/poll.js';
import { stats } from '../lib/native.js';

const FINAL = /"type":"(execution_complete|error)"/;

/** POST /command that destroys the connection as soon as the final event arrived (what our client used to do). */
function runAndCloseEarly(execd, command) {
  return new Promise((resolve, reject) => {
    const req = http.request(`${execd}/command`, { method: 'POST', agent: false, headers: { ...endpointHeadersFor(execd), 'Content-Type': 'application/json' } }, (res) => {
      let text = '';
      res.on('data', (d) => {
        text += d;
        if (FINAL.test(text)) {
          req.destroy();
          resolve(text);
        }
      });
      res.on('error', () => {});
    });
    req.on('error', reject); // after resolve (our own destroy) this is a no-op
    req.setTimeout(15000, () => req.destroy(new Error('no final event within 15 s')));
    req.end(JSON.stringify({ command }));
  });
}

describe('signal forwarding (upstream execd relays SIGPIPE to the foreground command)', function () {
  this.timeout(60000);
  let server;
  let sandbox;
  let execd;

  before(async function () {
    this.timeout(60000);
    server = await startServer({ port: 0, signalForwarding: true, commandTailMs: 300 });
    sandbox = new OpenSandboxSandbox({ domain: server.domain });
    await sandbox._start();
    execd = sandbox.opensandbox.execdUrl;
    await request(`${server.baseUrl}/v1/sandboxes/${sandbox.opensandbox.sandboxId}/endpoints/44772`); // the sandbox token
  });

  after(async function () {
    this.timeout(30000);
    await sandbox?._destroy();
    await server?.close();
  });

  it('the switch works: a raw client closing at the final event gets the next foreground command killed by SIGPIPE', async () => {
    await runAndCloseEarly(execd, 'echo quick');
    // the quick stream's end is written ~300 ms later, to a closed connection: SIGPIPE goes to this command
    const r = await request(`${execd}/command`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: { command: 'sleep 10; echo ok' }, timeoutMs: 20000 });
    const last = parseEvents(r.text).filter((e) => e.type !== 'ping').at(-1);
    assert.equal(last.type, 'error');
    assert.equal(last.error.evalue, '-1');
    assert.deepEqual(last.error.traceback, ['signal: broken pipe']);
  });

  it('executeCommand reads each stream to its end: quick commands then a long one, never killed', async () => {
    for (let round = 0; round < 4; round++) {
      for (let q = 0; q < 5; q++) assert.equal((await sandbox.executeCommand(`echo quick${q}`)).stdout, `quick${q}\n`);
      const r = await sandbox.executeCommand('sleep 0.8; echo ok');
      assert.deepEqual({ exitCode: r.exitCode, killed: r.killed, stdout: r.stdout }, { exitCode: 0, killed: false, stdout: 'ok\n' }, `round ${round}`);
    }
  });

  it('a timed-out and an aborted command do not get the next command killed either', async () => {
    const t = await sandbox.executeCommand('sleep 30', [], { timeout: 300 });
    assert.equal(t.timedOut, true);
    const ac = new AbortController();
    const pending = sandbox.executeCommand('echo started; sleep 30', [], { abortSignal: ac.signal, onStdout: () => ac.abort() });
    assert.equal((await pending).exitCode, 130);
    const r = await sandbox.executeCommand('sleep 1; echo ok');
    assert.deepEqual({ exitCode: r.exitCode, killed: r.killed, stdout: r.stdout }, { exitCode: 0, killed: false, stdout: 'ok\n' });
  });

  it('killing a background process (kill(), spawn timeout, abortSignal) never kills the foreground command', async () => {
    // upstream writes the PTY session's exit and close frames after DELETE /pty; a client that closes its WebSocket
    // as soon as the DELETE answered makes those writes hit a closed socket and the SIGPIPE lands on this command
    const rounds = 6;
    for (let round = 0; round < rounds; round++) {
      const fg = sandbox.executeCommand('sleep 2; echo ok');
      const bg = await sandbox.processes.spawn('echo up; sleep 30');
      await waitFor(() => bg.stdout === 'up\n', { message: 'the background process is attached' });
      assert.equal(await bg.kill(), true);
      const timed = await sandbox.processes.spawn('sleep 30', { timeout: 200 });
      assert.equal((await timed.wait()).timedOut, true);
      const ac = new AbortController();
      const aborted = await sandbox.processes.spawn('echo up; sleep 30', { abortSignal: ac.signal });
      await waitFor(() => aborted.stdout === 'up\n', { message: 'the background process is attached' });
      ac.abort();
      assert.equal((await aborted.wait()).killed, true);
      const r = await fg;
      assert.deepEqual({ exitCode: r.exitCode, killed: r.killed, stdout: r.stdout }, { exitCode: 0, killed: false, stdout: 'ok\n' }, `round ${round}`);
    }
  });

  it('a download refused as too large (maxReadBytes) reads on to the end: the foreground command is not killed', async () => {
    const fsys = new OpenSandboxFilesystem({ sandbox, maxReadBytes: 1024 });
    await sandbox.executeCommand('head -c 33554432 /dev/zero > osb-big.bin');
    const fg = sandbox.executeCommand('sleep 2; echo ok');
    await assert.rejects(fsys.readFile('osb-big.bin'), (e) => e.code === 'RESPONSE_TOO_LARGE');
    const r = await fg;
    assert.deepEqual({ exitCode: r.exitCode, killed: r.killed, stdout: r.stdout }, { exitCode: 0, killed: false, stdout: 'ok\n' });
  });

  it('the background reads end: no request left in flight', async () => {
    await sandbox.executeCommand('echo last');
    await waitFor(() => stats().requestsInFlight === 0, { timeoutMs: 10000, message: `a drained stream stayed open: ${JSON.stringify(stats())}` });
  });
});
