// Golden transcripts: every request recorded from the real OpenSandbox execd v1.0.19
// (test/fixtures/opensandbox-transcripts/) is replayed, in the recorded order and concurrency, against the local
// server's execd on a raw TCP socket, and the answers are compared with the recorded ones after normalising what varies
// per run (helpers/transcripts.js): status, headers, framing, chunk/event boundaries, event sequence and texts,
// escaping, pings, when the stream ends after the final event, whether the server closes the connection, WebSocket
// frames, close codes and TCP closes. Every difference that stays is an entry of ALLOWED below, and every entry is
// described with its reason in docs/dev-server-execd.md ("Golden transcripts"); an unlisted difference fails, and so
// does an entry that no longer matches anything (unless it is marked racy).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { startServer } from '../lib/dev-server/index.js';
import { request } from './helpers/raw.js';
import { WireConnection, WireWebSocket } from './helpers/wire.js';
import { loadTranscripts, bytesOf, PathMap, IdMap, httpView, wsView, diffViews } from './helpers/transcripts.js';

const TOKEN = 'transcript-token';
const DOC = new URL('../docs/dev-server-execd.md', import.meta.url);

/**
 * The differences that stay, each described with its reason under its id in docs/dev-server-execd.md ("Golden
 * transcripts"). files/labels/aspects are regular expressions matched against the transcript file name, the exchange
 * label and the compared aspect (see httpView/wsView); when: a further condition on the difference; racy: the real
 * server itself varies here, so the entry may match nothing in a run.
 */
