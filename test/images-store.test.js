// The image store (lib/dev-server/images/): references, the oci: and docker-archive: sources, the content-addressed
// store (shared layers, one pull for concurrent acquires, restart, SIGKILL mid-unpack, eviction) and hostile layers
// unpacked under bubblewrap.
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import crypto from 'node:crypto';
import path from 'node:path';
import { ImageStore, ImagePullError, parseReference } from '../lib/dev-server/images/store.js';
import { startServer } from '../lib/dev-server/index.js';
import { letUserRunCheckout } from './helpers/other-user.js';
import { makeTar, writeOciLayout, busyboxTar, startRegistry, pushImage, pythonLayout, nonLoopbackAddress } from './helpers/images.js';

const OWNER = process.getuid() === 0 ? { uid: 65534, gid: 65534 } : undefined;

describe('image store', function () {
  this.timeout(60000);
  let tmp;
  const stores = [];
  const newStore = async (opts = {}) => {
    const s = new ImageStore({ dir: path.join(tmp, 'store'), owner: OWNER, ...opts });
    await s.open();
    stores.push(s);
    return s;
  };
  beforeEach(() => { tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'img-store-')); });
  afterEach(async () => {
    stores.length = 0;
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  it('parses references as Docker and skopeo do', () => {
    const r = (s) => parseReference(s);
    assert.equal(r('python:3.11').key, 'docker.io/library/python:3.11');
    assert.equal(r('busybox').key, 'docker.io/library/busybox:latest');
    assert.equal(r('team/tool').key, 'docker.io/team/tool:latest');
    assert.deepEqual({ ...r('registry:5000/agent/tools:3') }, { transport: 'registry', registry: 'registry:5000', repository: 'agent/tools', tag: '3', digest: null, key: 'registry:5000/agent/tools:3' });
    const d = `sha256:${'a'.repeat(64)}`;
    assert.equal(r(`localhost/x@${d}`).key, `localhost/x@${d}`);
    assert.equal(r(`127.0.0.1:5000/bar/bb:1@${d}`).digest, d);
    assert.equal(r('index.docker.io/library/node:22-slim').key, 'docker.io/library/node:22-slim');
    assert.deepEqual({ ...r('oci:/x/y:tag') }, { transport: 'oci', dir: '/x/y', tag: 'tag', key: 'oci:/x/y:tag' });
    assert.equal(r('oci:/x/y').tag, null);
    assert.equal(r('docker-archive:/a/b.tar').file, '/a/b.tar');
    for (const bad of ['', 'Upper/Case', 'a:b:c', `x@sha256:${'z'.repeat(64)}`, 'x@md5:00', 'a//b']) {
      assert.throws(() => r(bad), (e) => e instanceof ImagePullError && e.code === 'DOCKER::SANDBOX_IMAGE_PULL_FAILED');
    }
  });

  it('the server checks its image options (maxImageBytes, insecureRegistries)', async () => {
    await assert.rejects(startServer({ maxImageBytes: -1 }), /^Error: maxImageBytes must be an integer >= 0$/);
    await assert.rejects(startServer({ maxImageBytes: 1.5 }), /^Error: maxImageBytes must be an integer >= 0$/);
    await assert.rejects(startServer({ insecureRegistries: 'reg:5000' }), /^Error: insecureRegistries must be an array of host\[:port\] strings$/);
    await assert.rejects(startServer({ insecureRegistries: ['http://reg:5000'] }), /^Error: insecureRegistries must be an array/);
  });

  it('unpacks an oci: layout (index -> host platform, gzip, zstd, uncompressed) with whiteouts and opaque dirs', async () => {
    writeOciLayout(path.join(tmp, 'oci'), { tag: 'bb', config: { Env: ['A=1'], WorkingDir: '/w', Cmd: ['sh'] }, layers: [
      { tar: busyboxTar() },
      { tar: makeTar([{ name: 'etc/.wh.os-release' }, { name: 'opq/', type: 'dir' }, { name: 'opq/.wh..wh..opq' }, { name: 'opq/new', data: 'n' }]), compression: 'zstd' },
      { tar: makeTar([{ name: 'plain', data: 'p', mode: 0o6755 }, { name: 'ro/', type: 'dir', mode: 0o555 }, { name: 'ro/f', data: 'f' }, { name: `long/${'n'.repeat(150)}`, data: 'pax path' }]), compression: 'none' },
    ] });
    const store = await newStore();
    const img = await store.acquire(`oci:${tmp}/oci:bb`);
    assert.equal(img.reference, `oci:${tmp}/oci:bb`);
    assert.match(img.digest, /^sha256:[a-f0-9]{64}$/);
    assert.equal(img.layers.length, 3);
    assert.deepEqual(img.config, { Env: ['A=1'], WorkingDir: '/w', Entrypoint: null, Cmd: ['sh'], User: '' });
    const [l0, l1, l2] = img.layers;
    for (const l of img.layers) assert.equal(fs.statSync(l).mode & 0o7777, 0o755); // no "./" entry in these tars
    assert.equal(fs.readFileSync(path.join(l0, 'marker'), 'utf8'), 'busybox-image\n');
    assert.equal(fs.readlinkSync(path.join(l0, 'bin/sh')), 'busybox');
    const wh = fs.lstatSync(path.join(l1, 'etc/os-release'));
    assert.ok(wh.isCharacterDevice());
    assert.equal(wh.rdev, 0);
    assert.equal(execFileSync('python3', ['-c', 'import os,sys; print(os.getxattr(sys.argv[1], "user.overlay.opaque").decode())', path.join(l1, 'opq')], { encoding: 'utf8' }), 'y\n');
    assert.ok(!fs.existsSync(path.join(l1, 'opq/.wh..wh..opq')));
    assert.equal(fs.statSync(path.join(l2, 'plain')).mode & 0o7777, 0o755); // setuid/setgid stripped
    assert.equal(fs.statSync(path.join(l2, 'ro')).mode & 0o777, 0o555);
    assert.equal(fs.readFileSync(path.join(l2, 'long', 'n'.repeat(150)), 'utf8'), 'pax path');
    const st = fs.statSync(path.join(l0, 'bin/busybox'));
    assert.equal(st.uid, OWNER?.uid ?? process.getuid());
    img.release();
  });

  it('concurrent acquires pull once; ten acquires store the layers once; a restart reuses them', async () => {
    writeOciLayout(path.join(tmp, 'oci'), { tag: 'bb', layers: [{ tar: busyboxTar() }] });
    const lines = [];
    const store = await newStore({ log: (l) => lines.push(l) });
    const seen = Array(10).fill(0);
    const imgs = await Promise.all(Array.from({ length: 10 }, (_, i) => store.acquire(`oci:${tmp}/oci:bb`, { onProgress: () => { seen[i]++; } })));
    assert.ok(seen.every((n) => n > 0), `every waiter sees the one pull's progress: ${seen}`);
    assert.equal(lines.filter((l) => l.startsWith('images: pulling')).length, 1);
    assert.equal(new Set(imgs.map((i) => i.layers[0])).size, 1);
    assert.deepEqual(fs.readdirSync(path.join(tmp, 'store/layers')), [path.basename(path.dirname(imgs[0].layers[0]))]);
    assert.equal(store.stats().images[0].held, 10);
    for (const i of imgs) i.release();
    const again = await newStore({ log: (l) => lines.push(l) });
    const img = await again.acquire(`oci:${tmp}/oci:bb`);
    assert.equal(lines.filter((l) => l.startsWith('images: pulling')).length, 1);
    assert.equal(img.layers[0], imgs[0].layers[0]);
  });

  it('reads an offline image without following a symbolic link anywhere on its paths (what was checked is what is read)', async () => {
    const { layers } = writeOciLayout(path.join(tmp, 'oci'), { tag: 'bb', layers: [{ tar: makeTar([{ name: 'f', data: 'x' }]), compression: 'none' }] });
    const store = await newStore();
    // the layout reached through a linked directory: refused, naming the link
    fs.symlinkSync(tmp, path.join(tmp, 'via'));
    await assert.rejects(store.acquire(`oci:${tmp}/via/oci:bb`), (e) => e instanceof ImagePullError && e.message === `OCI layout ${tmp}/via/oci: oci-layout: goes through the symbolic link ${tmp}/via (volumes are opened without following symbolic links: give the path it points to)`);
    // blobs/ inside the layout swapped for a link to a copy elsewhere: refused at the first blob
    fs.cpSync(path.join(tmp, 'oci/blobs'), path.join(tmp, 'elsewhere'), { recursive: true });
    fs.rmSync(path.join(tmp, 'oci/blobs'), { recursive: true });
    fs.symlinkSync(path.join(tmp, 'elsewhere'), path.join(tmp, 'oci/blobs'));
    await assert.rejects(store.acquire(`oci:${tmp}/oci:bb`), (e) => e instanceof ImagePullError && /: goes through the symbolic link .*\/oci\/blobs /.test(e.message));
    // one blob a link to its own bytes: refused too
    fs.rmSync(path.join(tmp, 'oci/blobs'));
    fs.cpSync(path.join(tmp, 'elsewhere'), path.join(tmp, 'oci/blobs'), { recursive: true });
    const blob = path.join(tmp, 'oci/blobs/sha256', layers[0].slice(7));
    fs.renameSync(blob, `${blob}.real`);
    fs.symlinkSync(`${blob}.real`, blob);
    await assert.rejects(store.acquire(`oci:${tmp}/oci:bb`), (e) => e instanceof ImagePullError && e.message.endsWith(`blob ${layers[0]}: is a symbolic link`));
    // a docker-archive: file that is a link
    fs.writeFileSync(path.join(tmp, 'real.tar'), makeTar([{ name: 'manifest.json', data: '[]' }]));
    fs.symlinkSync(path.join(tmp, 'real.tar'), path.join(tmp, 'link.tar'));
    await assert.rejects(store.acquire(`docker-archive:${tmp}/link.tar`), (e) => e instanceof ImagePullError && e.message === `docker archive ${tmp}/link.tar: is a symbolic link`);
    // once the link is gone, the same layout pulls
    fs.rmSync(blob);
    fs.renameSync(`${blob}.real`, blob);
    assert.equal((await store.acquire(`oci:${tmp}/oci:bb`)).layers.length, 1);
  });

  it('refuses a blob whose digest does not match', async () => {
    const { layers } = writeOciLayout(path.join(tmp, 'oci'), { tag: 'bb', layers: [{ tar: busyboxTar(), compression: 'none' }] });
    const blob = path.join(tmp, 'oci/blobs/sha256', layers[0].slice(7));
    const buf = fs.readFileSync(blob);
    buf[600] ^= 1; // in a tar header: the digest mismatch is reported, not the broken tar
    fs.writeFileSync(blob, buf);
    const store = await newStore();
    await assert.rejects(store.acquire(`oci:${tmp}/oci:bb`), (e) => e instanceof ImagePullError && /digest mismatch/.test(e.message) && e.message.includes(layers[0]));
    assert.deepEqual(fs.readdirSync(path.join(tmp, 'store/layers')), []);
    assert.deepEqual(fs.readdirSync(path.join(tmp, 'store/tmp')), []);
  });

  it('works for a server running as an ordinary user (nobody): its own uid owns the layers', async function () {
    if (process.getuid() !== 0) this.skip(); // this run is that user already
    letUserRunCheckout(65534);
    fs.chownSync(tmp, 65534, 65534);
    writeOciLayout(path.join(tmp, 'oci'), { tag: 'bb', layers: [{ tar: busyboxTar() }, { tar: makeTar([{ name: 'ro/', type: 'dir', mode: 0o555 }, { name: 'ro/f', data: 'f' }, { name: 'd/', type: 'dir' }, { name: 'd/.wh..wh..opq' }, { name: '.wh.marker' }]) }] });
    execFileSync('chown', ['-R', '65534:65534', path.join(tmp, 'oci')]);
    const storeUrl = JSON.stringify(new URL('../lib/dev-server/images/store.js', import.meta.url).href);
    const asNobody = (code) => execFileSync(process.execPath, ['--input-type=module', '-e', `import { ImageStore } from ${storeUrl};\n${code}`],
      { uid: 65534, gid: 65534, encoding: 'utf8', env: { PATH: process.env.PATH, HOME: tmp } });
    const dir = JSON.stringify(path.join(tmp, 'store'));
    const layers = JSON.parse(asNobody(`const s = new ImageStore({ dir: ${dir} }); await s.open();
      const img = await s.acquire(${JSON.stringify(`oci:${tmp}/oci:bb`)}); console.log(JSON.stringify(img.layers));`));
    assert.equal(fs.readFileSync(path.join(layers[0], 'marker'), 'utf8'), 'busybox-image\n');
    assert.equal(fs.statSync(path.join(layers[0], 'bin/busybox')).uid, 65534);
    assert.ok(fs.lstatSync(path.join(layers[1], 'marker')).isCharacterDevice());
    assert.equal(fs.statSync(path.join(layers[1], 'ro')).mode & 0o777, 0o555);
    // evicted by the non-root store, its 0555 directories included
    const stats = JSON.parse(asNobody(`const s = new ImageStore({ dir: ${dir}, maxImageBytes: 0 }); await s.open(); await s.evict(); console.log(JSON.stringify(s.stats()));`));
    assert.deepEqual(stats, { bytes: 0, layers: 0, images: [] });
    assert.deepEqual(fs.readdirSync(path.join(tmp, 'store/layers')), []);
  });

  describe('hostile layers', () => {
    const pull = async (entries, opts = {}) => {
      writeOciLayout(path.join(tmp, 'oci'), { tag: 't', layers: [{ tar: makeTar(entries) }] });
      const store = await newStore(opts);
      return store.acquire(`oci:${tmp}/oci:t`);
    };
    it('refuses .. and absolute paths', async () => {
      await assert.rejects(pull([{ name: '../escape', data: 'x' }]), /refused: entry '\.\.\/escape' has a \.\. component/);
      await assert.rejects(pull([{ name: 'a/../../escape', data: 'x' }]), /has a \.\. component/);
      await assert.rejects(pull([{ name: '/abs', data: 'x' }]), /refused: entry '\/abs' is absolute/);
      assert.ok(!fs.existsSync(path.join(tmp, 'store/escape')) && !fs.existsSync(path.join(tmp, 'escape')));
      assert.deepEqual(fs.readdirSync(path.join(tmp, 'store/layers')), []);
    });
    it('never writes through a symlink (a symlink followed by a file through it)', async () => {
      fs.mkdirSync(path.join(tmp, 'outside'));
      const img = await pull([{ name: 'link', type: 'symlink', linkname: path.join(tmp, 'outside') }, { name: 'link/pwned', data: 'x' },
        { name: 'rel', type: 'symlink', linkname: '../../../../' }, { name: 'rel/pwned2', data: 'x' }, { name: 'ok', data: 'ok' }]);
      assert.deepEqual(fs.readdirSync(path.join(tmp, 'outside')), []);
      assert.equal(fs.readlinkSync(path.join(img.layers[0], 'link')), path.join(tmp, 'outside'));
      assert.deepEqual(fs.readdirSync(img.layers[0]).sort(), ['link', 'ok', 'rel']);
    });
    it('hardlinks only to files of the layer; device nodes and FIFOs skipped; setuid stripped', async () => {
      const img = await pull([{ name: 'f', data: 'data', mode: 0o4755 }, { name: 'h', type: 'hardlink', linkname: 'f' },
        { name: 'out', type: 'hardlink', linkname: '/etc/passwd' }, { name: 's', type: 'symlink', linkname: '/etc/shadow' },
        { name: 'viasym', type: 'hardlink', linkname: 's' }, { name: 'sda', type: 'block', devmajor: 8, devminor: 0 },
        { name: 'mem', type: 'char', devmajor: 1, devminor: 1 }, { name: 'fifo', type: 'fifo' }]).catch((e) => e);
      assert.ok(img instanceof ImagePullError && /hardlink target '\/etc\/passwd' is absolute/.test(img.message), String(img));
      const ok = await pull([{ name: 'f', data: 'data', mode: 0o4755 }, { name: 'h', type: 'hardlink', linkname: 'f' },
        { name: 's', type: 'symlink', linkname: '/etc/shadow' }, { name: 'viasym', type: 'hardlink', linkname: 's' },
        { name: 'sda', type: 'block', devmajor: 8, devminor: 0 }, { name: 'mem', type: 'char', devmajor: 1, devminor: 1 }, { name: 'fifo', type: 'fifo' }]);
      const root = ok.layers[0];
      assert.deepEqual(fs.readdirSync(root).sort(), ['f', 'h', 's']);
      assert.equal(fs.statSync(path.join(root, 'h')).ino, fs.statSync(path.join(root, 'f')).ino);
      assert.equal(fs.statSync(path.join(root, 'f')).mode & 0o7777, 0o755);
    });
    it('bounds a decompression bomb by maxImageBytes and a million tiny files by maxLayerEntries', async () => {
      await assert.rejects(pull([{ name: 'zeros', data: Buffer.alloc(8 << 20) }], { maxImageBytes: 1 << 20 }), new RegExp(`^ImagePullError: image oci:${tmp}/oci:t unpacks to more than 1048576 bytes \\(maxImageBytes\\)$`));
      assert.deepEqual(fs.readdirSync(path.join(tmp, 'store/tmp')), []);
      const many = Array.from({ length: 1001 }, (_, i) => ({ name: `f${i}`, data: '' }));
      await assert.rejects(pull(many, { maxLayerEntries: 1000 }), /refused: more than 1000 entries in one layer/);
    });
  });

  it('evicts the least recently used image no one holds beyond maxImageBytes', async () => {
    const mk = (tag, n) => writeOciLayout(path.join(tmp, 'oci'), { tag, layers: [{ tar: makeTar([{ name: `f${tag}`, data: Buffer.alloc(n, 1) }]) }] });
    mk('a', 300000); mk('b', 300000); mk('c', 300000);
    const store = await newStore({ maxImageBytes: 700000 });
    const a = await store.acquire(`oci:${tmp}/oci:a`);
    const b = await store.acquire(`oci:${tmp}/oci:b`);
    b.release();
    const c = await store.acquire(`oci:${tmp}/oci:c`); // over the bound: b (unheld) goes, a is held
    assert.deepEqual(store.stats().images.map((i) => i.reference).sort(), [`oci:${tmp}/oci:a`, `oci:${tmp}/oci:c`]);
    assert.ok(fs.existsSync(a.layers[0]) && fs.existsSync(c.layers[0]));
    assert.equal(fs.readdirSync(path.join(tmp, 'store/layers')).length, 2);
    // hold(): a stored image by key and digest (a snapshot's), never a pull: b is gone, another digest is another image
    assert.equal(store.hold({ key: b.key, digest: b.digest }), null);
    assert.equal(store.hold({ key: a.key, digest: c.digest }), null);
    const held = store.hold({ key: a.key, digest: a.digest });
    assert.deepEqual([held.digest, held.layers], [a.digest, a.layers]);
    a.release(); c.release();
    store.maxImageBytes = 1; // c (unheld) goes, a stays while held
    await store.evict();
    assert.deepEqual(store.stats().images.map((i) => [i.reference, i.held]), [[`oci:${tmp}/oci:a`, 1]]);
    held.release();
    await store.evict();
    assert.deepEqual(store.stats().images, []);
  });

  it('a SIGKILL mid-unpack leaves no half layer in use', async () => {
    const big = makeTar(Array.from({ length: 40 }, (_, i) => ({ name: `f${i}`, data: crypto.randomBytes(1 << 20) })));
    writeOciLayout(path.join(tmp, 'oci'), { tag: 'big', layers: [{ tar: big, compression: 'none' }] });
    const script = `import { ImageStore } from ${JSON.stringify(new URL('../lib/dev-server/images/store.js', import.meta.url).href)};
      const s = new ImageStore({ dir: ${JSON.stringify(path.join(tmp, 'store'))}, owner: ${JSON.stringify(OWNER)} }); await s.open();
      await s.acquire(${JSON.stringify(`oci:${tmp}/oci:big`)}, { onProgress: ({ bytes }) => { if (bytes > (8 << 20)) { console.log('mid'); setInterval(() => {}, 1000); } } });`;
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
    await new Promise((resolve, reject) => { child.stdout.on('data', (d) => { if (String(d).includes('mid')) resolve(); }); child.on('exit', () => reject(new Error('child exited first'))); });
    child.kill('SIGKILL');
    await new Promise((resolve) => child.on('close', resolve));
    assert.equal(fs.readdirSync(path.join(tmp, 'store/layers')).length, 0);
    const store = await newStore();
    assert.deepEqual(fs.readdirSync(path.join(tmp, 'store/tmp')), []);
    const img = await store.acquire(`oci:${tmp}/oci:big`);
    assert.equal(fs.readdirSync(img.layers[0]).length, 40);
  });

  it('a python3 image (Debian packages, cached between runs) unpacks into a root that runs its python3', async () => {
    const layout = await pythonLayout();
    const store = await newStore();
    const img = await store.acquire(`oci:${layout}:py`);
    assert.deepEqual(img.config.Cmd, ['python3']);
    const out = execFileSync('bwrap', ['--unshare-net', '--ro-bind', img.layers[0], '/', '/usr/bin/python3', '-c', 'import sys; print(sys.version.split()[0], open("/marker").read().strip())'], { encoding: 'utf8' });
    assert.match(out, /^3\.\d+\.\d+ python-image\n$/);
  });

  it('reads an image umoci built (its layers end without the tar padding)', async () => {
    fs.mkdirSync(path.join(tmp, 'src'));
    fs.writeFileSync(path.join(tmp, 'src/hello'), 'hi\n');
    const l = path.join(tmp, 'umoci');
    execFileSync('umoci', ['init', '--layout', l]);
    execFileSync('umoci', ['new', '--image', `${l}:t`]);
    execFileSync('umoci', ['insert', ...(process.getuid() ? ['--rootless'] : []), '--image', `${l}:t`, path.join(tmp, 'src'), '/data']);
    execFileSync('umoci', ['config', '--image', `${l}:t`, '--config.env', 'A=b', '--config.workingdir', '/data']);
    const store = await newStore();
    const img = await store.acquire(`oci:${l}:t`);
    assert.equal(fs.readFileSync(path.join(img.layers.at(-1), 'data/hello'), 'utf8'), 'hi\n');
    assert.equal(img.config.WorkingDir, '/data');
    assert.ok(img.config.Env.includes('A=b'));
  });

  it('reads a docker-archive: (docker save) made by skopeo', async () => {
    writeOciLayout(path.join(tmp, 'oci'), { tag: 'bb', config: { Cmd: ['sh'] }, layers: [{ tar: busyboxTar() }, { tar: makeTar([{ name: 'two', data: '2' }]) }] });
    execFileSync('skopeo', ['copy', '-q', `oci:${tmp}/oci:bb`, `docker-archive:${tmp}/bb.tar:bar/bb:1`], { stdio: 'ignore' });
    const store = await newStore();
    const img = await store.acquire(`docker-archive:${tmp}/bb.tar`);
    assert.equal(img.layers.length, 2);
    assert.equal(fs.readFileSync(path.join(img.layers[0], 'marker'), 'utf8'), 'busybox-image\n');
    assert.equal(fs.readFileSync(path.join(img.layers[1], 'two'), 'utf8'), '2');
    assert.deepEqual(img.config.Cmd, ['sh']);
  });

  describe('from a registry (docker-registry on loopback)', () => {
    const registries = {};
    let layout; // the busybox image every registry here is given (oci:<layout>:bb)
    before(async function () {
      this.timeout(60000);
      layout = fs.mkdtempSync(path.join(os.tmpdir(), 'img-store-layout-'));
      writeOciLayout(layout, { tag: 'bb', config: { Env: ['PATH=/bin'] }, layers: [{ tar: busyboxTar() }] });
      for (const auth of ['none', 'htpasswd', 'token']) {
        registries[auth] = await startRegistry({ auth });
        await pushImage(layout, 'bb', registries[auth], 'bar/bb:1', { creds: auth !== 'none' });
      }
    });
    after(async () => {
      for (const r of Object.values(registries)) await r.stop();
      if (layout) fs.rmSync(layout, { recursive: true, force: true });
    });

    for (const auth of ['none', 'htpasswd', 'token']) {
      it(`pulls from a registry with ${auth === 'none' ? 'no auth' : auth === 'htpasswd' ? 'basic auth' : 'bearer tokens'}`, async () => {
        const r = registries[auth];
        const lines = [];
        const progress = [];
        const store = await newStore({ log: (l) => lines.push(l) });
        const img = await store.acquire(`${r.host}/bar/bb:1`, { auth: auth === 'none' ? undefined : { username: r.user, password: r.password }, onProgress: (p) => progress.push(p) });
        assert.equal(img.reference, `${r.host}/bar/bb:1`);
        assert.equal(fs.readFileSync(path.join(img.layers[0], 'marker'), 'utf8'), 'busybox-image\n');
        assert.deepEqual(img.config.Env, ['PATH=/bin']);
        const last = progress.at(-1);
        assert.equal(last.bytes, last.total);
        assert.ok(lines.some((l) => l.startsWith(`images: pulling ${r.host}/bar/bb:1`)));
        assert.ok(!lines.join('\n').includes(r.password));
        const byDigest = await store.acquire(`${r.host}/bar/bb@${img.digest}`, { auth: auth === 'none' ? undefined : { username: r.user, password: r.password } });
        assert.deepEqual(byDigest.layers, img.layers);
      });
      if (auth !== 'none') {
        it(`a wrong password (${auth}) is a clear error naming the registry, without the password`, async () => {
          const r = registries[auth];
          const store = await newStore();
          const err = await store.acquire(`${r.host}/bar/bb:1`, { auth: { username: r.user, password: 'wrong-Pa55word' } }).catch((e) => e);
          assert.ok(err instanceof ImagePullError, String(err));
          assert.equal(err.status, 500);
          assert.equal(err.code, 'DOCKER::SANDBOX_IMAGE_PULL_FAILED');
          assert.match(err.message, new RegExp(`^pulling ${r.host}/bar/bb:1: 401 Unauthorized from registry ${r.host}`));
          assert.ok(!err.message.includes('wrong-Pa55word') && !JSON.stringify(err).includes('wrong-Pa55word'));
          const anon = await store.acquire(`${r.host}/bar/bb:1`).catch((e) => e);
          assert.match(anon.message, /401 Unauthorized from registry/);
        });
      }
    }
    describe('a registry that is not on loopback', function () {
      // HTTPS verified against the system's CA store (here: $SSL_CERT_FILE naming the test's CA, as OpenSSL and curl
      // take it); plain HTTP only for a registry named in insecureRegistries. The registries listen on this machine's
      // first non-loopback address.
      const address = nonLoopbackAddress();
      const remote = {};
      const savedCertFile = process.env.SSL_CERT_FILE;
      before(async function () {
        if (!address) this.skip(); // a machine with loopback alone: nothing to listen on that is not loopback
        this.timeout(60000);
        remote.tls = await startRegistry({ address, tls: true });
        remote.plain = await startRegistry({ address });
        for (const r of [remote.tls, remote.plain]) await pushImage(layout, 'bb', r, 'bar/bb:1');
      });
      afterEach(() => {
        if (savedCertFile === undefined) delete process.env.SSL_CERT_FILE;
        else process.env.SSL_CERT_FILE = savedCertFile;
      });
      after(async () => { for (const r of Object.values(remote)) await r.stop(); });

      it('refuses a certificate no trusted CA signed: a clear error naming the registry, no fallback to HTTP', async () => {
        // first: Node keeps the system store it read for the process (with $SSL_CERT_FILE as it was then)
        delete process.env.SSL_CERT_FILE; // the system's own store: the test's CA is not in it
        const store = await newStore();
        const err = await store.acquire(`${remote.tls.host}/bar/bb:1`).catch((e) => e);
        assert.ok(err instanceof ImagePullError, String(err));
        assert.equal(err.code, 'DOCKER::SANDBOX_IMAGE_PULL_FAILED');
        assert.equal(err.message, `pulling ${remote.tls.host}/bar/bb:1: unable to verify the first certificate (UNABLE_TO_VERIFY_LEAF_SIGNATURE) from registry ${remote.tls.host}`);
      });

      it('pulls over HTTPS, the certificate checked against the system CA store', async () => {
        process.env.SSL_CERT_FILE = remote.tls.ca;
        const store = await newStore();
        const img = await store.acquire(`${remote.tls.host}/bar/bb:1`);
        assert.equal(fs.readFileSync(path.join(img.layers[0], 'marker'), 'utf8'), 'busybox-image\n');
      });

      it('speaks plain HTTP to it only when it is in insecureRegistries', async () => {
        const refused = await (await newStore()).acquire(`${remote.plain.host}/bar/bb:1`).catch((e) => e);
        assert.ok(refused instanceof ImagePullError, String(refused));
        assert.match(refused.message, new RegExp(`^pulling ${remote.plain.host}/bar/bb:1: no TLS answer \\(wrong version number\\): if the registry speaks plain HTTP, list it in insecureRegistries from registry ${remote.plain.host}$`));
        const store = new ImageStore({ dir: path.join(tmp, 'store-insecure'), owner: OWNER, insecureRegistries: [remote.plain.host] });
        await store.open();
        const img = await store.acquire(`${remote.plain.host}/bar/bb:1`);
        assert.equal(fs.readFileSync(path.join(img.layers[0], 'marker'), 'utf8'), 'busybox-image\n');
      });
    });

    it('a missing tag is the registry\'s reason', async () => {
      const store = await newStore();
      await assert.rejects(store.acquire(`${registries.none.host}/bar/bb:nope`), (e) => e instanceof ImagePullError && e.message.startsWith(`pulling ${registries.none.host}/bar/bb:nope: 404 Not Found from registry ${registries.none.host}: MANIFEST_UNKNOWN`));
    });
  });
});
