// The request target is parsed once (lib/dev-server/http.js parseTarget, src/execd/server.c xd_parse_target) and every hop decides and routes on that one form
// (docs/dev-server-security.md, "One parse"). Differential: the relay's decision function and the real execd's router
// (a real execd process on a Unix socket, a real app on a loopback port) are asked the same generated targets — dot
// segments, their encodings in every case, encoded separators, doubled slashes, `;`, `?`, `#`, absolute-form URLs —
// and must agree on each: refused, to the sandbox's app (no token, forwarded exactly as decided), or to execd's own API
// (token). The real relays (plain and header mode) in front of that execd must answer accordingly without the token.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { execFile, spawn } from 'node:child_process';
import { promisify } from 'node:util';
import { startServer } from '../lib/dev-server/index.js';
import { decide, startRelay, INGRESS_HEADER } from '../lib/dev-server/relay.js';
import { proxyRoute } from '../lib/dev-server/proxy.js';
import { checkExecdBinary } from '../lib/dev-server/execd-binary.js';
import { waitFor } from './helpers/poll.js';
import { request, parseEvents } from './helpers/raw.js';
import { letUserRunCheckout } from './helpers/other-user.js';

const ROOT = process.getuid() === 0;

const TOKEN = 'relay-target-token';

/** One raw HTTP/1.1 request (target written as given) on a new connection; resolves { status, text } at EOF. */
export function rawRequest(connect, target, { method = 'GET', headers = {}, body = '' } = {}) {
  return new Promise((resolve, reject) => {
    const s = net.connect(connect);
    let data = Buffer.alloc(0);
    const timer = setTimeout(() => s.destroy(new Error(`${method} ${target}: no answer within 10 s`)), 10000);
    s.on('connect', () => {
      let head = `${method} ${target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n`;
      for (const [k, v] of Object.entries(headers)) head += `${k}: ${v}\r\n`;
      if (body || method === 'POST') head += `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n`;
      s.write(`${head}\r\n${body}`);
    });
    s.on('data', (d) => { data = Buffer.concat([data, d]); });
    s.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    s.on('close', () => {
      clearTimeout(timer);
      const text = data.toString('latin1');
      const m = /^HTTP\/1\.1 (\d{3})/.exec(text);
      if (!m) return reject(new Error(`${method} ${target}: no HTTP answer: ${JSON.stringify(text.slice(0, 200))}`));
      const split = text.indexOf('\r\n\r\n');
      resolve({ status: Number(m[1]), head: text.slice(0, split), text: split < 0 ? '' : text.slice(split + 4) });
    });
  });
}

/** The body of a chunked HTTP/1.1 answer. */
function dechunk(text) {
  let out = '';
  for (let i = 0; ;) {
    const eol = text.indexOf('\r\n', i);
    const n = parseInt(text.slice(i, eol), 16);
    if (!(n > 0)) return out;
    out += text.slice(eol + 2, eol + 2 + n);
    i = eol + 2 + n + 2;
  }
}

/** A seeded PRNG (mulberry32): the generated targets are the same on every run. */
function prng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Request targets built from hostile pieces around /proxy/{appPort} and execd's routes (count, seeded). */
function generateTargets(appPort, count, seed) {
  const rnd = prng(seed);
  const pick = (list) => list[Math.floor(rnd() * list.length)];
  const starts = ['', `/proxy/${appPort}`, '/proxy/44772', `/proxy/0${appPort}`, `/PROXY/${appPort}`, `/pr%6fxy/${appPort}`,
    `/proxy%2f${appPort}`, `http://x/proxy/${appPort}`, 'http://x', `HTTP://x/proxy/${appPort}`, `//proxy/${appPort}`, `/proxy/${appPort};x`,
    '/proxy', '/proxy/', '/files', '/v1'];
  const segments = ['..', '.', '%2e%2e', '%2E%2E', '%2e%2E', '.%2e', '%2e.', '%2e', '%2E', '..;', ';', '', 'a', '%2f', '%2F', '%5c', '%5C',
    '\\', '..\\..', 'command', 'comm%61nd', 'ping', 'pty', 'x%00y', '%25', '%252e%252e', '%zz', '%2', '.a', 'a.', '...', '%41%42'];
  const ends = ['', '?x=1', '?a=/../../command', '#frag', '/', ';x', '?', '#/../../ping', '?%2e%2e', '//', '/.', '/..'];
  const out = [];
  for (let i = 0; i < count; i++) {
    let t = pick(starts);
    const n = Math.floor(rnd() * 5);
    for (let j = 0; j < n; j++) t += `/${rnd() < 0.5 ? pick(segments) : pick(['a', 'b.c', 'x;y', '%41', '~u', 'ping'])}`;
    if (rnd() < 0.4) t += `/${pick(['command', 'ping', 'files/info', 'pty/x/ws', 'command/status/x'])}`;
    t += pick(ends);
    out.push(t === '' ? '/' : t);
  }
  return out;
}

