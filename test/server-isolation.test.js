// Isolation of the local server's sandboxes (bubblewrap): read-only host, private /workspace and /tmp, private PID
// namespace, network through slirp4netns unless denied, working loopback inside, volume rules, no process left after the server is
// SIGKILLed; and the unconfined 'none' mode.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { startServer } from '../lib/dev-server/index.js';
import { descendants } from '../lib/dev-server/proctree.js';
import { execdBinary } from '../lib/dev-server/execd-binary.js';
import { waitFor } from './helpers/poll.js';
import { request, parseEvents, quietPeriod } from './helpers/raw.js';
import { INHERITED_FD, INHERITED_FD_PROBE, inheritedStdio } from './helpers/inherited-fd.js';
import { mounts } from '../lib/dev-server/cgroups.js';
import { SlirpNetwork } from '../lib/dev-server/network.js';

// `ps -eo args` without procps: one line per process, argv joined by spaces
const PS = 'for p in /proc/[0-9]*; do [ -r $p/cmdline ] && tr "\\0" " " < $p/cmdline && echo; done';

const CLI = fileURLToPath(new URL('../lib/dev-server/cli.js', import.meta.url));

/** True while pid runs (a zombie waiting for its reaper counts as gone). */
function alive(pid) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat[stat.lastIndexOf(')') + 2] !== 'Z';
  } catch {
    return false;
  }
}

/** Minimal client over the raw API: create, run (foreground, returns { out, err, exit }), delete. */
function client(server) {
  const api = (p, opts = {}) => request(`${server.baseUrl}${p}`, { ...opts, headers: { 'Content-Type': 'application/json' } });
  return {
    api,
    async create(extra = {}) {
      const r = await api('/v1/sandboxes', { method: 'POST', body: { image: { uri: 'x' }, entrypoint: ['tail', '-f', '/dev/null'], resourceLimits: {}, ...extra } });
      if (r.status !== 202) return r;
      const ep = (await api(`/v1/sandboxes/${r.json.id}/endpoints/44772`)).json;
      return { id: r.json.id, base: `http://${ep.endpoint}`, status: 202 };
    },
    async run(sb, command, extra = {}) {
      const r = await request(`${sb.base}/command`, { method: 'POST', body: { command, ...extra }, timeoutMs: 20000 });
      assert.equal(r.status, 200, r.text);
      const ev = parseEvents(r.text);
      const last = ev.at(-1);
      return {
        out: ev.filter((e) => e.type === 'stdout').map((e) => e.text).join('\n'),
        err: ev.filter((e) => e.type === 'stderr').map((e) => e.text).join('\n'),
        exit: last.type === 'execution_complete' ? 0 : Number(last.error.evalue),
        id: ev[0].text,
      };
    },
    remove: (sb) => api(`/v1/sandboxes/${sb.id}`, { method: 'DELETE' }),
  };
}

/** Starts the dev-server CLI (`cli` script, data dir) in a child process; resolves { child, cc } once it printed its domain. */
async function startCli(cli, dataDir, extraStdio = []) {
  const child = spawn(process.execPath, [cli, '--port', '0', '--quiet', '--no-api-key', '--data-dir', dataDir], { stdio: ['ignore', 'pipe', 'inherit', ...extraStdio] });
  let out = '';
  child.stdout.on('data', (d) => { out += d; });
  try {
    const domain = await waitFor(() => /^(\S+:\d+)\n/.exec(out)?.[1], { timeoutMs: 15000, message: 'cli prints its domain' });
    return { child, cc: client({ baseUrl: `http://${domain}` }) };
  } catch (err) {
    child.kill('SIGKILL');
    throw err;
  }
}

