// OpenSandboxSandbox against the behaviours of real OpenSandbox deployments (issue 20), reproduced by the local
// server: `startServer({ emulate: 'docker' | 'kubernetes', serverVersion })` (lib/dev-server/upstream.js) and its
// server proxy route. Each case is a regression test of a client behaviour that only worked on our own server. (The
// client's general suites run against every profile too: test/helpers/profiles.js; keep-alive after stop/start is in
// test/keepalive.test.js.)
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Workspace, LocalFilesystem } from '@mastra/core/workspace';
import { startServer } from '../lib/dev-server/index.js';
import { OpenSandboxSandbox, Template, OpenSandboxUnsupportedError, OpenSandboxTimeoutError, LOGICAL_ID_LABEL, encodeLogicalId } from '../lib/index.js';
import { waitFor } from './helpers/poll.js';
import { sandboxes, warnings } from './helpers/sandboxes.js';
import { portUrl } from '../lib/ports.js';

/** Raw lifecycle call against `server` (the way another process would do it). */
const api = async (server, method, p) => {
  const res = await fetch(`${server.baseUrl}/v1${p}`, { method });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
};

/** The sandboxes carrying the logical-id label of `id` (every state). */
async function labelled(server, id) {
  const q = encodeURIComponent(`${LOGICAL_ID_LABEL}=${encodeLogicalId(id)}`);
  return (await api(server, 'GET', `/sandboxes?metadata=${q}&pageSize=50`)).body.items;
}