describe('request targets: the relay decides on exactly what execd routes', function () {
  this.timeout(120000);
  let dir;
  let execd;
  let socketPath;
  let app;
  let appPort;
  let appSaw; // target -> headers the app received, by the last request
  let plain;
  let header;

  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'osb-target-'));
    socketPath = path.join(dir, 'execd.sock');
    app = http.createServer((req, res) => {
      appSaw = { url: req.url, headers: req.headers };
      res.end(`APP ${req.url}`);
    });
    await new Promise((r) => app.listen(0, '127.0.0.1', r));
    appPort = app.address().port;
    execd = spawn(checkExecdBinary(), ['--socket', socketPath, '--workspace', dir, '--command-tail-ms', '20'], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    execd.stdout.on('data', (d) => { out += d; });
    await waitFor(() => out.includes('execd ready'), { timeoutMs: 20000, message: 'execd starts' });
    plain = await startRelay(socketPath, { token: TOKEN });
    header = await startRelay(socketPath, { token: TOKEN, ingressId: 'sbx' });
  });
  after(async () => {
    await plain?.close();
    await header?.close();
    app?.close();
    if (execd) {
      execd.kill('SIGTERM');
      await new Promise((r) => (execd.exitCode !== null ? r() : execd.once('exit', r)));
    }
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  /** What execd's router did with a target, asked directly (no relay, no token): refused / app (+ what it saw) / execd. */
  async function execdRoute(target) {
    appSaw = null;
    const r = await rawRequest({ path: socketPath }, target);
    if (r.text.startsWith('APP ')) return { kind: 'app', forwarded: appSaw.url };
    // execd's 400 naming the target, Go's 400 for a malformed escape, or Node's HTTP parser's own (empty) 400
    if (r.status === 400 && (/"code":"INVALID_REQUEST_PATH"/.test(r.text) || r.text === '400 Bad Request' || r.text === '')) return { kind: 'refused', text: r.text };
    return { kind: 'execd', status: r.status };
  }

  const kindOf = (d) => (d.error ? 'refused' : d.app ? 'app' : 'execd');

  it('the exact targets of the attack: refused by both', async () => {
    for (const t of [`/proxy/${appPort}/../../command`, `/proxy/${appPort}/%2e%2e/%2e%2e/command`, `/proxy/${appPort}/%2E%2e/%2e%2E/pty/x/ws`,
      `/proxy/${appPort}/..%2f..%2fcommand`, `/proxy/${appPort}/..\\..\\command`]) {
      const d = decide(t);
      assert.equal(kindOf(d), 'refused', t);
      assert.equal((await execdRoute(t)).kind, 'refused', t);
      const viaRelay = await rawRequest(plain.port, t, { method: 'POST', body: '{"command":"true"}' });
      assert.deepEqual([viaRelay.status, JSON.parse(viaRelay.text).code], [400, 'GENERAL::BAD_REQUEST'], t);
    }
  });

  it('generated targets: the decision and execd\'s router agree on every one, and the relays act on it', async () => {
    const targets = [...new Set(generateTargets(appPort, 500, 21))];
    const seen = { refused: 0, app: 0, execd: 0 };
    for (const t of targets) {
      const d = decide(t);
      const kind = kindOf(d);
      seen[kind] += 1;
      const routed = await execdRoute(t);
      assert.equal(routed.kind, kind, `${JSON.stringify(t)}: relay decides ${kind}${d.error ? ` (${d.error})` : ''}, execd routes ${JSON.stringify(routed)}`);
      if (kind === 'app') {
        // what the app receives is what was decided on: the canonical rest of the target, nothing resolved
        assert.equal(routed.forwarded, proxyRoute(d.url).path, t);
        assert.equal(d.target, proxyRoute(d.url) && d.url.pathname + d.url.search, t);
      }
      // the plain relay without the token: 400, the app, or 401 — never execd's API
      appSaw = null;
      const viaPlain = await rawRequest(plain.port, t);
      const expectPlain = { refused: 400, app: 200, execd: 401 }[kind];
      assert.equal(viaPlain.status, expectPlain, `${JSON.stringify(t)} through the plain relay: ${viaPlain.text}`);
      if (kind === 'app') assert.equal(viaPlain.text, `APP ${proxyRoute(d.url).path}`, t);
      // header mode, the ingress header naming the app's port: the target goes to the app as decided, or is refused
      appSaw = null;
      const viaHeader = await rawRequest(header.port, t, { headers: { [INGRESS_HEADER]: `sbx-${appPort}` } });
      assert.equal(viaHeader.status, d.error ? 400 : 200, `${JSON.stringify(t)} through the header relay: ${viaHeader.text}`);
      if (!d.error) assert.equal(viaHeader.text, `APP ${d.target}`, t);
      // header mode naming execd: never without the token
      const toExecd = await rawRequest(header.port, t, { headers: { [INGRESS_HEADER]: 'sbx-44772' } });
      assert.equal(toExecd.status, d.error ? 400 : 401, `${JSON.stringify(t)} to execd through the header relay: ${toExecd.text}`);
    }
    // the generator reaches all three outcomes
    assert.ok(seen.refused > 50 && seen.app > 50 && seen.execd > 50, JSON.stringify(seen));
  });

  /** POST a JSON body straight to execd; resolves { status, events } (events parsed when the answer is a stream). */
  async function execdPost(target, body) {
    const r = await rawRequest({ path: socketPath }, target, { method: 'POST', body: JSON.stringify(body) });
    const text = r.head.includes('Transfer-Encoding: chunked') ? dechunk(r.text) : r.text;
    const events = r.status === 200 ? text.split('\n\n').filter((x) => x.trim()).map((x) => JSON.parse(x)) : null;
    return { status: r.status, text, events };
  }

  it('execd timeouts follow Go\'s int64 time.Duration: 2^31 ms and more are long deadlines, never Node\'s 1 ms', async () => {
    for (const timeout of [2 ** 31, 2 ** 31 - 1, 1e13, 2e13, 2 ** 53]) {
      const r = await execdPost('/command', { command: 'sleep 0.2; echo done', timeout });
      assert.equal(r.status, 200, r.text);
      assert.deepEqual(r.events.filter((e) => e.type !== 'ping').map((e) => [e.type, e.text ?? null]).slice(1),
        [['stdout', 'done'], ['execution_complete', null]], `timeout ${timeout}`);
    }
    const session = await execdPost('/session', {});
    const sid = JSON.parse(session.text).session_id;
    const run = await execdPost(`/session/${sid}/run`, { command: 'sleep 0.2; echo done', timeout: 2 ** 31 });
    assert.deepEqual(run.events.filter((e) => e.type === 'stdout' || e.type === 'execution_complete').map((e) => e.type), ['stdout', 'execution_complete']);
    // beyond int64 Go's decoder refuses the body
    const huge = await execdPost('/command', { command: 'true', timeout: 1e20 });
    assert.deepEqual([huge.status, JSON.parse(huge.text)], [400, { code: 'INVALID_REQUEST_BODY',
      message: 'error parsing request, MAYBE invalid body format. json: cannot unmarshal number 100000000000000000000 into Go struct field RunCommandRequest.timeout of type int64' }]);
    // and a short timeout still kills
    const killed = await execdPost('/command', { command: 'sleep 5', timeout: 300 });
    assert.deepEqual(killed.events.at(-1).error?.traceback, ['signal: killed']);
  });

  it('the plain relay decides every request of a kept-alive connection, not only the first', async () => {
    // first an app request (no token), then a dot-segment request and an execd request on the same connection
    const s = net.connect(plain.port);
    await new Promise((r) => s.once('connect', r));
    let text = '';
    s.on('data', (d) => { text += d; });
    s.write(`GET /proxy/${appPort}/a HTTP/1.1\r\nHost: x\r\n\r\nGET /proxy/${appPort}/%2e%2e/%2e%2e/ping HTTP/1.1\r\nHost: x\r\n\r\n`
      + 'GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    await new Promise((r) => s.once('close', r));
    assert.deepEqual([...text.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1])), [200, 400, 401], text);
    assert.match(text, /APP \/a/);
  });
});

