// A create that pulls an image, per emulated runtime: on Kubernetes the workload is listed Pending while its pod
// pulls (the create waits, as upstream's does for Running/Allocated), Running after; a failed pull is the BatchSandbox
// phase Failed (PodFailed: ErrImagePull) and the create's 504 KUBERNETES::POD_READY_TIMEOUT; on Docker and without
// emulation nothing is listed until the sandbox runs. No sleeps: a loopback proxy in front of Debian's docker-registry
// holds one layer blob's response until the test has seen the state it waits for.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { startServer } from '../lib/dev-server/index.js';
import { OpenSandboxSandbox } from '../lib/index.js';
import { busyboxTar, makeTar, pushImage, startRegistry, writeOciLayout } from './helpers/images.js';
import { waitFor } from './helpers/poll.js';

const BUSYBOX = ['/bin/busybox', '/usr/bin/busybox'].find((p) => fs.existsSync(p));

/**
 * An HTTP proxy on loopback in front of `registry`. hold(digest) resolves, once a GET of that blob arrives, to
 * { release() (forwarded), fail() (404 BLOB_UNKNOWN, and every later request of it) }; everything else is forwarded.
 */
async function holdingProxy(registry) {
  const holds = new Map(); // digest -> resolve of hold()'s promise
  const failing = new Set();
  const forward = (req, res) => {
    const up = http.request({ host: '127.0.0.1', port: registry.port, method: req.method, path: req.url, headers: req.headers }, (r) => {
      res.writeHead(r.statusCode, r.headers);
      r.pipe(res);
    });
    up.on('error', () => res.destroy());
    req.pipe(up);
  };
  const notFound = (res) => {
    res.writeHead(404, { 'content-type': 'application/json' });
    res.end('{"errors":[{"code":"BLOB_UNKNOWN","message":"blob unknown to registry"}]}');
  };
  const server = http.createServer((req, res) => {
    const digest = /\/blobs\/(sha256:[a-f0-9]{64})$/.exec(req.url)?.[1];
    if (digest && failing.has(digest)) return notFound(res);
    const hold = digest && holds.get(digest);
    if (!hold) return forward(req, res);
    holds.delete(digest);
    hold({
      release: () => forward(req, res),
      fail: () => {
        failing.add(digest);
        notFound(res);
      },
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    host: `127.0.0.1:${server.address().port}`,
    hold: (digest) => new Promise((resolve) => holds.set(digest, resolve)),
    close: () => new Promise((resolve) => { server.closeAllConnections(); server.close(resolve); }),
  };
}

describe('images: a create that pulls, per emulated runtime (Pending while pulling on Kubernetes)', function () {
  this.timeout(90000);
  let work;
  let registry;
  let proxy;
  const servers = {};
  const localLog = []; // the local server's log lines
  const made = [];
  let n = 0;

  /** A new image (busybox + a layer of its own, so the store pulls it) pushed through; resolves { ref, layer digest }. */
  async function newImage() {
    const tag = `t${++n}`;
    const dir = path.join(work, `oci-${tag}`);
    const { layers } = writeOciLayout(dir, { tag, config: { Env: ['PATH=/bin'] }, layers: [{ tar: busyboxTar() }, { tar: makeTar([{ name: 'which', data: `${tag}\n` }]) }] });
    await pushImage(dir, tag, registry, `pend/img:${tag}`);
    const sizes = layers.map((d) => fs.statSync(path.join(dir, 'blobs', 'sha256', d.slice(7))).size);
    return { ref: `${proxy.host}/pend/img:${tag}`, tag, layer: layers[1], layers, sizes };
  }
  const api = (server, p, init) => fetch(`${server.baseUrl}${p}`, init);
  const createRaw = (server, ref) => api(server, '/v1/sandboxes', {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ image: { uri: ref }, entrypoint: ['tail', '-f', '/dev/null'], timeout: 600, resourceLimits: { cpu: '1', memory: '1Gi' } }),
  }).then(async (r) => ({ status: r.status, body: await r.json() }));
  const listed = async (server, ref) => (await (await api(server, '/v1/sandboxes')).json()).items.filter((i) => i.image?.uri === ref);

  before(async function () {
    if (!BUSYBOX) this.skip();
    work = fs.mkdtempSync(path.join(os.tmpdir(), 'osb-images-pending-'));
    registry = await startRegistry();
    proxy = await holdingProxy(registry);
    const base = { images: 'run', log: () => {} };
    servers.kubernetes = await startServer({ ...base, dataDir: path.join(work, 'k8s'), emulate: 'kubernetes', emulateDelays: { create: 0, ready: 0, endpoint: 0, createTimeout: 600000 } });
    servers.docker = await startServer({ ...base, dataDir: path.join(work, 'docker'), emulate: 'docker', emulateDelays: { create: 0 } });
    servers.local = await startServer({ ...base, dataDir: path.join(work, 'local'), log: (l) => localLog.push(l) });
  });

  after(async () => {
    for (const s of made) await s._destroy().catch(() => {});
    for (const s of Object.values(servers)) await s.close();
    await proxy?.close();
    await registry?.stop();
    if (work) fs.rmSync(work, { recursive: true, force: true });
  });

  it('kubernetes: listed Pending while its image pulls (no endpoint yet), Running once pulled; start() waits through it', async () => {
    const server = servers.kubernetes;
    const { ref, tag, layer } = await newImage();
    const held = proxy.hold(layer);
    const s = new OpenSandboxSandbox({ domain: server.domain, image: ref });
    made.push(s);
    let settled = false;
    const started = s._start().finally(() => { settled = true; });
    const blob = await held;
    const [item] = await listed(server, ref);
    assert.deepEqual([item.status.state, item.status.reason, item.status.message], ['Pending', 'BATCHSANDBOX_PENDING', 'BatchSandbox is pending allocation']);
    const got = await (await api(server, `/v1/sandboxes/${item.id}`)).json();
    assert.equal(got.status.state, 'Pending');
    const ep = await api(server, `/v1/sandboxes/${item.id}/endpoints/44772`);
    assert.deepEqual([ep.status, (await ep.json()).code], [404, 'KUBERNETES::POD_IP_NOT_AVAILABLE']);
    assert.equal(settled, false); // the create still waits, as upstream's waits for the pod
    // a second client attaching to it now (as a start whose create timed out does, by its label) waits through Pending
    const attached = new OpenSandboxSandbox({ domain: server.domain, sandboxId: item.id });
    const attaching = attached._start();
    blob.release();
    await started;
    assert.equal(s.opensandbox.sandboxId, item.id);
    assert.deepEqual(await attaching, { outcome: 'connected' });
    assert.equal((await attached.executeCommand('cat /which')).stdout, `${tag}\n`);
    const r = await s.executeCommand('cat /which /marker');
    assert.equal(r.stdout, `${tag}\nbusybox-image\n`);
    const after = await (await api(server, `/v1/sandboxes/${item.id}`)).json();
    assert.deepEqual([after.status.state, after.status.reason], ['Running', 'POD_READY_WITH_IP']);
  });

  it('kubernetes: a failed pull is listed Failed (ErrImagePull) and the create answers 504 KUBERNETES::POD_READY_TIMEOUT', async () => {
    const server = servers.kubernetes;
    const { ref, layer } = await newImage();
    const held = proxy.hold(layer);
    let settled = false;
    const created = createRaw(server, ref).finally(() => { settled = true; });
    (await held).fail();
    let item;
    await waitFor(async () => {
      [item] = await listed(server, ref);
      return item?.status.state === 'Failed';
    }, { message: 'the sandbox listed Failed' });
    assert.deepEqual({ state: item.status.state, reason: item.status.reason, message: item.status.message },
      { state: 'Failed', reason: 'FAILED', message: `1/1 observed pods failed; primary reason=ErrImagePull; sample pod=${item.id}-0` });
    assert.equal(settled, false); // upstream's create waits for Running until sandbox_create_timeout_seconds
    assert.equal((await api(server, `/v1/sandboxes/${item.id}`, { method: 'DELETE' })).status, 204);
    const { status, body } = await created;
    assert.equal(status, 504);
    assert.equal(body.code, 'KUBERNETES::POD_READY_TIMEOUT');
    assert.match(body.message, new RegExp(`^Timeout waiting for sandbox ${item.id} to be Running with IP\\. Elapsed: \\d+\\.\\ds, Last state: Failed$`));
    assert.equal((await api(server, `/v1/sandboxes/${item.id}`)).status, 404);
    assert.deepEqual(await listed(server, ref), []);
  });

  for (const runtime of ['docker', 'local']) {
    it(`${runtime === 'local' ? 'no emulation' : 'docker'}: nothing listed while the image pulls; the create answers Running`, async () => {
      const server = servers[runtime];
      const { ref, tag, layer, layers, sizes } = await newImage();
      const held = proxy.hold(layer);
      let settled = false;
      const began = Date.now();
      const created = createRaw(server, ref).finally(() => { settled = true; });
      const blob = await held;
      assert.deepEqual(await listed(server, ref), []);
      assert.equal(settled, false);
      blob.release();
      const { status, body } = await created;
      assert.equal(status, 202);
      assert.equal(body.status.state, 'Running');
      const [item] = await listed(server, ref);
      assert.equal(item.id, body.id);
      const s = new OpenSandboxSandbox({ domain: server.domain, sandboxId: body.id });
      made.push(s);
      await s._start();
      assert.equal((await s.executeCommand('cat /which')).stdout, `${tag}\n`);
      if (runtime !== 'local') return;
      // the pull's progress in the log, bounded: one line per layer once done, and between those at most one per 2 s of
      // pulling (not one per chunk: the busybox layer alone is many)
      const lines = localLog.filter((l) => l.startsWith(`sandbox ${body.id}: pulling ${ref}: `)).map((l) => l.slice(`sandbox ${body.id}: pulling ${ref}: `.length));
      const perLayer = lines.filter((l) => l.startsWith('layer '));
      assert.deepEqual(perLayer.sort(), layers.map((d, i) => `layer ${d.slice(0, 19)} done, ${sizes[i]} bytes`).sort(), lines.join('\n'));
      assert.ok(lines.length - perLayer.length <= 1 + Math.floor((Date.now() - began) / 2000), lines.join('\n'));
    });
  }
});
