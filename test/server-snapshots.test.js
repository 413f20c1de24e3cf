// Snapshots API of the local OpenSandbox-compatible server over raw HTTP: capture (202 Creating -> Ready), the
// captured /workspace /tmp /root restored into a new sandbox (with and without entrypoint), list filters and
// pagination, delete, the spec's status codes and bodies, snapshots outliving their sandbox and a server restart on
// the same dataDir, the snapshot disk limit, and (disk bound) the copies of snapshot images made ahead for restores.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { startServer } from '../lib/dev-server/index.js';
import { mounts } from '../lib/dev-server/cgroups.js';
import { SNAPSHOT_SPARES, loopDevices } from '../lib/dev-server/disk.js';
import { waitFor } from './helpers/poll.js';
import { request, parseEvents } from './helpers/raw.js';

const KEY = 'snapshot-test-key';

describe('dev-server snapshots API', function () {
  this.timeout(60000);
  let server;
  let dataDir;
  const api = (p, opts = {}) => request(`${server.baseUrl}${p}`, { ...opts, headers: { 'OPEN-SANDBOX-API-KEY': KEY, 'Content-Type': 'application/json', ...opts.headers } });
  const start = (extra = {}) => startServer({ apiKey: KEY, dataDir, commandTailMs: 50, ...extra });

  async function createSandbox(body = { image: { uri: 'ubuntu:22.04' }, entrypoint: ['tail', '-f', '/dev/null'] }) {
    const r = await api('/v1/sandboxes', { method: 'POST', body: { resourceLimits: { cpu: '1' }, ...body } });
    assert.equal(r.status, 202, r.text);
    return r.json;
  }
  async function sh(id, command) {
    const ep = await api(`/v1/sandboxes/${id}/endpoints/44772`);
    assert.equal(ep.status, 200, ep.text);
    const r = await request(`http://${ep.json.endpoint}/command`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: { command } });
    assert.equal(r.status, 200, r.text);
    const events = parseEvents(r.text);
    assert.equal(events.at(-1).type, 'execution_complete', r.text);
    return events.filter(e => e.type === 'stdout').map(e => e.text).join('\n');
  }
  async function snapshot(id, body) {
    const r = await api(`/v1/sandboxes/${id}/snapshots`, { method: 'POST', ...(body === undefined ? {} : { body }) });
    assert.equal(r.status, 202, r.text);
    return r;
  }
  const ready = id => waitFor(async () => {
    const r = await api(`/v1/snapshots/${id}`);
    assert.notEqual(r.json.status.state, 'Failed', r.text);
    return r.json.status.state === 'Ready' && r.json;
  }, { timeoutMs: 30000, message: `snapshot ${id} Ready` });

  beforeEach(async () => {
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'osb-snap-'));
    server = await start();
  });
  afterEach(async () => {
    await server?.close();
    fs.rmSync(dataDir, { recursive: true, force: true });
  });

  it('captures a running sandbox (202 Creating, Location) and restores the captured files, not later changes', async () => {
    const sb = await createSandbox();
    await sh(sb.id, 'echo captured > /workspace/a.txt; mkdir -p /workspace/d && echo deep > /workspace/d/b; echo t > /tmp/t; echo r > /root/r');
    const r = await snapshot(sb.id, { name: 'before-import' });
    assert.equal(r.headers.location, `/v1/snapshots/${r.json.id}`);
    assert.deepEqual(Object.keys(r.json).sort(), ['createdAt', 'id', 'name', 'sandboxId', 'status']);
    assert.equal(r.json.sandboxId, sb.id);
    assert.equal(r.json.name, 'before-import');
    assert.equal(r.json.status.state, 'Creating');
    assert.equal(r.json.status.reason, 'snapshot_accepted');
    const snap = await ready(r.json.id);
    assert.equal(snap.status.reason, 'snapshot_runtime_ready');
    assert.equal(snap.createdAt, r.json.createdAt);
    // the source keeps running and changing; the snapshot does not
    await sh(sb.id, 'echo modified > /workspace/a.txt; rm /workspace/d/b; echo new > /workspace/new');
    const restored = await createSandbox({ snapshotId: snap.id });
    assert.deepEqual(restored.entrypoint, ['tail', '-f', '/dev/null']);
    assert.equal(await sh(restored.id, 'cat /workspace/a.txt /workspace/d/b /tmp/t /root/r; ls /workspace'), 'captured\ndeep\nt\nr\na.txt\nd');
    // the restored files are the new sandbox's own (a root-started server gives each sandbox its own host uid)
    assert.equal(await sh(restored.id, 'echo changed >> /workspace/d/b && rm /root/r && stat -c %u:%g /workspace/a.txt /workspace/d'), '0:0\n0:0');
    const got = await api(`/v1/sandboxes/${restored.id}`);
    assert.equal(got.json.snapshotId, snap.id);
    assert.equal(got.json.image, undefined);
    assert.equal(await sh(sb.id, 'cat /workspace/a.txt'), 'modified');
  });

  it('an unnamed snapshot (no body, or {}) has no name; two captures at once both complete; restoring with an entrypoint runs it', async () => {
    const sb = await createSandbox();
    await sh(sb.id, 'echo x > /workspace/x');
    const a = await snapshot(sb.id);
    const b = await snapshot(sb.id, {});
    for (const s of [a, b]) assert.equal('name' in s.json, false);
    await ready(a.json.id);
    await ready(b.json.id);
    assert.equal(await sh(sb.id, 'echo still-running'), 'still-running'); // two captures in a row, then it continues
    const restored = await createSandbox({ snapshotId: a.json.id, entrypoint: ['sh', '-c', 'cp /workspace/x /workspace/copied; exec sleep 600'] });
    assert.deepEqual(restored.entrypoint, ['sh', '-c', 'cp /workspace/x /workspace/copied; exec sleep 600']);
    await waitFor(async () => (await sh(restored.id, 'cat /workspace/copied 2>/dev/null')) === 'x', { timeoutMs: 15000, message: 'entrypoint ran' });
  });

  it('status codes and bodies: unknown sandbox/snapshot 404, paused sandbox 409, bad body 422, both sources 422', async () => {
    const missing = await api('/v1/sandboxes/nope/snapshots', { method: 'POST', body: {} });
    assert.equal(missing.status, 404);
    assert.deepEqual(missing.json, { code: 'DOCKER::SANDBOX_NOT_FOUND', message: 'Sandbox nope not found.' });
    for (const p of ['/v1/snapshots/nope', '/snapshots/nope']) {
      const r = await api(p);
      assert.equal(r.status, 404);
      assert.deepEqual(r.json, { code: 'SNAPSHOT::NOT_FOUND', message: 'Snapshot nope not found' });
    }
    assert.equal((await api('/v1/snapshots/nope', { method: 'DELETE' })).status, 404);
    const fromMissing = await api('/v1/sandboxes', { method: 'POST', body: { snapshotId: 'nope', resourceLimits: {} } });
    assert.equal(fromMissing.status, 404);
    assert.deepEqual(fromMissing.json, { code: 'SNAPSHOT::NOT_FOUND', message: 'Snapshot nope not found' });
    const sb = await createSandbox();
    const extra = await api(`/v1/sandboxes/${sb.id}/snapshots`, { method: 'POST', body: { name: 'x', ttl: 5 } });
    assert.equal(extra.status, 422);
    assert.deepEqual(extra.json.detail.map(d => [d.type, d.loc]), [['extra_forbidden', ['body', 'ttl']]]);
    const empty = await api(`/v1/sandboxes/${sb.id}/snapshots`, { method: 'POST', body: { name: '' } });
    assert.equal(empty.status, 422);
    assert.equal(empty.json.detail[0].type, 'string_too_short');
    const both = await api('/v1/sandboxes', { method: 'POST', body: { snapshotId: 's', image: { uri: 'x' }, entrypoint: ['x'], resourceLimits: {} } });
    assert.equal(both.status, 422);
    assert.equal((await api(`/v1/sandboxes/${sb.id}/pause`, { method: 'POST' })).status, 202);
    const paused = await api(`/v1/sandboxes/${sb.id}/snapshots`, { method: 'POST', body: {} });
    assert.equal(paused.status, 409);
    assert.deepEqual(paused.json, { code: 'SNAPSHOT::INVALID_SOURCE_STATE', message: 'Snapshot can only be created from a Running sandbox.' });
  });

  it('lists with sandboxId and state filters and pagination, newest first; delete is 204 then 404', async () => {
    const one = await createSandbox();
    const two = await createSandbox();
    const ids = [];
    for (const sb of [one, two, one]) {
      const r = await snapshot(sb.id, { name: `n${ids.length}` });
      await ready(r.json.id);
      ids.push(r.json.id);
    }
    const all = await api('/v1/snapshots');
    assert.equal(all.status, 200);
    assert.deepEqual(all.json.items.map(s => s.id), [...ids].reverse());
    assert.deepEqual(all.json.pagination, { page: 1, pageSize: 20, totalItems: 3, totalPages: 1, hasNextPage: false });
    const ofOne = await api(`/v1/snapshots?sandboxId=${one.id}&state=Ready&state=Failed`);
    assert.deepEqual(ofOne.json.items.map(s => s.id), [ids[2], ids[0]]);
    assert.equal((await api('/v1/snapshots?state=Creating')).json.items.length, 0);
    const p2 = await api('/v1/snapshots?page=2&pageSize=2');
    assert.deepEqual(p2.json.items.map(s => s.id), [ids[0]]);
    assert.deepEqual(p2.json.pagination, { page: 2, pageSize: 2, totalItems: 3, totalPages: 2, hasNextPage: false });
    assert.equal((await api('/v1/snapshots?pageSize=0')).status, 422);
    const del = await api(`/v1/snapshots/${ids[1]}`, { method: 'DELETE' });
    assert.equal(del.status, 204);
    assert.equal(del.text, '');
    assert.equal((await api(`/v1/snapshots/${ids[1]}`)).status, 404);
    assert.equal((await api('/v1/snapshots')).json.pagination.totalItems, 2);
  });

  it('snapshots outlive their sandbox and a server restart on the same dataDir', async () => {
    const sb = await createSandbox();
    await sh(sb.id, 'echo kept > /workspace/k');
    const r = await snapshot(sb.id, { name: 'keep' });
    const snap = await ready(r.json.id);
    assert.equal((await api(`/v1/sandboxes/${sb.id}`, { method: 'DELETE' })).status, 204);
    assert.deepEqual((await api(`/v1/snapshots/${snap.id}`)).json, snap);
    await server.close();
    server = await start();
    assert.deepEqual((await api(`/v1/snapshots/${snap.id}`)).json, snap);
    assert.deepEqual((await api('/v1/snapshots')).json.items, [snap]);
    const restored = await createSandbox({ snapshotId: snap.id });
    assert.equal(await sh(restored.id, 'cat /workspace/k'), 'kept');
    // a capture cut by a restart is Failed afterwards; an interrupted delete is finished
    await server.close();
    const record = (id, state) => {
      fs.mkdirSync(path.join(dataDir, 'snapshots', id, 'data', 'workspace'), { recursive: true });
      fs.writeFileSync(path.join(dataDir, 'snapshots', id, 'snapshot.json'),
        JSON.stringify({ id, sandboxId: sb.id, createdAt: Date.now(), sizeBytes: 0, status: { state, reason: 'x', message: 'x', lastTransitionAt: new Date().toISOString() } }));
    };
    record('cut-capture', 'Creating');
    record('cut-delete', 'Deleting');
    server = await start();
    const cut = await api('/v1/snapshots/cut-capture');
    assert.deepEqual([cut.json.status.state, cut.json.status.reason], ['Failed', 'snapshot_recovery_failed']);
    assert.equal(fs.existsSync(path.join(dataDir, 'snapshots', 'cut-capture', 'data')), false);
    assert.equal((await api('/v1/snapshots/cut-delete')).status, 404);
    assert.equal(fs.existsSync(path.join(dataDir, 'snapshots', 'cut-delete')), false);
  });

  it('with a disk bound a snapshot keeps the disk image: a restore of the same size mounts a copy of it, another size copies the files; both exact', async () => {
    assert.equal(process.getuid(), 0, 'the disk bound needs root (loop-mounted images); CI runs as root');
    const sb = await createSandbox();
    const make = 'mkdir -p /workspace/m/d{0..49} && for i in $(seq 1 2000); do echo "f$i" > /workspace/m/d$((i % 50))/f$i; done; '
      + 'printf "\\000\\377x" > /workspace/bin; chmod 640 /workspace/bin; ln -s m/d7 /workspace/link; echo t > /tmp/t; echo r > /root/r';
    await sh(sb.id, make);
    const probe = 'find /workspace/m -type f | wc -l; cat /workspace/m/d7/f1007; od -An -tx1 /workspace/bin; stat -c %a /workspace/bin; '
      + 'readlink /workspace/link; cat /tmp/t /root/r; ls /workspace/link | wc -l';
    const expected = await sh(sb.id, probe);
    assert.equal(expected, '2000\nf1007\n 00 ff 78\n640\nm/d7\nt\nr\n40');
    const snap = await ready((await snapshot(sb.id)).json.id);
    assert.ok(fs.existsSync(path.join(dataDir, 'snapshots', snap.id, 'disk.img')), 'the snapshot has no disk image');
    // its journal replayed at capture (Disks.settle), not at every restore's mount
    const features = spawnSync('dumpe2fs', ['-h', path.join(dataDir, 'snapshots', snap.id, 'disk.img')], { encoding: 'utf8', env: { PATH: `/usr/sbin:/sbin:${process.env.PATH}` } });
    assert.equal(features.status, 0, features.stderr);
    assert.match(features.stdout, /^Filesystem features:\s+has_journal /m);
    assert.doesNotMatch(features.stdout, /needs_recovery/);
    const inodes = 'stat -c %i /workspace/bin /workspace/m/d7/f1007 /root/r';
    const sourceInodes = await sh(sb.id, inodes);
    await sh(sb.id, 'rm -rf /workspace/m'); // later changes of the source are not restored
    for (const resourceLimits of [{ cpu: '1' }, { cpu: '1', 'ephemeral-storage': '3Gi' }]) {
      const r = await api('/v1/sandboxes', { method: 'POST', body: { snapshotId: snap.id, entrypoint: ['tail', '-f', '/dev/null'], resourceLimits } });
      assert.equal(r.status, 202, r.text);
      assert.equal(await sh(r.json.id, probe), expected, JSON.stringify(resourceLimits)); // execd listens: its run dir is fresh
      // the same size restores the image itself (the same inodes), another size a copy of the files
      if (!resourceLimits['ephemeral-storage']) assert.equal(await sh(r.json.id, inodes), sourceInodes);
      assert.equal(await sh(r.json.id, 'echo new > /workspace/n && cat /workspace/n'), 'new');
    }
  });

  it('with a disk bound a restore takes a copy of the snapshot image made ahead (after its capture or last restore): exactly its files, owned by the sandbox; dropped on delete, eviction, a failed create and close', async () => {
    assert.equal(process.getuid(), 0, 'the disk bound needs root (loop-mounted images); CI runs as root');
    assert.equal(SNAPSHOT_SPARES, 2);
    await server.close();
    const lines = [];
    server = await start({ log: (line) => lines.push(line) });
    const real = fs.realpathSync(dataDir);
    const disksDir = path.join(real, 'disks');
    const spareFiles = () => fs.readdirSync(disksDir).flatMap((inst) => fs.readdirSync(path.join(disksDir, inst))
      .filter((n) => /^spare-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.img$/.test(n)).map((n) => path.join(disksDir, inst, n)));
    // three snapshots of different contents
    const snaps = {};
    for (const name of ['A', 'B', 'C']) {
      const sb = await createSandbox();
      const n = { A: 30, B: 40, C: 50 }[name];
      await sh(sb.id, `echo ${name} > /workspace/which; mkdir -p /workspace/t && for i in $(seq 1 ${n}); do echo $i > /workspace/t/f$i; done; ln -s t /workspace/l`);
      snaps[name] = (await ready((await snapshot(sb.id, { name })).json.id)).id;
      assert.equal((await api(`/v1/sandboxes/${sb.id}`, { method: 'DELETE' })).status, 204);
    }
    const expected = { A: 'A\n30\nt', B: 'B\n40\nt', C: 'C\n50\nt' };
    // restores `name`: its files exactly, every one (symlinks too) owned by the sandbox's host uid; how its disk was made
    const restore = async (name) => {
      const r = await api('/v1/sandboxes', { method: 'POST', body: { snapshotId: snaps[name], entrypoint: ['tail', '-f', '/dev/null'], resourceLimits: { cpu: '1' } } });
      assert.equal(r.status, 202, r.text);
      assert.equal(await sh(r.json.id, 'cat /workspace/which; ls /workspace/t | wc -l; readlink /workspace/l'), expected[name]);
      assert.equal(await sh(r.json.id, 'echo more >> /workspace/t/f1 && tail -n 1 /workspace/t/f1 && stat -c %u:%g /workspace/t/f1'), 'more\n0:0');
      const root = path.join(real, 'sb', r.json.id);
      const owner = fs.statSync(root).uid;
      assert.notEqual(owner, 0);
      const walk = (d) => fs.readdirSync(d, { withFileTypes: true }).flatMap((e) => [path.join(d, e.name), ...(e.isDirectory() ? walk(path.join(d, e.name)) : [])]);
      const files = walk(path.join(root, 'workspace'));
      assert.equal(files.length, 3 + expected[name].split('\n')[1] * 1);
      assert.deepEqual(files.filter((f) => fs.lstatSync(f).uid !== owner), []);
      const how = lines.map((l) => new RegExp(`^disk of sandbox ${r.json.id}: snapshot ${snaps[name]}'s image, (.*)$`).exec(l)?.[1]).filter(Boolean);
      assert.equal((await api(`/v1/sandboxes/${r.json.id}`, { method: 'DELETE' })).status, 204);
      return how.join();
    };
    const kept = (n) => waitFor(() => spareFiles().length === n && spareFiles(), { timeoutMs: 30000, message: `${n} spare images` });
    // the captures made copies for A and B (free places), none for C; private to the server like the sandboxes' images
    for (const f of await kept(2)) assert.equal(fs.statSync(f).mode & 0o777, 0o600, f);
    assert.equal(await restore('A'), 'the copy made ahead');
    assert.equal(await restore('A'), 'the copy made ahead'); // made again after each restore
    // C restored: the copy of the snapshot restored longest ago (B) goes for C's
    assert.equal(await restore('C'), 'copied now');
    await kept(2);
    assert.equal(await restore('B'), 'copied now'); // not another snapshot's; A's goes
    assert.equal(await restore('B'), 'the copy made ahead');
    assert.equal(await restore('C'), 'the copy made ahead');
    assert.equal(await restore('A'), 'copied now'); // B's goes
    // deleting a snapshot deletes its copy (C's and A's are kept now)
    await kept(2);
    assert.equal((await api(`/v1/snapshots/${snaps.C}`, { method: 'DELETE' })).status, 204);
    assert.equal(spareFiles().length, 1);
    assert.equal((await api('/v1/sandboxes', { method: 'POST', body: { snapshotId: snaps.C, resourceLimits: { cpu: '1' } } })).status, 404);
    assert.equal(await restore('A'), 'the copy made ahead');
    await kept(1);
    // a create that takes the copy and fails before its disk is made deletes it: the next restore copies again
    const refused = await api('/v1/sandboxes', { method: 'POST', body: { snapshotId: snaps.A, resourceLimits: { cpu: '1' }, volumes: [{ name: 'h', host: { path: '/etc' }, mountPath: '/mnt/h' }] } });
    assert.equal(refused.status, 400, refused.text);
    assert.equal(refused.json.code, 'VOLUME::HOST_PATH_NOT_ALLOWED');
    await kept(0);
    assert.equal(await restore('A'), 'copied now');
    await kept(1);
    // close: no image, mount or loop device of the server is left
    await server.close();
    server = null;
    assert.equal(fs.existsSync(disksDir), false);
    assert.deepEqual(mounts().filter((m) => m.mountPoint.startsWith(`${real}/`)), []);
    await waitFor(() => loopDevices().every((l) => !l.backing.startsWith(`${real}/`)), { timeoutMs: 10000, message: 'loop devices released' });
  });

  it('the snapshot disk limit counts the copies of images made ahead: none made where it has no room, given up for a capture that needs it', async () => {
    assert.equal(process.getuid(), 0, 'the disk bound needs root (loop-mounted images); CI runs as root');
    const sb = await createSandbox();
    await sh(sb.id, 'echo kept > /workspace/k');
    const snap = await ready((await snapshot(sb.id)).json.id);
    assert.equal((await api(`/v1/sandboxes/${sb.id}`, { method: 'DELETE' })).status, 204);
    await server.close();
    // what the snapshot occupies, as the server counts it: its data and its image (allocated blocks)
    const dir = path.join(dataDir, 'snapshots', snap.id);
    const du = (p) => (fs.lstatSync(p).isDirectory() ? fs.readdirSync(p).reduce((n, e) => n + du(path.join(p, e)), 0) : fs.lstatSync(p).blocks * 512);
    const size = du(path.join(dir, 'data')) + du(path.join(dir, 'disk.img'));
    const image = fs.statSync(path.join(dir, 'disk.img')).blocks * 512;
    assert.ok(image > 2 * 1048576, `${image}`); // the file system's metadata: more than the 1 MiB written below
    const spareFiles = () => fs.readdirSync(path.join(dataDir, 'disks')).flatMap((inst) => fs.readdirSync(path.join(dataDir, 'disks', inst)).filter((n) => /^spare-.{36}\.img$/.test(n)));
    const restore = async (lines) => {
      const r = await api('/v1/sandboxes', { method: 'POST', body: { snapshotId: snap.id, resourceLimits: { cpu: '1' } } });
      assert.equal(r.status, 202, r.text);
      assert.equal(await sh(r.json.id, 'cat /workspace/k'), 'kept');
      assert.equal((await api(`/v1/sandboxes/${r.json.id}`, { method: 'DELETE' })).status, 204);
      return lines.map((l) => new RegExp(`^disk of sandbox ${r.json.id}: .*image, (.*)$`).exec(l)?.[1]).filter(Boolean).join();
    };
    // room for the snapshot but not for a copy of its image as well
    let lines = [];
    server = await start({ maxSnapshotBytes: size + image - 1, log: (l) => lines.push(l) });
    assert.equal(await restore(lines), 'copied now');
    assert.deepEqual(spareFiles(), []);
    assert.ok(lines.some((l) => l.startsWith(`no copy of snapshot ${snap.id}'s image made ahead: its ${image} bytes would exceed the server's snapshot disk limit`)), lines.join('\n'));
    assert.equal(await restore(lines), 'copied now');
    await server.close();
    // room for both: the copy is made; a capture that needs its room gets it
    lines = [];
    server = await start({ maxSnapshotBytes: size + image, log: (l) => lines.push(l) });
    assert.equal(await restore(lines), 'copied now');
    assert.equal(spareFiles().length, 1);
    assert.equal(await restore(lines), 'the copy made ahead');
    assert.equal(spareFiles().length, 1);
    const other = await createSandbox();
    await sh(other.id, 'head -c 1048576 /dev/urandom > /workspace/r'); // data that fits only without the copy
    const second = await snapshot(other.id);
    const failedOrReady = await waitFor(async () => {
      const g = await api(`/v1/snapshots/${second.json.id}`);
      return g.json.status.state !== 'Creating' && g.json;
    }, { timeoutMs: 30000, message: 'capture done' });
    assert.deepEqual(spareFiles(), []);
    // without the disk image (no room for it beside the first snapshot), its files: restored by copying them
    assert.equal(failedOrReady.status.state, 'Ready', JSON.stringify(failedOrReady));
    assert.equal(fs.existsSync(path.join(dataDir, 'snapshots', second.json.id, 'disk.img')), false);
  });

  it('a capture over the snapshot disk limit fails (Failed, reason and message); the sandbox keeps running', async () => {
    await server.close();
    server = await start({ maxSnapshotBytes: 64 * 1024 });
    const sb = await createSandbox();
    await sh(sb.id, 'head -c 200000 /dev/zero > /workspace/big');
    const r = await snapshot(sb.id, { name: 'too-big' });
    const failed = await waitFor(async () => {
      const g = await api(`/v1/snapshots/${r.json.id}`);
      return g.json.status.state === 'Failed' && g.json;
    }, { timeoutMs: 30000, message: 'capture failed' });
    assert.equal(failed.status.reason, 'snapshot_runtime_failed');
    assert.match(failed.status.message, /exceed the server's snapshot disk limit/);
    assert.equal(await sh(sb.id, 'stat -c %s /workspace/big'), '200000');
    const restore = await api('/v1/sandboxes', { method: 'POST', body: { snapshotId: failed.id, resourceLimits: {} } });
    assert.equal(restore.status, 409);
    assert.deepEqual(restore.json, { code: 'SNAPSHOT::NOT_READY', message: `Snapshot ${failed.id} is not ready for restore.` });
    assert.equal((await api(`/v1/snapshots/${failed.id}`, { method: 'DELETE' })).status, 204);
    await sh(sb.id, 'rm /workspace/big; echo small > /workspace/s');
    await ready((await snapshot(sb.id)).json.id);
  });
});
