// Sandboxes on container images (images 'run'): the image's layers, read-only and shared, under the sandbox's own
// writable layer (runner.js, src/execd/rootfs.c). Every image here is pushed to Debian's docker-registry on loopback
// and pulled by the server's own image store (lib/dev-server/images/): a two-layer busybox image (a marker file, a
// setuid-marked file, a second layer over it), then busybox and python3 images through the same store.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync, spawn } from 'node:child_process';
import { startServer } from '../lib/dev-server/index.js';
import { resolveImageUser } from '../lib/dev-server/images/user.js';
import { BUSYBOX, writeLayerImage } from './helpers/image-layers.js';
import { letUserRunCheckout } from './helpers/other-user.js';
import { busyboxTar, makeTar, pushImage, pythonLayout, startRegistry, writeOciLayout } from './helpers/images.js';
import { OpenSandboxFilesystem, OpenSandboxSandbox, Template } from '../lib/index.js';
import { waitFor } from './helpers/poll.js';

const ROOT = process.getuid() === 0;
/**
 * Changes to an image sandbox's files that its writable layer records: a file of the image modified, a new one,
 * /etc/passwd (of the image) deleted: a whiteout; /app (the top layer's /app/top) removed and made again: an opaque
 * directory; a symlink to a host path (copied as the link, never followed) and a new directory.
 */
const CHANGE_LAYER = `echo changed > /marker; echo new > /etc/new; rm /etc/passwd; rm -rf /app; mkdir /app; echo fresh > /app/fresh;
  ln -s /etc/shadow /root/link; mkdir -p /root/d; echo deep > /root/d/f`;
/** [command, its output] showing CHANGE_LAYER's changes (in the sandbox that made them, or one restored from its snapshot). */
const CHANGED = ['cat /marker /etc/new; test -e /etc/passwd; echo $?; ls -A /app; readlink /root/link; cat /root/d/f', 'changed\nnew\n1\nfresh\n/etc/shadow\ndeep'];

/** A started OpenSandboxSandbox of `image` on `server`, remembered in `made` (each suite's after() destroys them). */
async function startSandbox(server, made, image, opts) {
  const s = new OpenSandboxSandbox({ domain: server.domain, image, ...opts });
  made.push(s);
  await s._start();
  return s;
}

/** `cmd`'s trimmed stdout; a non-zero exit fails the test with its stderr. */
async function sh(s, cmd) {
  const r = await s.executeCommand(cmd);
  assert.equal(r.exitCode, 0, r.stderr);
  return r.stdout.trim();
}

