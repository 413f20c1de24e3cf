// Lifecycle API of the local OpenSandbox-compatible server, driven by the official client
// (@alibaba-group/opensandbox) and by raw HTTP for the exact status codes and bodies.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Sandbox, SandboxManager, ConnectionConfig } from '@alibaba-group/opensandbox';
import { startServer } from '../lib/dev-server/index.js';
import { waitFor } from './helpers/poll.js';
import { request, quietPeriod } from './helpers/raw.js';

const KEY = 'lifecycle-test-key';

describe('dev-server lifecycle API', function () {
  this.timeout(60000);
  let server;
  let hostDir;
  let conn;
  const created = [];
  const api = (p, opts = {}) => request(`${server.baseUrl}${p}`, { ...opts, headers: { 'OPEN-SANDBOX-API-KEY': KEY, 'Content-Type': 'application/json', ...opts.headers } });
  const minimal = (extra = {}) => ({ image: { uri: 'python:3.11' }, entrypoint: ['tail', '-f', '/dev/null'], resourceLimits: { cpu: '1', memory: '1Gi' }, ...extra });

  before(async () => {
    hostDir = fs.mkdtempSync(path.join(os.tmpdir(), 'osb-lc-'));
    server = await startServer({ apiKey: KEY, allowedHostPaths: [hostDir], maxSandboxTimeoutSeconds: 86400, commandTailMs: 50 });
    conn = () => new ConnectionConfig({ domain: server.domain, apiKey: KEY });
  });
  after(async () => {
    for (const id of created) await api(`/v1/sandboxes/${id}`, { method: 'DELETE' }).catch(() => {});
    await server?.close();
    fs.rmSync(hostDir, { recursive: true, force: true });
  });

  async function createRaw(extra) {
    const r = await api('/v1/sandboxes', { method: 'POST', body: minimal(extra) });
    assert.equal(r.status, 202, r.text);
    created.push(r.json.id);
    return r;
  }

  it('creates with the official client; get adds image and platform', async () => {
    const sbx = await Sandbox.create({ connectionConfig: conn(), image: 'python:3.11', metadata: { owner: 'agent-7', 'mastra.ai/workspace': 'ws1' } });
    created.push(sbx.id);
    const info = await sbx.getInfo();
    assert.equal(info.id, sbx.id);
    assert.equal(info.status.state, 'Running');
    assert.deepEqual(info.metadata, { owner: 'agent-7', 'mastra.ai/workspace': 'ws1' });
    assert.deepEqual(info.image, { uri: 'python:3.11' });
    assert.ok(info.expiresAt instanceof Date && info.expiresAt > new Date());
    const raw = await api(`/v1/sandboxes/${sbx.id}`);
    assert.deepEqual(raw.json.platform, { os: 'linux', arch: process.arch === 'x64' ? 'amd64' : process.arch });
    assert.deepEqual(raw.json.entrypoint, ['tail', '-f', '/dev/null']);
    assert.equal((await sbx.commands.run('echo ok')).logs.stdout[0].text, 'ok');
    await sbx.kill();
    const gone = await api(`/v1/sandboxes/${sbx.id}`);
    assert.equal(gone.status, 404);
    assert.deepEqual(gone.json, { code: 'DOCKER::SANDBOX_NOT_FOUND', message: `Sandbox ${sbx.id} not found.` });
    await sbx.close();
  });

  it('answers create with 202, Location, Running state and no expiresAt when timeout is null', async () => {
    const r = await createRaw({ timeout: null });
    assert.equal(r.headers.location, `/v1/sandboxes/${r.json.id}`);
    assert.match(r.json.id, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    assert.equal(r.json.status.state, 'Running');
    assert.equal(r.json.status.reason, 'CONTAINER_RUNNING');
    assert.equal('expiresAt' in r.json, false);
    assert.equal('image' in r.json, false);
    assert.equal('platform' in r.json, false);
    assert.match(r.json.createdAt, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);
    // no prefix works too
    const g = await api(`/sandboxes/${r.json.id}`);
    assert.equal(g.status, 200);
    // renewing a sandbox without expiry is a 409
    const ren = await api(`/v1/sandboxes/${r.json.id}/renew-expiration`, { method: 'POST', body: { expiresAt: new Date(Date.now() + 3600e3).toISOString() } });
    assert.equal(ren.status, 409);
    assert.equal(ren.json.code, 'DOCKER::INVALID_EXPIRATION');
  });

  it('lists by metadata (AND), state (OR, case-insensitive), newest first, paginated', async () => {
    const tag = `t${Date.now()}`;
    const a = await createRaw({ metadata: { suite: tag, role: 'a' }, timeout: 600 });
    const b = await createRaw({ metadata: { suite: tag, role: 'b' }, timeout: 600 });
    const mgr = SandboxManager.create({ connectionConfig: conn() });
    try {
      const all = await mgr.listSandboxInfos({ metadata: { suite: tag } });
      assert.deepEqual(all.items.map((i) => i.id), [b.json.id, a.json.id]);
      const onlyA = await mgr.listSandboxInfos({ metadata: { suite: tag, role: 'a' }, states: ['Running', 'Paused'] });
      assert.deepEqual(onlyA.items.map((i) => i.id), [a.json.id]);
      await mgr.pauseSandbox(a.json.id);
      const paused = await mgr.listSandboxInfos({ metadata: { suite: tag }, states: ['paused'] });
      assert.deepEqual(paused.items.map((i) => i.id), [a.json.id]);
      await mgr.resumeSandbox(a.json.id);
      const page2 = await api(`/v1/sandboxes?metadata=${encodeURIComponent(`suite=${tag}`)}&page=2&pageSize=1`);
      assert.deepEqual(page2.json.items.map((i) => i.id), [a.json.id]);
      assert.deepEqual(page2.json.pagination, { page: 2, pageSize: 1, totalItems: 2, totalPages: 2, hasNextPage: false });
    } finally {
      await mgr.close();
    }
    const bad = await api(`/v1/sandboxes?metadata=${encodeURIComponent('novalue')}`);
    assert.equal(bad.status, 400);
    assert.equal(bad.json.code, 'INVALID_METADATA_FORMAT');
    for (const ps of ['0', '201']) {
      const r = await api(`/v1/sandboxes?pageSize=${ps}`);
      assert.equal(r.status, 422);
      assert.deepEqual(r.json.detail[0].loc, ['query', 'pageSize']);
    }
  });

  it('patches metadata as a merge patch (null deletes) and validates labels', async () => {
    const r = await createRaw({ metadata: { keep: 'x', gone: 'y' } });
    const id = r.json.id;
    const p = await api(`/v1/sandboxes/${id}/metadata`, { method: 'PATCH', body: { gone: null, added: 'z' } });
    assert.equal(p.status, 200);
    assert.deepEqual(p.json.metadata, { keep: 'x', added: 'z' });
    const bad = await api(`/v1/sandboxes/${id}/metadata`, { method: 'PATCH', body: { 'bad key!': 'v' } });
    assert.equal(bad.status, 400);
    assert.equal(bad.json.code, 'SANDBOX::INVALID_METADATA_LABEL');
    assert.deepEqual((await api(`/v1/sandboxes/${id}`)).json.metadata, { keep: 'x', added: 'z' });
  });

  it('pause freezes every process of the sandbox; resume continues it', async () => {
    const sbx = await Sandbox.create({
      connectionConfig: conn(), image: 'python:3.11',
      volumes: [{ name: 'data', host: { path: hostDir }, mountPath: '/data', subPath: 'counter' }],
    });
    created.push(sbx.id);
    const file = path.join(hostDir, 'counter', 'c');
    await sbx.commands.run('i=0; while true; do i=$((i+1)); echo $i > /data/c.tmp; mv /data/c.tmp /data/c; sleep 0.02; done', { background: true });
    const read = () => Number(fs.readFileSync(file, 'utf8'));
    await waitFor(() => fs.existsSync(file) && read() > 3, { message: 'counter starts' });
    await sbx.pause();
    assert.equal((await sbx.getInfo()).status.state, 'Paused');
    const frozen = read();
    await quietPeriod(400);
    assert.equal(read(), frozen, 'counter advanced while paused');
    const again = await api(`/v1/sandboxes/${sbx.id}/pause`, { method: 'POST' });
    assert.equal(again.status, 409);
    assert.equal(again.json.code, 'DOCKER::SANDBOX_NOT_RUNNING');
    const resumed = await sbx.resume();
    assert.equal((await resumed.getInfo()).status.state, 'Running');
    await waitFor(() => read() > frozen + 3, { message: 'counter continues after resume' });
    const notPaused = await api(`/v1/sandboxes/${sbx.id}/resume`, { method: 'POST' });
    assert.equal(notPaused.status, 409);
    assert.equal(notPaused.json.code, 'DOCKER::SANDBOX_NOT_PAUSED');
    await resumed.kill();
    await Promise.all([sbx.close(), resumed.close()]);
  });

  it('a sandbox whose execd dies is listed as Failed and cannot be paused', async () => {
    const { json } = await createRaw();
    const ep = (await api(`/v1/sandboxes/${json.id}/endpoints/44772`)).json;
    await request(`http://${ep.endpoint}/command`, { method: 'POST', body: { command: 'kill -9 $PPID' } }).catch(() => {});
    const st = await waitFor(async () => {
      const g = await api(`/v1/sandboxes/${json.id}`);
      return g.json.status.state !== 'Running' && g.json.status;
    }, { message: 'state leaves Running' });
    assert.equal(st.state, 'Failed');
    assert.equal(st.message, 'Sandbox main process exited (exit code 137).'); // bwrap reports 128 + SIGKILL
    const p = await api(`/v1/sandboxes/${json.id}/pause`, { method: 'POST' });
    assert.equal(p.status, 409);
    assert.equal((await api(`/v1/sandboxes/${json.id}`, { method: 'DELETE' })).status, 204);
  });

  it('a sandbox deleted while it starts: the create answers 404 and no process of it remains', async () => {
    const environs = () => fs.readdirSync('/proc').filter((n) => /^\d+$/.test(n)).map((n) => {
      try {
        return `\0${fs.readFileSync(`/proc/${n}/environ`, 'utf8')}`;
      } catch {
        return '';
      }
    });
    const creating = api('/v1/sandboxes', { method: 'POST', body: minimal() });
    // listed as Pending from the moment its directory exists, before its processes run
    const pending = await waitFor(async () => (await api('/v1/sandboxes?state=Pending')).json.items[0], { message: 'the sandbox is listed as Pending', intervalMs: 2 });
    assert.equal((await api(`/v1/sandboxes/${pending.id}`, { method: 'DELETE' })).status, 204);
    const r = await creating;
    assert.deepEqual([r.status, r.json.code], [404, 'DOCKER::SANDBOX_NOT_FOUND']);
    // bwrap's and execd's environment carries the sandbox's hostname: the first 12 hex digits of its id
    const hostname = pending.id.replace(/-/g, '').slice(0, 12);
    const left = () => environs().filter((c) => c.includes(`\0HOSTNAME=${hostname}\0`));
    await waitFor(() => left().length === 0, { message: `no process of the deleted sandbox remains: ${left().length}`, timeoutMs: 10000 });
    assert.equal((await api(`/v1/sandboxes/${pending.id}`)).status, 404);
  });

  it('pause and resume answer 202 with an empty body', async () => {
    const { json } = await createRaw();
    const p = await api(`/v1/sandboxes/${json.id}/pause`, { method: 'POST' });
    assert.equal(p.status, 202);
    assert.equal(p.text, '');
    const r = await api(`/v1/sandboxes/${json.id}/resume`, { method: 'POST' });
    assert.equal(r.status, 202);
    assert.equal(r.text, '');
    // a paused sandbox can be deleted (SIGKILL reaches stopped processes)
    assert.equal((await api(`/v1/sandboxes/${json.id}/pause`, { method: 'POST' })).status, 202);
    assert.equal((await api(`/v1/sandboxes/${json.id}`, { method: 'DELETE' })).status, 204);
    assert.equal((await api(`/v1/sandboxes/${json.id}`)).status, 404);
  });

  it('renews to an absolute time, rejects past times, and really deletes at expiry', async () => {
    const sbx = await Sandbox.create({ connectionConfig: conn(), image: 'python:3.11', timeoutSeconds: 600 });
    created.push(sbx.id);
    const renewed = await sbx.renew(3600);
    assert.ok(Math.abs(renewed.expiresAt.getTime() - (Date.now() + 3600e3)) < 60e3);
    assert.equal((await sbx.getInfo()).expiresAt.getTime(), renewed.expiresAt.getTime());
    const past = await api(`/v1/sandboxes/${sbx.id}/renew-expiration`, { method: 'POST', body: { expiresAt: '2020-01-01T00:00:00Z' } });
    assert.equal(past.status, 400);
    assert.equal(past.json.code, 'DOCKER::INVALID_EXPIRATION');
    const garbage = await api(`/v1/sandboxes/${sbx.id}/renew-expiration`, { method: 'POST', body: { expiresAt: 'tomorrow' } });
    assert.equal(garbage.status, 422);
    // the Docker runtime lets a renew shorten the expiry: expire in about a second
    const soon = new Date(Date.now() + 1000).toISOString().replace('Z', '+00:00');
    const short = await api(`/v1/sandboxes/${sbx.id}/renew-expiration`, { method: 'POST', body: { expiresAt: soon } });
    assert.equal(short.status, 200);
    await waitFor(async () => (await api(`/v1/sandboxes/${sbx.id}`)).status === 404, { timeoutMs: 10000, message: 'sandbox expired' });
    await sbx.close();
  });

  it('connects to an existing sandbox by id and resolves endpoints for any port', async () => {
    const { json } = await createRaw();
    const sbx = await Sandbox.connect({ sandboxId: json.id, connectionConfig: conn() });
    assert.equal((await sbx.commands.run('echo $((6*7))')).logs.stdout[0].text, '42');
    const ep = await api(`/v1/sandboxes/${json.id}/endpoints/44772`);
    assert.match(ep.json.endpoint, /^127\.0\.0\.1:\d+$/);
    assert.deepEqual(Object.keys(ep.json.headers), ['OpenSandbox-Secure-Access']); // the sandbox's own token
    const other = await api(`/v1/sandboxes/${json.id}/endpoints/8000`);
    assert.equal(other.json.endpoint, `${ep.json.endpoint}/proxy/8000`);
    const viaServer = await api(`/v1/sandboxes/${json.id}/endpoints/44772?use_server_proxy=true`);
    assert.equal(viaServer.json.endpoint, `${server.domain}/v1/sandboxes/${json.id}/proxy/44772`);
    await sbx.close();
  });

  it('runs a non-default entrypoint like a container\'s main process', async () => {
    const js = "require('http').createServer((q,s)=>s.end('entry:'+process.env.WHO)).listen(8003,'127.0.0.1')";
    const { json } = await createRaw({ entrypoint: ['node', '-e', js], env: { WHO: "it's me" } });
    const ep = (await api(`/v1/sandboxes/${json.id}/endpoints/8003`)).json;
    const r = await waitFor(async () => {
      const res = await request(`http://${ep.endpoint}/`);
      return res.status === 200 && res;
    }, { message: 'entrypoint server answers' });
    assert.equal(r.text, "entry:it's me");
  });

  it('server proxy (use_server_proxy) serves execd and strips credentials before a sandbox port', async () => {
    const cc = new ConnectionConfig({ domain: server.domain, apiKey: KEY, useServerProxy: true });
    const sbx = await Sandbox.create({ connectionConfig: cc, image: 'python:3.11' });
    created.push(sbx.id);
    const echo = "require('http').createServer((q,s)=>s.end(JSON.stringify(q.headers))).listen(8000,'127.0.0.1')";
    await sbx.commands.run(`node -e "${echo}"`, { background: true });
    const url = `${server.baseUrl}/v1/sandboxes/${sbx.id}/proxy/8000/x?y=1`;
    const ep = (await api(`/v1/sandboxes/${sbx.id}/endpoints/8000?use_server_proxy=true`)).json;
    assert.equal(`http://${ep.endpoint}/x?y=1`, url);
    const r = await waitFor(async () => {
      const res = await request(url, { headers: { ...ep.headers, 'OPEN-SANDBOX-API-KEY': KEY, Authorization: 'Bearer s', Cookie: 'c=1', 'X-Keep': 'kept' } });
      return res.status === 200 && res;
    }, { message: 'in-sandbox server answers through the server proxy' });
    assert.equal(r.json['x-keep'], 'kept');
    assert.equal(r.json['open-sandbox-api-key'], undefined);
    assert.equal(r.json.authorization, undefined);
    assert.equal(r.json.cookie, undefined);
    assert.equal(r.json['opensandbox-secure-access'], undefined);
    // the proxy route needs no API key (upstream exempts it) but the sandbox's token; an unknown id answers the same
    const anonymous = await request(url, { headers: ep.headers });
    assert.equal(anonymous.status, 200);
    // execd through the proxy needs the sandbox's token; an unknown id answers exactly the same
    const execdUrl = `${server.baseUrl}/v1/sandboxes/${sbx.id}/proxy/44772/ping`;
    const refused = await request(execdUrl, { endpointHeaders: false });
    assert.equal(refused.status, 401);
    const unknown = await request(execdUrl.replace(sbx.id, '00000000-0000-4000-8000-000000000000'), { endpointHeaders: false });
    assert.deepEqual([unknown.status, unknown.json], [refused.status, refused.json]);
    const token = (await api(`/v1/sandboxes/${sbx.id}/endpoints/44772?use_server_proxy=true`)).json.headers;
    assert.equal((await request(execdUrl, { headers: token, endpointHeaders: false })).status, 200);
    await sbx.kill();
    await sbx.close();
  });

  describe('validation and errors', () => {
    const post = (body) => api('/v1/sandboxes', { method: 'POST', body });
    it('422 for schema failures, pydantic-style', async () => {
      const cases = [
        [minimal({ timeout: 30 }), ['body', 'timeout'], 'greater_than_equal'],
        [{ image: { uri: 'x' }, resourceLimits: {} }, ['body'], 'value_error'],
        [minimal({ snapshotId: 'snap' }), ['body'], 'value_error'],
        [{ image: { uri: 'x' }, entrypoint: ['sh'] }, ['body', 'resourceLimits'], 'missing'],
      ];
      for (const [body, loc, type] of cases) {
        const r = await post(body);
        assert.equal(r.status, 422, JSON.stringify(body));
        assert.ok(Array.isArray(r.json.detail));
        assert.deepEqual(r.json.detail[0].loc, loc);
        assert.equal(r.json.detail[0].type, type);
      }
      const tooLong = await post(minimal({ timeout: 86401 }));
      assert.equal(tooLong.status, 400);
      assert.equal(tooLong.json.code, 'SANDBOX::INVALID_TIMEOUT');
      const malformed = await api('/v1/sandboxes', { method: 'POST', body: '{"image":' });
      assert.equal(malformed.status, 422);
      assert.equal(malformed.json.detail[0].type, 'json_invalid');
    });
    it('400 for metadata labels and the reserved prefix', async () => {
      for (const metadata of [{ 'a b': 'x' }, { k: 'x'.repeat(64) }, { 'opensandbox.io/x': 'y' }, { k: '-bad' }]) {
        const r = await post(minimal({ metadata }));
        assert.equal(r.status, 400, JSON.stringify(metadata));
        assert.equal(r.json.code, 'SANDBOX::INVALID_METADATA_LABEL');
        assert.equal(typeof r.json.message, 'string');
      }
    });
    it('401 without or with a wrong API key; /health needs none', async () => {
      const missing = await request(`${server.baseUrl}/v1/sandboxes`);
      assert.equal(missing.status, 401);
      assert.equal(missing.json.code, 'MISSING_API_KEY');
      const wrong = await request(`${server.baseUrl}/v1/sandboxes`, { headers: { 'OPEN-SANDBOX-API-KEY': 'nope' } });
      assert.equal(wrong.status, 401);
      assert.equal(wrong.json.code, 'INVALID_API_KEY');
      assert.ok(!wrong.text.includes(KEY));
      const health = await request(`${server.baseUrl}/health`);
      assert.equal(health.status, 200);
      assert.deepEqual(health.json, { status: 'healthy' });
    });
    it('X-Request-ID is echoed or generated; unknown routes and ids are 404', async () => {
      const echoed = await api('/v1/sandboxes', { headers: { 'X-Request-ID': 'req-123' } });
      assert.equal(echoed.headers['x-request-id'], 'req-123');
      const generated = await api('/v1/nothing-here');
      assert.equal(generated.status, 404);
      assert.match(generated.headers['x-request-id'], /^[0-9a-f]{32}$/);
      for (const [method, p] of [['GET', '/v1/sandboxes/nope'], ['DELETE', '/v1/sandboxes/nope'], ['POST', '/v1/sandboxes/nope/pause'], ['GET', '/v1/sandboxes/nope/endpoints/44772']]) {
        const r = await api(p, { method });
        assert.equal(r.status, 404, `${method} ${p}`);
        assert.equal(r.json.code, 'DOCKER::SANDBOX_NOT_FOUND');
      }
    });
    it('host volumes outside allowedHostPaths are refused; ossfs is not supported', async () => {
      const r = await post(minimal({ volumes: [{ name: 'v', host: { path: '/etc' }, mountPath: '/mnt' }] }));
      assert.equal(r.status, 400);
      assert.equal(r.json.code, 'VOLUME::HOST_PATH_NOT_ALLOWED');
      const escape = await post(minimal({ volumes: [{ name: 'v', host: { path: hostDir }, mountPath: '/mnt', subPath: '../x' }] }));
      assert.equal(escape.status, 422);
      const link = path.join(hostDir, 'link-out');
      fs.symlinkSync('/etc', link);
      const viaLink = await post(minimal({ volumes: [{ name: 'v', host: { path: link }, mountPath: '/mnt' }] }));
      assert.equal(viaLink.status, 400);
      assert.equal(viaLink.json.code, 'VOLUME::HOST_PATH_NOT_ALLOWED');
      const oss = await post(minimal({ volumes: [{ name: 'v', ossfs: { bucket: 'b', endpoint: 'e' }, mountPath: '/mnt' }] }));
      assert.equal(oss.status, 400);
      assert.match(oss.json.message, /ossfs/);
    });
  });
});
