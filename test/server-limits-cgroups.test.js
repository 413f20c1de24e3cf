// resourceLimits (cpu / memory / pids through cgroups) and the per-sandbox disk bound of the local server
// (docs/dev-server-security.md "Resource limits"), each attack tried for real from inside a sandbox: a fork bomb,
// spawning until fork fails, a memory hog, a file bigger than the disk. Each must fail while the sandbox keeps
// answering. Then what is left after delete and close (nothing), the sweep of a dead server's cgroups and disks, bad
// quantities (400), and a server that cannot create cgroups: run as `nobody` through the CLI, it refuses limits with
// 400 and accepts them with --unenforced-limits. The cgroup and disk parts need root (CI runs as root): without it
// the `before` hook fails saying so rather than skipping.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn, spawnSync } from 'node:child_process';
import { startServer } from '../lib/dev-server/index.js';
import { mounts } from '../lib/dev-server/cgroups.js';
import { loopDevices } from '../lib/dev-server/disk.js';
import { request, parseEvents } from './helpers/raw.js';
import { waitFor } from './helpers/poll.js';
import { letUserRunCheckout } from './helpers/other-user.js';

const ROOT = process.getuid() === 0;
const MiB = 1024 * 1024;
const LIMITS = { cpu: '1', memory: '256Mi', pids: '64' };

/** The cgroup files of a sandbox, v1 (one dir per controller) or v2 (one dir), found on the host by its id. */
function cgroupDirs(id) {
  const found = [];
  for (const m of mounts().filter((x) => x.fstype === 'cgroup' || x.fstype === 'cgroup2')) {
    const top = path.join(m.mountPoint, 'mastra-opensandbox');
    let instances = [];
    try {
      instances = fs.readdirSync(top);
    } catch { /* not used in this hierarchy */ }
    for (const inst of instances) if (fs.existsSync(path.join(top, inst, id))) found.push(path.join(top, inst, id));
  }
  return found;
}
function cgroupFile(id, name) {
  const dir = cgroupDirs(id).find((d) => fs.existsSync(path.join(d, name)));
  assert.ok(dir, `no cgroup file ${name} for sandbox ${id} (dirs: ${cgroupDirs(id).join(', ')})`);
  return fs.readFileSync(path.join(dir, name), 'utf8').trim();
}
/** The sandbox ids that have a cgroup beside sandbox `id`'s (the same server instance; other servers share the hierarchy). */
function sandboxCgroups(id) {
  const ids = new Set();
  for (const dir of cgroupDirs(id)) {
    for (const e of fs.readdirSync(path.dirname(dir), { withFileTypes: true })) if (e.isDirectory()) ids.add(e.name);
  }
  return [...ids].sort();
}
/** Pids of bwrap gates (runner.js: sh waiting for its line before exec'ing bwrap) children of this process. */
function gates() {
  return fs.readdirSync('/proc').filter((p) => /^\d+$/.test(p)).filter((p) => {
    try {
      const stat = fs.readFileSync(`/proc/${p}/stat`, 'utf8');
      return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === process.pid
        && fs.readFileSync(`/proc/${p}/cmdline`, 'utf8').includes('read -r _ && unset PWD OLDPWD');
    } catch {
      return false; // gone meanwhile
    }
  });
}
/** Loop devices whose backing file lies under dir, as "/dev/loopN: file[ (deleted)]". */
const loopsUnder = (dir) => loopDevices().filter((l) => l.backing.startsWith(dir + '/'))
  .map((l) => `${l.device}: ${l.backing}${l.deleted ? ' (deleted)' : ''}`);
const mountsUnder = (dir) => mounts().filter((m) => m.mountPoint.startsWith(dir + '/')).map((m) => m.mountPoint);