describe('OpenSandboxSandbox on upstream deployments', function () {
  this.timeout(60000);

  describe("emulate: 'docker' (server 0.1.14)", () => {
    let server;
    let hostRoot;
    const sb = sandboxes(() => server);
    before(async function () {
      this.timeout(60000);
      hostRoot = await fs.realpath(await fs.mkdtemp(path.join(os.tmpdir(), 'osb-upstream-')));
      server = await startServer({ port: 0, emulate: 'docker', allowedHostPaths: [hostRoot] });
    });
    after(async function () {
      this.timeout(60000);
      await sb.destroyAll();
      await server?.close();
      await fs.rm(hostRoot, { recursive: true, force: true });
    });

    it('stop() of a sandbox another process paused resolves (500 DOCKER::SANDBOX_PAUSE_FAILED = already paused)', async () => {
      const s = sb.make();
      await s._start();
      const id = s.opensandbox.sandboxId;
      assert.equal((await api(server, 'POST', `/sandboxes/${id}/pause`)).status, 202);
      const again = await api(server, 'POST', `/sandboxes/${id}/pause`);
      assert.deepEqual([again.status, again.body.code], [500, 'DOCKER::SANDBOX_PAUSE_FAILED']);
      await s._stop();
      assert.equal(s.status, 'stopped');
      assert.equal((await api(server, 'GET', `/sandboxes/${id}`)).body.status.state, 'Paused');
      assert.equal((await s.executeCommand('echo back')).stdout, 'back\n');
      assert.equal((await s.getInfo()).pause, undefined);
    });

    it('mounts a local filesystem whose base path has //, /.. and a trailing / (upstream refuses them unnormalised)', async () => {
      const dir = path.join(hostRoot, 'data');
      await fs.mkdir(dir);
      await fs.writeFile(path.join(dir, 'hello.txt'), 'from the host\n');
      class RawPathFilesystem extends LocalFilesystem {
        getMountConfig() {
          return { type: 'local', basePath: `${hostRoot}//data/../data/` };
        }
      }
      const s = sb.make();
      const ws = new Workspace({ sandbox: s, mounts: { '/mnt/data': new RawPathFilesystem({ basePath: dir }) } });
      await ws.init();
      assert.equal((await s.executeCommand('cat /mnt/data/hello.txt')).stdout, 'from the host\n');
      assert.equal((await s.opensandbox.get()).metadata['mastra.ai/mounts'].length, 16);
    });

    it('a sandbox paused behind our back (Docker freezes it: execd accepts and answers nothing): the waiting call resumes it and completes, each command run once', async () => {
      const w = warnings();
      const s = sb.make();
      s.__setLogger(w.logger);
      await s._start();
      const id = s.opensandbox.sandboxId;
      await s.executeCommand('echo ready');
      assert.equal((await api(server, 'POST', `/sandboxes/${id}/pause`)).status, 202);
      assert.equal((await api(server, 'GET', `/sandboxes/${id}`)).body.status.state, 'Paused');
      // without the watch this waited for the 10 s stream-idle timeout, failed, then ran the command a second time
      const r = await s.executeCommand('echo once >> /tmp/ran; cat /tmp/ran');
      assert.deepEqual([r.exitCode, r.stdout], [0, 'once\n']);
      assert.equal((await api(server, 'GET', `/sandboxes/${id}`)).body.status.state, 'Running');
      assert.deepEqual(w.seen, [`OpenSandboxSandbox: sandbox ${id} was paused by another client while a call waited on it; resumed it`]);
      assert.equal(s.status, 'running');
      // paused again: a command and a process spawned at once share one probe and one resume
      assert.equal((await api(server, 'POST', `/sandboxes/${id}/pause`)).status, 202);
      const [again, h] = await Promise.all([s.executeCommand('cat /tmp/ran'), s.processes.spawn('echo spawned')]);
      assert.equal(again.stdout, 'once\n');
      assert.equal((await h.wait()).stdout, 'spawned\n');
      assert.equal((await api(server, 'GET', `/sandboxes/${id}`)).body.status.state, 'Running');
      assert.equal(w.seen.length, 2, w.seen.join('\n'));
    });

    it('resources some runtime cannot apply are warned about once per process', async () => {
      const w = warnings();
      const resources = { cpu: '1', memory: '512Mi', pids: '64' };
      for (const id of ['docker-res-1', 'docker-res-2']) {
        const s = sb.make({ id, resources });
        s.__setLogger(w.logger);
        await s._start();
      }
      assert.deepEqual(w.seen.filter(m => m.includes('resources.')), [
        "OpenSandboxSandbox: resources.pids: upstream's Docker runtime ignores every key but cpu and memory (no pids limit there); Kubernetes passes it to the pod limits",
      ]);
    });

    it('useServerProxy: the proxy endpoint upstream answers has no /v1; commands and port URLs work through it', async () => {
      const s = sb.make({ useServerProxy: true });
      await s._start();
      const id = s.opensandbox.sandboxId;
      assert.equal(s.opensandbox.execdUrl, `${server.baseUrl}/sandboxes/${id}/proxy/44772`);
      assert.equal((await s.executeCommand('echo proxied')).stdout, 'proxied\n');
      assert.equal(await s.networking.getPortUrl(8125), `http://${server.domain}/sandboxes/${id}/proxy/8125`);
    });

    it('a checkpoint restore does not inherit the mounts label of its source (docker commit keeps labels)', async () => {
      const dir = path.join(hostRoot, 'ck-mount');
      await fs.mkdir(dir);
      const a = sb.make({ id: 'ck-labels' });
      const ws = new Workspace({ sandbox: a, mounts: { '/mnt/ck': new LocalFilesystem({ basePath: dir }) } });
      await ws.init();
      assert.equal((await a.opensandbox.get()).metadata['mastra.ai/mounts'].length, 16);
      await a.snapshot();
      await a._destroy();
      const b = sb.make({ id: 'ck-labels' });
      assert.equal((await b._start()).restoredFrom?.kind, 'checkpoint');
      const labels = (await b.opensandbox.get()).metadata;
      assert.equal(labels['mastra.ai/mounts'] ?? '', '');
      assert.equal(labels['mastra.ai/template-build'] ?? '', '');
      assert.equal(labels[LOGICAL_ID_LABEL], encodeLogicalId('ck-labels'));
    });

    it('pruning deletes again a checkpoint whose delete conflicted (409 SNAPSHOT::DELETE_CONFLICT left it Deleting)', async function () {
      this.timeout(120000);
      const w = warnings();
      const named = async () => (await api(server, 'GET', '/snapshots?pageSize=200')).body.items.filter(x => x.name === 'mastra.checkpoint.prune-409');
      const a = sb.make({ id: 'prune-409', keepCheckpoints: 1 });
      await a._start();
      await a.snapshot();
      const [first] = await named();
      await a._destroy();
      const b = sb.make({ id: 'prune-409', keepCheckpoints: 1 });
      b.__setLogger(w.logger);
      assert.equal((await b._start()).restoredFrom?.snapshotId, first.id); // b was created from the first checkpoint
      await b.snapshot(); // prunes the first: 409, the record stays Deleting
      assert.ok(w.seen.some(m => m.includes('SNAPSHOT::DELETE_CONFLICT')), w.seen.join('\n'));
      assert.equal((await api(server, 'GET', `/snapshots/${first.id}`)).body.status.state, 'Deleting');
      await b._destroy(); // nothing is created from the first checkpoint any more
      const c = sb.make({ id: 'prune-409', keepCheckpoints: 1 });
      c.__setLogger(w.logger);
      await c._start();
      await c.snapshot(); // this pruning deletes the first checkpoint again
      assert.equal((await api(server, 'GET', `/snapshots/${first.id}`)).status, 404, JSON.stringify([w.seen, await named()]));
    });

    it('a create slower than createTimeoutMs: the next start finds the sandbox by its label instead of creating a second', async function () {
      this.timeout(90000);
      const slow = await startServer({ port: 0, emulate: 'docker', emulateDelays: { create: 4000 } });
      try {
        const make = () => sb.track(new OpenSandboxSandbox({ domain: slow.domain, id: 'slow-create', createTimeoutMs: 1500 }));
        const first = make();
        await assert.rejects(first._start(), OpenSandboxTimeoutError);
        await waitFor(async () => (await labelled(slow, 'slow-create')).some(x => x.status.state === 'Running'),
          { timeoutMs: 30000, intervalMs: 200, message: 'the server finished the create' });
        const second = make();
        assert.equal((await second._start()).outcome, 'connected');
        assert.equal((await labelled(slow, 'slow-create')).length, 1);
        await second._destroy();
      } finally {
        await slow.close();
      }
    });
  });

  describe("serverVersion: '0.1.12' (no Snapshots API)", () => {
    let server;
    const sb = sandboxes(() => server);
    before(async function () {
      this.timeout(60000);
      server = await startServer({ port: 0, emulate: 'docker', serverVersion: '0.1.12' });
    });
    after(async function () {
      this.timeout(60000);
      await sb.destroyAll();
      await server?.close();
    });

    it('start() with a stable id works, supportsCheckpoints is false, snapshot(), snapshotId and templates name the version needed', async () => {
      assert.equal((await api(server, 'GET', '/snapshots')).status, 404);
      const s = sb.make({ id: 'stable-on-0.1.12' });
      assert.deepEqual(await s._start(), { outcome: 'created' });
      assert.equal(s.supportsCheckpoints, false);
      assert.equal((await s.executeCommand('echo ok')).stdout, 'ok\n');
      const unsupported = err => {
        assert.ok(err instanceof OpenSandboxUnsupportedError, String(err));
        assert.equal(err.code, 'UNSUPPORTED_BY_SERVER');
        assert.equal(err.requiredServerVersion, '0.1.13');
        assert.match(err.message, /OpenSandbox server 0\.1\.13 or later/);
        return true;
      };
      await assert.rejects(s.snapshot(), unsupported);
      await assert.rejects(s.opensandbox.createSnapshot(), unsupported);
      const fromSnapshot = sb.make({ snapshotId: 'any' });
      await assert.rejects(fromSnapshot._start(), unsupported);
      const templated = sb.make({ template: Template().runCmd('echo built > /tmp/t') });
      await assert.rejects(templated._start(), unsupported);
      await assert.rejects(Template().runCmd('true').build({ domain: server.domain }), unsupported);
      // a second instance of the same id reattaches; the capability was asked once per server
      const again = sb.make({ id: 'stable-on-0.1.12' });
      assert.deepEqual(await again._start(), { outcome: 'connected' });
      assert.equal(again.supportsCheckpoints, false);
    });
  });

  describe("emulate: 'kubernetes'", () => {
    const delays = { create: 800, ready: 800, endpoint: 1800, pause: 1300, resume: 1300 }; // the endpoint lags Running
    let server;
    const sb = sandboxes(() => server);
    before(async function () {
      this.timeout(60000);
      server = await startServer({ port: 0, emulate: 'kubernetes', emulateDelays: delays });
    });
    after(async function () {
      this.timeout(60000);
      await sb.destroyAll();
      await server?.close();
    });

    it('start survives Allocated and the transient endpoint 404; a second instance during Allocated reattaches', async () => {
      const a = sb.make({ id: 'k8s-allocated' });
      const starting = a._start();
      // the pod is Allocated (the create's answer says Running since server 0.1.10); while it is not Running a second
      // instance must find it, not create another
      await waitFor(async () => (await labelled(server, 'k8s-allocated')).some(x => x.status.state === 'Allocated'),
        { timeoutMs: 20000, intervalMs: 50, message: 'the sandbox is Allocated' });
      const b = sb.make({ id: 'k8s-allocated' });
      const [ra, rb] = await Promise.all([starting, b._start()]);
      assert.equal(ra.outcome, 'created');
      assert.equal(rb.outcome, 'connected');
      assert.equal(a.opensandbox.sandboxId, b.opensandbox.sandboxId);
      assert.equal((await a.executeCommand('echo k8s')).stdout, 'k8s\n');
      assert.equal((await labelled(server, 'k8s-allocated')).length, 1);
    });

    it('stop() pauses through Pausing; a second instance during Pausing and Resuming reattaches (never a duplicate)', async () => {
      const a = sb.make({ id: 'k8s-pausing' });
      await a._start();
      const id = a.opensandbox.sandboxId;
      const stopping = a._stop();
      await waitFor(async () => (await api(server, 'GET', `/sandboxes/${id}`)).body.status.state === 'Pausing', { timeoutMs: 10000, intervalMs: 100, message: 'Pausing' });
      const b = sb.make({ id: 'k8s-pausing' });
      assert.equal((await b._start()).outcome, 'connected');
      assert.equal(b.opensandbox.sandboxId, id);
      await stopping;
      await b._stop();
      const c = sb.make({ id: 'k8s-pausing' });
      const resuming = c._start();
      await waitFor(async () => (await api(server, 'GET', `/sandboxes/${id}`)).body.status.state === 'Resuming', { timeoutMs: 10000, intervalMs: 100, message: 'Resuming' });
      const d = sb.make({ id: 'k8s-pausing' });
      const [rc, rd] = await Promise.all([resuming, d._start()]);
      assert.deepEqual([rc.outcome, rd.outcome], ['connected', 'connected']);
      assert.equal(d.opensandbox.sandboxId, id);
      assert.equal((await d.executeCommand('echo resumed')).stdout, 'resumed\n');
      assert.equal((await labelled(server, 'k8s-pausing')).length, 1);
    });
  });

  describe("emulate: 'kubernetes', stop() between states", () => {
    let server;
    const sb = sandboxes(() => server);
    before(async function () {
      this.timeout(60000);
      server = await startServer({ port: 0, emulate: 'kubernetes', emulateDelays: { create: 200, ready: 200, endpoint: 0, pause: 1500, resume: 1500 } });
    });
    after(async function () {
      this.timeout(60000);
      await sb.destroyAll();
      await server?.close();
    });

    it('stop() during Resuming (409 KUBERNETES::INVALID_STATE) waits for Running and pauses it', async () => {
      const s = sb.make();
      await s._start();
      const id = s.opensandbox.sandboxId;
      const state = async () => (await api(server, 'GET', `/sandboxes/${id}`)).body.status.state;
      // another process pauses and resumes it; our stop() arrives while it is Resuming
      assert.equal((await api(server, 'POST', `/sandboxes/${id}/pause`)).status, 202);
      await waitFor(async () => (await state()) === 'Paused', { timeoutMs: 20000, intervalMs: 100, message: 'Paused' });
      assert.equal((await api(server, 'POST', `/sandboxes/${id}/resume`)).status, 202);
      assert.equal(await state(), 'Resuming');
      const refused = await api(server, 'POST', `/sandboxes/${id}/pause`);
      assert.deepEqual([refused.status, refused.body.code], [409, 'KUBERNETES::INVALID_STATE']);
      await s._stop();
      assert.equal(await state(), 'Paused');
    });
  });

  describe("emulate: 'kubernetes', a slow create", () => {
    let server;
    const sb = sandboxes(() => server);
    before(async function () {
      this.timeout(60000);
      server = await startServer({ port: 0, emulate: 'kubernetes', emulateDelays: { create: 6000, ready: 200, endpoint: 0 } });
    });
    after(async function () {
      this.timeout(60000);
      await sb.destroyAll();
      await server?.close();
    });

    it('a create that times out while the server goes on (listed Pending) adopts that sandbox instead of failing', async () => {
      const w = warnings();
      const s = sb.make({ id: 'k8s-slow-create', createTimeoutMs: 4000 }); // the emulated create takes 6 s
      s.__setLogger(w.logger);
      assert.equal((await s._start()).outcome, 'created');
      assert.equal((await s.executeCommand('echo adopted')).stdout, 'adopted\n');
      const all = await labelled(server, 'k8s-slow-create');
      assert.deepEqual(all.map(x => x.id), [s.opensandbox.sandboxId]);
      assert.ok(w.seen.some(m => /create sandbox timed out; adopting sandbox/.test(m)), w.seen.join('\n'));
    });

  });

  for (const [what, options, code] of [
    ['agent-sandbox provider (400 KUBERNETES::INVALID_STATE)', { workloadProvider: 'agent-sandbox' }, 'KUBERNETES::INVALID_STATE'],
    ['server 0.1.12 (501 SANDBOX::API_NOT_SUPPORTED)', { serverVersion: '0.1.12' }, 'SANDBOX::API_NOT_SUPPORTED'],
  ]) {
    describe(`emulate: 'kubernetes', ${what}`, () => {
      let server;
      const sb = sandboxes(() => server);
      before(async function () {
        this.timeout(60000);
        server = await startServer({ port: 0, emulate: 'kubernetes', emulateDelays: { create: 200, ready: 200, endpoint: 0 }, ...options });
      });
      after(async function () {
        this.timeout(60000);
        await sb.destroyAll();
        await server?.close();
      });

      it('stop() leaves the sandbox running without throwing, warns once per server, getInfo() says so', async () => {
        const w = warnings();
        const s = sb.make();
        s.__setLogger(w.logger);
        await s._start();
        const id = s.opensandbox.sandboxId;
        await s._stop();
        await s._stop(); // a stopped handle: nothing to pause
        assert.equal(s.status, 'stopped');
        // not paused: it goes on to Running (upstream's create answers Running while the pod may still be Allocated)
        await waitFor(async () => (await api(server, 'GET', `/sandboxes/${id}`)).body.status.state === 'Running',
          { timeoutMs: 10000, intervalMs: 50, message: 'the sandbox is Running' });
        const info = await s.getInfo();
        assert.deepEqual([info.pause.paused, info.pause.supported, info.pause.code], [false, false, code]);
        assert.equal(info.metadata.pause, undefined); // the stored config stays what the constructor took
        assert.equal((await s.executeCommand('echo still-here')).stdout, 'still-here\n');
        assert.equal(s.opensandbox.sandboxId, id);
        const other = sb.make();
        other.__setLogger(w.logger);
        await other._start();
        await other._stop();
        assert.equal(w.seen.filter(m => m.includes('cannot pause')).length, 1, w.seen.join('\n'));
      });
    });
  }

  it('getPortUrl through the server proxy: the gateway routing header upstream keeps is not needed, an access token is', () => {
    const ep = { endpoint: 'gw.example.com/sandboxes/s-1/proxy/8080', headers: { 'OpenSandbox-Ingress-To': 's-1-8080' } };
    assert.equal(portUrl(ep, 'https', { serverProxy: true }), 'https://gw.example.com/sandboxes/s-1/proxy/8080');
    assert.equal(portUrl(ep, 'https'), null); // directly, the gateway needs the header
    assert.equal(portUrl({ ...ep, headers: { ...ep.headers, 'OpenSandbox-Secure-Access': 't' } }, 'https', { serverProxy: true }), null);
  });

  describe('local server proxy (useServerProxy)', () => {
    let server;
    const sb = sandboxes(() => server);
    before(async function () {
      this.timeout(60000);
      server = await startServer({ port: 0 });
    });
    after(async function () {
      this.timeout(60000);
      await sb.destroyAll();
      await server?.close();
    });

    it('executeCommand and processes.spawn recover right after an external delete (the proxy answers 401 SANDBOX::UNAUTHORIZED)', async () => {
      const s = sb.make({ useServerProxy: true });
      await s._start();
      for (const call of ['command', 'spawn']) {
        const id = s.opensandbox.sandboxId;
        assert.equal((await api(server, 'DELETE', `/sandboxes/${id}`)).status, 204);
        if (call === 'command') {
          const r = await s.executeCommand('echo recovered');
          assert.deepEqual([r.exitCode, r.stdout], [0, 'recovered\n']);
        } else {
          const h = await s.processes.spawn('echo spawned');
          const r = await h.wait();
          assert.deepEqual([r.exitCode, r.stdout], [0, 'spawned\n']);
        }
        assert.notEqual(s.opensandbox.sandboxId, id);
        assert.equal(s.status, 'running');
      }
    });
  });
});
