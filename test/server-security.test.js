// Attacks on the local server (docs/dev-server-security.md), each tried for real: from code inside a sandbox, from a
// second local uid (`nobody`, when the tests run as root), and from a browser-like request. Each must fail with the
// sandbox still working afterwards.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFile, spawn } from 'node:child_process';
import { promisify } from 'node:util';
import { startServer } from '../lib/dev-server/index.js';
import { DEFAULT_SANDBOX_UID } from '../lib/dev-server/security.js';
import { request, parseEvents } from './helpers/raw.js';
import { waitFor } from './helpers/poll.js';

const ROOT = process.getuid() === 0;

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
    assert.equal(owner, ROOT ? DEFAULT_SANDBOX_UID : process.getuid());
  });

  it('cannot remount, mount, unshare, change the server code or read host files by handle', async () => {
    const pkg = path.resolve('lib');
    const attempts = [
      'mount -o remount,rw /',
      'mount -o remount,rw /ro',
      `mount -o remount,rw ${pkg}`,
      'mount -t tmpfs x /mnt',
      'unshare -U true',
      'unshare -m true',
      `touch ${pkg}/dev-server/pwned`,
      'echo x > /ro/x',
      'echo x > /etc/pwned',
      // open_by_handle_at and name_to_handle_at through python's os module have no wrapper: call them via ctypes
      "python3 -c 'import ctypes,sys; l=ctypes.CDLL(None,use_errno=True); sys.exit(0 if l.syscall(304,-100,b\"/\",0,0,0)>=0 else 1)'",
    ];
    for (const cmd of attempts) {
      const r = await run(a, `${cmd} 2>/dev/null`);
      assert.notEqual(r.exit, 0, `${cmd} succeeded`);
    }
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

  it('keeps its execd token out of the sandbox; each sandbox has its own; the relay demands it', async () => {
    const token = a.headers['OpenSandbox-Secure-Access'];
    assert.match(token, /^[A-Za-z0-9_-]{43}$/);
    assert.notEqual(token, b.headers['OpenSandbox-Secure-Access']);
    const half = token.length >> 1;
    const pattern = `'${token.slice(0, half)}[${token[half]}]${token.slice(half + 1)}'`;
    const leak = await run(a, `cat /proc/*/environ /proc/*/cmdline 2>/dev/null | tr '\\0' '\\n' | grep -c ${pattern}; grep -rc ${pattern} /run /workspace /tmp /root 2>/dev/null | grep -vc ':0$'`);
    assert.deepEqual(leak.out.split('\n'), ['0', '0']);
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

  it('timeout beyond the bound is a 422, an egress allow-list a 400, and neither creates anything; list keeps working', async () => {
    const r = await api('/v1/sandboxes', { method: 'POST', body: { image: { uri: 'x' }, entrypoint: ['sh'], resourceLimits: {}, timeout: 1e13 } });
    assert.equal(r.status, 422);
    assert.equal(r.json.detail[0].type, 'less_than_equal');
    const egress = await api('/v1/sandboxes', { method: 'POST', body: { image: { uri: 'x' }, entrypoint: ['sh'], resourceLimits: {}, networkPolicy: { defaultAction: 'deny', egress: [{ action: 'allow', target: 'pypi.org' }] } } });
    assert.deepEqual([egress.status, egress.json.code], [400, 'SANDBOX::NETWORK_POLICY_NOT_SUPPORTED']);
    const list = await api('/v1/sandboxes');
    assert.equal(list.status, 200);
    assert.equal(list.json.items.length, 2);
  });

  it('checks a host volume through a symlink before creating any directory', async () => {
    const outside = path.join(work, 'outside');
    fs.mkdirSync(outside);
    fs.symlinkSync(outside, path.join(work, 'vol', 'link'));
    const r = await api('/v1/sandboxes', { method: 'POST', body: { image: { uri: 'x' }, entrypoint: ['sh'], resourceLimits: {}, volumes: [{ name: 'v', host: { path: path.join(work, 'vol', 'link', 'made') }, mountPath: '/v' }] } });
    assert.deepEqual([r.status, r.json.code], [400, 'VOLUME::HOST_PATH_NOT_ALLOWED']);
    assert.equal(fs.existsSync(path.join(outside, 'made')), false);
  });

  (ROOT ? it : it.skip)('another local user (nobody) can neither drive a sandbox through its relay nor read its files', async () => {
    const port = new URL(a.base).port;
    const js = `const s=require('net').connect(${port},'127.0.0.1',()=>s.write('POST /command HTTP/1.1\\r\\nHost: x\\r\\nContent-Type: application/json\\r\\nContent-Length: 20\\r\\n\\r\\n{"command":"id -u"}\\n'));s.on('data',d=>process.stdout.write(d));s.on('end',()=>process.exit(0));setTimeout(()=>process.exit(3),10000)`;
    // asynchronously: the relay answering it lives in this process
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
