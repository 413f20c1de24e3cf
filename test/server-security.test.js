// Attacks on the local server (docs/dev-server-security.md), each tried for real: from code inside a sandbox, from a
// second local uid (`nobody`, when the tests run as root), and from a browser-like request. Each must fail with the
// sandbox still working afterwards.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { execFile, execFileSync, spawn } from 'node:child_process';
import { promisify } from 'node:util';
import { startServer } from '../lib/dev-server/index.js';
import { findBwrap, findExecutable } from '../lib/dev-server/runner.js';
import { DEFAULT_SANDBOX_UID, MAX_SANDBOX_UID, SandboxIdentities, UID_BLOCK } from '../lib/dev-server/security.js';
import { request, parseEvents } from './helpers/raw.js';
import { waitFor } from './helpers/poll.js';
import { asNobodyWithTun, letUserRunCheckout } from './helpers/other-user.js';
import { INHERITED_FD_PROBE, inheritedStdio } from './helpers/inherited-fd.js';

const ROOT = process.getuid() === 0;
const NETWORK = { networkPolicy: { defaultAction: 'allow' } };

/** slirp4netns processes started by the process `ppid`: [{ pid, uid }]. */
function slirpChildren(ppid) {
  const found = [];
  for (const d of fs.readdirSync('/proc').filter((n) => /^\d+$/.test(n))) {
    try {
      const status = fs.readFileSync(`/proc/${d}/status`, 'utf8');
      if (/^Name:\tslirp4netns$/m.test(status) && Number(/^PPid:\t(\d+)/m.exec(status)[1]) === ppid) {
        found.push({ pid: Number(d), uid: Number(/^Uid:\t(\d+)/m.exec(status)[1]) });
      }
    } catch { /* gone meanwhile */ }
  }
  return found;
}

/**
 * A shell command that tries a TCP connection from inside a sandbox to each [host, port] (5 s deadline each) and
 * prints one word per target: connected, timeout or the error code.
 */
function connectProbe(targets) {
  const js = `const net=require("net");Promise.all(${JSON.stringify(targets)}.map(([h,p])=>new Promise((r)=>{const s=net.connect(p,h);`
    + 'const t=setTimeout(()=>{s.destroy();r("timeout")},5000);s.on("connect",()=>{clearTimeout(t);s.destroy();r("connected")});'
    + 's.on("error",(e)=>{clearTimeout(t);r(e.code)})}))).then((x)=>console.log(x.join(" ")))';
  return `node -e '${js}'`;
}

/** A TCP listener on the host (address, port 0); close() when done. */
async function hostListener(address) {
  const l = net.createServer((s) => {
    s.on('error', () => {}); // probes hang up at once
    s.end('host');
  });
  await new Promise((r) => l.listen(0, address, r));
  return l;
}

/** The first non-loopback IPv4 address of this machine, or undefined. */
const hostAddress = () => Object.values(os.networkInterfaces()).flat().find((i) => i.family === 'IPv4' && !i.internal)?.address;

