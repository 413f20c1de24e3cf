// Wire-level behaviour of the local server's execd that clients hide: event framing (`{…}\n\n`, no `data:`),
// headers, pings, the 1 s tail after the final event, byte cursors and the cursor header's spelling, 401/404 bodies.
// The server here emulates a gateway deployment: execd behind `/proxy/44772`, endpoint headers required, execd token.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import path from 'node:path';
import WebSocket from 'ws';
import { Sandbox, ConnectionConfig } from '@alibaba-group/opensandbox';
import { startServer } from '../lib/dev-server/index.js';
import { waitFor } from './helpers/poll.js';
import { request, parseEvents } from './helpers/raw.js';

const TOKEN = 'framing-token';

describe('dev-server execd wire format (proxy endpoint, endpoint headers, access token)', function () {
  this.timeout(60000);
  let server;
  let sbx;
  let ep; // { endpoint, headers }
  let base;
  let hdrs;

  before(async () => {
    server = await startServer({ execdAccessToken: TOKEN, endpointHeaders: true, execdEndpoint: 'proxy' });
    sbx = await Sandbox.create({
      connectionConfig: new ConnectionConfig({ domain: server.domain, headers: { 'X-EXECD-ACCESS-TOKEN': TOKEN } }),
      image: 'python:3.11',
    });
    ep = (await request(`${server.baseUrl}/v1/sandboxes/${sbx.id}/endpoints/44772`)).json;
    base = `http://${ep.endpoint}`;
    hdrs = { ...ep.headers, 'X-EXECD-ACCESS-TOKEN': TOKEN, 'Content-Type': 'application/json' };
  });
  after(async () => {
    await sbx?.kill().catch(() => {});
    await sbx?.close();
    await server?.close();
  });

  const run = (body, extra = {}) => request(`${base}/command`, { method: 'POST', headers: hdrs, body, ...extra });

  it('endpoint is the relay plus /proxy/44772 with the ingress header; the official client works through it', async () => {
    assert.match(ep.endpoint, /^127\.0\.0\.1:\d+\/proxy\/44772$/);
    assert.deepEqual(ep.headers, { 'OpenSandbox-Ingress-To': `${sbx.id}-44772`, 'OpenSandbox-Secure-Access': ep.headers['OpenSandbox-Secure-Access'] });
    assert.match(ep.headers['OpenSandbox-Secure-Access'], /^[A-Za-z0-9_-]{43}$/);
    const ex = await sbx.commands.run('echo via-proxy');
    assert.equal(ex.logs.stdout[0].text, 'via-proxy');
  });

  it('frames events as compact JSON + blank line, no data: prefix, with the execd headers', async () => {
    const r = await run({ command: 'echo hello; echo err >&2; printf partial', cwd: '/tmp' });
    assert.equal(r.status, 200);
    assert.equal(r.headers['content-type'], 'text/event-stream');
    assert.equal(r.headers['cache-control'], 'no-cache');
    assert.equal(r.headers['x-accel-buffering'], 'no');
    assert.equal(r.headers['transfer-encoding'], 'chunked');
    assert.match(r.text, /^(\{[^\n]+\}\n\n)+$/);
    assert.ok(!r.text.includes('data:'));
    const ev = parseEvents(r.text);
    assert.equal(ev[0].type, 'init');
    assert.match(ev[0].text, /^[0-9a-f]{32}$/);
    assert.deepEqual({ type: ev[1].type, text: ev[1].text }, { type: 'ping', text: 'pong' });
    const out = ev.filter((e) => e.type === 'stdout').map((e) => e.text);
    const err = ev.filter((e) => e.type === 'stderr').map((e) => e.text);
    assert.deepEqual(out, ['hello', 'partial']);
    assert.deepEqual(err, ['err']);
    const last = ev.at(-1);
    assert.equal(last.type, 'execution_complete');
    assert.ok(Number.isInteger(last.execution_time) && last.execution_time >= 0);
    for (const e of ev) assert.ok(Number.isInteger(e.timestamp));
  });

  it('holds the stream open about 1 s after the final event, then EOF', async () => {
    const r = await run({ command: 'true' });
    const finalChunk = r.chunks.find((c) => c.data.includes('"execution_complete"'));
    assert.ok(finalChunk, 'final event received');
    assert.ok(r.endAt - finalChunk.at >= 900, `EOF came ${r.endAt - finalChunk.at} ms after the final event`);
  });

  it('failure: error event with exit code string, fields in execd order', async () => {
    const r = await run({ command: 'echo a; exit 3' });
    const lastLine = r.text.trimEnd().split('\n\n').at(-1);
    assert.match(lastLine, /^\{"type":"error","timestamp":\d+,"error":\{"ename":"CommandExecError","evalue":"3","traceback":\["exit status 3"\]\}\}$/);
  });

  it('pings every 3 s while a command runs', async () => {
    const r = await run({ command: 'sleep 4; echo end' });
    const ev = parseEvents(r.text);
    const types = ev.map((e) => e.type);
    assert.deepEqual(types, ['init', 'ping', 'ping', 'stdout', 'execution_complete']);
    const [p1, p2] = ev.filter((e) => e.type === 'ping');
    assert.ok(p2.timestamp - p1.timestamp >= 2900);
  });

  it('background: init, ping, execution_complete without execution_time', async () => {
    const r = await run({ command: 'sleep 0.2; echo bg', background: true });
    const ev = parseEvents(r.text);
    assert.deepEqual(ev.map((e) => e.type), ['init', 'ping', 'execution_complete']);
    assert.equal('execution_time' in ev[2], false);
  });

  it('logs: byte cursor mid-line and the cursor header spelled like Go', async () => {
    const bg = parseEvents((await run({ command: 'printf "alpha\\nbeta\\ngamma\\n"', background: true })).text)[0].text;
    await waitFor(async () => (await request(`${base}/command/status/${bg}`, { headers: hdrs })).json.running === false, { message: 'bg done' });
    const all = await request(`${base}/command/${bg}/logs`, { headers: hdrs });
    assert.equal(all.text, 'alpha\nbeta\ngamma\n');
    assert.ok(all.rawHeaders.includes('Execd-Commands-Tail-Cursor'), all.rawHeaders.join(' '));
    assert.equal(all.headers['execd-commands-tail-cursor'], '17');
    const mid = await request(`${base}/command/${bg}/logs?cursor=8`, { headers: hdrs });
    assert.equal(mid.text, 'ta\ngamma\n');
    assert.equal(mid.headers['execd-commands-tail-cursor'], '17');
  });

  it('401 with execd\'s own body shape without the access token', async () => {
    const { 'X-EXECD-ACCESS-TOKEN': _, ...noToken } = hdrs;
    for (const h of [noToken, { ...noToken, 'X-EXECD-ACCESS-TOKEN': 'wrong' }]) {
      const r = await request(`${base}/ping`, { headers: h });
      assert.equal(r.status, 401);
      assert.deepEqual(r.json, { error: 'Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN' });
    }
  });

  it('401 for a POST with a body and a wrong token, every time, through the execd proxy (regression: 502)', async () => {
    const body = JSON.stringify({ command: 'echo never', padding: 'x'.repeat(256 * 1024) });
    for (let i = 0; i < 20; i++) {
      const r = await request(`${base}/command`, { method: 'POST', headers: { ...hdrs, 'X-EXECD-ACCESS-TOKEN': 'wrong' }, body });
      assert.equal(r.status, 401, `attempt ${i}: ${r.text}`);
      assert.deepEqual(r.json, { error: 'Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN' });
    }
  });

  it('the execd token is neither in the commands\' environment nor in any process\'s argv', async () => {
    const half = TOKEN.length >> 1;
    // a bracket expression: grep's own argv (visible in /proc while it runs) does not match the pattern
    const pattern = `'${TOKEN.slice(0, half)}[${TOKEN[half]}]${TOKEN.slice(half + 1)}'`;
    const r = await run({ command: `env | grep -c ${pattern}; cat /proc/[0-9]*/cmdline | tr '\\0' ' ' | grep -c ${pattern}` });
    const out = parseEvents(r.text).filter((e) => e.type === 'stdout').map((e) => e.text);
    assert.deepEqual(out, ['0', '0'], r.text);
  });

  it('the relay refuses requests without the exact ingress header (404)', async () => {
    const { 'OpenSandbox-Ingress-To': _, ...noIngress } = hdrs;
    const missing = await request(`${base}/ping`, { headers: noIngress, endpointHeaders: false });
    assert.equal(missing.status, 404);
    for (const value of ['other-44772', `${sbx.id}`, `${sbx.id}-x`, `${sbx.id}-70000`]) {
      const wrong = await request(`${base}/ping`, { headers: { ...noIngress, "OpenSandbox-Ingress-To": value }, endpointHeaders: false });
      assert.equal(wrong.status, 404, value);
    }
    const ok = await request(`${base}/ping`, { headers: hdrs });
    assert.equal(ok.status, 200);
    assert.equal(ok.text, '');
    const unknown = await request(`${base}/nothing`, { headers: hdrs });
    assert.equal(unknown.status, 404);
    // execd's router: text/plain, no JSON
    assert.equal(unknown.headers['content-type'], 'text/plain');
    assert.equal(unknown.text, '404 page not found');
  });

  it('WebSocket passes through the relay + execd proxy and through the server proxy', async () => {
    // a sandbox sees none of the package's node_modules: the echo service gets its own copy of ws
    const nodeModules = path.dirname(path.dirname(createRequire(import.meta.url).resolve('ws/package.json')));
    const tgz = execFileSync('tar', ['-C', nodeModules, '-cz', 'ws']).toString('base64');
    const copied = await run({ command: `mkdir -p /workspace/nm && echo ${tgz} | base64 -d | tar -xz -C /workspace/nm && echo copied` });
    assert.match(copied.text, /"text":"copied"/);
    const js = `const W=require('/workspace/nm/ws');new W.WebSocketServer({port:8001,host:'127.0.0.1'}).on('connection',s=>s.on('message',m=>s.send('echo:'+m)))`;
    await run({ command: `node -e ${JSON.stringify(js).replace(/\$/g, '\\$')}`, background: true });
    const ep8001 = (await request(`${server.baseUrl}/v1/sandboxes/${sbx.id}/endpoints/8001`)).json;
    assert.deepEqual(ep8001, { endpoint: ep.endpoint.replace(/\/proxy\/44772$/, ''), headers: { 'OpenSandbox-Ingress-To': `${sbx.id}-8001` } });
    const routed = `ws://${ep8001.endpoint}/`; // the header routes to port 8001
    const relayUrl = `ws://${ep8001.endpoint}/proxy/8001/`; // execd's own proxy, reached with the execd route
    const proxyUrl = `ws://${server.domain}/v1/sandboxes/${sbx.id}/proxy/8001/`;
    const echo = (url, headers) => new Promise((resolve, reject) => {
      const ws = new WebSocket(url, { headers, handshakeTimeout: 5000 });
      ws.on('open', () => ws.send('hi'));
      ws.on('message', (m) => {
        resolve(String(m));
        ws.close();
      });
      ws.on('error', reject);
    });
    assert.equal(await waitFor(() => echo(relayUrl, hdrs), { message: 'ws echo via relay' }), 'echo:hi');
    assert.equal(await echo(routed, { ...ep8001.headers, 'X-EXECD-ACCESS-TOKEN': TOKEN }), 'echo:hi');
    const secure = { 'OpenSandbox-Secure-Access': ep.headers['OpenSandbox-Secure-Access'] };
    await assert.rejects(echo(routed, { ...secure, 'X-EXECD-ACCESS-TOKEN': TOKEN }), /Unexpected server response: 404/);
    // the sandbox's own services need no sandbox token; the server proxy forwards the client's execd token as is
    assert.equal(await echo(proxyUrl, { 'X-EXECD-ACCESS-TOKEN': TOKEN }), 'echo:hi');
  });
});