// The same attacks against a real server (bubblewrap sandboxes): the exact requests of issue 21 are refused without the
// token on every path (plain relay, header-routed relay, server proxy route, PTY WebSocket; as root and as another
// local user), nothing runs, and the sandbox's own service never sees a token header on any forwarding path.
describe('a real server: the relay attacks of issue 21 fail, and apps never see a token', function () {
  this.timeout(120000);
  const EXECD_TOKEN = 'server-wide-execd-token';
  let work;
  let plainServer;
  let headerServer;
  let p; // sandbox on the plain server
  let h; // sandbox on the header-routed server (with a server-wide execd token)

  async function create(server) {
    const api = (u, opts = {}) => request(`${server.baseUrl}${u}`, { ...opts, headers: { 'Content-Type': 'application/json' }, endpointHeaders: false });
    const r = await api('/v1/sandboxes', { method: 'POST', body: { image: { uri: 'x' }, entrypoint: ['tail', '-f', '/dev/null'], resourceLimits: {} } });
    assert.equal(r.status, 202, r.text);
    const ep = (await api(`/v1/sandboxes/${r.json.id}/endpoints/44772`)).json;
    return { id: r.json.id, server, relayPort: Number(ep.endpoint.split(':')[1].split('/')[0]), headers: ep.headers };
  }
  /** Runs a command with the token; resolves its stdout lines joined. */
  async function run(sb, command, extra = {}) {
    const r = await rawRequest(sb.relayPort, '/command', { method: 'POST', headers: { ...sb.headers, ...extra }, body: JSON.stringify({ command }) });
    assert.equal(r.status, 200, r.text);
    const events = parseEvents(dechunk(r.text));
    return events.filter((e) => e.type === 'stdout').map((e) => e.text).join('\n');
  }
  const APP = [
    "const http = require('http');",
    'const seen = (q) => JSON.stringify({ url: q.url, headers: q.headers });',
    'const s = http.createServer((q, r) => r.end(seen(q)));',
    "s.on('upgrade', (q, sock) => { const b = seen(q); sock.end('HTTP/1.1 200 OK\\r\\nContent-Length: ' + Buffer.byteLength(b) + '\\r\\nConnection: close\\r\\n\\r\\n' + b); });",
    "s.listen(8000, '127.0.0.1');",
  ].join('\n');
  async function startApp(sb) {
    await run(sb, `cat > /tmp/app.js <<'EOF'\n${APP}\nEOF\nnohup node /tmp/app.js >/dev/null 2>&1 &`);
  }

  before(async () => {
    work = fs.mkdtempSync(path.join(os.tmpdir(), 'osb-target-srv-'));
    plainServer = await startServer({ dataDir: path.join(work, 'plain'), commandTailMs: 20 });
    headerServer = await startServer({ dataDir: path.join(work, 'header'), commandTailMs: 20, endpointHeaders: true, execdAccessToken: EXECD_TOKEN });
    p = await create(plainServer);
    h = await create(headerServer);
    h.headers = { ...h.headers, 'X-EXECD-ACCESS-TOKEN': EXECD_TOKEN };
    await startApp(p);
    await startApp(h);
    await waitFor(async () => (await rawRequest(p.relayPort, '/proxy/8000/')).status === 200, { timeoutMs: 20000, message: 'the app in the plain sandbox answers' });
    await waitFor(async () => (await rawRequest(h.relayPort, '/', { headers: { [INGRESS_HEADER]: `${h.id}-8000`, 'X-EXECD-ACCESS-TOKEN': EXECD_TOKEN } })).status === 200,
      { timeoutMs: 20000, message: 'the app in the header sandbox answers' });
  });
  after(async () => {
    await plainServer?.close();
    await headerServer?.close();
    if (work) fs.rmSync(work, { recursive: true, force: true });
  });

  const pwn = JSON.stringify({ command: 'touch /tmp/pwned' });
  const secureOnly = (sb) => ({ 'OpenSandbox-Secure-Access': sb.headers['OpenSandbox-Secure-Access'] });
  const pwned = async (sb) => (await run(sb, 'test -e /tmp/pwned && echo yes || echo no')) === 'yes';
  const upgradeHeaders = { Upgrade: 'websocket', Connection: 'Upgrade', 'Sec-WebSocket-Key': 'dGhlIHNhbXBsZSBub25jZQ==', 'Sec-WebSocket-Version': '13' };
  const ptySession = async (sb) => {
    const r = await rawRequest(sb.relayPort, '/pty', { method: 'POST', headers: sb.headers, body: '{}' });
    assert.equal(r.status, 201, r.text);
    return JSON.parse(r.text).session_id;
  };

  it('plain relay: /proxy/<app>/../../command and its encodings are a 400 without the token; nothing runs', async () => {
    for (const t of ['/proxy/8000/../../command', '/proxy/8000/%2e%2e/%2e%2e/command', '/proxy/8000/%2E%2e/%2e%2E/command',
      '/proxy/8000/..%2f..%2fcommand', '/proxy/8000/..\\..\\command', 'http://x/proxy/8000/../../command', '/proxy/8000//../../command']) {
      const r = await rawRequest(p.relayPort, t, { method: 'POST', body: pwn });
      assert.equal(r.status, 400, `${t}: ${r.text}`);
    }
    const sid = await ptySession(p);
    for (const t of [`/proxy/8000/../../pty/${sid}/ws`, `/proxy/8000/%2e%2e/%2e%2e/pty/${sid}/ws`]) {
      const r = await rawRequest(p.relayPort, t, { headers: upgradeHeaders });
      assert.equal(r.status, 400, `${t}: ${r.text}`);
    }
    assert.equal(await pwned(p), false);
  });

  it('header-routed relay: OpenSandbox-Ingress-To <id>-<app port> with /../../command is a 400; nothing runs', async () => {
    const toApp = { [INGRESS_HEADER]: `${h.id}-8000`, 'X-EXECD-ACCESS-TOKEN': EXECD_TOKEN };
    for (const t of ['/../../command', '/%2e%2e/%2e%2e/command', '/..', 'http://x/../command']) {
      const r = await rawRequest(h.relayPort, t, { method: 'POST', headers: toApp, body: pwn });
      assert.equal(r.status, 400, `${t}: ${r.text}`);
    }
    const sid = await ptySession(h);
    const ws = await rawRequest(h.relayPort, `/../../pty/${sid}/ws`, { headers: { ...toApp, ...upgradeHeaders } });
    assert.equal(ws.status, 400, ws.text);
    assert.equal(await pwned(h), false);
  });

  it('server proxy route: a dot segment from an app port to execd\'s is a 400, not a route', async () => {
    for (const [srv, sb] of [[plainServer, p], [headerServer, h]]) {
      for (const t of [`/v1/sandboxes/${sb.id}/proxy/8000/../44772/command`, `/v1/sandboxes/${sb.id}/proxy/8000/%2e%2e/44772/command`,
        `/sandboxes/${sb.id}/proxy/8000/..%2F44772%2Fcommand`]) {
        const r = await rawRequest(srv.port, t, { method: 'POST', headers: { 'X-EXECD-ACCESS-TOKEN': EXECD_TOKEN }, body: pwn });
        assert.deepEqual([r.status, JSON.parse(r.text).code], [400, 'GENERAL::BAD_REQUEST'], t);
      }
      assert.equal(await pwned(sb), false);
    }
  });

  it('server proxy route, generated targets after /proxy/8000 (no token): a 400 or the app gets exactly the decided path', async () => {
    const targets = [...new Set(generateTargets(8000, 200, 7).filter((t) => t.startsWith('/')))];
    let app = 0;
    for (const t of targets) {
      const d = decide(`/proxy/8000${t}`);
      const r = await rawRequest(plainServer.port, `/v1/sandboxes/${p.id}/proxy/8000${t}`);
      if (d.error) {
        assert.equal(r.status, 400, `${t}: ${r.text}`);
        continue;
      }
      assert.equal(r.status, 200, `${t}: ${r.text}`);
      assert.equal(JSON.parse(r.text).url, proxyRoute(d.url).path, t);
      app += 1;
    }
    assert.ok(app > 20, `${app} of ${targets.length} reached the app`);
    // and the PTY WebSocket through it
    const sid = await ptySession(p);
    const ws = await rawRequest(plainServer.port, `/v1/sandboxes/${p.id}/proxy/8000/../44772/pty/${sid}/ws`, { headers: { ...secureOnly(p), ...upgradeHeaders } });
    assert.equal(ws.status, 400, ws.text);
  });

  (ROOT ? it : it.skip)('another local user (nobody) gets the same 400 from the plain relay and runs nothing', async () => {
    letUserRunCheckout(65534);
    const js = `const s=require('net').connect(${p.relayPort},'127.0.0.1',()=>s.write('POST /proxy/8000/%2e%2e/%2e%2e/command HTTP/1.1\\r\\nHost: x\\r\\nContent-Type: application/json\\r\\nContent-Length: ${pwn.length}\\r\\n\\r\\n'+${JSON.stringify(pwn)}));s.on('data',d=>process.stdout.write(d));s.on('end',()=>process.exit(0));setTimeout(()=>process.exit(3),10000)`;
    const r = await promisify(execFile)('setpriv', ['--reuid', '65534', '--regid', '65534', '--clear-groups', process.execPath, '-e', js], { timeout: 20000 })
      .catch((err) => err);
    assert.match(r.stdout, /^HTTP\/1\.1 400 /, r.stderr);
    assert.equal(await pwned(p), false);
  });

  it('code that replaces execd\'s socket with a server answering nonsense gets 502s; the server and other sandboxes go on', async () => {
    const sb = await create(plainServer);
    // the sandbox's code unlinks execd's socket and listens there itself: the host now talks to it
    const evil = "const net=require('net');const fs=require('fs');fs.unlinkSync('/run/execd/execd.sock');"
      + "net.createServer((s)=>s.on('data',()=>s.end('HTTP/1.1 099 X\\r\\nContent-Length: 0\\r\\n\\r\\n'))).listen('/run/execd/execd.sock')";
    await run(sb, `cat > /tmp/evil.js <<'EOF'\n${evil}\nEOF\nnohup node /tmp/evil.js >/dev/null 2>&1 &`);
    const viaProxy = () => rawRequest(plainServer.port, `/v1/sandboxes/${sb.id}/proxy/44772/ping`, { headers: sb.headers });
    // between the unlink and the listen the socket is missing (502 "cannot reach the sandbox: ENOENT"): wait for the
    // code's own server to answer
    const r = await waitFor(async () => {
      const a = await viaProxy();
      return a.status === 502 && !/ENOENT/.test(a.text) && a;
    }, { timeoutMs: 20000, message: 'the server proxy route reaches the replaced socket' });
    assert.match(JSON.parse(r.text).message, /^invalid answer from the sandbox: Invalid status code: 99$/);
    const app = await rawRequest(sb.relayPort, '/proxy/8000/');
    assert.deepEqual([app.status, JSON.parse(app.text).code], [502, 'PROXY_ERROR']);
    assert.equal((await request(`${plainServer.baseUrl}/health`, { endpointHeaders: false })).status, 200);
    assert.equal(await run(p, 'echo still'), 'still');
  });

  /** The token headers among what the app received. */
  const tokensSeen = (text) => {
    const { headers } = JSON.parse(text);
    assert.equal(headers['x-probe'], 'through', text); // other headers do pass
    return Object.keys(headers).filter((k) => /secure-access|access-token|api-key/i.test(k));
  };

  it('the sandbox\'s own service sees no token header on any forwarding path', async () => {
    const probe = { 'X-Probe': 'through' };
    const cases = [];
    // plain relay: a first request to the app carrying the token (and execd's), HTTP and upgrade
    cases.push(['plain relay, app first', await rawRequest(p.relayPort, '/proxy/8000/a', { headers: { ...secureOnly(p), 'X-EXECD-ACCESS-TOKEN': 'x', ...probe } })]);
    cases.push(['plain relay, app upgrade', await rawRequest(p.relayPort, '/proxy/8000/ws', { headers: { ...secureOnly(p), ...probe, ...upgradeHeaders } })]);
    // plain relay: a connection that starts with execd (relayed byte for byte) and then asks the app
    cases.push(['plain relay, after an execd request', await secondOnConnection(p.relayPort, '/ping', '/proxy/8000/b', { ...secureOnly(p), ...probe })]);
    // header-routed relay: by the ingress header, and through execd's own /proxy route
    const hTokens = { ...secureOnly(h), 'X-EXECD-ACCESS-TOKEN': EXECD_TOKEN, ...probe };
    cases.push(['header relay, ingress to the app', await rawRequest(h.relayPort, '/c', { headers: { ...hTokens, [INGRESS_HEADER]: `${h.id}-8000` } })]);
    cases.push(['header relay, execd /proxy/8000', await rawRequest(h.relayPort, '/proxy/8000/d', { headers: { ...hTokens, [INGRESS_HEADER]: `${h.id}-44772` } })]);
    cases.push(['header relay, upgrade', await rawRequest(h.relayPort, '/ws', { headers: { ...hTokens, [INGRESS_HEADER]: `${h.id}-8000`, ...upgradeHeaders } })]);
    // the server proxy route
    cases.push(['server proxy', await rawRequest(headerServer.port, `/v1/sandboxes/${h.id}/proxy/8000/e`, { headers: hTokens })]);
    cases.push(['server proxy, upgrade', await rawRequest(headerServer.port, `/v1/sandboxes/${h.id}/proxy/8000/f`, { headers: { ...hTokens, ...upgradeHeaders } })]);
    for (const [name, r] of cases) {
      assert.equal(r.status, 200, `${name}: ${r.text}`);
      assert.deepEqual(tokensSeen(r.text), [], name);
    }
  });
});