describe('images: sandboxes on a container image', function () {
  this.timeout(60000);
  let work;
  let registry;
  let server;
  let image; // <registry>/bar/bb:1
  const made = [];
  const make = (opts = {}) => startSandbox(server, made, image, opts);
  const held = () => server.images.stats().images.find((i) => i.reference === image)?.held ?? 0;

  before(async function () {
    if (!BUSYBOX) this.skip();
    work = fs.mkdtempSync(path.join(os.tmpdir(), 'osb-images-'));
    fs.chmodSync(work, 0o755);
    registry = await startRegistry();
    writeLayerImage(path.join(work, 'oci'));
    await pushImage(path.join(work, 'oci'), 'bb', registry, 'bar/bb:1');
    image = `${registry.host}/bar/bb:1`;
    server = await startServer({ images: 'run', dataDir: path.join(work, 'data'), serverVersion: '0.1.13', log: () => {} });
  });

  after(async () => {
    for (const s of made) await s._destroy().catch(() => {});
    await server?.close();
    await registry?.stop();
    if (work) fs.rmSync(work, { recursive: true, force: true });
  });

  it("has the image's files, not the host's, and the image config (Env merged with the create's)", async () => {
    const s = await make({ env: { BOTH: 'create' } });
    assert.equal(await sh(s, 'cat /marker'), 'from the image');
    assert.equal(await sh(s, 'cat /app/top'), 'top layer');
    const r = await s.executeCommand('test -e /etc/os-release; echo $?');
    assert.equal(r.stdout.trim(), '1');
    assert.equal(await sh(s, 'echo $FROM_IMAGE $BOTH $HOME'), '1 create /root');
    assert.equal(await sh(s, 'id -u'), '0');
  });

  it('writes go to its own layer: the shared layers and other sandboxes of the image do not see them', async () => {
    const a = await make();
    const b = await make();
    assert.equal(await sh(a, 'echo changed > /marker; echo new > /etc/new; rm /app/top; cat /marker; ls /app'), 'changed');
    assert.equal(await sh(b, 'cat /marker; test -e /etc/new; echo $?'), 'from the image\n1');
    assert.equal(await sh(b, 'cat /app/top'), 'top layer');
    const osfs = new OpenSandboxFilesystem({ sandbox: a, basePath: '/tmp/fs' });
    await osfs.writeFile('x.txt', 'hello');
    assert.equal(await osfs.readFile('x.txt', { encoding: 'utf8' }), 'hello');
    assert.equal(await sh(a, 'cat /tmp/fs/x.txt'), 'hello');
    const p = await a.processes.spawn('sleep 30');
    assert.ok((await a.processes.list()).some((x) => x.pid === p.pid));
    await p.kill();
  });

  it('no setuid from a layer, no host root, no mount', async () => {
    const s = await make();
    assert.equal(await sh(s, 'stat -c %a /bin/suid; /bin/suid'), '755\n0'); // 4755 in the layer's tar
    const r = await s.executeCommand('mount -t tmpfs none /mnt 2>&1; echo rc=$?');
    assert.match(r.stdout, /rc=[1-9]/);
    assert.equal(await sh(s, 'ls /proc/1/root/ | grep -c os-release || true'), '0');
  });

  it('a snapshot restores its writable layer over the image: modified, new, deleted (whiteout), opaque dir, symlink', async () => {
    const src = await make();
    await sh(src, CHANGE_LAYER);
    const [check, expected] = CHANGED;
    const snap = await src.opensandbox.createSnapshot({ wait: true, timeoutMs: 30000 });
    assert.equal(await sh(src, check), expected); // the source runs on, unchanged
    const restored = [await make({ snapshotId: snap.id, image: undefined })];
    // root: every sandbox has a disk; one of another size gets the layer copied file by file instead of the disk image
    if (ROOT) restored.push(await make({ snapshotId: snap.id, image: undefined, resources: { cpu: '1', memory: '1Gi', 'ephemeral-storage': '64Mi' } }));
    for (const r of restored) {
      assert.equal(await sh(r, check), expected);
      assert.equal(await sh(r, 'cat /app/top 2>&1; echo $FROM_IMAGE'), 'cat: can\'t open \'/app/top\': No such file or directory\n1');
    }
    // a snapshot of a restored sandbox (its layer holds the restored whiteouts and opaque dir) restores as well
    await sh(restored[0], 'rm /etc/new; echo again > /app/fresh');
    const again = await restored[0].opensandbox.createSnapshot({ wait: true, timeoutMs: 30000 });
    const r2 = await make({ snapshotId: again.id, image: undefined });
    assert.equal(await sh(r2, 'cat /marker; test -e /etc/passwd || test -e /etc/new || echo gone; ls -A /app; cat /app/fresh'), 'changed\ngone\nfresh\nagain');
    // the snapshot's record keeps the image by digest; it is held until the snapshot is deleted
    const rec = JSON.parse(fs.readFileSync(path.join(work, 'data', 'snapshots', snap.id, 'snapshot.json'), 'utf8'));
    const { digest } = server.images.stats().images.find((i) => i.reference === image);
    assert.match(digest, /^sha256:[a-f0-9]{64}$/);
    assert.deepEqual(rec.image, { reference: image, digest, key: image });
    const before = held();
    await src.opensandbox.deleteSnapshot(snap.id);
    assert.equal(held(), before - 1);
  });

  it('a failed pull is 500 DOCKER::SANDBOX_IMAGE_PULL_FAILED with the reason', async () => {
    const res = await fetch(`${server.baseUrl}/v1/sandboxes`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ image: { uri: `${registry.host}/missing:1` }, entrypoint: ['tail', '-f', '/dev/null'], timeout: 60, resourceLimits: { cpu: '1', memory: '1Gi' } }),
    });
    assert.equal(res.status, 500);
    const body = await res.json();
    assert.equal(body.code, 'DOCKER::SANDBOX_IMAGE_PULL_FAILED');
    // the registry's reason: its status and its error code (docker-registry says MANIFEST_UNKNOWN for a missing repository)
    assert.equal(body.message, `Failed to pull image ${registry.host}/missing:1: pulling ${registry.host}/missing:1: 404 Not Found from registry ${registry.host}: MANIFEST_UNKNOWN: manifest unknown`);
  });

  (ROOT ? it : it.skip)('a server run by another user (nobody): the layers owned by it, root in the sandbox, writes its own, snapshots restore', async () => {
    letUserRunCheckout(65534);
    const dir = fs.mkdtempSync(path.join(work, 'nobody-'));
    fs.chownSync(dir, 65534, 65534);
    const child = spawn(process.execPath, [path.resolve('test/helpers/image-layers.js'), dir], { uid: 65534, gid: 65534, stdio: ['pipe', 'pipe', 'inherit'], env: process.env });
    try {
      const domain = await new Promise((resolve, reject) => {
        let out = '';
        child.stdout.on('data', (b) => {
          out += b;
          if (out.includes('\n')) resolve(JSON.parse(out.split('\n')[0]).domain);
        });
        child.on('exit', (code) => reject(new Error(`server exited ${code}`)));
      });
      const s = new OpenSandboxSandbox({ domain, image });
      made.push(s);
      await s._start();
      assert.equal(await sh(s, 'cat /marker; id -u; echo w > /marker; cat /marker'), 'from the image\n0\nw');
      // the layer in its store: owned by nobody, unchanged by the sandbox's write
      const layersDir = path.join(dir, 'data', 'images', 'layers');
      const markers = fs.readdirSync(layersDir).map((hex) => path.join(layersDir, hex, 'root', 'marker')).filter((f) => fs.existsSync(f));
      assert.equal(markers.length, 1);
      assert.equal(fs.readFileSync(markers[0], 'utf8'), 'from the image\n');
      assert.equal(fs.statSync(markers[0]).uid, 65534);
      // its writable layer copied as the server's user (no disk bound without root): whiteouts and opaque dirs too,
      // and a directory that user cannot read (mode 000)
      await sh(s, `${CHANGE_LAYER}; mkdir /root/locked; echo kept > /root/locked/f; busybox chmod 000 /root/locked`);
      const snap = await s.opensandbox.createSnapshot({ wait: true, timeoutMs: 30000 });
      const sbDir = path.join(dir, 'data', 'sb', s.opensandbox.sandboxId);
      await s._destroy();
      assert.equal(fs.existsSync(sbDir), false); // removed, its mode 000 directory too
      const r = new OpenSandboxSandbox({ domain, snapshotId: snap.id });
      made.push(r);
      await r._start();
      assert.equal(await sh(r, CHANGED[0]), CHANGED[1]);
      assert.equal(await sh(r, 'busybox stat -c %a /root/locked; busybox chmod 700 /root/locked; cat /root/locked/f'), '0\nkept');
      await r._destroy();
      assert.equal((await fetch(`http://${domain}/v1/snapshots/${snap.id}`, { method: 'DELETE' })).status, 204);
      assert.equal(fs.existsSync(path.join(dir, 'data', 'snapshots', snap.id)), false);
    } finally {
      child.stdin.end();
      await new Promise((resolve) => (child.exitCode !== null ? resolve() : child.on('exit', resolve)));
    }
    assert.equal(child.exitCode, 0); // its close() removed every sandbox directory
  });
});