describe('dev-server security: sandboxed code cannot touch the host, other sandboxes or other users', function () {
  this.timeout(120000);
  let server;
  let work;
  let a;
  let b;
  const api = (p, opts = {}) => request(`${server.baseUrl}${p}`, { ...opts, headers: { 'Content-Type': 'application/json', ...opts.headers }, endpointHeaders: false });
  async function create(extra = {}) {
    const r = await api('/v1/sandboxes', { method: 'POST', body: { image: { uri: 'x' }, entrypoint: ['tail', '-f', '/dev/null'], resourceLimits: {}, ...extra } });
    assert.equal(r.status, 202, r.text);
    const ep = (await api(`/v1/sandboxes/${r.json.id}/endpoints/44772`)).json;
    return { id: r.json.id, base: `http://${ep.endpoint}`, headers: ep.headers };
  }
  async function run(sb, command, headers = sb.headers) {
    const r = await request(`${sb.base}/command`, { method: 'POST', headers: { 'Content-Type': 'application/json', ...headers }, body: { command }, timeoutMs: 30000, endpointHeaders: false });
    if (r.status !== 200) return { status: r.status, json: r.json };
    const ev = parseEvents(r.text);
    const last = ev.at(-1);
    return {
      status: 200,
      out: ev.filter((e) => e.type === 'stdout').map((e) => e.text).join('\n'),
      err: ev.filter((e) => e.type === 'stderr').map((e) => e.text).join('\n'),
      exit: last.type === 'execution_complete' ? 0 : Number(last.error.evalue),
    };
  }

  before(async () => {
    work = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'osb-sec-')));
    fs.mkdirSync(path.join(work, 'vol'));
    server = await startServer({ dataDir: path.join(work, 'data'), allowedHostPaths: [path.join(work, 'vol')], commandTailMs: 20 });
    a = await create({ volumes: [{ name: 'rw', host: { path: path.join(work, 'vol') }, mountPath: '/vol' }, { name: 'ro', host: { path: path.join(work, 'vol') }, mountPath: '/ro', readOnly: true }] });
    b = await create();
  });
  after(async () => {
    await server?.close();
    if (work) fs.rmSync(work, { recursive: true, force: true });
  });

  it('runs without capabilities, with no_new_privs and a seccomp filter, as an unprivileged host uid', async () => {
    const r = await run(a, 'grep -E "^(CapEff|CapPrm|CapBnd|NoNewPrivs|Seccomp):" /proc/self/status; echo made > /workspace/owned');
    assert.equal(r.out, 'CapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2');
    const owner = fs.statSync(path.join(work, 'data', 'sb', a.id, 'workspace', 'owned')).uid;
    if (ROOT) assert.ok(owner >= DEFAULT_SANDBOX_UID && owner <= MAX_SANDBOX_UID, String(owner));
    else assert.equal(owner, process.getuid());
  });

  (ROOT ? it : it.skip)('each sandbox runs as a host uid of its own: another cannot read its files, nor starve it of per-uid inotify instances (issue 21)', async () => {
    const c = await create();
    const d = await create();
    try {
      const owners = [];
      for (const sb of [c, d]) {
        assert.equal((await run(sb, 'echo mine > /workspace/private && chmod 600 /workspace/private')).exit, 0);
        const st = fs.statSync(path.join(work, 'data', 'sb', sb.id, 'workspace', 'private'));
        owners.push([st.uid, st.gid]);
      }
      assert.notEqual(owners[0][0], owners[1][0]);
      assert.equal(owners[0][1], DEFAULT_SANDBOX_UID, 'every sandbox has the sandbox group');
      assert.equal(owners[1][1], DEFAULT_SANDBOX_UID);
      // as d's host user, c's files cannot be read (its directory is c's, 0700), nor its private file itself
      const asD = (...argv) => promisify(execFile)('setpriv', ['--reuid', String(owners[1][0]), '--regid', String(owners[1][1]), '--clear-groups', ...argv], { timeout: 20000 }).catch((err) => err);
      const cDir = path.join(work, 'data', 'sb', c.id);
      for (const p of [path.join(cDir, 'workspace', 'private'), path.join(cDir, 'workspace')]) {
        const r = await asD('cat', p);
        assert.match(r.stderr, /Permission denied/, `${p}: ${r.stdout}`);
      }
      // c holds every inotify instance its uid may have (fs.inotify.max_user_instances) until it is deleted
      const max = Number(fs.readFileSync('/proc/sys/fs/inotify/max_user_instances', 'utf8'));
      const py = (body) => `python3 -c 'import ctypes,os,sys,time\nl=ctypes.CDLL(None,use_errno=True)\n${body}'`;
      const hog = await request(`${c.base}/command`, { method: 'POST', headers: { 'Content-Type': 'application/json', ...c.headers }, body: { command: py('fds=[]\nwhile True:\n  fd=l.inotify_init()\n  if fd<0: break\n  fds.append(fd)\nopen("/tmp/held","w").write(str(len(fds)))\ntime.sleep(300)'), background: true }, endpointHeaders: false });
      assert.equal(hog.status, 200, hog.text);
      const held = await waitFor(async () => (await run(c, 'cat /tmp/held 2>/dev/null')).out, { timeoutMs: 20000, message: 'c holds its inotify instances' });
      assert.ok(Number(held) > 0 && Number(held) <= max, held);
      assert.equal((await run(c, py('sys.exit(0 if l.inotify_init()>=0 else ctypes.get_errno())'))).exit, 24, 'c has none left (EMFILE)');
      assert.equal((await run(d, py('sys.exit(0 if l.inotify_init()>=0 else ctypes.get_errno())'))).exit, 0, 'd still gets one');
    } finally {
      for (const sb of [c, d]) await api(`/v1/sandboxes/${sb.id}`, { method: 'DELETE' });
    }
  });

  (ROOT ? it : it.skip)('a server claims a block of uids no live server holds and no process runs in; a dead server\'s claim is reused', async () => {
    const claims = path.join(work, 'claims');
    fs.mkdirSync(claims);
    const base = MAX_SANDBOX_UID + 1 - 2 * UID_BLOCK; // two blocks: 0 and 1
    const dead = spawn('true');
    await new Promise((r) => dead.once('exit', r));
    fs.mkdirSync(path.join(claims, `${dead.pid}-00000000`)); // block 0, its server gone
    fs.mkdirSync(path.join(claims, `${process.pid}-00000001`)); // block 1, a live server
    const ids = new SandboxIdentities(base, { claims });
    try {
      assert.deepEqual(fs.readdirSync(claims).sort(), [`${process.pid}-00000000`, `${process.pid}-00000001`].sort());
      const got = [ids.allocate(), ids.allocate()];
      assert.deepEqual(got.map((i) => [i.uid, i.gid]), [[base, base], [base + 1, base]]);
    } finally {
      ids.close();
    }
    // a process running as a uid of block 0 (left by anyone): that block is not taken, and there is no other
    const squatter = spawn('sleep', ['60'], { uid: base + 7, gid: base });
    try {
      await waitFor(() => fs.readFileSync(`/proc/${squatter.pid}/status`, 'utf8').includes(`\t${base + 7}\t`), { message: 'the squatter runs' });
      assert.throws(() => new SandboxIdentities(base, { claims }), /no free block of 65536 sandbox uids/);
    } finally {
      squatter.kill('SIGKILL');
    }
    assert.deepEqual(fs.readdirSync(claims), [`${process.pid}-00000001`]);
  });

  it('sees neither the data directory nor its id in its processes\' argv and environment, nor the server in /proc/self/cgroup (issue 21)', async () => {
    const r = await run(a, "tr '\\0' '\\n' < /proc/1/cmdline; echo ---; tr '\\0' '\\n' < /proc/1/environ; echo ---; cat /proc/self/cgroup");
    const [argv, environ, cgroup] = r.out.split('\n---\n');
    for (const [what, text] of [['argv', argv], ['environment', environ], ['cgroup', cgroup]]) {
      for (const secret of [work, a.id]) assert.ok(!text.includes(secret), `${what} shows ${JSON.stringify(secret)}: ${text}`);
    }
    assert.deepEqual(environ.split('\n').map((l) => l.split('=')[0]).sort(), ['HOME', 'HOSTNAME', 'LANG', 'PATH', 'TMPDIR']);
    assert.deepEqual(argv.split('\n').slice(0, 3), [findBwrap(), '--args', argv.split('\n')[2]]);
    assert.match(argv.split('\n')[2], /^\d+$/);
    // every hierarchy (v1) or the one (v2) shows the sandbox's own cgroup as its root
    for (const line of cgroup.split('\n')) assert.match(line, /^\d+:[^:]*:\/$/, cgroup);
  });

  it('cannot remount, mount, unshare, change the server code or read host files by handle', async () => {
    const pkg = path.resolve('lib');
    const attempts = [
      'mount -o remount,rw /',
      'mount -o remount,rw /ro',
      `mount -o remount,rw ${pkg}/dev-server/execd`, // the code kernels: the one part of the package a sandbox sees
      'mount -t tmpfs x /mnt',
      'unshare -U true',
      'unshare -m true',
      `touch ${pkg}/dev-server/execd/pwned`,
      'echo x > /ro/x',
      'echo x > /etc/pwned',
      // open_by_handle_at and name_to_handle_at through python's os module have no wrapper: call them via ctypes
      "python3 -c 'import ctypes,sys; l=ctypes.CDLL(None,use_errno=True); sys.exit(0 if l.syscall(304,-100,b\"/\",0,0,0)>=0 else 1)'",
    ];
    for (const cmd of attempts) {
      const r = await run(a, `${cmd} 2>/dev/null`);
      assert.notEqual(r.exit, 0, `${cmd} succeeded`);
    }
    assert.equal(fs.existsSync(path.join(pkg, 'dev-server', 'execd', 'pwned')), false);
    // the rest of the package is not there at all: a file made at its path lands in the sandbox's own directories
    await run(a, `mkdir -p ${pkg}/dev-server && touch ${pkg}/dev-server/pwned 2>/dev/null`);
    assert.equal(fs.existsSync(path.join(pkg, 'dev-server', 'pwned')), false);
    assert.equal(fs.existsSync(path.join(work, 'vol', 'x')), false);
  });

  it('cannot make a setuid or setgid file, in its workspace or a host volume', async () => {
    const r = await run(a, 'cp /bin/true /vol/t && chmod u+s /vol/t; echo $?; chmod g+s /vol/t; echo $?; chmod 4755 /workspace/t 2>/dev/null; stat -c %a /vol/t');
    assert.deepEqual(r.out.split('\n').slice(0, 2).map(Number).map((x) => x !== 0), [true, true]);
    assert.equal(fs.statSync(path.join(work, 'vol', 't')).mode & 0o6000, 0);
    const mounts = await run(a, 'grep -E " /(vol|workspace|tmp|root) " /proc/self/mountinfo');
    for (const line of mounts.out.split('\n')) assert.match(line.split(' ')[5], /nosuid/, line);
    for (const line of mounts.out.split('\n')) assert.match(line.split(' ')[5], /nodev/, line);
  });

  it('cannot create a setuid or setgid file either: mknod, mknodat, creat, open and openat (O_CREAT, O_TMPFILE) with 06755 fail, 0755 works; openat2 is ENOSYS (issue 21)', async () => {
    const script = `import ctypes, os, platform, sys
l = ctypes.CDLL(None, use_errno=True)
NR = {'open': 2, 'creat': 85, 'mknod': 133, 'openat': 257, 'mknodat': 259} if platform.machine() == 'x86_64' else {'openat': 56, 'mknodat': 33}
class How(ctypes.Structure):
    _fields_ = [('flags', ctypes.c_uint64), ('mode', ctypes.c_uint64), ('resolve', ctypes.c_uint64)]
def call(name, d, mode):
    p = f'{d}/{name}-{mode:o}'.encode()
    W = os.O_CREAT | os.O_WRONLY
    if name == 'open': r = l.syscall(NR[name], p, W, mode)
    elif name == 'creat': r = l.syscall(NR[name], p, mode)
    elif name in ('mknod', 'mknodat'): r = l.syscall(NR[name], *([-100] if name == 'mknodat' else []), p, 0o100000 | mode, 0)
    elif name == 'openat': r = l.syscall(NR[name], -100, p, W, mode)
    elif name == 'openat-tmpfile': r = l.syscall(NR['openat'], -100, d.encode(), os.O_TMPFILE | os.O_WRONLY, mode)
    elif name == 'openat2':
        how = How(W, mode, 0)
        r = l.syscall(437, -100, p, ctypes.byref(how), ctypes.sizeof(how))
    e = ctypes.get_errno() if r < 0 else 0
    if r >= 0 and name not in ('mknod', 'mknodat'): os.close(r)
    return e
for d in sys.argv[1:]:
    for name in [*NR, 'openat-tmpfile', 'openat2']:
        print(d, name, call(name, d, 0o6755), call(name, d, 0o4755), call(name, d, 0o2755), call(name, d, 0o755))
`;
    fs.writeFileSync(path.join(work, 'vol', 'suid.py'), script);
    const r = await run(a, 'python3 /vol/suid.py /workspace /vol');
    assert.equal(r.exit, 0, r.err);
    const names = process.arch === 'x64' ? ['open', 'creat', 'mknod', 'openat', 'mknodat'] : ['openat', 'mknodat'];
    const expected = [];
    for (const d of ['/workspace', '/vol']) {
      for (const n of [...names, 'openat-tmpfile']) expected.push(`${d} ${n} 1 1 1 0`); // EPERM for either bit; 0755 made
      expected.push(`${d} openat2 38 38 38 38`); // ENOSYS whatever the mode
    }
    assert.deepEqual(r.out.split('\n'), expected);
    for (const f of fs.readdirSync(path.join(work, 'vol')).filter((n) => /-\d+$/.test(n))) {
      assert.equal(f.endsWith('-755'), true, `${f} was created`);
      assert.equal(fs.statSync(path.join(work, 'vol', f)).mode & 0o7777, 0o755, f);
    }
  });

  it('keeps its execd token out of the sandbox; each sandbox has its own; the relay demands it', async () => {
    const token = a.headers['OpenSandbox-Secure-Access'];
    assert.match(token, /^[A-Za-z0-9_-]{43}$/);
    assert.notEqual(token, b.headers['OpenSandbox-Secure-Access']);
    const half = token.length >> 1;
    // -e: a token starting with '-' (1 in 64) is otherwise read as options (CI: "grep: invalid max count")
    const pattern = `'${token.slice(0, half)}[${token[half]}]${token.slice(half + 1)}'`;
    const leak = await run(a, `cat /proc/*/environ /proc/*/cmdline 2>/dev/null | tr '\\0' '\\n' | grep -c -e ${pattern}; grep -rc -e ${pattern} /run /workspace /tmp /root 2>/dev/null | grep -vc ':0$'`);
    assert.deepEqual(leak.out.split('\n'), ['0', '0'], `exit ${leak.exit}, stderr: ${leak.err}`);
    assert.equal((await run(a, 'true', {})).status, 401);
    assert.equal((await run(a, 'true', b.headers)).status, 401); // another sandbox's token
    const wrong = await run(a, 'true', { 'OpenSandbox-Secure-Access': 'x'.repeat(43) });
    assert.deepEqual([wrong.status, wrong.json.code], [401, 'SANDBOX::UNAUTHORIZED']);
    // the server proxy: no token, a foreign token and an unknown id answer the same
    const proxied = (id, headers) => request(`${server.baseUrl}/v1/sandboxes/${id}/proxy/44772/files/download?path=/etc/hostname`, { headers, endpointHeaders: false });
    const none = await proxied(a.id, {});
    const foreign = await proxied(a.id, b.headers);
    const unknown = await proxied('11111111-1111-4111-8111-111111111111', a.headers);
    assert.equal(none.status, 401);
    assert.deepEqual([foreign.status, foreign.text], [none.status, none.text]);
    assert.deepEqual([unknown.status, unknown.text], [none.status, none.text]);
    assert.equal((await proxied(a.id, a.headers)).status, 200);
    assert.equal((await run(a, 'echo still-works')).out, 'still-works');
  });

  it('cannot reach another sandbox\'s execd through the host filesystem', async () => {
    const r = await run(b, `ls ${path.join(work, 'data')} 2>&1; ls /run/execd; find / -name execd.sock -not -path '/proc/*' 2>/dev/null`);
    assert.doesNotMatch(r.out, new RegExp(a.id));
    assert.equal(r.out.split('\n').filter((l) => l.startsWith('/') && l.endsWith('execd.sock')).join(), '/run/execd/execd.sock');
  });

  it('refuses browser-originated requests and JSON bodies of another type', async () => {
    const body = JSON.stringify({ image: { uri: 'x' }, entrypoint: ['sh'], resourceLimits: {} });
    const plain = await request(`${server.baseUrl}/v1/sandboxes`, { method: 'POST', headers: { 'Content-Type': 'text/plain' }, body, endpointHeaders: false });
    assert.equal(plain.status, 415);
    const origin = await api('/v1/sandboxes', { method: 'POST', headers: { Origin: 'http://evil.example' }, body });
    assert.deepEqual([origin.status, origin.json.code], [403, 'GENERAL::FORBIDDEN']);
    const site = await api('/v1/sandboxes', { headers: { 'Sec-Fetch-Site': 'cross-site' } });
    assert.equal(site.status, 403);
    const relay = await run(a, 'true', { ...a.headers, Origin: 'http://evil.example' });
    assert.equal(relay.status, 403);
    assert.equal((await api('/v1/sandboxes')).json.items.length, 2);
  });

  it('timeout beyond the bound is a 422, a malformed egress rule a 422, and neither creates anything; list keeps working', async () => {
    const r = await api('/v1/sandboxes', { method: 'POST', body: { image: { uri: 'x' }, entrypoint: ['sh'], resourceLimits: {}, timeout: 1e13 } });
    assert.equal(r.status, 422);
    assert.equal(r.json.detail[0].type, 'less_than_equal');
    const egress = await api('/v1/sandboxes', { method: 'POST', body: { image: { uri: 'x' }, entrypoint: ['sh'], resourceLimits: {}, networkPolicy: { defaultAction: 'deny', egress: [{ action: 'allow', target: 'pypi.org' }, { action: 'maybe', target: 'x.org' }] } } });
    assert.equal(egress.status, 422, egress.text);
    assert.deepEqual(egress.json.detail.map((d) => d.loc), [['body', 'networkPolicy', 'egress', 1]]);
    const list = await api('/v1/sandboxes');
    assert.equal(list.status, 200);
    assert.equal(list.json.items.length, 2);
  });

  describe('a sandbox given network (networkPolicy defaultAction allow, or no networkPolicy: upstream\'s full network)', () => {
    let n;
    let d;
    let listener;
    before(async () => {
      listener = await hostListener('127.0.0.1');
      n = await create(NETWORK);
      d = await create(); // no networkPolicy: the same slirp4netns path (a and b have it too)
    });
    after(async () => {
      listener?.close();
    });

    it('has its own tap0 from slirp4netns (10.0.2.100/24, default route via 10.0.2.2, DNS 10.0.2.3) and runs commands', async () => {
      const tap = await run(n, 'node -p \'JSON.stringify(os.networkInterfaces().tap0.filter((i) => i.family === "IPv4").map(({ mac, ...i }) => i))\'');
      assert.deepEqual(JSON.parse(tap.out), [{ address: '10.0.2.100', netmask: '255.255.255.0', family: 'IPv4', internal: false, cidr: '10.0.2.100/24' }]);
      const route = await run(n, 'cat /proc/net/route');
      assert.deepEqual(route.out.split('\n').map((l) => l.trim().split(/\s+/)), [
        ['Iface', 'Destination', 'Gateway', 'Flags', 'RefCnt', 'Use', 'Metric', 'Mask', 'MTU', 'Window', 'IRTT'],
        ['tap0', '00000000', '0202000A', '0003', '0', '0', '0', '00000000', '0', '0', '0'],
        ['tap0', '0002000A', '00000000', '0001', '0', '0', '0', '00FFFFFF', '0', '0', '0'],
      ]);
      const dns = await run(n, 'grep nameserver /etc/resolv.conf');
      assert.equal(dns.out, 'nameserver 10.0.2.3');
      assert.equal((await run(n, 'echo works')).out, 'works');
      assert.equal((await run(d, 'cat /proc/net/route')).out, route.out);
      assert.equal((await run(d, 'grep nameserver /etc/resolv.conf')).out, 'nameserver 10.0.2.3');
      const slirp = slirpChildren(process.pid);
      assert.equal(slirp.length, 4); // a, b, n, d
      assert.deepEqual(slirp.map((p) => p.uid), [process.getuid(), process.getuid(), process.getuid(), process.getuid()]);
    });

    it('cannot connect to the server, another sandbox\'s relay, a host loopback listener, nor the host through 10.0.2.2', async () => {
      const relay = Number(new URL(b.base).port);
      const port = listener.address().port;
      const probe = connectProbe([
        ['127.0.0.1', server.port], ['127.0.0.1', relay], ['127.0.0.1', port],
        ['10.0.2.2', server.port], ['10.0.2.2', relay], ['10.0.2.2', port], ['10.0.2.3', port],
      ]);
      for (const sb of [n, d]) assert.equal((await run(sb, probe)).out, 'ECONNREFUSED ECONNREFUSED ECONNREFUSED ENETUNREACH ENETUNREACH ENETUNREACH ENETUNREACH');
      // nor this machine's other addresses, nor the cloud's metadata service (the sandbox's firewall, network.js)
      const addr = hostAddress();
      if (addr) {
        const open = await hostListener(addr);
        try {
          assert.equal((await run(n, connectProbe([[addr, open.address().port], ['169.254.169.254', 80], ['100.100.100.200', 80]]))).out, 'ECONNREFUSED ECONNREFUSED ECONNREFUSED');
        } finally {
          open.close();
        }
      }
    });

    it('serves its own ports through the endpoint (execd\'s proxy runs in its network namespace)', async () => {
      const srv = 'require("http").createServer((q,s)=>s.end("inside:"+q.url)).listen(8002,"127.0.0.1")';
      await request(`${n.base}/command`, { method: 'POST', headers: { 'Content-Type': 'application/json', ...n.headers }, body: { command: `node -e '${srv}'`, background: true }, endpointHeaders: false });
      const ep = (await api(`/v1/sandboxes/${n.id}/endpoints/8002`)).json;
      const r = await waitFor(async () => {
        const got = await request(`http://${ep.endpoint}/x`, { endpointHeaders: false });
        return got.status === 200 && got;
      }, { message: 'the sandbox\'s server answers through its endpoint' });
      assert.equal(r.text, 'inside:/x');
    });

    it('after delete its slirp4netns is gone', async () => {
      assert.equal(slirpChildren(process.pid).length, 4);
      assert.equal((await api(`/v1/sandboxes/${n.id}`, { method: 'DELETE' })).status, 204);
      assert.equal((await api(`/v1/sandboxes/${d.id}`, { method: 'DELETE' })).status, 204);
      assert.equal(slirpChildren(process.pid).length, 2); // a's and b's
    });
  });

  it('without slirp4netns a create with network is a 400 naming what is missing, one without networkPolicy has none (warned at start); insecure: true falls back to the host network, warned', async () => {
    // a PATH with bwrap and `true` (its start probe) only; python3 for the seccomp filter is found by absolute path
    const bin = path.join(work, 'bin-no-slirp');
    fs.mkdirSync(bin);
    fs.symlinkSync(findBwrap(), path.join(bin, 'bwrap'));
    fs.symlinkSync(fs.existsSync('/usr/bin/true') ? '/usr/bin/true' : '/bin/true', path.join(bin, 'true'));
    const savedPath = process.env.PATH;
    const warnings = [];
    const strictWarnings = [];
    let strict;
    let loose;
    try {
      process.env.PATH = bin;
      strict = await startServer({ dataDir: path.join(work, 'no-slirp'), commandTailMs: 20, log: (l) => strictWarnings.push(l) });
      loose = await startServer({ dataDir: path.join(work, 'no-slirp-insecure'), commandTailMs: 20, insecure: true, log: (l) => warnings.push(l) });
    } finally {
      process.env.PATH = savedPath;
    }
    const body = { image: { uri: 'x' }, entrypoint: ['tail', '-f', '/dev/null'], resourceLimits: {} };
    const post = (srv, extra) => request(`${srv.baseUrl}/v1/sandboxes`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: { ...body, ...extra }, endpointHeaders: false });
    const listener = await hostListener('127.0.0.1');
    try {
      const refused = await post(strict, NETWORK);
      assert.deepEqual([refused.status, refused.json.code], [400, 'SANDBOX::NETWORK_NOT_AVAILABLE']);
      assert.match(refused.json.message, /slirp4netns is not on PATH \(Debian: apt-get install slirp4netns\)/);
      assert.match(refused.json.message, /insecure: true \(--insecure\)/);
      assert.deepEqual(fs.readdirSync(path.join(work, 'no-slirp', 'sb')), []);
      // no networkPolicy: upstream would give network; without slirp4netns this server gives none, and said so at start
      assert.ok(strictWarnings.some((w) => /^dev-server: slirp4netns is not on PATH .*: sandboxes created without networkPolicy get NO network \(a real OpenSandbox server gives them full network\)/.test(w)), strictWarnings.join('\n'));
      const quiet = await post(strict, {});
      assert.equal(quiet.status, 202);
      const qep = (await request(`${strict.baseUrl}/v1/sandboxes/${quiet.json.id}/endpoints/44772`, { endpointHeaders: false })).json;
      assert.equal((await run({ base: `http://${qep.endpoint}`, headers: qep.headers }, 'grep -c tap0 /proc/net/route || true')).out, '0');
      assert.ok(warnings.some((w) => /^dev-server: INSECURE: slirp4netns is not on PATH .*: sandboxes given network share this machine's network namespace/.test(w)), warnings.join('\n'));
      const open = await post(loose, NETWORK);
      assert.equal(open.status, 202, open.text);
      const ep = (await request(`${loose.baseUrl}/v1/sandboxes/${open.json.id}/endpoints/44772`)).json;
      const sb = { base: `http://${ep.endpoint}`, headers: ep.headers };
      assert.equal((await run(sb, connectProbe([['127.0.0.1', listener.address().port]]))).out, 'connected');
    } finally {
      listener.close();
      await strict.close();
      await loose.close();
    }
  });

  it('a slirp4netns that fails fails the create with its message and leaves nothing behind', async () => {
    const bin = path.join(work, 'bin-bad-slirp');
    fs.mkdirSync(bin);
    fs.symlinkSync(findBwrap(), path.join(bin, 'bwrap'));
    fs.symlinkSync(fs.existsSync('/usr/bin/true') ? '/usr/bin/true' : '/bin/true', path.join(bin, 'true'));
    for (const tool of ['nft', 'nsenter']) fs.symlinkSync(findExecutable(tool), path.join(bin, tool)); // the sandbox's firewall
    fs.writeFileSync(path.join(bin, 'slirp4netns'), '#!/bin/sh\necho "open(/dev/net/tun): No such device" >&2\nexit 1\n', { mode: 0o755 });
    const savedPath = process.env.PATH;
    let srv;
    try {
      process.env.PATH = bin;
      srv = await startServer({ dataDir: path.join(work, 'bad-slirp'), commandTailMs: 20 });
    } finally {
      process.env.PATH = savedPath;
    }
    try {
      const r = await request(`${srv.baseUrl}/v1/sandboxes`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: { image: { uri: 'x' }, entrypoint: ['tail', '-f', '/dev/null'], resourceLimits: {}, ...NETWORK }, endpointHeaders: false });
      assert.deepEqual([r.status, r.json.code], [500, 'DOCKER::SANDBOX_START_FAILED']);
      assert.match(r.json.message, /slirp4netns failed \(exit code 1\): open\(\/dev\/net\/tun\): No such device/);
      assert.deepEqual(fs.readdirSync(path.join(work, 'bad-slirp', 'sb')), []);
      assert.equal((await request(`${srv.baseUrl}/v1/sandboxes`, { endpointHeaders: false })).json.items.length, 0);
    } finally {
      await srv.close();
    }
  });

  (ROOT ? it : it.skip)('a server run by an ordinary user (nobody) gives a sandbox network through slirp4netns, which runs as that user, and no descriptor it inherited (a host file at fd 40)', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'osb-nobody-'));
    fs.chownSync(dir, 65534, 65534);
    const script = `import { startServer } from ${JSON.stringify(path.resolve('lib/dev-server/index.js'))};
      const s = await startServer({ dataDir: ${JSON.stringify(path.join(dir, 'data'))}, commandTailMs: 20 });
      console.log(s.baseUrl);
      process.stdin.resume();
      process.stdin.on('end', () => s.close().then(() => process.exit(0)));`;
    letUserRunCheckout(65534);
    const argv = asNobodyWithTun([process.execPath, '--input-type=module', '-e', script], dir);
    // a host file the server holds at fd 40 without close-on-exec: it must not reach the sandbox (execd closes it)
    const hostFile = path.join(dir, 'inherited.txt');
    const inherited = fs.openSync(hostFile, 'w');
    const child = spawn(argv[0], argv.slice(1), { stdio: ['pipe', 'pipe', 'pipe', ...inheritedStdio(inherited)] });
    fs.closeSync(inherited);
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => { out += d; });
    child.stderr.on('data', (d) => { err += d; });
    const exited = new Promise((r) => child.once('exit', r));
    const listener = await hostListener('127.0.0.1');
    try {
      const baseUrl = await waitFor(() => /^(http:\S+)\n/.exec(out)?.[1], { timeoutMs: 20000, message: `the server as nobody starts (${err})` });
      const created = await request(`${baseUrl}/v1/sandboxes`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: { image: { uri: 'x' }, entrypoint: ['tail', '-f', '/dev/null'], resourceLimits: {}, ...NETWORK }, endpointHeaders: false });
      assert.equal(created.status, 202, created.text);
      const ep = (await request(`${baseUrl}/v1/sandboxes/${created.json.id}/endpoints/44772`)).json;
      const sb = { base: `http://${ep.endpoint}`, headers: ep.headers };
      const route = await run(sb, 'grep -c tap0 /proc/net/route; id -u');
      assert.equal(route.out, '2\n0');
      const leak = await run(sb, INHERITED_FD_PROBE);
      assert.deepEqual([leak.out, fs.readFileSync(hostFile, 'utf8')], ['rc=1', '']);
      assert.equal((await run(sb, connectProbe([['127.0.0.1', listener.address().port], ['10.0.2.2', listener.address().port]]))).out, 'ECONNREFUSED ENETUNREACH');
      // its firewall, set by the server through the sandbox's user namespace: the host's other addresses closed
      const addr = hostAddress();
      if (addr) {
        const open = await hostListener(addr);
        try {
          assert.equal((await run(sb, connectProbe([[addr, open.address().port], ['169.254.169.254', 80]]))).out, 'ECONNREFUSED ECONNREFUSED');
          assert.notEqual((await run(sb, 'nft flush ruleset')).exit, 0);
          assert.equal((await run(sb, connectProbe([[addr, open.address().port]]))).out, 'ECONNREFUSED');
        } finally {
          open.close();
        }
      }
      assert.deepEqual(slirpChildren(child.pid).map((p) => p.uid), [65534]);
      const del = await request(`${baseUrl}/v1/sandboxes/${created.json.id}`, { method: 'DELETE', endpointHeaders: false });
      assert.equal(del.status, 204);
      assert.deepEqual(slirpChildren(child.pid), []);
    } finally {
      listener.close();
      child.stdin.end();
      const timer = setTimeout(() => child.kill('SIGKILL'), 10000);
      await exited;
      clearTimeout(timer);
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('checks a host volume through a symlink before creating any directory', async () => {
    const outside = path.join(work, 'outside');
    fs.mkdirSync(outside);
    fs.symlinkSync(outside, path.join(work, 'vol', 'link'));
    const r = await api('/v1/sandboxes', { method: 'POST', body: { image: { uri: 'x' }, entrypoint: ['sh'], resourceLimits: {}, volumes: [{ name: 'v', host: { path: path.join(work, 'vol', 'link', 'made') }, mountPath: '/v' }] } });
    assert.deepEqual([r.status, r.json.code], [400, 'VOLUME::HOST_PATH_NOT_ALLOWED']);
    assert.equal(fs.existsSync(path.join(outside, 'made')), false);
  });

  it('a sandbox swapping a directory and a symlink in a volume while others are created through it never gets them anything outside (issue 21)', async () => {
    // a root-only directory outside allowedHostPaths, which the swapped symlink points to
    const secret = path.join(work, 'secret');
    fs.mkdirSync(secret, { mode: 0o700 });
    fs.writeFileSync(path.join(secret, 'key'), 'secret\n');
    const acl = () => execFileSync('getfacl', ['--omit-header', '--absolute-names', secret], { encoding: 'utf8' });
    const aclBefore = acl();
    const setup = await run(a, `mkdir -p /vol/race/x/sub && chmod 700 /vol/race/x && ln -s ${secret} /vol/race/y && stat -c %i /vol/race/x /vol/race/x/sub`);
    assert.equal(setup.exit, 0, setup.err);
    const [dirIno, subIno] = setup.out.split('\n');
    // renameat2(RENAME_EXCHANGE) of x and y in a tight loop until /vol/race/stop exists (at most 120 s)
    const swapper = 'import ctypes,os,time\nl=ctypes.CDLL(None,use_errno=True)\nend=time.time()+120\n'
      + 'while not os.path.exists("/vol/race/stop") and time.time()<end:\n  for _ in range(2000): l.renameat2(-100,b"/vol/race/x",-100,b"/vol/race/y",2)\n';
    fs.writeFileSync(path.join(work, 'vol', 'race', 'swap.py'), swapper);
    const bg = await request(`${a.base}/command`, { method: 'POST', headers: { 'Content-Type': 'application/json', ...a.headers }, body: { command: 'python3 /vol/race/swap.py', background: true }, endpointHeaders: false });
    assert.equal(bg.status, 200, bg.text);
    const outcomes = { mounted: 0, refused: 0, raceDetected: 0 };
    try {
      for (let i = 0; i < 30; i++) {
        const sub = i % 2 ? 'race/x/sub' : 'race/x';
        const r = await api('/v1/sandboxes', { method: 'POST', body: { image: { uri: 'x' }, entrypoint: ['tail', '-f', '/dev/null'], resourceLimits: {}, volumes: [{ name: 'v', host: { path: path.join(work, 'vol') }, subPath: sub, mountPath: '/v' }] } });
        if (r.status === 400) {
          assert.equal(r.json.code, 'VOLUME::HOST_PATH_NOT_ALLOWED', r.text);
          assert.match(r.json.message, /goes through the symbolic link .*\/race\/x/);
          outcomes.refused++;
          continue;
        }
        if (r.status === 500) {
          // bubblewrap resolved the descriptor's path while it was swapped: it finds that out and starts nothing
          assert.match(r.json.message, /bwrap: (Race condition binding dirfd|Can't )/, r.text);
          outcomes.raceDetected++;
          continue;
        }
        assert.equal(r.status, 202, r.text);
        const ep = (await api(`/v1/sandboxes/${r.json.id}/endpoints/44772`)).json;
        const seen = await run({ base: `http://${ep.endpoint}`, headers: ep.headers }, 'stat -c %i /v; ls /v');
        assert.equal(seen.out.split('\n')[0], i % 2 ? subIno : dirIno, `create ${i} (${sub}) mounted something else: ${seen.out}`);
        assert.ok(!seen.out.split('\n').includes('key'), `create ${i} mounted the secret directory`);
        outcomes.mounted++;
        assert.equal((await api(`/v1/sandboxes/${r.json.id}`, { method: 'DELETE' })).status, 204);
      }
    } finally {
      fs.writeFileSync(path.join(work, 'vol', 'race', 'stop'), '');
    }
    assert.equal(outcomes.mounted + outcomes.refused + outcomes.raceDetected, 30, JSON.stringify(outcomes));
    assert.equal(acl(), aclBefore, 'the root-only directory got no ACL entry');
    assert.deepEqual(fs.readdirSync(secret), ['key'], 'nothing was created in it');
    assert.equal(fs.statSync(secret).mode & 0o7777, 0o700);
  });

  it('a bubblewrap without --bind-fd (older than 0.10.0 / Debian 12\'s deb12u1) refuses volumes with a 400 and says so at start', async () => {
    const bin = path.join(work, 'old-bwrap');
    fs.mkdirSync(bin);
    const real = findBwrap();
    fs.writeFileSync(path.join(bin, 'bwrap'), `#!/bin/sh\nif [ "$1" = --help ]; then ${real} --help | grep -v -- '-bind-fd'; exit 0; fi\nexec ${real} "$@"\n`, { mode: 0o755 });
    const savedPath = process.env.PATH;
    const lines = [];
    let srv;
    try {
      process.env.PATH = `${bin}:${savedPath}`;
      srv = await startServer({ dataDir: path.join(work, 'old-bwrap-data'), allowedHostPaths: [path.join(work, 'vol')], commandTailMs: 20, log: (l) => lines.push(l) });
    } finally {
      process.env.PATH = savedPath;
    }
    try {
      assert.ok(lines.some((l) => /has no --bind-fd .*: creates with volumes are refused \(400 VOLUME::NOT_SUPPORTED\)/.test(l)), lines.join('\n'));
      const post = (extra) => request(`${srv.baseUrl}/v1/sandboxes`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: { image: { uri: 'x' }, entrypoint: ['tail', '-f', '/dev/null'], resourceLimits: {}, ...extra }, endpointHeaders: false });
      const r = await post({ volumes: [{ name: 'v', host: { path: path.join(work, 'vol') }, mountPath: '/v' }] });
      assert.deepEqual([r.status, r.json.code], [400, 'VOLUME::NOT_SUPPORTED']);
      assert.match(r.json.message, /^Volumes cannot be mounted safely by this server: \S+\/bwrap has no --bind-fd/);
      assert.equal((await post({})).status, 202);
    } finally {
      await srv.close();
    }
  });

  (ROOT ? it : it.skip)('another local user (nobody) can neither drive a sandbox through its relay nor read its files', async () => {
    const port = new URL(a.base).port;
    const js = `const s=require('net').connect(${port},'127.0.0.1',()=>s.write('POST /command HTTP/1.1\\r\\nHost: x\\r\\nContent-Type: application/json\\r\\nContent-Length: 20\\r\\n\\r\\n{"command":"id -u"}\\n'));s.on('data',d=>process.stdout.write(d));s.on('end',()=>process.exit(0));setTimeout(()=>process.exit(3),10000)`;
    // asynchronously: the relay answering it lives in this process
    letUserRunCheckout(65534);
    const asNobody = (...argv) => promisify(execFile)('setpriv', ['--reuid', '65534', '--regid', '65534', '--clear-groups', ...argv], { timeout: 20000 })
      .catch((err) => err);
    const r = await asNobody(process.execPath, '-e', js);
    assert.match(r.stdout, /^HTTP\/1\.1 401 /, r.stderr);
    const ls = await asNobody('ls', path.join(work, 'data', 'sb', a.id, 'workspace'));
    assert.equal(ls.code, 2);
    assert.match(ls.stderr, /Permission denied/);
    assert.equal((await run(a, 'echo ok')).out, 'ok');
  });

  it('the CLI generates an API key into a 0600 file and prints how to use it; without the key: 401', async () => {
    const cli = path.resolve('lib/dev-server/cli.js');
    const child = spawn(process.execPath, [cli, '--port', '0', '--quiet', '--data-dir', path.join(work, 'cli-data')], { stdio: ['ignore', 'pipe', 'inherit'] });
    try {
      let out = '';
      child.stdout.on('data', (d) => { out += d; });
      const [domain, file] = await waitFor(() => {
        const m = /^(\S+:\d+)\n[^\n]*API key generated in (\S+) /m.exec(out);
        return m && [m[1], m[2]];
      }, { timeoutMs: 20000, message: 'the CLI prints its domain and key file' });
      assert.equal(fs.statSync(file).mode & 0o777, 0o600);
      const key = fs.readFileSync(file, 'utf8').trim();
      assert.ok(!out.includes(key), 'the key itself is not printed');
      const list = (headers) => request(`http://${domain}/v1/sandboxes`, { headers, endpointHeaders: false });
      assert.equal((await list({})).status, 401);
      assert.equal((await list({ 'OPEN-SANDBOX-API-KEY': key })).status, 200);
    } finally {
      child.kill('SIGTERM');
      await new Promise((r) => child.once('exit', r));
    }
  });

  it('a sandbox is still fully usable after all of the above', async () => {
    const r = await run(a, 'echo hi > /vol/f && cat /vol/f /ro/f && python3 -c "import os; print(os.getuid())"');
    assert.equal(r.out, 'hi\nhi\n0');
    assert.equal(fs.readFileSync(path.join(work, 'vol', 'f'), 'utf8'), 'hi\n');
  });
});