const ALLOWED = [
  { id: 'T2', files: /^03-/, labels: /^start failure: uid 54321 cannot chdir/, aspects: /^events$/ },
  { id: 'T3', files: /^04-/, labels: /^timeout 1 ms/, aspects: /^events$/, racy: true },
  {
    id: 'T4', files: /^05-/, labels: /background/, aspects: /^events$/, racy: true,
    // only execution_time of the background start's execution_complete
    when: (d) => {
      const strip = (t) => JSON.stringify(JSON.parse(t).map(({ execution_time: _, ...e }) => e));
      return strip(d.expected) === strip(d.actual);
    },
  },
  { id: 'T5', files: /^06-/, labels: /^(quick command .* \(client closes|long command `sleep 1\.5; echo ok` \(client closes|status of the long command)/, aspects: /^(events|body|pings)$/, racy: true },
  { id: 'T6', files: /^07-/, labels: /UNDEFINED_VAR/, aspects: /^(status|body)$/ },
  { id: 'T7', files: /^07-/, labels: /^permissions: (mode 999|unknown owner name)/, aspects: /^(status|body|headers|header:content-type|escaping)$/ },
  { id: 'T8', files: /^07-/, labels: /^download a directory$/, aspects: /./ },
  { id: 'T10', files: /^08-/, labels: /^run 2: state shared/, aspects: /^events$/ },
  { id: 'T11', files: /^08-/, labels: /^run 5: timeout/, aspects: /^pings$/ },
  { id: 'T12', files: /^09-/, labels: /./, aspects: /^tcp after refusal$/ },
  { id: 'T13', files: /^09-/, labels: /^D: client sends close/, aspects: /^server closes TCP$/ },
  { id: 'T14', files: /^09-/, labels: /^E: text control frames/, aspects: /^text frames$/ },
  { id: 'T15', files: /^09-/, labels: /^(exit race example|connect to that session)/, aspects: /^stdout$/, racy: true },
  { id: 'T16', files: /^10-/, labels: /./, aspects: /^events$/ },
  { id: 'T17', files: /^10-/, labels: /^create context with an unsupported language/, aspects: /./ },
  { id: 'T18', files: /^03-/, labels: /^uid without a passwd entry/, aspects: /^events$/ },
  { id: 'T19', files: /^07-/, labels: /^(permissions: chmod .* owner nobody|info after chmod\/chown|final listing)/, aspects: /./ },
];

/** Exchanges the recorder listed before the stream they were sent during (10: interrupt and busy-context runs). */
const RUNS_DURING_NEXT = /^DELETE \/code\?id=|^second run on the busy context/;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const isFinal = (d) => /"type":"(execution_complete|error)"/.test(d) || /^\{"code":"RUNTIME_ERROR"/.test(d);

describe('golden transcripts of the real execd replayed against the local execd', function () {
  this.timeout(300000);
  let server;
  let sandboxId;
  let host;
  let secureAccess;
  let port;
  const paths = new PathMap([['/home/user/workdir', '/workspace'], ['/home/user/homedir', '/root'], ['/opt/execd/tempdir', '/tmp']]);
  const found = []; // { file, label, aspect, expected, actual }
  const transcripts = loadTranscripts();

  before(async () => {
    server = await startServer({ execdAccessToken: TOKEN });
    const created = await request(`${server.baseUrl}/v1/sandboxes`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: { image: { uri: 'python:3.11' }, timeout: 600, resourceLimits: {}, entrypoint: ['sleep', 'infinity'] },
    });
    assert.equal(created.status, 202, created.text);
    sandboxId = created.json.id;
    const ep = await request(`${server.baseUrl}/v1/sandboxes/${sandboxId}/endpoints/44772`);
    [host, port] = ep.json.endpoint.split(':');
    secureAccess = ep.json.headers['OpenSandbox-Secure-Access']; // the sandbox's own token, added to every request
    port = Number(port);
    // what the recorder had prepared in its workspace before the runs
    const setup = await request(`http://${host}:${port}/command`, {
      method: 'POST', headers: { 'X-EXECD-ACCESS-TOKEN': TOKEN, 'Content-Type': 'application/json' },
      body: { command: 'echo plain > /workspace/plain-file.txt; mkdir -p /workspace/private; chmod 700 /workspace/private' },
    });
    assert.match(setup.text, /execution_complete/);
  });
  after(async () => {
    if (process.env.TRANSCRIPT_DIFFS) fs.writeFileSync(process.env.TRANSCRIPT_DIFFS, JSON.stringify(found, null, 1));
    await server?.close();
  });

  /** The request bytes to send for a recorded one. */
  function buildRequest(ids, req) {
    const pathText = ids.apply(paths.toLocal(req.path));
    let body = req.body === undefined ? undefined : Buffer.from(ids.apply(paths.toLocal(bytesOf(req).toString('latin1'))), 'latin1');
    const headers = [];
    for (const [k, v] of Object.entries(req.headers)) {
      if (/^host$/i.test(k)) headers.push([k, `${host}:${port}`]);
      else if (/^content-length$/i.test(k)) headers.push([k, String(body?.length ?? 0)]);
      else headers.push([k, v === '<token>' ? TOKEN : v]);
    }
    headers.push(['OpenSandbox-Secure-Access', secureAccess]);
    if (body && body.length === 0 && !headers.some(([k]) => /^content-length$/i.test(k))) body = undefined;
    return { method: req.method, path: pathText, headers, body };
  }

  /** A local response in the transcript's shape, local directories mapped back to the placeholders. */
  function asRecorded(res) {
    const out = { ...res, headers: { ...res.headers } };
    const rawLen = res.chunks.reduce((n, c) => n + c.data.length, 0);
    const utf8 = (b) => Buffer.from(b.toString('utf8'), 'utf8').equals(b);
    const binary = res.chunks.some((c) => !utf8(c.data));
    out.chunks = res.chunks.map((c) => (binary ? { t_ms: c.t_ms, data: c.data.toString('base64'), data_b64: true }
      : { t_ms: c.t_ms, data: paths.toRecorded(c.data.toString('utf8')) }));
    if (!binary && Number(res.headers['content-length']) === rawLen && res.end_ms !== null) {
      out.headers['content-length'] = String(out.chunks.reduce((n, c) => n + Buffer.byteLength(c.data), 0));
    }
    return out;
  }

  async function runHttp(ids, ex, { conn, onChunk } = {}) {
    const rec = ex.response;
    const own = !conn;
    const c = conn ?? new WireConnection(host, port);
    // a client that closed early: right after the final event if it got one, else after as many chunks as it got
    const recFinal = rec.chunks.some((x) => isFinal(x.data));
    const stopWhen = rec.end_ms === null && rec.client_closed_ms !== undefined && rec.framing === 'chunked'
      ? (chunks) => (recFinal ? chunks.some((x) => isFinal(x.data.toString('utf8'))) : chunks.length >= rec.chunks.length)
      : undefined;
    const res = await c.exchange(buildRequest(ids, ex.request), { stopWhen, onChunk, timeoutMs: 30000 });
    if (res.end_ms !== null && res.eof_ms === null) res.eof_ms = await c.eofWithin(res, rec.eof_ms !== null ? 3000 : 200);
    if (own) c.close();
    return asRecorded(res);
  }

  function compareHttp(file, ex, local, ids) {
    ids.learn(ex.response.chunks.map((c) => c.data).join(''), local.chunks.map((c) => c.data).join(''));
    const numbers = file.startsWith('11-');
    for (const d of diffViews(httpView(ex.response, { numbers }), httpView(local, { numbers }))) found.push({ file, label: ex.label, ...d });
  }

  /** Replays a WebSocket session: the client's frames at the recorded points of the server's output. */
  async function runWs(ids, ex, { onOpen } = {}) {
    const ws = new WireWebSocket(host, port);
    const headers = ex.request.wire_headers.map((l) => {
      const i = l.indexOf(':');
      const k = l.slice(0, i);
      const v = l.slice(i + 1).trim();
      return [k, /^host$/i.test(k) ? `${host}:${port}` : v === '<token>' ? TOKEN : v];
    });
    headers.push(['OpenSandbox-Secure-Access', secureAccess]);
    const hs = await ws.open(ids.apply(paths.toLocal(ex.request.path)), headers);
    const session = { handshake: hs, frames: [], tcp: {} };
    if (hs.status === 101) {
      onOpen?.(ws);
      const progress = (frames) => frames.filter((f) => f.dir === 'in' && f.opcode !== 8)
        .reduce((n, f) => n + (f.opcode === 1 ? 1 : Math.max(0, f.payload.length - 1)), 0);
      const rec = ex.frames.map((f) => ({ ...f, payload: f.hex !== undefined ? Buffer.from(f.hex, 'hex') : Buffer.from(f.text ?? '') }));
      for (let i = 0; i < rec.length; i++) {
        const f = rec[i];
        if (f.dir !== 'out') continue;
        if (f.opcode === 8 && rec[i - 1]?.dir === 'in' && rec[i - 1].opcode === 8) continue; // the library's echo
        const before = rec.slice(0, i);
        const want = progress(before);
        await ws.until((fr) => progress(fr.map((x) => ({ ...x, dir: 'in' }))) >= want, 3000);
        const lastIn = before.filter((x) => x.dir === 'in').at(-1)?.t_ms ?? hs.t_ms;
        await sleep(Math.min(1500, Math.max(0, f.t_ms - Math.max(lastIn, before.at(-1)?.t_ms ?? 0))));
        const payload = f.opcode === 1 ? Buffer.from(ids.apply(paths.toLocal(f.payload.toString('utf8')))) : f.payload;
        ws.send(f.opcode, payload);
      }
      if (ws.closeSent) await ws.until(() => false, 1000); // does the server close TCP after answering our close?
      else {
        await ws.until((fr) => fr.some((x) => x.opcode === 8), 10000);
        await ws.until(() => false, 1000);
      }
      session.tcp.server_fin_ms = ws.finAt();
      session.frames = ws.frames.map((f) => (f.opcode === 1 ? { ...f, text: paths.toRecorded(f.payload.toString('utf8')) }
        : f.opcode === 2 ? { ...f, payload: Buffer.from(paths.toRecorded(f.payload.toString('utf8'))) } : f));
    } else {
      hs.body = paths.toRecorded(hs.body ?? '');
      await ws.until(() => false, 1000);
      session.tcp.server_fin_ms = ws.finAt();
    }
    ws.close();
    return session;
  }

  function compareWs(file, ex, local, ids) {
    const recorded = { ...ex, frames: ex.frames.map((f) => ({ ...f, payload: f.hex !== undefined ? Buffer.from(f.hex, 'hex') : Buffer.from(f.text ?? '') })) };
    ids.learn(ex.frames.map((f) => f.text ?? '').join(''), local.frames.map((f) => f.text ?? '').join(''));
    for (const d of diffViews(wsView(recorded), wsView(local))) found.push({ file, label: ex.label, ...d });
  }

  /** Replays one transcript file in order; returns nothing, differences go to `found`. */
  async function replay(t) {
    const ids = new IdMap();
    const ex = t.exchanges;
    for (let i = 0; i < ex.length; i++) {
      const e = ex[i];
      const next = ex[i + 1];
      if (e.kind === 'websocket') {
        const nextJoins = next?.kind === 'websocket' && next.request.path.split('?')[0] === e.request.path.split('?')[0]
          && (next.handshake.status === 409 || /takeover=1/.test(next.request.path));
        if (!nextJoins) {
          compareWs(t.file, e, await runWs(ids, e), ids);
          continue;
        }
        let opened;
        const isOpen = new Promise((r) => { opened = r; });
        const first = runWs(ids, e, { onOpen: (ws) => ws.until((fr) => fr.some((f) => f.opcode === 1), 5000).then(opened) });
        await isOpen;
        await sleep(300);
        const second = await runWs(ids, next);
        compareWs(t.file, e, await first, ids);
        compareWs(t.file, next, second, ids);
        i += 1;
      } else if (e.connection) {
        const group = [e];
        while (ex[i + group.length]?.connection?.[0] === e.connection[0]) group.push(ex[i + group.length]);
        const conn = new WireConnection(host, port);
        for (const g of group) compareHttp(t.file, g, await runHttp(ids, g, { conn }), ids);
        conn.close();
        i += group.length - 1;
      } else if (e.round !== undefined && e.offset_ms !== undefined) {
        const group = [];
        while (ex[i + group.length]?.round === e.round && ex[i + group.length].offset_ms !== undefined) group.push(ex[i + group.length]);
        const results = await Promise.all(group.map(async (g) => {
          await sleep(g.offset_ms);
          return runHttp(ids, g);
        }));
        group.forEach((g, k) => compareHttp(t.file, g, results[k], ids));
        i += group.length - 1;
      } else if ((e.concurrent_with && next) || (RUNS_DURING_NEXT.test(e.label) && next)) {
        // the recorder sent one of the two 500 ms after the other's init event (listed in either order)
        const [streamEx, otherEx] = e.concurrent_with ? [e, next] : [next, e];
        let gotInit;
        const init = new Promise((r) => { gotInit = r; });
        const stream = runHttp(ids, streamEx, { onChunk: (d, res) => { if (res.chunks.length === 1) gotInit(d.toString('utf8')); } });
        const first = await init;
        ids.learn(streamEx.response.chunks[0].data, first);
        await sleep(500);
        const other = await runHttp(ids, otherEx);
        compareHttp(t.file, e, e === streamEx ? await stream : other, ids);
        compareHttp(t.file, next, next === streamEx ? await stream : other, ids);
        i += 1;
      } else {
        await beforeExchange(t.file, e, ids);
        compareHttp(t.file, e, await runHttp(ids, e), ids);
      }
    }
  }

  /** Waits the recorder did between two exchanges, where the next answer depends on it. */
  async function beforeExchange(file, e, ids) {
    const m = /^\/command\/status\/(\w+)$/.exec(e.request.path);
    const body = e.response.chunks[0]?.data ?? '';
    if (m && /"running":false/.test(body)) {
      const id = ids.apply(m[1]);
      const deadline = Date.now() + 15000;
      while (Date.now() < deadline) {
        const r = await request(`http://${host}:${port}/command/status/${id}`, { headers: { 'X-EXECD-ACCESS-TOKEN': TOKEN } });
        if (r.json?.running === false || r.status !== 200) return;
        await sleep(100);
      }
    }
  }

  const allowedBy = (d) => ALLOWED.find((a) => a.files.test(d.file) && a.labels.test(d.label) && a.aspects.test(d.aspect) && (!a.when || a.when(d)));
  const used = new Set();

  // the files are independent (own directories, ids, sessions): replay them side by side, a few at a time
  let replayed;
  const replayAll = () => {
    replayed ??= (async () => {
      const queue = [...transcripts];
      const lane = async () => {
        for (let t = queue.shift(); t; t = queue.shift()) await replay(t);
      };
      await Promise.all([lane(), lane(), lane(), lane()]);
    })();
    return replayed;
  };

  for (const t of transcripts) {
    it(`${t.file}: ${t.scenario}`, async () => {
      await replayAll();
      const mine = found.filter((d) => d.file === t.file);
      const unexplained = [];
      for (const d of mine) {
        const a = allowedBy(d);
        if (a) used.add(a.id);
        else unexplained.push(d);
      }
      assert.deepEqual(unexplained.map((d) => `${d.label} | ${d.aspect}: expected ${JSON.stringify(d.expected)}, got ${JSON.stringify(d.actual)}`), []);
    });
  }

  it('every allow-list entry is still needed and documented in docs/dev-server-execd.md', () => {
    const doc = fs.readFileSync(DOC, 'utf8');
    for (const a of ALLOWED) {
      assert.ok(doc.includes(`| ${a.id} |`), `allow-list entry ${a.id} is not in the doc's table`);
      if (!a.racy) assert.ok(used.has(a.id), `allow-list entry ${a.id} matched no difference: remove it`);
    }
  });

  it('the tail is measured from when the server wrote the final event, not from when a stalled client read it', () => {
    // regression: under load the test read the final event late and execd's 1 s tail looked like none
    const epochMs = 1_700_000_000_000;
    const chunk = (t, ev) => ({ t_ms: t, data: `${JSON.stringify({ ...ev, timestamp: epochMs + ev.at })}\n\n` });
    const res = {
      status: 200, headers: { 'content-type': 'text/event-stream' }, framing: 'chunked', end_ms: 1105, eof_ms: null, epochMs,
      chunks: [chunk(5, { type: 'init', text: 'x', at: 4 }), chunk(700, { type: 'execution_complete', at: 100 })], // read 600 ms late
    };
    assert.equal(httpView(res).tail, 'ends ~1 s after the final event');
    const { epochMs: _, ...recorded } = res; // a recording: only when the recorder read it
    assert.equal(httpView(recorded).tail, 'ends right after the final event');
  });
});