describe('images: sandboxes on images pulled from a loopback registry (the image store)', function () {
  this.timeout(60000);
  let work;
  let registry;
  let server;
  const made = [];
  const make = (image, opts = {}) => startSandbox(server, made, image, opts);
  let serverOptions;

  before(async function () {
    if (!BUSYBOX) this.skip();
    work = fs.mkdtempSync(path.join(os.tmpdir(), 'osb-images-reg-'));
    serverOptions = { images: 'run', dataDir: path.join(work, 'data'), allowedHostPaths: [path.join(work, 'allowed')], log: () => {} };
    registry = await startRegistry();
    writeOciLayout(path.join(work, 'oci'), { tag: 'bb', config: { Env: ['PATH=/bin', 'FROM_IMAGE=yes'], WorkingDir: '/' }, layers: [{ tar: busyboxTar() }] });
    await pushImage(path.join(work, 'oci'), 'bb', registry, 'bar/bb:1');
    await pushImage(path.join(work, 'oci'), 'bb', registry, 'bar/snap:1');
    await pushImage(await pythonLayout(), 'py', registry, 'bar/py:1');
    fs.mkdirSync(path.join(work, 'allowed'));
    server = await startServer(serverOptions);
  });

  after(async () => {
    for (const s of made) await s._destroy().catch(() => {});
    await server?.close();
    await registry?.stop();
    if (work) fs.rmSync(work, { recursive: true, force: true });
  });

  it("a busybox image: the image's /marker and /etc/os-release, not the host's; ten sandboxes store its layers once", async () => {
    const image = `${registry.host}/bar/bb:1`;
    const all = await Promise.all(Array.from({ length: 10 }, () => make(image)));
    for (const s of all) assert.equal(await sh(s, 'cat /marker /etc/os-release; echo $FROM_IMAGE'), 'busybox-image\nNAME=busybox-test\nyes');
    assert.equal(fs.readdirSync(path.join(work, 'data', 'images', 'layers')).length, 1);
  });

  it("a python3 image runs python3 -c with the image's python", async () => {
    const s = await make(`${registry.host}/bar/py:1`);
    const out = await sh(s, `python3 -c 'import sys; print(sys.version_info[:2], sys.executable)'`);
    assert.match(out, /^\(3, 11\) \/usr\/bin\/python3/);
  });

  it('a pull of a missing image is 500 DOCKER::SANDBOX_IMAGE_PULL_FAILED naming the registry', async () => {
    const res = await fetch(`${server.baseUrl}/v1/sandboxes`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ image: { uri: `${registry.host}/bar/none:1` }, entrypoint: ['tail', '-f', '/dev/null'], timeout: 60, resourceLimits: { cpu: '1', memory: '1Gi' } }),
    });
    assert.equal(res.status, 500);
    const body = await res.json();
    assert.equal(body.code, 'DOCKER::SANDBOX_IMAGE_PULL_FAILED');
    assert.match(body.message, new RegExp(registry.host.replace(/\./g, '\\.')));
  });

  it("an oci: or docker-archive: image is read only under an allowed host path (400 IMAGE::HOST_PATH_NOT_ALLOWED otherwise)", async () => {
    const create = (uri) => fetch(`${server.baseUrl}/v1/sandboxes`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ image: { uri }, entrypoint: ['tail', '-f', '/dev/null'], timeout: 60, resourceLimits: { cpu: '1', memory: '1Gi' } }),
    });
    // the layout exists (made for the pushes) but lies outside the allowed path; a symlink from inside does not help
    fs.symlinkSync(path.join(work, 'oci'), path.join(work, 'allowed', 'link'));
    for (const uri of [`oci:${path.join(work, 'oci')}:bb`, `oci:${path.join(work, 'allowed', 'link')}:bb`, 'docker-archive:/etc/passwd', `oci:${path.join(work, 'data')}`]) {
      const res = await create(uri);
      assert.equal(res.status, 400, uri);
      const body = await res.json();
      assert.equal(body.code, 'IMAGE::HOST_PATH_NOT_ALLOWED', uri);
    }
    fs.cpSync(path.join(work, 'oci'), path.join(work, 'allowed', 'oci'), { recursive: true });
    const s = await make(`oci:${path.join(work, 'allowed', 'oci')}:bb`);
    assert.equal(await sh(s, 'cat /marker'), 'busybox-image');
  });

  it('a template on an image: built once on it (a file of the image deleted), later starts restore it without a step', async () => {
    const tpl = Template({ image: `${registry.host}/bar/bb:1` }).runCmd('echo ran >> /count; busybox rm /etc/os-release').withFamily(`img-${process.pid}`);
    const check = ['cat /count /marker; test -e /etc/os-release; echo $?', 'ran\nbusybox-image\n1'];
    const started = [];
    for (let i = 0; i < 2; i++) {
      const s = new OpenSandboxSandbox({ domain: server.domain, template: tpl });
      made.push(s);
      started.push(await s._start());
      assert.equal(await sh(s, check[0]), check[1]);
    }
    const { snapshotId } = started[0].restoredFrom;
    assert.equal(started[0].templateBuilt, true);
    assert.deepEqual(started[1], { outcome: 'created', restoredFrom: { kind: 'template', templateId: tpl.templateId, snapshotId } });
    assert.equal((await fetch(`${server.baseUrl}/v1/snapshots/${snapshotId}`, { method: 'DELETE' })).status, 204); // its image's hold too
  });

  it("the image's User as Docker applies it: a name (its uid, gid and HOME from /etc/passwd), uid:group, a uid missing from passwd; a missing name fails the start", async function () {
    if (!ROOT) this.skip(); // run as root only: a non-root server's nested user namespace is not exercised here
    const etc = { tar: makeTar([{ name: 'etc/', type: 'dir' }, { name: 'etc/passwd', data: 'root:x:0:0:root:/root:/bin/sh\napp:x:1000:1001:App:/home/app:/bin/sh\n' },
      { name: 'etc/group', data: 'root:x:0:\napp:x:1001:\nstaff:x:50:app\n' }, { name: 'home/', type: 'dir' }, { name: 'home/app/', type: 'dir' }]) };
    const cases = [
      ['app', '1000 1001 /home/app'],
      ['app:staff', '1000 50 /home/app'],
      ['1000:7', '1000 7 /home/app'],
      ['4242', '4242 0 /'],
      ['0', '0 0 /root'],
    ];
    const layout = path.join(work, 'oci-user');
    for (const [i, [user]] of [...cases, ['nosuch']].entries()) {
      writeOciLayout(layout, { tag: `u${i}`, config: { Env: ['PATH=/bin'], User: user }, layers: [{ tar: busyboxTar() }, etc] });
      await pushImage(layout, `u${i}`, registry, `bar/user:${i}`);
    }
    for (const [i, [user, expected]] of cases.entries()) {
      const s = await make(`${registry.host}/bar/user:${i}`);
      assert.equal(await sh(s, 'echo $(busybox id -u) $(busybox id -g) $HOME'), expected, user);
      // its files: written as that user, read back
      assert.equal(await sh(s, 'echo hi > /mine; cat /mine; busybox stat -c %u /mine'), `hi\n${expected.split(' ')[0]}`, user);
    }
    const res = await fetch(`${server.baseUrl}/v1/sandboxes`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ image: { uri: `${registry.host}/bar/user:${cases.length}` }, entrypoint: ['tail', '-f', '/dev/null'], timeout: 60, resourceLimits: { cpu: '1', memory: '1Gi' } }),
    });
    assert.equal(res.status, 500);
    assert.deepEqual(await res.json(), { code: 'DOCKER::SANDBOX_START_FAILED', message: 'Failed to start sandbox: unable to find user nosuch: no matching entries in passwd file' });
  });

  it("the User's lookup never follows a layer's symlink; a whiteout or a non-directory etc in an upper layer hides a lower passwd", async function () {
    if (!ROOT) this.skip(); // mknod of the whiteout
    const l = (name) => path.join(work, 'user-layers', name);
    for (const d of ['low/etc', 'sym/etc', 'wh/etc', 'file']) fs.mkdirSync(l(d), { recursive: true });
    fs.writeFileSync(l('low/etc/passwd'), 'app:x:7:8::/h:/bin/sh\n');
    fs.symlinkSync('/etc/passwd', l('sym/etc/passwd')); // the host's file, which has root
    execFileSync('mknod', [l('wh/etc/passwd'), 'c', '0', '0']);
    fs.writeFileSync(l('file/etc'), 'not a directory');
    assert.deepEqual(resolveImageUser([l('low')], 'app'), { uid: 7, gid: 8, home: '/h' });
    assert.deepEqual(resolveImageUser([l('low')], ''), null);
    for (const top of ['sym', 'wh', 'file']) {
      assert.throws(() => resolveImageUser([l('low'), l(top)], 'app'), { message: 'unable to find user app: no matching entries in passwd file' }, top);
      assert.throws(() => resolveImageUser([l(top)], 'root'), /unable to find user root/, top);
    }
    assert.deepEqual(resolveImageUser([l('low'), l('sym')], '12:13'), { uid: 12, gid: 13, home: '/' });
    assert.throws(() => resolveImageUser([l('low')], 'app:nogroup'), { message: 'unable to find group nogroup: no matching entries in group file' });
    assert.throws(() => resolveImageUser([l('low')], '99999999999'), /out of range/);
  });

  // last: it restarts the server with an image bound
  it("a snapshot holds its image in the store by digest: restored after a server restart, no eviction until it is deleted", async () => {
    const image = `${registry.host}/bar/snap:1`;
    const src = await make(image);
    await sh(src, 'echo changed > /marker; echo new > /etc/new; busybox rm /etc/os-release');
    const check = ['cat /marker /etc/new; test -e /etc/os-release; echo $?; echo $FROM_IMAGE', 'changed\nnew\n1\nyes'];
    const snap = await src.opensandbox.createSnapshot({ wait: true, timeoutMs: 30000 });
    await src._destroy();
    const held = () => server.images.stats().images.find((i) => i.reference === image)?.held;
    assert.equal(held(), 1); // by the snapshot alone
    // a server on the same dataDir without images refuses to restore it, saying why
    await server.close();
    server = await startServer({ ...serverOptions, images: 'host' });
    const res = await fetch(`${server.baseUrl}/v1/sandboxes`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ snapshotId: snap.id, entrypoint: ['tail', '-f', '/dev/null'], timeout: 60, resourceLimits: { cpu: '1', memory: '1Gi' } }),
    });
    const body = await res.json();
    assert.equal(res.status, 400);
    assert.equal(body.code, 'SNAPSHOT::NOT_SUPPORTED');
    assert.match(body.message, /this server does not run images \(start it with images 'run', --images run\)/);
    // a restart with an image bound every unheld image exceeds: only the snapshot's image is kept
    await server.close();
    server = await startServer({ ...serverOptions, maxImageBytes: 1 });
    assert.equal(held(), 1);
    const r = await make(undefined, { snapshotId: snap.id });
    assert.equal(await sh(r, check[0]), check[1]);
    await r._destroy(); // its release runs the eviction
    const left = () => JSON.stringify(server.images.stats().images.map((i) => [i.reference, i.held]));
    await waitFor(() => left() === JSON.stringify([[image, 1]]), { message: 'the other images evicted, the snapshot\'s kept' });
    assert.equal((await fetch(`${server.baseUrl}/v1/snapshots/${snap.id}`, { method: 'DELETE' })).status, 204);
    // the store forgets the image first and then removes its layers: wait for both
    await waitFor(() => server.images.stats().images.length === 0 && fs.readdirSync(path.join(work, 'data', 'images', 'layers')).length === 0,
      { message: 'the image and its layers evicted once its snapshot is gone' });
  });
});
