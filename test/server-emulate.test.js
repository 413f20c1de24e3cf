// Emulated upstream deployments (`startServer({ emulate, serverVersion, workloadProvider, emulateDelays })`,
// lib/dev-server/upstream.js): each behaviour of docs/dev-server.md "Emulating an upstream deployment" over real HTTP
// against real sandboxes.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer } from '../lib/dev-server/index.js';
import { waitFor } from './helpers/poll.js';
import { request, parseEvents } from './helpers/raw.js';

const KEY = 'emulate-test-key';
const minimal = (extra = {}) => ({ image: { uri: 'python:3.11' }, entrypoint: ['tail', '-f', '/dev/null'], resourceLimits: {}, timeout: 600, ...extra });

/** A server with `options` and the helpers of a test on it; close() deletes everything. */
async function serve(options) {
  const server = await startServer({ apiKey: KEY, commandTailMs: 50, ...options });
  const api = (p, opts = {}) => request(`${server.baseUrl}${p}`, { ...opts, headers: { 'OPEN-SANDBOX-API-KEY': KEY, 'Content-Type': 'application/json', ...opts.headers } });
  const create = async (extra) => {
    const r = await api('/v1/sandboxes', { method: 'POST', body: minimal(extra) });
    assert.equal(r.status, 202, r.text);
    return r.json;
  };
  const endpoint = async (id) => {
    const r = await waitFor(async () => {
      const e = await api(`/v1/sandboxes/${id}/endpoints/44772`);
      return e.status === 200 && e;
    }, { timeoutMs: 30000, message: `endpoint of ${id}` });
    return `http://${r.json.endpoint}`;
  };
  /** Runs a foreground command in sandbox `id`; resolves its stdout lines. */
  const run = async (id, command) => {
    const r = await request(`${await endpoint(id)}/command`, { method: 'POST', body: { command } });
    assert.equal(r.status, 200, r.text);
    const events = parseEvents(r.text);
    assert.equal(events.at(-1).type, 'execution_complete', r.text);
    return events.filter((e) => e.type === 'stdout').map((e) => e.text);
  };
  const state = async (id) => (await api(`/v1/sandboxes/${id}`)).json.status;
  const waitState = (id, want) => waitFor(async () => (await state(id)).state === want, { timeoutMs: 30000, message: `sandbox ${id} reaches ${want}` });
  return { server, api, create, endpoint, run, state, waitState, close: () => server.close() };
}

