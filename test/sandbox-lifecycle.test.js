// OpenSandboxSandbox lifecycle against the local OpenSandbox-compatible server: start outcomes, lazy start,
// stop = pause (files and processes survive), restart, reconnect by logical id (same process and a new process),
// sandboxId reattach, destroy, hooks, getInfo, and the raw `opensandbox` handle. Run against the local server and against
// it emulating upstream's Docker and Kubernetes runtimes (test/helpers/profiles.js).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { randomUUID } from 'node:crypto';
import { SandboxNotReadyError } from '@mastra/core/workspace';
import { LOCAL, PROFILES, startProfileServer, clientOnly } from './helpers/profiles.js';
import { waitFor } from './helpers/poll.js';
import { OpenSandboxSandbox, OpenSandboxNotFoundError, LOGICAL_ID_LABEL, encodeLogicalId } from '../lib/index.js';

const INDEX_URL = new URL('../lib/index.js', import.meta.url).href;

for (const profile of [LOCAL, ...PROFILES]) describe(`OpenSandboxSandbox lifecycle${profile.title}`, function () {
  this.timeout(30000);
  let server;
  const cleanup = [];

  const make = (options = {}) => {
    const s = new OpenSandboxSandbox({ domain: server.domain, ...options });
    cleanup.push(s);
    return s;
  };
  const api = async (method, path) => {
    const res = await fetch(`${server.baseUrl}/v1${path}`, { method });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : undefined };
  };
  const remoteState = async id => (await api('GET', `/sandboxes/${id}`)).body?.status?.state;
  const byLabel = async id => {
    const q = new URLSearchParams({ metadata: `${LOGICAL_ID_LABEL}=${encodeLogicalId(id)}` });
    return (await api('GET', `/sandboxes?${q}`)).body.items;
  };

  before(async function () {
    this.timeout(60000);
    server = await startProfileServer(profile);
  });

  after(async function () {
    this.timeout(60000);
    for (const s of cleanup) await s._destroy().catch(() => {});
    await server?.close();
  });

  it('starts: created, running, labelled with the logical id; second start is connected', async () => {
    const s = make({ id: `life-${randomUUID()}` });
    assert.equal(s.status, 'pending');
    assert.deepEqual(await s._start(), { outcome: 'created' });
    assert.equal(s.status, 'running');
    const remoteId = s.opensandbox.sandboxId;
    assert.match(remoteId, /^[0-9a-f-]{36}$/);
    assert.equal(await remoteState(remoteId), 'Running');
    const items = await byLabel(s.id);
    assert.deepEqual(items.map(i => i.id), [remoteId]);
    assert.deepEqual(await s._start(), { outcome: 'connected' });
    assert.equal(s.opensandbox.sandboxId, remoteId);
  });

  it('concurrent starts coalesce into one remote sandbox', async () => {
    const s = make({ id: `coalesce-${randomUUID()}` });
    const results = await Promise.all([s._start(), s._start(), s._start()]);
    assert.deepEqual(results, [{ outcome: 'created' }, { outcome: 'created' }, { outcome: 'created' }]);
    assert.equal((await byLabel(s.id)).length, 1);
  });

  clientOnly(profile)('starts lazily on the first command', async () => {
    const s = make();
    const r = await s.executeCommand('echo lazy');
    assert.equal(r.stdout, 'lazy\n');
    assert.equal(s.status, 'running');
  });

  clientOnly(profile)('a command aborted while its lazy start runs does not run', async () => {
    const controller = new AbortController();
    const s = make({ onStart: () => controller.abort() });
    const r = await s.executeCommand('touch /workspace/osb-not-run', [], { abortSignal: controller.signal });
    assert.equal(s.status, 'running');
    assert.equal(r.success, false);
    assert.equal(r.killed, true);
    assert.equal(r.exitCode, 130);
    assert.equal((await s.executeCommand('test -e /workspace/osb-not-run')).exitCode, 1);
  });

  it(`stop pauses (files ${profile.keepsProcesses ? 'and processes survive' : 'survive, processes do not'}); start resumes it as connected`, async () => {
    const s = make();
    await s._start();
    const id = s.opensandbox.sandboxId;
    await s.executeCommand('echo kept > /tmp/osb-keep.txt; nohup sleep 601 > /dev/null 2>&1 &');
    // processes by command line, not pid: a resumed Kubernetes pod is a fresh pid namespace that reuses pids
    const sleepers = async () => (await s.executeCommand("for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '^sleep 601 $'")).stdout;
    assert.equal(await sleepers(), '1\n');
    await s._stop();
    assert.equal(s.status, 'stopped');
    assert.equal(await remoteState(id), 'Paused');
    assert.deepEqual(await s._start(), { outcome: 'connected' });
    assert.equal(s.status, 'running');
    assert.equal(s.opensandbox.sandboxId, id);
    assert.equal(await remoteState(id), 'Running');
    assert.equal((await s.executeCommand('cat /tmp/osb-keep.txt')).stdout, 'kept\n');
    assert.equal(await sleepers(), profile.keepsProcesses ? '1\n' : '0\n');
  });

  it('a direct stop() (not through Mastra\'s _stop) leaves the status stopped: the next command resumes the sandbox', async () => {
    const s = make();
    await s._start();
    const id = s.opensandbox.sandboxId;
    await s.stop();
    assert.equal(s.status, 'stopped');
    assert.equal(await remoteState(id), 'Paused');
    assert.equal((await s.executeCommand('echo back')).stdout, 'back\n');
    assert.equal(s.status, 'running');
    assert.equal(s.opensandbox.sandboxId, id);
    assert.equal(await remoteState(id), 'Running');
  });

  it('a command after stop restarts the sandbox (ensureRunning)', async () => {
    const s = make();
    await s._start();
    const id = s.opensandbox.sandboxId;
    await s._stop();
    assert.equal((await s.executeCommand('echo back')).stdout, 'back\n');
    assert.equal(s.status, 'running');
    assert.equal(s.opensandbox.sandboxId, id);
    await s._stop();
    await s.ensureRunning();
    assert.equal(s.status, 'running');
  });

  it('survives three stop/start cycles, and concurrent stops/starts', async () => {
    const s = make();
    await s._start();
    const id = s.opensandbox.sandboxId;
    await s.executeCommand('echo cycle > /tmp/cycle.txt');
    for (let i = 0; i < 3; i++) {
      await s._stop();
      assert.equal(s.status, 'stopped');
      await s._start();
      assert.equal(s.status, 'running');
    }
    await Promise.all([s._stop(), s._stop(), s._stop()]);
    assert.equal(s.status, 'stopped');
    await Promise.all([s._start(), s._start(), s._start()]);
    assert.equal(s.status, 'running');
    assert.equal(s.opensandbox.sandboxId, id);
    assert.equal((await s.executeCommand('cat /tmp/cycle.txt')).stdout, 'cycle\n');
  });

  it('stop cancels a foreground command still running (it resolves killed)', async () => {
    const s = make();
    await s._start();
    let started;
    const seen = new Promise(resolve => {
      started = resolve;
    });
    const running = s.executeCommand('echo go; sleep 60', [], { onStdout: started });
    await seen;
    await s._stop();
    const r = await running;
    assert.equal(r.killed, true);
    assert.equal(r.success, false);
    assert.equal(r.stdout, 'go\n');
  });

  it('reconnects by logical id from a second instance (running and paused)', async () => {
    const id = `reconnect-${randomUUID()}`;
    const a = make({ id });
    await a._start();
    const remoteId = a.opensandbox.sandboxId;
    await a.executeCommand('echo from-a > /workspace/a.txt');

    const b = make({ id });
    assert.deepEqual(await b._start(), { outcome: 'connected' });
    assert.equal(b.opensandbox.sandboxId, remoteId);
    assert.equal((await b.executeCommand('cat a.txt')).stdout, 'from-a\n');

    await b._stop();
    assert.equal(await remoteState(remoteId), 'Paused');
    const c = make({ id });
    assert.deepEqual(await c._start(), { outcome: 'connected' });
    assert.equal(c.opensandbox.sandboxId, remoteId);
    assert.equal(await remoteState(remoteId), 'Running');
  });

  it('with several live sandboxes for one logical id, reconnects to the newest', async () => {
    const id = `newest-${randomUUID()}`;
    const a = make({ id });
    await a._start();
    const res = await fetch(`${server.baseUrl}/v1/sandboxes`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({
        image: { uri: 'ubuntu:22.04' }, entrypoint: ['tail', '-f', '/dev/null'], timeout: 600,
        resourceLimits: { cpu: '1', memory: '2Gi' }, metadata: { [LOGICAL_ID_LABEL]: encodeLogicalId(id) },
      }),
    });
    assert.equal(res.status, 202);
    const newer = (await res.json()).id;
    cleanup.push({ _destroy: () => api('DELETE', `/sandboxes/${newer}`) });
    const b = make({ id });
    assert.deepEqual(await b._start(), { outcome: 'connected' });
    assert.equal(b.opensandbox.sandboxId, newer);
  });

  clientOnly(profile)('accepts the server as a full URL domain', async () => {
    const s = make({ domain: `${server.baseUrl}/` });
    assert.equal((await s.executeCommand('echo url-domain')).stdout, 'url-domain\n');
  });

  clientOnly(profile)('reconnects by logical id to a sandbox created by another process', async function () {
    this.timeout(60000);
    const id = `cross-process-${randomUUID()}`;
    const script = `
      import { OpenSandboxSandbox } from ${JSON.stringify(INDEX_URL)};
      const s = new OpenSandboxSandbox({ id: ${JSON.stringify(id)}, domain: ${JSON.stringify(server.domain)} });
      const { outcome } = await s._start();
      const r = await s.executeCommand('echo written-by-child > /workspace/child.txt');
      console.log(JSON.stringify({ outcome, sandboxId: s.opensandbox.sandboxId, exitCode: r.exitCode }));
    `;
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', d => (out += d));
    child.stderr.on('data', d => (err += d));
    const code = await new Promise(resolve => child.on('close', resolve));
    assert.equal(code, 0, `child failed: ${err}`);
    const fromChild = JSON.parse(out.trim());
    assert.equal(fromChild.outcome, 'created');
    assert.equal(fromChild.exitCode, 0);

    const s = make({ id });
    assert.deepEqual(await s._start(), { outcome: 'connected' });
    assert.equal(s.opensandbox.sandboxId, fromChild.sandboxId);
    assert.equal((await s.executeCommand('cat /workspace/child.txt')).stdout, 'written-by-child\n');
  });

  it('reattaches to a known sandboxId; a missing sandboxId is a typed error', async () => {
    const a = make();
    await a._start();
    await a.executeCommand('echo by-id > /tmp/by-id.txt');
    const b = make({ sandboxId: a.opensandbox.sandboxId });
    assert.deepEqual(await b._start(), { outcome: 'connected' });
    assert.equal((await b.executeCommand('cat /tmp/by-id.txt')).stdout, 'by-id\n');
    assert.equal((await b.getInfo()).metadata.sandboxId, a.opensandbox.sandboxId);

    const missing = make({ sandboxId: randomUUID() });
    await assert.rejects(missing._start(), err => {
      assert.ok(err instanceof OpenSandboxNotFoundError, String(err));
      assert.equal(err.status, 404);
      assert.equal(err.code, profile.notFoundCode);
      return true;
    });
    assert.equal(missing.status, 'error');
  });

  it('destroy deletes the remote sandbox; the instance cannot be used again', async () => {
    const s = make();
    await s._start();
    const id = s.opensandbox.sandboxId;
    await s._destroy();
    assert.equal(s.status, 'destroyed');
    assert.equal((await api('GET', `/sandboxes/${id}`)).status, 404);
    await assert.rejects(s._start(), /Cannot start a destroyed sandbox/);
    await assert.rejects(s.executeCommand('echo x'), SandboxNotReadyError);
    await s._destroy();
  });

  it('destroy tolerates a sandbox already deleted behind its back', async () => {
    const s = make();
    await s._start();
    assert.equal((await api('DELETE', `/sandboxes/${s.opensandbox.sandboxId}`)).status, 204);
    await s._destroy();
    assert.equal(s.status, 'destroyed');
  });

  clientOnly(profile)('calls onStart/onStop/onDestroy with the outcome, in order', async () => {
    const events = [];
    const s = make({
      onStart: ({ sandbox, outcome }) => events.push(`start:${outcome}:${sandbox === s}`),
      onStop: ({ sandbox }) => events.push(`stop:${sandbox === s}`),
      onDestroy: ({ sandbox }) => events.push(`destroy:${sandbox === s}`),
    });
    await s._start();
    await s._stop();
    await s._start();
    await s._destroy();
    assert.deepEqual(events, ['start:created:true', 'stop:true', 'start:connected:true', 'destroy:true']);
  });

  clientOnly(profile)('an onStart hook that throws fails the start', async () => {
    const s = make({
      onStart: () => {
        throw new Error('hook says no');
      },
    });
    await assert.rejects(s._start(), /onStart hook failed: hook says no/);
    assert.equal(s.status, 'error');
  });

  it('getInfo mirrors status and the remote sandbox, without secrets', async () => {
    const s = make({ id: `info-${randomUUID()}`, metadata: { team: 'infra' }, timeoutSeconds: 3600 });
    const before = Date.now();
    await s._start();
    const info = await s.getInfo();
    assert.equal(info.id, s.id);
    assert.equal(info.name, 'OpenSandboxSandbox');
    assert.equal(info.provider, 'opensandbox');
    assert.equal(info.status, 'running');
    // the remote id is not part of the stored config (a snapshot reconnects by logical id)
    assert.equal(info.metadata.sandboxId, undefined);
    assert.ok(s.opensandbox.sandboxId);
    assert.deepEqual(info.metadata.metadata, { team: 'infra' });
    assert.ok(info.createdAt instanceof Date);
    assert.ok(info.timeoutAt instanceof Date);
    const ttl = info.timeoutAt.getTime() - info.createdAt.getTime();
    assert.ok(Math.abs(ttl - 3600 * 1000) < 5000, `ttl ${ttl}`);
    assert.ok(info.createdAt.getTime() >= before - 5000);
    const remote = await s.opensandbox.get();
    assert.equal(remote.metadata.team, 'infra');
    assert.equal(remote.metadata[LOGICAL_ID_LABEL], encodeLogicalId(s.id));
    await s._stop();
    assert.equal((await s.getInfo()).status, 'stopped');
  });

  it('a sandbox without expiry has no timeoutAt', async () => {
    const s = make({ timeoutSeconds: null });
    await s._start();
    assert.equal((await s.getInfo()).timeoutAt, undefined);
    assert.equal((await s.opensandbox.get()).expiresAt, undefined);
  });

  it('exposes the raw OpenSandbox handle: get, renew, endpoint, patchMetadata, pause/resume', async () => {
    const s = make();
    await s._start();
    const h = s.opensandbox;
    assert.match(h.execdUrl, /^http:\/\/127\.0\.0\.1:\d+$/);
    assert.equal((await h.get()).status.state, 'Running');
    const at = new Date(Date.now() + 2 * 3600 * 1000);
    const renewed = await h.renew(at);
    assert.equal(new Date(renewed.expiresAt).getTime(), at.getTime());
    const ep = await h.endpoint(44772);
    assert.equal(`http://${ep.endpoint}`, h.execdUrl);
    const patched = await h.patchMetadata({ extra: 'yes' });
    assert.equal(patched.metadata.extra, 'yes');
    assert.equal((await h.get()).metadata.extra, 'yes');
    // the raw calls do not wait: Kubernetes passes through Pausing / Resuming (immediate elsewhere)
    const settles = async state => waitFor(async () => (await h.get()).status.state === state,
      { timeoutMs: 20000, intervalMs: 50, message: `the sandbox is ${state}` });
    await h.pause();
    await settles('Paused');
    await h.resume();
    await settles('Running');
    await assert.rejects(h.pause().then(() => h.pause()),
      err => err.status === profile.pauseAgain.status && err.code === profile.pauseAgain.code);
    await settles('Paused');
    await h.resume();
    await settles('Running');
    await assert.rejects(make().opensandbox.get(), SandboxNotReadyError);
  });
});