describe('dev-server sandbox isolation (bubblewrap)', function () {
  this.timeout(60000);
  let server;
  let c;
  let work; // test-owned host dir: server data + allowed host volumes
  let a;
  let b;

  before(async () => {
    work = fs.mkdtempSync(path.join(os.tmpdir(), 'osb-iso-'));
    fs.mkdirSync(path.join(work, 'vol'));
    server = await startServer({ dataDir: path.join(work, 'data'), allowedHostPaths: [path.join(work, 'vol')], commandTailMs: 20 });
    c = client(server);
    [a, b] = await Promise.all([c.create(), c.create()]);
  });
  after(async () => {
    await server?.close();
    fs.rmSync(work, { recursive: true, force: true });
  });

  it('cannot write to the host system or see the server\'s files', async () => {
    for (const target of ['/usr/x', '/etc/x', '/x']) {
      const r = await c.run(a, `echo hi > ${target}`);
      assert.notEqual(r.exit, 0, `${target} was writable`);
    }
    const r = await c.run(a, `test -e ${JSON.stringify(work)} && echo visible || echo hidden`);
    assert.equal(r.out, 'hidden');
    const marker = path.join(os.tmpdir(), `osb-marker-${process.pid}`);
    fs.writeFileSync(marker, 'x');
    try {
      assert.equal((await c.run(a, `test -e ${marker} && echo visible || echo hidden`)).out, 'hidden');
    } finally {
      fs.rmSync(marker);
    }
    assert.equal((await c.run(a, 'echo ok > /workspace/w && echo ok > /tmp/t && cat /workspace/w /tmp/t')).out, 'ok\nok');
    // the server's code (the package) is not there, only the code interpreter's kernel programs, read-only
    const pkgRoot = fs.realpathSync(fileURLToPath(new URL('..', import.meta.url)));
    const server = JSON.stringify(path.join(pkgRoot, 'lib', 'dev-server', 'index.js'));
    const kernel = JSON.stringify(path.join(pkgRoot, 'lib', 'dev-server', 'execd', 'code-python-kernel.py'));
    const seen = await c.run(a, `test -e ${server} && echo server-visible; test -r ${kernel} && echo kernel; echo x >> ${kernel} || echo read-only`);
    assert.equal(seen.out, 'kernel\nread-only');
  });

  it('cannot see another sandbox\'s /workspace, /tmp or processes', async () => {
    await c.run(a, 'echo secret > /workspace/a-secret; echo secret > /tmp/a-secret');
    await c.run(a, 'sleep 1234', { background: true });
    const r = await c.run(b, `ls -A /workspace /tmp; ${PS}`);
    assert.ok(!r.out.includes('a-secret'), r.out);
    assert.ok(!r.out.includes('sleep 1234'), r.out);
    const pids = (await c.run(b, 'ls /proc | grep -E "^[0-9]+$"')).out.split('\n');
    // bwrap's init, execd, the command's shell and ls/grep: a handful, never the host's
    assert.ok(pids.length <= 8, `sandbox sees ${pids.length} processes`);
    assert.ok(pids.includes('1'));
    const own = await c.run(a, PS);
    assert.ok(own.out.includes('sleep 1234'));
  });

  it('without networkPolicy has network through slirp4netns like an allow policy (never the host: loopback nor its other addresses); deny has none; loopback inside works', async () => {
    // a listener on the host's loopback, and one on a non-loopback address of this machine when it has one
    const hostAddr = Object.values(os.networkInterfaces()).flat().find((i) => i.family === 'IPv4' && !i.internal)?.address;
    const listeners = [];
    for (const addr of ['127.0.0.1', hostAddr].filter(Boolean)) {
      const l = net.createServer((s) => s.on('error', () => {}).end('host-says-hi'));
      await new Promise((r) => l.listen(0, addr, r));
      listeners.push(l);
    }
    const probe = (addr, port) => `node -e "require('net').connect(${port},'${addr}').on('data',d=>{console.log(String(d));process.exit(0)}).on('error',e=>{console.log(e.code);process.exit(0)})"`;
    const [loop, eth] = listeners.map((l) => probe(l.address().address, l.address().port));
    try {
      // a (no networkPolicy): upstream's meaning, full network, here through slirp4netns
      assert.equal((await c.run(a, loop)).out, 'ECONNREFUSED');
      // the host's own non-loopback address is closed too (the sandbox's firewall, network.js)
      if (eth) assert.equal((await c.run(a, eth)).out, 'ECONNREFUSED');
      const closed = await c.create({ networkPolicy: { defaultAction: 'deny' } });
      const open = await c.create({ networkPolicy: { defaultAction: 'allow' } });
      try {
        assert.equal((await c.run(closed, loop)).out, 'ECONNREFUSED');
        if (eth) assert.equal((await c.run(closed, eth)).out, 'ENETUNREACH');
        assert.equal((await c.run(open, loop)).out, 'ECONNREFUSED');
        if (eth) assert.equal((await c.run(open, eth)).out, 'ECONNREFUSED');
      } finally {
        await c.remove(closed);
        await c.remove(open);
      }
    } finally {
      for (const l of listeners) l.close();
    }
    // a server inside, reached from inside and from the host through endpoints/{port}
    const srv = "require('http').createServer((q,s)=>s.end('inside:'+q.url)).listen(8002,'127.0.0.1')";
    await c.run(a, `node -e "${srv}"`, { background: true });
    const get = `node -e "require('http').get('http://127.0.0.1:8002/loop',r=>r.on('data',d=>console.log(String(d))))"`;
    const inside = await waitFor(async () => {
      const r = await c.run(a, get);
      return r.out === 'inside:/loop' && r;
    }, { message: 'in-sandbox server answers' });
    assert.equal(inside.out, 'inside:/loop');
    const ep = (await c.api(`/v1/sandboxes/${a.id}/endpoints/8002`)).json;
    const fromHost = await request(`http://${ep.endpoint}/from-host?q=1`);
    assert.equal(fromHost.text, 'inside:/from-host?q=1');
  });

  (process.getuid() === 0 ? it : it.skip)('starts slirp4netns only once the sandbox\'s loopback is up', async () => {
    // regression: slirp4netns --configure sets lo up; started right after bwrap reported the sandbox's pid it raced
    // bwrap's own loopback setup (RTM_NEWADDR 127.0.0.1 with NLM_F_EXCL), which then died and failed the create. A
    // network namespace whose lo stays down until told, and a stand-in slirp4netns that records what it found
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'osb-lo-'));
    const ns = spawn('unshare', ['-n', 'sh', '-c', 'read go; ip link set lo up; exec sleep 60'], { stdio: ['pipe', 'ignore', 'ignore'] });
    try {
      const seen = path.join(dir, 'seen');
      const fake = path.join(dir, 'slirp4netns');
      fs.writeFileSync(fake, `#!/bin/sh\ngrep -c '127\\.0\\.0\\.1' /proc/${ns.pid}/net/fib_trie > ${seen}\nexit 1\n`, { mode: 0o755 });
      await waitFor(() => fs.readlinkSync(`/proc/${ns.pid}/ns/net`) !== fs.readlinkSync('/proc/self/ns/net'), { message: 'unshare made its namespace' });
      const attached = new SlirpNetwork(fake).attach({ pid: ns.pid, netns: `/proc/${ns.pid}/ns/net` }).catch((err) => err);
      await quietPeriod(300);
      assert.equal(fs.existsSync(seen), false, 'slirp4netns started while the loopback was down');
      ns.stdin.write('go\n');
      const err = await attached;
      assert.match(err.message, /^slirp4netns failed \(exit code 1\)/);
      assert.notEqual(fs.readFileSync(seen, 'utf8').trim(), '0');
    } finally {
      ns.kill('SIGKILL');
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('enforces the host-path allow-list and read-only volumes', async () => {
    const denied = await c.create({ volumes: [{ name: 'v', host: { path: '/var' }, mountPath: '/v' }] });
    assert.equal(denied.status, 400);
    assert.equal(denied.json.code, 'VOLUME::HOST_PATH_NOT_ALLOWED');
    // an allowed prefix that contains the server's data dir still cannot reach other sandboxes' directories
    const wide = await startServer({ dataDir: path.join(work, 'vol', 'wide-data'), allowedHostPaths: [work], commandTailMs: 20 });
    try {
      const wc = client(wide);
      const other = await wc.create();
      for (const p of [path.join(work, 'vol', 'wide-data', 'sb', other.id), path.join(work, 'vol')]) {
        const r = await wc.create({ volumes: [{ name: 'v', host: { path: p }, mountPath: '/v' }] });
        assert.equal(r.status, 400, p);
        assert.equal(r.json.code, 'VOLUME::HOST_PATH_NOT_ALLOWED');
      }
    } finally {
      await wide.close();
    }
    const vol = path.join(work, 'vol');
    fs.writeFileSync(path.join(vol, 'given.txt'), 'from-host');
    const sb = await c.create({
      volumes: [
        { name: 'ro', host: { path: vol }, mountPath: '/ro', readOnly: true },
        { name: 'rw', host: { path: vol }, mountPath: '/rw', subPath: 'sub' },
        { name: 'named', pvc: { claimName: 'shared-cache' }, mountPath: '/cache' },
      ],
    });
    try {
      assert.equal((await c.run(sb, 'cat /ro/given.txt')).out, 'from-host');
      assert.notEqual((await c.run(sb, 'echo x > /ro/new.txt')).exit, 0);
      assert.equal(fs.existsSync(path.join(vol, 'new.txt')), false);
      assert.equal((await c.run(sb, 'echo y > /rw/made.txt && echo z > /cache/k')).exit, 0);
      assert.equal(fs.readFileSync(path.join(vol, 'sub', 'made.txt'), 'utf8'), 'y\n');
    } finally {
      await c.remove(sb);
    }
    // a named volume outlives its sandbox and is shared with the next one
    const next = await c.create({ volumes: [{ name: 'named', pvc: { claimName: 'shared-cache' }, mountPath: '/cache' }] });
    assert.equal((await c.run(next, 'cat /cache/k')).out, 'z');
    // ... which (as root: another host uid, the same sandbox group) can change and remove what the first one made
    assert.equal((await c.run(next, 'echo w >> /cache/k && mkdir /cache/d2 && cat /cache/k && rm /cache/k')).out, 'z\nw');
    await c.remove(next);
  });

  it('delete kills every process and removes the sandbox\'s directories', async () => {
    const sb = await c.create();
    await c.run(sb, 'sleep 4321', { background: true });
    const dir = path.join(work, 'data', 'sb', sb.id);
    assert.ok(fs.existsSync(path.join(dir, 'workspace')));
    const before = new Set(descendants(process.pid));
    assert.equal((await c.remove(sb)).status, 204);
    assert.equal(fs.existsSync(dir), false);
    const left = [...before].filter((p) => fs.existsSync(`/proc/${p}`) && fs.readFileSync(`/proc/${p}/cmdline`, 'utf8').includes('4321'));
    assert.deepEqual(left, []);
  });

  it('the CLI deletes its sandboxes and exits 0 on SIGTERM', async () => {
    const data = path.join(work, 'termed');
    const { child, cc } = await startCli(CLI, data);
    try {
      const exited = new Promise((r) => child.on('exit', (code) => r(code)));
      const sb = await cc.create();
      await cc.run(sb, 'sleep 998', { background: true });
      const pids = descendants(child.pid);
      child.kill('SIGTERM');
      assert.equal(await exited, 0);
      // the sandboxes' processes, and the server's reaper, which exits once the server has closed
      await waitFor(() => pids.filter(alive).length === 0, { timeoutMs: 5000, message: `processes left: ${pids.filter(alive)}` });
      assert.equal(fs.existsSync(path.join(data, 'sb')), false, 'sandbox directories left');
    } finally {
      child.kill('SIGKILL');
    }
  });

  it('close() leaves nothing that keeps the process alive (sockets, timers, children)', async () => {
    const index = new URL('../lib/dev-server/index.js', import.meta.url).href;
    const script = `
      import { startServer } from ${JSON.stringify(index)};
      const s = await startServer({ commandTailMs: 10 });
      const post = (u, b, h = {}) => fetch(u, { method: 'POST', headers: { 'content-type': 'application/json', ...h }, body: JSON.stringify(b) }).then((r) => r.json().catch(() => null));
      const sb = await post(s.baseUrl + '/v1/sandboxes', { image: { uri: 'x' }, entrypoint: ['tail', '-f', '/dev/null'], resourceLimits: {}, timeout: 600 });
      const ep = await (await fetch(s.baseUrl + '/v1/sandboxes/' + sb.id + '/endpoints/44772')).json();
      await (await fetch('http://' + ep.endpoint + '/command', { method: 'POST', headers: { 'content-type': 'application/json', ...ep.headers }, body: JSON.stringify({ command: 'sleep 60 & echo hi' }) })).text();
      await (await fetch(s.baseUrl + '/v1/sandboxes/' + sb.id + '/proxy/44772/ping', { headers: ep.headers })).text();
      await s.close();
      console.log('closed');`;
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d) => { out += d; });
    try {
      await waitFor(() => child.exitCode !== null, { timeoutMs: 20000, message: `the process exits by itself after close() (output so far: ${out})` });
    } finally {
      child.kill('SIGKILL');
    }
    assert.equal(out.trim(), 'closed');
    assert.equal(child.exitCode, 0);
  });

  it('works from a checkout under /tmp, which the sandbox\'s own /tmp would hide (regression)', async () => {
    // a copy of the package's lib/dev-server (it has no npm dependencies) in the system temp dir, run from there
    const root = fileURLToPath(new URL('..', import.meta.url));
    const copy = fs.mkdtempSync(path.join(os.tmpdir(), 'osb-checkout-'));
    try {
      fs.cpSync(path.join(root, 'package.json'), path.join(copy, 'package.json'));
      fs.cpSync(path.join(root, 'lib', 'dev-server'), path.join(copy, 'lib', 'dev-server'), { recursive: true });
      // and the execd where a source build puts it (used unless $MASTRA_OPENSANDBOX_ADDON names an addon beside one)
      fs.cpSync(execdBinary(), path.join(copy, 'build', 'Release', 'osb-execd'));
      const cli = path.join(copy, 'lib', 'dev-server', 'cli.js');
      const { child, cc } = await startCli(cli, path.join(work, 'from-tmp'));
      try {
        const sb = await cc.create();
        assert.equal(sb.status, 202, JSON.stringify(sb.json));
        const r = await cc.run(sb, 'echo from-tmp-checkout; ls /tmp | grep -c osb-checkout-');
        assert.deepEqual([r.out, r.exit], ['from-tmp-checkout\n1', 0]);
      } finally {
        child.kill('SIGKILL');
      }
    } finally {
      fs.rmSync(copy, { recursive: true, force: true });
    }
  });

  it('a descriptor the server inherited without close-on-exec (a host file at fd 40) never reaches the sandbox (regression)', async () => {
    // Node's spawn and bubblewrap pass on every descriptor that is not close-on-exec: execd used to hold the server's
    // fd 40 and hand it to every command, which wrote to the host file through it.
    const hostFile = path.join(work, 'inherited.txt');
    const fd = fs.openSync(hostFile, 'w');
    let started;
    try {
      started = await startCli(CLI, path.join(work, 'inherits'), inheritedStdio(fd));
    } finally {
      fs.closeSync(fd);
    }
    const { child, cc } = started;
    try {
      const sb = await cc.create();
      const r = await cc.run(sb, INHERITED_FD_PROBE);
      assert.equal(r.out, 'rc=1');
      assert.match(r.err, new RegExp(`${INHERITED_FD}: Bad file descriptor`));
      assert.equal(fs.readFileSync(hostFile, 'utf8'), '');
    } finally {
      child.kill('SIGKILL');
    }
  });

  it('leaves no sandbox process (nor a networked sandbox\'s slirp4netns) behind when the server is killed with SIGKILL', async () => {
    const { child, cc } = await startCli(CLI, path.join(work, 'killed'));
    try {
      const sb = await cc.create();
      await cc.run(sb, 'sleep 999', { background: true });
      const networked = await cc.create({ networkPolicy: { defaultAction: 'allow' } });
      assert.equal(networked.status, 202);
      const pids = descendants(child.pid);
      assert.ok(pids.length >= 3, `sandbox processes: ${pids}`);
      const comm = (pid) => fs.readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
      assert.equal(pids.filter((p) => comm(p) === 'slirp4netns').length, 2); // both: no networkPolicy has network too
      // what the kernel would keep (the sandboxes' disk mounts and images, their cgroups) the server's reaper removes
      const ROOT = process.getuid() === 0;
      const disks = path.join(work, 'killed', 'disks');
      const mounted = () => mounts().filter((m) => m.mountPoint.startsWith(`${path.join(work, 'killed')}/`));
      const leftovers = () => [...mounted(), ...(fs.existsSync(disks) ? fs.readdirSync(disks) : [])];
      const cgroups = mounts().filter((m) => m.fstype === 'cgroup')
        .map((m) => path.join(m.mountPoint, 'mastra-opensandbox')).filter((d) => fs.existsSync(d))
        .flatMap((d) => fs.readdirSync(d).filter((n) => n.startsWith(`${child.pid}-`)).map((n) => path.join(d, n)));
      if (ROOT) assert.deepEqual([mounted().length, cgroups.length > 0], [2, true], 'both sandboxes have a disk mount and cgroups');
      child.kill('SIGKILL');
      await waitFor(() => !pids.some(alive), { timeoutMs: 10000, message: `all sandbox processes gone: ${pids}` });
      await waitFor(() => leftovers().length === 0, { timeoutMs: 10000, message: `the reaper unmounts and removes the disks: ${leftovers()}` });
      await waitFor(() => cgroups.every((d) => !fs.existsSync(d)), { timeoutMs: 10000, message: `the reaper removes the cgroups: ${cgroups}` });
    } finally {
      child.kill('SIGKILL');
    }
  });
});