describe('dev-server resource limits (cgroups) and disk bound', function () {
  this.timeout(120000);
  let server;
  let work;
  let dataDir;
  const lines = [];
  const live = new Set(); // sandboxes a failed test left: deleted after it
  const api = (p, opts = {}) => request(`${server.baseUrl}${p}`, { ...opts, headers: { 'Content-Type': 'application/json', ...opts.headers }, endpointHeaders: false });
  async function create(resourceLimits, extra = {}) {
    const r = await api('/v1/sandboxes', { method: 'POST', body: { image: { uri: 'x' }, entrypoint: ['tail', '-f', '/dev/null'], resourceLimits, ...extra } });
    assert.equal(r.status, 202, r.text);
    live.add(r.json.id);
    const ep = (await api(`/v1/sandboxes/${r.json.id}/endpoints/44772`)).json;
    return { id: r.json.id, base: `http://${ep.endpoint}`, headers: ep.headers };
  }
  async function run(sb, command, { timeout } = {}) {
    const r = await request(`${sb.base}/command`, { method: 'POST', headers: { 'Content-Type': 'application/json', ...sb.headers }, body: { command, ...(timeout ? { timeout } : {}) }, timeoutMs: 60000, endpointHeaders: false });
    assert.equal(r.status, 200, r.text);
    const ev = parseEvents(r.text);
    return { out: ev.filter((e) => e.type === 'stdout').map((e) => e.text).join('\n'), last: ev.at(-1) };
  }
  const remove = async (sb) => {
    live.delete(sb.id);
    assert.equal((await api(`/v1/sandboxes/${sb.id}`, { method: 'DELETE' })).status, 204);
  };

  before(async function () {
    assert.ok(ROOT, 'these tests need root (cgroups and loop-mounted disks); CI runs as root');
    work = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'osb-lim-')));
    dataDir = path.join(work, 'data');
    server = await startServer({ dataDir, commandTailMs: 20, log: (l) => lines.push(l) });
  });
  afterEach(async function () {
    if (this.currentTest.parent.title.startsWith('attacks')) return; // those share one sandbox
    for (const id of live) await api(`/v1/sandboxes/${id}`, { method: 'DELETE' });
    live.clear();
  });
  after(async () => {
    await server?.close();
    if (work) fs.rmSync(work, { recursive: true, force: true });
  });

  it('uses cgroups (v2 where the machine offers memory and pids on it, else the v1 hierarchies) and a disk image per sandbox', () => {
    const line = lines.find((l) => l.startsWith('limits: '));
    assert.match(line, /^limits: cgroup v[12] \(memory, pids, cpu\) under \S+; disk bound: ext4 image per sandbox \(default 10737418240 bytes\); default memory: 2147483648 bytes$/);
    const v2 = mounts().find((m) => m.fstype === 'cgroup2');
    const v2HasMemory = v2 && fs.readFileSync(path.join(v2.mountPoint, 'cgroup.controllers'), 'utf8').includes('memory');
    assert.match(line, v2HasMemory ? /cgroup v2/ : /cgroup v1/);
  });

  it('writes what was asked into the cgroup: cpu quota, memory (and memory+swap), pids', async () => {
    const sb = await create(LIMITS);
    if (cgroupDirs(sb.id).length === 1) {
      assert.equal(cgroupFile(sb.id, 'cpu.max'), '100000 100000');
      assert.equal(cgroupFile(sb.id, 'memory.max'), String(256 * MiB));
      assert.equal(cgroupFile(sb.id, 'pids.max'), '64');
    } else {
      assert.equal(cgroupFile(sb.id, 'cpu.cfs_period_us'), '100000');
      assert.equal(cgroupFile(sb.id, 'cpu.cfs_quota_us'), '100000');
      assert.equal(cgroupFile(sb.id, 'memory.limit_in_bytes'), String(256 * MiB));
      assert.equal(cgroupFile(sb.id, 'memory.memsw.limit_in_bytes'), String(256 * MiB));
      assert.equal(cgroupFile(sb.id, 'pids.max'), '64');
    }
    const half = await create({ cpu: '500m', memory: '1G' });
    assert.match(cgroupFile(half.id, cgroupDirs(half.id).length === 1 ? 'cpu.max' : 'cpu.cfs_quota_us'), /^50000( 100000)?$/);
    // the kernel rounds a memory bound down to whole pages
    assert.equal(cgroupFile(half.id, cgroupDirs(half.id).length === 1 ? 'memory.max' : 'memory.limit_in_bytes'), String(1e9 - (1e9 % 4096)));
    // no pids asked: the server's cap (maxPids, default 4096)
    assert.equal(cgroupFile(half.id, 'pids.max'), '4096');
    await remove(sb);
    await remove(half);
  });

  describe('attacks from inside a sandbox with ' + JSON.stringify(LIMITS), () => {
    let sb;
    before(async () => {
      sb = await create(LIMITS);
    });
    after(async () => sb && remove(sb));

    it('spawning 200 processes fails with EAGAIN below the pids bound; the sandbox keeps answering', async () => {
      const py = [
        'import os, time, errno',
        'kids = []',
        'try:',
        '    while len(kids) < 200:',
        '        pid = os.fork()',
        '        if pid == 0:',
        '            time.sleep(60); os._exit(0)',
        '        kids.append(pid)',
        '    print("all 200 forked")',
        'except OSError as e:',
        '    print("fork failed", errno.errorcode[e.errno], "after", len(kids))',
        'for k in kids: os.kill(k, 9)',
        'for k in kids: os.waitpid(k, 0)',
      ].join('\n');
      const r = await run(sb, `python3 -c '${py}'`);
      const m = /^fork failed EAGAIN after (\d+)$/.exec(r.out);
      assert.ok(m, r.out);
      assert.ok(Number(m[1]) > 10 && Number(m[1]) < 64, r.out);
      assert.equal((await run(sb, 'echo ok')).out, 'ok');
    });

    it('a fork bomb stays within the pids bound and, once killed, leaves the sandbox working', async () => {
      // the shell stays in the foreground (a builtin busy loop: it cannot fork) until the command's timeout
      // SIGKILLs its process group, the bomb's orphans included
      const r = await run(sb, 'bomb() { bomb | bomb & }; bomb; SECONDS=0; while (( SECONDS < 20 )); do :; done', { timeout: 4000 });
      assert.equal(r.last.type, 'error', JSON.stringify(r.last));
      assert.equal(cgroupFile(sb.id, 'pids.max'), '64');
      assert.ok(Number(cgroupFile(sb.id, 'pids.events').match(/max (\d+)/)[1]) > 0, 'fork was refused at the bound');
      await waitFor(() => Number(cgroupFile(sb.id, 'pids.current')) < 20, { timeoutMs: 20000, message: 'the bomb is gone' });
      assert.equal((await run(sb, 'echo ok')).out, 'ok');
    });

    it('a memory hog (512 MiB) is OOM-killed (137); the sandbox keeps answering', async () => {
      const r = await run(sb, `python3 -c "b = b'x' * (512 << 20); print(len(b))"; echo rc=$?`);
      assert.equal(r.out, 'rc=137');
      assert.equal((await run(sb, 'echo ok')).out, 'ok');
    });

    it('pause and resume still work', async () => {
      assert.equal((await api(`/v1/sandboxes/${sb.id}/pause`, { method: 'POST' })).status, 202);
      assert.equal((await api(`/v1/sandboxes/${sb.id}/resume`, { method: 'POST' })).status, 202);
      assert.equal((await run(sb, 'echo ok')).out, 'ok');
    });
  });

  it('a file bigger than the disk bound fails with "No space left on device"; the sandbox works; delete leaves nothing', async () => {
    const sb = await create({ 'ephemeral-storage': '64Mi' });
    const r = await run(sb, 'dd if=/dev/zero of=/workspace/big bs=1M count=100 2>&1 | grep -o "No space left on device"; rm /workspace/big; head -c 1000 /dev/zero > /tmp/small && stat -c %s /tmp/small');
    assert.equal(r.out, 'No space left on device\n1000');
    const dirs = cgroupDirs(sb.id);
    assert.ok(dirs.length >= 1);
    assert.deepEqual(mountsUnder(dataDir), [path.join(dataDir, 'sb', sb.id)]);
    // per sandbox one image; the never-mounted templates and their copies made ahead (one each per size and owner) stay until the server closes
    const images = () => fs.readdirSync(path.join(dataDir, 'disks')).flatMap((inst) => fs.readdirSync(path.join(dataDir, 'disks', inst))).filter((n) => !n.startsWith('template-') && !n.startsWith('spare-'));
    assert.deepEqual(images(), [`${sb.id}.img`]);
    await remove(sb);
    assert.deepEqual(dirs.filter((d) => fs.existsSync(d)), []);
    assert.deepEqual(mountsUnder(dataDir), []);
    assert.equal(fs.existsSync(path.join(dataDir, 'sb', sb.id)), false);
    assert.deepEqual(images(), []);
    await waitFor(() => loopsUnder(dataDir).length === 0, { timeoutMs: 10000, message: `loop devices released: ${loopsUnder(dataDir)}` });
  });

  it('without a memory limit a sandbox gets the server defaultMemory (2Gi; issue 21), one that asks gets its own, defaultMemory 0 none', async () => {
    const memoryOf = (sb) => (cgroupDirs(sb.id).length === 1 ? cgroupFile(sb.id, 'memory.max') : cgroupFile(sb.id, 'memory.limit_in_bytes'));
    const plain = await create({});
    const asked = await create({ memory: '256Mi' });
    try {
      assert.equal(memoryOf(plain), String(2 * 1024 * MiB));
      if (cgroupDirs(plain.id).length > 1) assert.equal(cgroupFile(plain.id, 'memory.memsw.limit_in_bytes'), String(2 * 1024 * MiB));
      assert.equal(memoryOf(asked), String(256 * MiB));
    } finally {
      await remove(plain);
      await remove(asked);
    }
    const other = await startServer({ dataDir: path.join(work, 'mem-data'), commandTailMs: 20, defaultMemory: '300Mi' });
    const none = await startServer({ dataDir: path.join(work, 'mem-none'), commandTailMs: 20, defaultMemory: 0 });
    try {
      for (const [srv, want] of [[other, String(300 * MiB)], [none, null]]) {
        const r = await request(`${srv.baseUrl}/v1/sandboxes`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: { image: { uri: 'x' }, entrypoint: ['tail', '-f', '/dev/null'], resourceLimits: {} }, endpointHeaders: false });
        assert.equal(r.status, 202, r.text);
        const unbounded = ['max', '9223372036854771712'];
        if (want) assert.equal(memoryOf({ id: r.json.id }), want);
        else assert.ok(unbounded.includes(memoryOf({ id: r.json.id })), memoryOf({ id: r.json.id }));
      }
      await assert.rejects(startServer({ defaultMemory: '1Mi' }), /defaultMemory must be a byte quantity of at least 64Mi .*got "1Mi"/);
      await assert.rejects(startServer({ defaultMemory: '2 Gi' }), /defaultMemory must be a byte quantity/);
    } finally {
      await other.close();
      await none.close();
    }
  });

  it('without ephemeral-storage a sandbox gets the server diskLimit, as a sparse image', async () => {
    const sb = await create({});
    const size = Number((await run(sb, 'df -B1 --output=size /workspace | tail -1')).out);
    assert.ok(size > 9.5 * 1024 * MiB && size <= 10 * 1024 * MiB, String(size));
    const img = path.join(dataDir, 'disks', fs.readdirSync(path.join(dataDir, 'disks'))[0], `${sb.id}.img`);
    assert.ok(fs.statSync(img).blocks * 512 < 64 * MiB, 'the image is sparse');
    await remove(sb);
  });

  it('a snapshot bigger than the target disk bound fails the create with 400 and leaves nothing; one that fits restores', async () => {
    const src = await create({ 'ephemeral-storage': '64Mi' });
    await run(src, 'head -c 20000000 /dev/urandom > /workspace/data && echo written');
    const snap = await api(`/v1/sandboxes/${src.id}/snapshots`, { method: 'POST' });
    assert.equal(snap.status, 202, snap.text);
    await waitFor(async () => (await api(`/v1/snapshots/${snap.json.id}`)).json.status.state === 'Ready', { timeoutMs: 30000, message: 'snapshot ready' });
    const before = fs.readdirSync(path.join(dataDir, 'sb'));
    const cgroupsBefore = sandboxCgroups(src.id);
    assert.ok(cgroupsBefore.includes(src.id), JSON.stringify(cgroupsBefore));
    const r = await api('/v1/sandboxes', { method: 'POST', body: { snapshotId: snap.json.id, resourceLimits: { 'ephemeral-storage': '16Mi' } } });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.code, 'SANDBOX::INVALID_PARAMETER');
    assert.match(r.json.message, /does not fit the sandbox's disk bound of 16777216 bytes .*No space left on device/);
    assert.deepEqual(fs.readdirSync(path.join(dataDir, 'sb')), before);
    assert.deepEqual(mountsUnder(dataDir), [path.join(dataDir, 'sb', src.id)]);
    // bwrap's gate was spawned and its cgroup entered while the disk was made (runner.js prepare): both gone too
    assert.deepEqual(sandboxCgroups(src.id), cgroupsBefore);
    assert.deepEqual(gates(), []);
    const ok = await api('/v1/sandboxes', { method: 'POST', body: { snapshotId: snap.json.id, resourceLimits: { 'ephemeral-storage': '64Mi' } } });
    assert.equal(ok.status, 202, ok.text);
    const ep = (await api(`/v1/sandboxes/${ok.json.id}/endpoints/44772`)).json;
    const restored = { id: ok.json.id, base: `http://${ep.endpoint}`, headers: ep.headers };
    assert.equal((await run(restored, 'stat -c %s /workspace/data')).out, '20000000');
    await remove(restored);
    await remove(src);
    assert.equal((await api(`/v1/snapshots/${snap.json.id}`, { method: 'DELETE' })).status, 204);
  });

  it('malformed or unknown limits are 400 SANDBOX::INVALID_PARAMETER naming the key; "0" of an unknown key asks for nothing', async () => {
    const cases = [
      [{ memory: '512m' }, /^resourceLimits\.memory: "512m" is not a byte quantity .*use "Mi" or "M"$/],
      [{ cpu: 'lots' }, /^resourceLimits\.cpu: "lots" is not a CPU quantity/],
      [{ cpu: '0' }, /^resourceLimits\.cpu: "0" is not a CPU quantity greater than 0/],
      [{ pids: '1.5' }, /^resourceLimits\.pids: "1\.5" is not a whole number/],
      [{ pids: '5000' }, /^resourceLimits\.pids: 5000 exceeds the server maximum of 4096 \(maxPids\)$/],
      [{ 'ephemeral-storage': '1Mi' }, /^resourceLimits\.ephemeral-storage: "1Mi" is below the smallest disk bound, "8Mi"$/],
      [{ gpu: '1' }, /^resourceLimits\.gpu: the local server has no GPUs/],
      [{ 'example.com/widgets': '2' }, /^resourceLimits\.example\.com\/widgets: unknown resource .*cpu, memory, pids, ephemeral-storage/],
    ];
    for (const [limits, message] of cases) {
      const r = await api('/v1/sandboxes', { method: 'POST', body: { image: { uri: 'x' }, entrypoint: ['sh'], resourceLimits: limits } });
      assert.equal(r.status, 400, `${JSON.stringify(limits)}: ${r.text}`);
      assert.equal(r.json.code, 'SANDBOX::INVALID_PARAMETER');
      assert.match(r.json.message, message);
    }
    assert.deepEqual(fs.readdirSync(path.join(dataDir, 'sb')), []);
    const sb = await create({ 'example.com/widgets': '0', gpu: '0' });
    await remove(sb);
  });

  it('close() removes its cgroups, mounts and images; a later server sweeps those of a server that died', async () => {
    const other = await startServer({ dataDir: path.join(work, 'other') });
    const otherApi = (p, opts = {}) => request(`${other.baseUrl}${p}`, { ...opts, headers: { 'Content-Type': 'application/json' }, endpointHeaders: false });
    const r = await otherApi('/v1/sandboxes', { method: 'POST', body: { image: { uri: 'x' }, entrypoint: ['sh'], resourceLimits: LIMITS } });
    assert.equal(r.status, 202, r.text);
    const dirs = cgroupDirs(r.json.id);
    const instances = dirs.map((d) => path.dirname(d));
    await other.close();
    assert.deepEqual(instances.filter((d) => fs.existsSync(d)), []);
    assert.deepEqual(mountsUnder(path.join(work, 'other')), []);
    assert.deepEqual(loopsUnder(path.join(work, 'other')).filter((l) => !l.endsWith('(deleted)')), []);

    // what a server killed before close() leaves: an instance cgroup with a sandbox cgroup, a mounted image
    const dead = spawnSync(process.execPath, ['-e', '0']).pid;
    const stale = `${dead}-0badc0de`;
    const staleCgroups = instances.map((d) => path.join(path.dirname(d), stale, 'sandbox'));
    for (const d of staleCgroups) fs.mkdirSync(d, { recursive: true });
    const staleDisks = path.join(work, 'other', 'disks', stale);
    const img = path.join(staleDisks, '00000000-0000-4000-8000-000000000000.img');
    const mp = path.join(work, 'other', 'sb', '00000000-0000-4000-8000-000000000000');
    fs.mkdirSync(staleDisks, { recursive: true });
    fs.mkdirSync(mp, { recursive: true });
    fs.writeFileSync(img, '');
    fs.truncateSync(img, 16 * MiB);
    assert.equal(spawnSync('mkfs.ext4', ['-q', '-F', img], { env: { PATH: `/usr/sbin:/sbin:${process.env.PATH}` } }).status, 0);
    assert.equal(spawnSync('mount', ['-o', 'loop', img, mp]).status, 0);
    assert.deepEqual(mountsUnder(path.join(work, 'other')), [mp]);
    const again = await startServer({ dataDir: path.join(work, 'other') });
    try {
      await waitFor(() => staleCgroups.every((d) => !fs.existsSync(path.dirname(d))), { timeoutMs: 10000, message: 'stale cgroups swept' });
      await waitFor(() => mountsUnder(path.join(work, 'other')).length === 0, { timeoutMs: 10000, message: 'stale mount swept' });
      assert.equal(fs.existsSync(staleDisks), false);
    } finally {
      await again.close();
    }
  });

  it('cgroupParent must be a cgroup v2 directory with memory and pids delegated: startServer names the option', async () => {
    await assert.rejects(startServer({ cgroupParent: 'relative/dir' }), /cgroupParent must be an absolute path/);
    await assert.rejects(startServer({ cgroupParent: work }), /cgroupParent .*: is not a cgroup v2 directory/);
    const v2 = mounts().find((m) => m.fstype === 'cgroup2');
    const controllers = v2 ? fs.readFileSync(path.join(v2.mountPoint, 'cgroup.controllers'), 'utf8') : '';
    if (v2 && !/\bmemory\b/.test(controllers)) {
      await assert.rejects(startServer({ cgroupParent: v2.mountPoint }), /cgroupParent \S+: the controllers memory, pids are not delegated to it/);
    }
  });

  it('isolation none accepts limits and says at start that they are not enforced', async () => {
    const warnings = [];
    const none = await startServer({ isolation: 'none', log: (l) => warnings.push(l) });
    try {
      assert.ok(warnings.some((w) => /isolation none: .*resourceLimits and disk use are not enforced/.test(w)), warnings.join('\n'));
      const r = await request(`${none.baseUrl}/v1/sandboxes`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: { image: { uri: 'x' }, entrypoint: ['sh'], resourceLimits: LIMITS }, endpointHeaders: false });
      assert.equal(r.status, 202, r.text);
    } finally {
      await none.close();
    }
  });

  describe('a server that cannot create cgroups (run as nobody)', () => {
    /** The CLI as uid 65534 on a data dir it owns; resolves { domain, out (its stdout so far), child }. */
    async function cliAsNobody(...extra) {
      const data = path.join(work, `nobody-${extra.length}`);
      fs.chmodSync(work, 0o711); // nobody reaches its data dir (and nothing else of ours)
      fs.mkdirSync(data, { recursive: true });
      fs.chownSync(data, 65534, 65534);
      letUserRunCheckout(65534); // a checkout in a 0700 directory (a fresh clone under mktemp -d)
      const cli = path.resolve('lib/dev-server/cli.js');
      const child = spawn('setpriv', ['--reuid', '65534', '--regid', '65534', '--clear-groups', process.execPath, cli, '--port', '0', '--no-api-key', '--data-dir', data, ...extra], { stdio: ['ignore', 'pipe', 'pipe'] });
      const state = { out: '', child };
      child.stdout.on('data', (d) => { state.out += d; });
      child.stderr.on('data', (d) => { state.out += d; });
      state.domain = await waitFor(() => /^(127\.0\.0\.1:\d+)$/m.exec(state.out)?.[1], { timeoutMs: 20000, message: 'the CLI prints its domain' })
        .catch((err) => { child.kill('SIGKILL'); throw new Error(`${err.message}: ${state.out}`); });
      return state;
    }
    const stop = async (s) => {
      s.child.kill('SIGTERM');
      if (s.child.exitCode === null) await new Promise((r) => s.child.once('exit', r));
    };
    const post = (s, resourceLimits) => request(`http://${s.domain}/v1/sandboxes`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: { image: { uri: 'x' }, entrypoint: ['sh'], resourceLimits }, endpointHeaders: false });

    it('refuses cpu/memory/pids and ephemeral-storage with 400 RESOURCE_LIMITS_NOT_ENFORCEABLE; {} is fine', async () => {
      const s = await cliAsNobody();
      try {
        assert.match(s.out, /no cgroups \(the server does not run as root and no cgroupParent .*\): creates with cpu, memory or pids limits are refused/);
        assert.match(s.out, /no per-sandbox disk bound \(the server does not run as root/);
        const r = await post(s, { cpu: '1', memory: '2Gi' });
        assert.equal(r.status, 400, r.text);
        assert.equal(r.json.code, 'SANDBOX::RESOURCE_LIMITS_NOT_ENFORCEABLE');
        assert.match(r.json.message, /cannot enforce resourceLimits cpu, memory: the server does not run as root .*unenforcedLimits \(--unenforced-limits\)/);
        const d = await post(s, { 'ephemeral-storage': '1Gi' });
        assert.equal(d.status, 400, d.text);
        assert.match(d.json.message, /cannot enforce resourceLimits ephemeral-storage: the server does not run as root/);
        assert.equal((await post(s, {})).status, 202);
      } finally {
        await stop(s);
      }
    });

    it('with --unenforced-limits accepts them and warns at start that they are not enforced', async () => {
      const s = await cliAsNobody('--unenforced-limits');
      try {
        assert.match(s.out, /resourceLimits cpu, memory and pids are NOT enforced \(.*\); they are accepted because of unenforcedLimits/);
        assert.equal((await post(s, { ...LIMITS, 'ephemeral-storage': '1Gi' })).status, 202);
      } finally {
        await stop(s);
      }
    });
  });
});