/** Two requests on one connection (the first answered before the second is sent); resolves the second's answer. */
async function secondOnConnection(port, first, second, headers) {
  const s = net.connect(port);
  await new Promise((r, j) => s.once('connect', r).once('error', j));
  let data = '';
  s.on('data', (d) => { data += d; });
  const head = (t, close) => `GET ${t} HTTP/1.1\r\nHost: x\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('')}${close ? 'Connection: close\r\n' : ''}\r\n`;
  s.write(head(first, false));
  await waitFor(() => /^HTTP\/1\.1 200 [^]*?\r\n\r\n/.test(data), { timeoutMs: 10000, message: `${first} answered` });
  const firstEnd = data.indexOf('\r\n\r\n') + 4;
  const done = new Promise((r) => s.once('close', r));
  s.write(head(second, true));
  await done;
  const rest = data.slice(firstEnd + Number(/Content-Length: (\d+)/i.exec(data)[1]));
  const split = rest.indexOf('\r\n\r\n');
  return { status: Number(/^HTTP\/1\.1 (\d{3})/.exec(rest)?.[1]), text: rest.slice(split + 4) };
}

// Bad input to the lifecycle API (issue 21): one request must never take the server down (it runs every sandbox), and
// every bad input gets a 4xx naming the field. The server runs as its CLI in a child process, so that a crash shows.
describe('bad input to the lifecycle API: a 4xx naming the field, never a 5xx or a dead server', function () {
  this.timeout(300000);
  const KEY = 'bad-input-key';
  let work;
  let child;
  let base;
  let childErr = '';
  const headers = { 'OPEN-SANDBOX-API-KEY': KEY, 'Content-Type': 'application/json' };
  /** POST /v1/sandboxes with a body given as JSON text; a sandbox it made is deleted at once. */
  async function create(text) {
    const r = await request(`${base}/v1/sandboxes`, { method: 'POST', headers, body: text, endpointHeaders: false, timeoutMs: 60000 });
    if (r.status === 202) await request(`${base}/v1/sandboxes/${r.json.id}`, { method: 'DELETE', headers, endpointHeaders: false });
    return r;
  }
  const alive = async () => {
    assert.equal(child.exitCode, null, `the server exited: ${childErr}`);
    assert.equal((await request(`${base}/health`, { endpointHeaders: false })).status, 200);
  };

  before(async () => {
    work = fs.mkdtempSync(path.join(os.tmpdir(), 'osb-badinput-'));
    fs.mkdirSync(path.join(work, 'vol'));
    child = spawn(process.execPath, [path.resolve('lib/dev-server/cli.js'), '--port', '0', '--quiet', '--data-dir', path.join(work, 'data'),
      '--allowed-host-path', path.join(work, 'vol'), '--command-tail-ms', '20'], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, OPENSANDBOX_SERVER_API_KEY: KEY } });
    let out = '';
    child.stdout.on('data', (d) => { out += d; });
    child.stderr.on('data', (d) => { childErr += d; });
    base = `http://${await waitFor(() => /^(\S+:\d+)\n/.exec(out)?.[1], { timeoutMs: 30000, message: `the CLI server starts (${childErr})` })}`;
  });
  after(async () => {
    if (child && child.exitCode === null) {
      child.kill('SIGTERM');
      await new Promise((r) => child.once('exit', r));
    }
    if (work) fs.rmSync(work, { recursive: true, force: true });
  });

  it('100,000 nested [ (and {"a": …) in an authenticated create: a bounded 422, the server answers the next request', async () => {
    const deep = (open, close, n, inner = '') => open.repeat(n) + inner + close.repeat(n);
    const bodies = [deep('[', ']', 1e5), '['.repeat(1e5), `{"image":{"uri":"x"},"entrypoint":["sh"],"resourceLimits":{},"env":${deep('[', ']', 1e5)}}`,
      `{"image":{"uri":"x"},"entrypoint":["sh"],"resourceLimits":{},"metadata":${deep('{"a":', '}', 1e5, '1')}}`,
      `{"image":{"uri":"x"},"entrypoint":${deep('[', ']', 1e5)},"resourceLimits":{},"volumes":${deep('[', ']', 1e5)}}`];
    for (const text of bodies) {
      const r = await create(text);
      assert.equal(r.status, 422, r.text.slice(0, 300));
      assert.ok(r.text.length < 4096, `the answer echoes ${r.text.length} bytes`);
      await alive();
    }
  });

  it('the reported 500s are 4xx naming the field', async () => {
    const ok = { image: { uri: 'x' }, entrypoint: ['tail', '-f', '/dev/null'], resourceLimits: {} };
    const vol = { name: 'v', host: { path: path.join(work, 'vol') }, mountPath: '/v' };
    const cases = [
      [{ ...ok, env: { A: 'x\u0000y' } }, 'env["A"]: must not contain a NUL byte'],
      [{ ...ok, env: { 'A\u0000': 'x' } }, 'env key "A\\u0000": must not contain a NUL byte'],
      [{ ...ok, volumes: [{ ...vol, subPath: 'a\u0000b' }] }, 'volumes[0].subPath: must not contain a NUL byte'],
      [{ ...ok, volumes: [{ ...vol, host: { path: `${vol.host.path}\u0000` } }] }, 'volumes[0].host.path: must not contain a NUL byte'],
      [{ ...ok, volumes: [{ ...vol, mountPath: '/v\u0000' }] }, 'volumes[0].mountPath: must not contain a NUL byte'],
      [{ ...ok, entrypoint: ['sh\u0000'] }, 'entrypoint[0]: must not contain a NUL byte'],
      [{ ...ok, resourceLimits: { 'ephemeral-storage': '1Pi' } }, 'resourceLimits.ephemeral-storage: "1Pi" is above the largest disk bound, "1Ti"'],
      [{ ...ok, resourceLimits: { memory: '1' } }, 'resourceLimits.memory: "1" is below the smallest memory bound, "32Mi" (the sandbox\'s execd does not start in less)'],
    ];
    for (const [body, message] of cases) {
      const r = await create(JSON.stringify(body));
      assert.deepEqual([r.status, r.json?.code, r.json?.message], [400, 'SANDBOX::INVALID_PARAMETER', message]);
    }
    // a malformed percent-encoding in a snapshot id (was "URI malformed", 500); a well-formed non-UTF-8 one is unknown
    const snap = (id) => request(`${base}/v1/snapshots/${id}`, { headers, endpointHeaders: false });
    assert.deepEqual([(await snap('%E0%A4%A')).status, (await snap('%E0%A4%A')).json.code], [400, 'GENERAL::BAD_REQUEST']);
    assert.equal((await snap('%ff')).status, 404);
    const snapCreate = await request(`${base}/v1/sandboxes/%ff/snapshots`, { method: 'POST', headers, endpointHeaders: false });
    assert.equal(snapCreate.status, 404, snapCreate.text);
    await alive();
  });

  it('hostile values in every field of the create body (seeded, 160 cases): never a 5xx, never a crash', async () => {
    const rnd = prng(2121);
    const pick = (list) => list[Math.floor(rnd() * list.length)];
    const vol = { name: 'v', host: { path: path.join(work, 'vol') }, mountPath: '/v' };
    const valid = { image: { uri: 'x' }, entrypoint: ['tail', '-f', '/dev/null'], resourceLimits: {}, env: { A: '1' }, metadata: { k: 'v' },
      volumes: [vol], networkPolicy: { defaultAction: 'deny' }, timeout: 600 };
    const fields = [['image'], ['image', 'uri'], ['snapshotId'], ['entrypoint'], ['entrypoint', 0], ['timeout'], ['resourceLimits'],
      ['resourceLimits', 'cpu'], ['resourceLimits', 'memory'], ['resourceLimits', 'pids'], ['resourceLimits', 'ephemeral-storage'],
      ['resourceLimits', 'gpu'], ['resourceLimits', 'x'], ['env'], ['env', 'A'], ['env', '\u0000'], ['metadata'], ['metadata', 'k'],
      ['extensions'], ['extensions', 'poolRef'], ['networkPolicy'], ['networkPolicy', 'defaultAction'], ['networkPolicy', 'egress'], ['volumes'],
      ['volumes', 0], ['volumes', 0, 'name'], ['volumes', 0, 'mountPath'], ['volumes', 0, 'subPath'], ['volumes', 0, 'readOnly'],
      ['volumes', 0, 'host'], ['volumes', 0, 'host', 'path'], ['volumes', 0, 'pvc'], ['platform'], ['secureAccess']];
    let nested = 'x';
    for (let i = 0; i < 1000; i++) nested = [nested];
    const manyKeys = Object.fromEntries(Array.from({ length: 5000 }, (_, i) => [`k${i}`, 'v']));
    const values = ['', '\u0000', 'a\u0000b', 'x'.repeat(200000), '../../..', '/', '/proc/self/root', '%zz', '\ud800', '1Pi', '1e400', '-1', '0', '1',
      'NaN', ' 1Gi ', '1Gi\n', -1, 0, 0.5, 1e308, 2 ** 53 + 1, -(2 ** 63), true, false, null, [], {}, nested, manyKeys, [vol, vol], { path: '\u0000' }];
    const statuses = {};
    for (let i = 0; i < 160; i++) {
      const field = pick(fields);
      const value = pick(values);
      const body = structuredClone(valid);
      let at = body;
      for (const k of field.slice(0, -1)) {
        if (at[k] === null || typeof at[k] !== 'object') at[k] = typeof k === 'number' ? [] : {};
        at = at[k];
      }
      at[field.at(-1)] = value;
      const r = await create(JSON.stringify(body));
      const what = `${JSON.stringify(field)} = ${JSON.stringify(value)?.slice(0, 80)}`;
      assert.ok(r.status < 500, `${what}: ${r.status} ${r.text.slice(0, 300)}`);
      if (r.status >= 400) assert.ok(r.text.length < 16384, `${what}: the error answer echoes ${r.text.length} bytes`);
      statuses[r.status] = (statuses[r.status] ?? 0) + 1;
    }
    await alive();
    assert.ok((statuses[400] ?? 0) + (statuses[422] ?? 0) > 100, JSON.stringify(statuses));
  });
});