const HTTP_DATE = /^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{2} (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d{2}:\d{2}:\d{2} GMT$/;

describe('dev-server emulating upstream deployments', function () {
  this.timeout(120000);

  describe('options', () => {
    const rejects = (options, pattern) => assert.rejects(startServer(options), pattern);
    it('refuses an unknown runtime, naming the option and the known ones', () => rejects({ emulate: 'podman' }, /^Error: emulate must be one of 'docker', 'kubernetes' .*got "podman"$/));
    it('refuses a malformed server version', async () => {
      await rejects({ serverVersion: '0.1' }, /^Error: serverVersion must be an OpenSandbox server version 'X\.Y\.Z' .*got "0\.1"$/);
      await rejects({ serverVersion: 13 }, /^Error: serverVersion must be .*got 13$/);
      await rejects({ serverVersion: 'v0.1.13' }, /^Error: serverVersion must be .*got "v0\.1\.13"$/);
    });
    it('refuses a workload provider without kubernetes, and an unknown one', async () => {
      await rejects({ workloadProvider: 'agent-sandbox' }, /^Error: workloadProvider needs emulate: 'kubernetes'$/);
      await rejects({ emulate: 'kubernetes', workloadProvider: 'pod' }, /^Error: workloadProvider must be one of 'batchsandbox', 'agent-sandbox', got "pod"$/);
    });
    it('refuses unknown and malformed delays', async () => {
      await rejects({ emulate: 'docker', emulateDelays: { pull: 1 } }, /^Error: emulateDelays\.pull is unknown; known: create, ready, endpoint, pause, resume, snapshot, createTimeout$/);
      await rejects({ emulate: 'docker', emulateDelays: { create: -1 } }, /^Error: emulateDelays\.create must be an integer 0\.\.600000 \(milliseconds\), got -1$/);
      await rejects({ emulate: 'docker', emulateDelays: [] }, /^Error: emulateDelays must be an object/);
    });
  });
  describe("emulate: 'docker'", () => {
    let t;
    let hostDir;
    before(async () => {
      hostDir = fs.mkdtempSync(path.join(os.tmpdir(), 'osb-emu-'));
      t = await serve({ emulate: 'docker', emulateDelays: { create: 1500 }, allowedHostPaths: [hostDir], maxSandboxTimeoutSeconds: 86400 });
    });
    after(async () => {
      await t?.close();
      fs.rmSync(hostDir, { recursive: true, force: true });
    });

    it('answers a create only after the pull: nothing is listed meanwhile, then it is Running', async () => {
      let answered = false;
      const pending = t.create({ metadata: { case: 'slow-create' } }).then((sb) => {
        answered = true;
        return sb;
      });
      const during = await t.api('/v1/sandboxes?metadata=case%3Dslow-create');
      assert.equal(answered, false, 'the list was answered before the create');
      assert.equal(during.json.pagination.totalItems, 0);
      const sb = await pending;
      assert.equal(sb.status.state, 'Running');
      assert.equal(sb.status.message, 'Sandbox container started successfully.');
      const after = await t.api('/v1/sandboxes?metadata=case%3Dslow-create');
      assert.deepEqual(after.json.items.map((i) => i.id), [sb.id]);
      // createdAt of the answer is the request's arrival; get shows the container's creation, after the pull
      const got = (await t.api(`/v1/sandboxes/${sb.id}`)).json;
      assert.ok(Date.parse(got.createdAt) > Date.parse(sb.createdAt), `${got.createdAt} after ${sb.createdAt}`);
      assert.equal(got.status.message, 'Sandbox container is running.');
      assert.equal(got.platform, undefined);
      await t.api(`/v1/sandboxes/${sb.id}`, { method: 'DELETE' });
    });

    it('lastTransitionAt is the container creation time through pause and resume, then FinishedAt; every answer has a Date header', async () => {
      const sb = await t.create();
      const got = await t.api(`/v1/sandboxes/${sb.id}`);
      assert.match(got.headers.date, HTTP_DATE);
      const created = got.json.createdAt;
      assert.equal(got.json.status.lastTransitionAt, created);
      const pause = await t.api(`/v1/sandboxes/${sb.id}/pause`, { method: 'POST' });
      assert.equal(pause.status, 202);
      assert.match(pause.headers.date, HTTP_DATE);
      assert.deepEqual(await t.state(sb.id), { state: 'Paused', reason: 'CONTAINER_PAUSED', message: 'Sandbox container is paused.', lastTransitionAt: created });
      assert.equal((await t.api(`/v1/sandboxes/${sb.id}/resume`, { method: 'POST' })).status, 202);
      assert.deepEqual(await t.state(sb.id), { state: 'Running', reason: 'CONTAINER_RUNNING', message: 'Sandbox container is running.', lastTransitionAt: created });
      // execd (the container's main process) dies: FinishedAt
      const ep = await t.endpoint(sb.id);
      await request(`${ep}/command`, { method: 'POST', body: { command: 'kill -9 $PPID' } }).catch(() => {});
      await t.waitState(sb.id, 'Failed');
      const failed = await t.state(sb.id);
      assert.equal(failed.reason, 'CONTAINER_EXITED_ERROR');
      assert.equal(failed.message, 'Sandbox container exited with code 137.');
      assert.ok(Date.parse(failed.lastTransitionAt) > Date.parse(created), `${failed.lastTransitionAt} after ${created}`);
      await t.api(`/v1/sandboxes/${sb.id}`, { method: 'DELETE' });
    });

    it('a second pause is 500 DOCKER::SANDBOX_PAUSE_FAILED, a resume of a running sandbox 409 with upstream\'s text', async () => {
      const sb = await t.create();
      assert.equal((await t.api(`/v1/sandboxes/${sb.id}/pause`, { method: 'POST' })).status, 202);
      const again = await t.api(`/v1/sandboxes/${sb.id}/pause`, { method: 'POST' });
      assert.equal(again.status, 500);
      assert.equal(again.json.code, 'DOCKER::SANDBOX_PAUSE_FAILED');
      assert.match(again.json.message, /^Failed to pause sandbox container: 409 Client Error for http\+docker:\/\/localhost\/v1\.41\/containers\/([0-9a-f]{64})\/pause: Conflict \("Container \1 is already paused"\)$/);
      assert.equal((await t.api(`/v1/sandboxes/${sb.id}/resume`, { method: 'POST' })).status, 202);
      const resumed = await t.api(`/v1/sandboxes/${sb.id}/resume`, { method: 'POST' });
      assert.equal(resumed.status, 409);
      assert.deepEqual(resumed.json, { code: 'DOCKER::SANDBOX_NOT_PAUSED', message: 'Sandbox is not in a paused state.' });
      assert.deepEqual(await t.run(sb.id, 'echo alive'), ['alive']);
      await t.api(`/v1/sandboxes/${sb.id}`, { method: 'DELETE' });
    });

    it('a restore inherits the source metadata (docker commit keeps labels); a snapshot in use is 409 DELETE_CONFLICT and stays Deleting', async () => {
      const src = await t.create({ metadata: { 'mastra.ai/template-build': 'abc', owner: 'a' } });
      const snap = (await t.api(`/v1/sandboxes/${src.id}/snapshots`, { method: 'POST', body: {} })).json;
      await waitFor(async () => (await t.api(`/v1/snapshots/${snap.id}`)).json.status.state === 'Ready', { timeoutMs: 30000, message: 'snapshot Ready' });
      const plain = await t.api('/v1/sandboxes', { method: 'POST', body: { snapshotId: snap.id, resourceLimits: {}, timeout: 600 } });
      assert.equal(plain.status, 202, plain.text);
      assert.deepEqual((await t.api(`/v1/sandboxes/${plain.json.id}`)).json.metadata, { 'mastra.ai/template-build': 'abc', owner: 'a' });
      const own = await t.api('/v1/sandboxes', { method: 'POST', body: { snapshotId: snap.id, resourceLimits: {}, timeout: 600, metadata: { owner: 'b' } } });
      assert.deepEqual((await t.api(`/v1/sandboxes/${own.json.id}`)).json.metadata, { 'mastra.ai/template-build': 'abc', owner: 'b' });
      const refused = await t.api(`/v1/snapshots/${snap.id}`, { method: 'DELETE' });
      assert.equal(refused.status, 409);
      assert.deepEqual(refused.json, { code: 'SNAPSHOT::DELETE_CONFLICT', message: 'snapshot image cannot be deleted due to a conflict' });
      const left = (await t.api(`/v1/snapshots/${snap.id}`)).json.status;
      assert.equal(left.state, 'Deleting');
      assert.equal(left.reason, 'snapshot_delete_requested');
      // listed too, like every record of upstream's repository (with and without a state filter)
      const listed = async (q) => (await t.api(`/v1/snapshots?sandboxId=${src.id}${q}`)).json.items.map((x) => [x.id, x.status.state]);
      assert.deepEqual(await listed(''), [[snap.id, 'Deleting']]);
      assert.deepEqual(await listed('&state=Deleting'), [[snap.id, 'Deleting']]);
      assert.deepEqual(await listed('&state=Ready'), []);
      await t.api(`/v1/sandboxes/${plain.json.id}`, { method: 'DELETE' });
      assert.equal((await t.api(`/v1/snapshots/${snap.id}`, { method: 'DELETE' })).status, 409); // one restored sandbox left
      await t.api(`/v1/sandboxes/${own.json.id}`, { method: 'DELETE' });
      assert.equal((await t.api(`/v1/snapshots/${snap.id}`, { method: 'DELETE' })).status, 204);
      assert.equal((await t.api(`/v1/snapshots/${snap.id}`, { method: 'DELETE' })).status, 404);
      await t.api(`/v1/sandboxes/${src.id}`, { method: 'DELETE' });
    });

    it("refuses host paths with '//', a trailing '/' or '/..' like upstream (400 VOLUME::INVALID_HOST_PATH)", async () => {
      const cases = [
        [`${hostDir}//a`, `Host path '${hostDir}//a' is not normalized. Remove redundant slashes.`],
        [`${hostDir}/a/`, `Host path '${hostDir}/a/' is not normalized. Remove redundant slashes.`],
        [`${hostDir}/a/..`, `Host path '${hostDir}/a/..' contains path traversal component '..'.`],
      ];
      for (const [p, message] of cases) {
        const r = await t.api('/v1/sandboxes', { method: 'POST', body: minimal({ volumes: [{ name: 'v', host: { path: p }, mountPath: '/mnt/v' }] }) });
        assert.equal(r.status, 400, p);
        assert.deepEqual(r.json, { code: 'VOLUME::INVALID_HOST_PATH', message });
      }
      assert.equal((await t.api('/v1/sandboxes?pageSize=200')).json.pagination.totalItems, 0);
    });

    it('refuses a bad create without waiting for the image pull', async () => {
      const slow = await serve({ emulate: 'docker', emulateDelays: { create: 600000 } });
      try {
        // the request's deadline (30 s) is far below the pull: only an answer before the pull passes
        const r = await slow.api('/v1/sandboxes', { method: 'POST', body: minimal({ volumes: [{ name: 'v', host: { path: '/etc' }, mountPath: '/mnt/v' }] }), timeoutMs: 30000 });
        assert.equal(r.status, 400);
        assert.equal(r.json.code, 'VOLUME::HOST_PATH_NOT_ALLOWED');
      } finally {
        await slow.close();
      }
    });

    it("answers unknown routes and methods with FastAPI's bodies, after the API key check", async () => {
      const unknown = await t.api('/v1/does-not-exist');
      assert.equal(unknown.status, 404);
      assert.equal(unknown.text, '{"detail":"Not Found"}');
      assert.equal((await t.api('/v2/sandboxes')).text, '{"detail":"Not Found"}');
      const noKey = await request(`${t.server.baseUrl}/v1/does-not-exist`);
      assert.equal(noKey.status, 401);
      assert.equal(noKey.json.code, 'MISSING_API_KEY');
      const put = await t.api('/v1/sandboxes', { method: 'PUT', body: {} });
      assert.equal(put.status, 405);
      assert.equal(put.text, '{"detail":"Method Not Allowed"}');
      assert.equal(put.headers.allow, 'GET, POST');
    });

    it("answers with upstream's codes: timeout above the maximum, port out of range, reserved key, missing PVC, renew order", async () => {
      const long = await t.api('/v1/sandboxes', { method: 'POST', body: minimal({ timeout: 86401 }) });
      assert.equal(long.status, 400);
      assert.deepEqual(long.json, { code: 'SANDBOX::INVALID_PARAMETER', message: 'Sandbox timeout 86401s exceeds configured maximum of 86400s.' });
      const reserved = await t.api('/v1/sandboxes', { method: 'POST', body: minimal({ metadata: { 'opensandbox.io/id': 'x' } }) });
      assert.equal(reserved.status, 400);
      assert.deepEqual(reserved.json, {
        code: 'SANDBOX::INVALID_METADATA_LABEL',
        message: "Metadata key 'opensandbox.io/id' uses the reserved prefix 'opensandbox.io/'. Keys under this prefix are managed by the system and cannot be set via metadata.",
      });
      const pvc = await t.api('/v1/sandboxes', { method: 'POST', body: minimal({ volumes: [{ name: 'v', pvc: { claimName: 'never-made', createIfNotExists: false }, mountPath: '/mnt/v' }] }) });
      assert.equal(pvc.status, 400);
      assert.equal(pvc.json.code, 'VOLUME::PVC_NOT_FOUND');
      const sb = await t.create({ timeout: null });
      for (const port of ['0', '70000']) {
        const r = await t.api(`/v1/sandboxes/${sb.id}/endpoints/${port}`);
        assert.equal(r.status, 400);
        assert.deepEqual(r.json, { code: 'DOCKER::INVALID_PORT', message: 'Port must be between 1 and 65535.' });
      }
      const abc = await t.api(`/v1/sandboxes/${sb.id}/endpoints/abc`);
      assert.equal(abc.status, 422);
      assert.deepEqual(abc.json.detail[0], { type: 'int_parsing', loc: ['path', 'port'], msg: 'Input should be a valid integer, unable to parse string as an integer', input: 'abc' });
      // Docker checks the time before the expiry: a past time on a sandbox without expiry is 400, a future one 409
      const past = await t.api(`/v1/sandboxes/${sb.id}/renew-expiration`, { method: 'POST', body: { expiresAt: '2000-01-01T00:00:00Z' } });
      assert.equal(past.status, 400);
      assert.deepEqual(past.json, { code: 'DOCKER::INVALID_EXPIRATION', message: 'New expiration time must be in the future.' });
      const future = await t.api(`/v1/sandboxes/${sb.id}/renew-expiration`, { method: 'POST', body: { expiresAt: '2999-01-01T00:00:00Z' } });
      assert.equal(future.status, 409);
      assert.deepEqual(future.json, { code: 'DOCKER::INVALID_EXPIRATION', message: `Sandbox ${sb.id} does not have automatic expiration enabled.` });
      const unknown = await t.api('/v1/sandboxes/00000000-0000-0000-0000-000000000000/renew-expiration', { method: 'POST', body: { expiresAt: '2000-01-01T00:00:00Z' } });
      assert.equal(unknown.status, 404);
      await t.api(`/v1/sandboxes/${sb.id}`, { method: 'DELETE' });
    });

    it('server proxy: the endpoint has no /v1; after a delete behind the client\'s back the proxy answers 401 SANDBOX::UNAUTHORIZED', async () => {
      const sb = await t.create();
      const ep = await t.api(`/v1/sandboxes/${sb.id}/endpoints/44772?use_server_proxy=true`);
      assert.equal(ep.json.endpoint, `${t.server.domain}/sandboxes/${sb.id}/proxy/44772`);
      const ping = await request(`http://${ep.json.endpoint}/ping`, { headers: ep.json.headers });
      assert.equal(ping.status, 200);
      assert.equal((await t.api(`/v1/sandboxes/${sb.id}`, { method: 'DELETE' })).status, 204);
      const gone = await request(`http://${ep.json.endpoint}/ping`, { headers: ep.json.headers });
      assert.equal(gone.status, 401);
      assert.deepEqual(gone.json, { code: 'SANDBOX::UNAUTHORIZED', message: 'Missing or invalid OpenSandbox-Secure-Access header for this sandbox.' });
    });
  });

  describe("emulate: 'kubernetes' (BatchSandbox)", () => {
    let t;
    before(async () => {
      t = await serve({ emulate: 'kubernetes', emulateDelays: { create: 1500, ready: 800, endpoint: 3000, pause: 800, resume: 800 } });
    });
    after(() => t?.close());

    it('lists a create as Pending while it waits, answers Running (upstream >= 0.1.10) while the pod is Allocated, then Running; the endpoint is 404 POD_IP_NOT_AVAILABLE until the informer sees the IP', async () => {
      let answered = false;
      const pending = t.create({ metadata: { case: 'k8s-create' } }).then((sb) => {
        answered = true;
        return sb;
      });
      const listed = await waitFor(async () => {
        const l = await t.api('/v1/sandboxes?metadata=case%3Dk8s-create');
        return l.json.items[0];
      }, { timeoutMs: 30000, message: 'the create is listed' });
      assert.equal(answered, false, 'the create answered before it was listed');
      assert.equal(listed.status.state, 'Pending');
      assert.equal(listed.status.reason, 'BATCHSANDBOX_PENDING');
      const sb = await pending;
      // status_helpers.py _normalize_create_status: the answer says Running, a get right after still Allocated
      assert.equal(sb.status.state, 'Running');
      assert.equal(sb.status.reason, 'IP_ASSIGNED');
      assert.equal(sb.status.message, 'Pod has IP assigned and sandbox is ready for requests');
      assert.deepEqual(await t.state(sb.id).then(({ state, reason, message }) => ({ state, reason, message })),
        { state: 'Allocated', reason: 'IP_ASSIGNED', message: 'Pod has IP assigned but not ready (1/1 allocated, 0 ready)' });
      const early = await t.api(`/v1/sandboxes/${sb.id}/endpoints/44772`);
      assert.equal(early.status, 404);
      assert.deepEqual(early.json, { code: 'KUBERNETES::POD_IP_NOT_AVAILABLE', message: 'Pod IP is not yet available. The Pod may still be starting.' });
      await t.waitState(sb.id, 'Running');
      assert.deepEqual(await t.run(sb.id, 'echo up'), ['up']);
      // the workload's creationTimestamp: whole seconds, never moves
      const { status, createdAt } = (await t.api(`/v1/sandboxes/${sb.id}`)).json;
      assert.match(status.lastTransitionAt, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
      assert.equal(Date.parse(status.lastTransitionAt), Math.floor(Date.parse(createdAt) / 1000) * 1000);
      await t.api(`/v1/sandboxes/${sb.id}`, { method: 'DELETE' });
    });

    it('before server 0.1.10 a create answers the pod\'s own Allocated', async () => {
      const old = await serve({ emulate: 'kubernetes', serverVersion: '0.1.9', emulateDelays: { create: 0, ready: 800 } });
      try {
        const sb = await old.create();
        assert.deepEqual({ state: sb.status.state, reason: sb.status.reason, message: sb.status.message },
          { state: 'Allocated', reason: 'IP_ASSIGNED', message: 'Pod has IP assigned but not ready (1/1 allocated, 0 ready)' });
        await old.api(`/v1/sandboxes/${sb.id}`, { method: 'DELETE' });
      } finally {
        await old.close();
      }
    });

    it('pause goes Pausing -> Paused and loses the processes (files stay), resume Resuming -> Running with a fresh execd', async () => {
      const sb = await t.create();
      await t.waitState(sb.id, 'Running');
      const created = (await t.state(sb.id)).lastTransitionAt;
      const ep = await t.endpoint(sb.id);
      await t.run(sb.id, 'echo kept > /workspace/f');
      const bg = await request(`${ep}/command`, { method: 'POST', body: { command: 'sleep 1000', background: true } });
      assert.equal(bg.status, 200, bg.text);
      const sleeps = 'for p in /proc/[0-9]*; do cat $p/comm 2>/dev/null; done | grep -c "^sleep$" || true';
      assert.deepEqual(await t.run(sb.id, sleeps), ['1']);
      assert.equal((await t.api(`/v1/sandboxes/${sb.id}/pause`, { method: 'POST' })).status, 202);
      assert.deepEqual(await t.state(sb.id), { state: 'Pausing', reason: 'PAUSING', message: 'Pausing sandbox', lastTransitionAt: created });
      const busy = await t.api(`/v1/sandboxes/${sb.id}/pause`, { method: 'POST' });
      assert.equal(busy.status, 409);
      assert.deepEqual(busy.json, { code: 'KUBERNETES::INVALID_STATE', message: 'Cannot pause: operation in progress (phase=Pausing)' });
      await t.waitState(sb.id, 'Paused');
      const noIp = await t.api(`/v1/sandboxes/${sb.id}/endpoints/44772`);
      assert.equal(noIp.status, 404);
      assert.equal(noIp.json.code, 'KUBERNETES::POD_IP_NOT_AVAILABLE');
      const again = await t.api(`/v1/sandboxes/${sb.id}/pause`, { method: 'POST' });
      assert.deepEqual(again.json, { code: 'KUBERNETES::INVALID_STATE', message: 'Sandbox is already paused' });
      assert.equal((await t.api(`/v1/sandboxes/${sb.id}/resume`, { method: 'POST' })).status, 202);
      assert.equal((await t.state(sb.id)).state, 'Resuming');
      await t.waitState(sb.id, 'Running');
      assert.deepEqual(await t.run(sb.id, `cat /workspace/f; ${sleeps}`), ['kept', '0']);
      const running = await t.api(`/v1/sandboxes/${sb.id}/resume`, { method: 'POST' });
      assert.deepEqual(running.json, { code: 'KUBERNETES::INVALID_STATE', message: 'Cannot resume sandbox in phase Succeed, expected Paused' });
      await t.api(`/v1/sandboxes/${sb.id}`, { method: 'DELETE' });
    });

    it('a delete while Pausing answers 204 and the sandbox is gone: KUBERNETES::SANDBOX_NOT_FOUND', async () => {
      const sb = await t.create();
      await t.waitState(sb.id, 'Running');
      assert.equal((await t.api(`/v1/sandboxes/${sb.id}/pause`, { method: 'POST' })).status, 202);
      assert.equal((await t.api(`/v1/sandboxes/${sb.id}`, { method: 'DELETE' })).status, 204);
      const gone = await t.api(`/v1/sandboxes/${sb.id}`);
      assert.equal(gone.status, 404);
      assert.deepEqual(gone.json, { code: 'KUBERNETES::SANDBOX_NOT_FOUND', message: `Sandbox '${sb.id}' not found` });
    });
  });

  describe('pause where upstream cannot pause', () => {
    for (const [options, status, body] of [
      [{ emulate: 'kubernetes', workloadProvider: 'agent-sandbox' }, 400, { code: 'KUBERNETES::INVALID_STATE', message: 'Pause is not supported for this sandbox type' }],
      [{ emulate: 'kubernetes', serverVersion: '0.1.12' }, 501, { code: 'SANDBOX::API_NOT_SUPPORTED', message: 'Pause operation is not supported in Kubernetes runtime' }],
    ]) {
      it(`${JSON.stringify(options)}: ${status} ${body.code}, the sandbox keeps running`, async () => {
        const t = await serve({ ...options, emulateDelays: { create: 0, ready: 0, endpoint: 0 } });
        try {
          const sb = await t.create();
          const r = await t.api(`/v1/sandboxes/${sb.id}/pause`, { method: 'POST' });
          assert.equal(r.status, status);
          assert.deepEqual(r.json, body);
          const resume = await t.api(`/v1/sandboxes/${sb.id}/resume`, { method: 'POST' });
          assert.equal(resume.status, status);
          assert.equal(resume.json.message, body.message.replace('Pause', 'Resume'));
          assert.equal((await t.state(sb.id)).state, 'Running');
          assert.deepEqual(await t.run(sb.id, 'echo still'), ['still']);
        } finally {
          await t.close();
        }
      });
    }
  });

  describe('serverVersion before 0.1.13: no Snapshots API', () => {
    for (const options of [{ serverVersion: '0.1.12' }, { emulate: 'docker', serverVersion: '0.1.12', emulateDelays: { create: 0 } }]) {
      it(`${JSON.stringify(options)}: every snapshot route is 404 {"detail":"Not Found"}`, async () => {
        const t = await serve(options);
        try {
          const sb = await t.create();
          for (const [method, p] of [['GET', '/v1/snapshots'], ['GET', '/snapshots'], ['GET', '/v1/snapshots/x'], ['DELETE', '/v1/snapshots/x'], ['POST', `/v1/sandboxes/${sb.id}/snapshots`]]) {
            const r = await t.api(p, { method, body: method === 'POST' ? {} : undefined });
            assert.equal(r.status, 404, `${method} ${p}`);
            assert.equal(r.text, '{"detail":"Not Found"}', `${method} ${p}`);
          }
        } finally {
          await t.close();
        }
      });
    }
  });
});