describe('dev-server without isolation', function () {
  this.timeout(30000);

  it('rejects bad options with clear errors', async () => {
    await assert.rejects(startServer({ prot: 8080 }), /unknown option\(s\) prot/);
    await assert.rejects(startServer({ port: -1 }), /port must be an integer/);
    await assert.rejects(startServer({ isolation: 'docker' }), /isolation must be 'bwrap' or 'none'/);
    await assert.rejects(startServer({ allowedHostPaths: ['relative/dir'] }), /absolute paths/);
    await assert.rejects(startServer({ apiKey: 42 }), /apiKey must be a non-empty string/);
    await assert.rejects(startServer({ execdEndpoint: 'gateway' }), /execdEndpoint/);
  });

  it('hides a data dir that lies inside the exposed package directory', async () => {
    const pkgRoot = fileURLToPath(new URL('..', import.meta.url));
    const inner = fs.mkdtempSync(path.join(pkgRoot, '.osb-data-'));
    const server = await startServer({ dataDir: inner, commandTailMs: 20 });
    try {
      const c = client(server);
      const [x, y] = await Promise.all([c.create(), c.create()]);
      await c.run(x, 'echo mine > /workspace/secret');
      const r = await c.run(y, `ls -A ${JSON.stringify(inner)} | wc -l; cat ${JSON.stringify(path.join(inner, 'sb', x.id, 'workspace', 'secret'))} || echo hidden`);
      assert.deepEqual(r.out.split('\n'), ['0', 'hidden']);
      // of the package only the code interpreter's kernels are exposed: the server's own code is not
      const seen = await c.run(y, `test -r ${JSON.stringify(path.join(pkgRoot, 'package.json'))} && echo pkg-visible || echo pkg-hidden`);
      assert.equal(seen.out, 'pkg-hidden');
    } finally {
      await server.close();
      fs.rmSync(inner, { recursive: true, force: true });
    }
  });

  it('serves sandboxes whose data dir is deeper than a Unix socket path can be (both isolation modes)', async () => {
    // regression: execd's socket lived at <dataDir>/sb/<id>/run/execd.sock and the server refused to start a
    // sandbox once that path passed the 107-byte limit of sun_path
    const top = fs.mkdtempSync(path.join(os.tmpdir(), 'osb-deep-'));
    const deep = path.join(top, 'd'.repeat(120), 'e'.repeat(60));
    for (const isolation of ['bwrap', 'none']) {
      const server = await startServer({ dataDir: path.join(deep, isolation), isolation, commandTailMs: 20, log: () => {} });
      try {
        const c = client(server);
        const sb = await c.create();
        assert.equal(sb.status, 202, JSON.stringify(sb.json));
        assert.equal((await c.run(sb, 'echo deep')).out, 'deep', isolation);
        assert.equal((await c.remove(sb)).status, 204);
      } finally {
        await server.close();
      }
    }
    fs.rmSync(top, { recursive: true, force: true });
  });

  it('refuses to start without bwrap on PATH unless isolation is none', async () => {
    const saved = process.env.PATH;
    process.env.PATH = path.dirname(process.execPath);
    try {
      await assert.rejects(startServer({}), /bubblewrap \(bwrap\) is not on PATH.*isolation 'none'/);
    } finally {
      process.env.PATH = saved;
    }
  });

  it("isolation 'none' runs execd as a plain child process in the sandbox's host directory", async () => {
    const warnings = [];
    const server = await startServer({ isolation: 'none', log: (m) => warnings.push(m), commandTailMs: 20 });
    try {
      assert.ok(warnings.some((w) => /unconfined/.test(w)));
      const c = client(server);
      const vol = await c.create({ volumes: [{ name: 'v', pvc: { claimName: 'cache' }, mountPath: '/cache' }] });
      assert.equal(vol.status, 400);
      assert.equal(vol.json.code, 'VOLUME::NOT_SUPPORTED');
      const sb = await c.create();
      const r = await c.run(sb, 'pwd; echo $TMPDIR');
      const [cwd, tmp] = r.out.split('\n');
      assert.ok(path.isAbsolute(cwd) && cwd.endsWith(path.join(sb.id, 'workspace')), cwd);
      assert.ok(tmp.endsWith(path.join(sb.id, 'tmp')), tmp);
      await c.run(sb, 'sleep 2468', { background: true });
      await c.remove(sb);
      const other = await c.create();
      const relay = other.base.replace('http://', '');
      await server.close();
      // close() deleted the remaining sandbox: its relay port is closed
      const refused = await new Promise((r) => net.connect(Number(relay.split(':')[1]), '127.0.0.1').on('connect', function () { this.destroy(); r('open'); }).on('error', (e) => r(e.code)));
      assert.equal(refused, 'ECONNREFUSED');
      await waitFor(() => !fs.readdirSync('/proc').some((p) => /^\d+$/.test(p) && (() => {
        try {
          return fs.readFileSync(`/proc/${p}/cmdline`, 'utf8') === 'sleep\u00002468\u0000';
        } catch {
          return false;
        }
      })()), { message: 'background process killed with its sandbox' });
    } finally {
      await server.close();
    }
  });
});
