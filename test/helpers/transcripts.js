// Test helper: the golden wire transcripts of the real OpenSandbox execd (test/fixtures/opensandbox-transcripts/,
// format in its README) — loading, the request bytes to send, and the normalised "view" of a response or WebSocket
// session that the golden-transcript test compares. Normalisation removes only what varies per run (the README's
// list): ids, timestamps, execution times, RFC 3339 times, Last-Modified dates, per-run frame splitting, ping positions.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const TRANSCRIPT_DIR = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'fixtures', 'opensandbox-transcripts');

export function loadTranscripts() {
  return fs.readdirSync(TRANSCRIPT_DIR).filter((f) => f.endsWith('.json')).sort()
    .map((file) => ({ file, ...JSON.parse(fs.readFileSync(path.join(TRANSCRIPT_DIR, file), 'utf8')) }));
}

/** Bytes of a recorded request/response body or chunk. */
export function bytesOf(x, dataKey = 'data') {
  const v = x[dataKey] ?? x.body;
  if (v === undefined) return Buffer.alloc(0);
  return (x.data_b64 || x.body_b64) ? Buffer.from(v, 'base64') : Buffer.from(v, 'utf8');
}

const ID32 = /\b[0-9a-f]{32}\b/g;
const UUID = /\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b/g;
const RFC3339 = /\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)/g;
const HTTP_DATE = /^[A-Z][a-z]{2}, \d\d [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d GMT$/;
const PROMPT = /bash-\d+\.\d+[#$] /g;

/**
 * The recorder's directories and ours. The placeholders stand for the real execd's workspace, $HOME and $TMPDIR; a
 * request is rewritten to the local server's directories and a local answer back to the placeholders.
 */
export class PathMap {
  constructor(pairs) {
    this.pairs = pairs; // [[placeholder, local], …]
  }

  static esc(s) {
    return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  }

  toLocal(text) {
    let out = text;
    for (const [ph, local] of this.pairs) {
      out = out.split(ph).join(local).split(encodeURIComponent(ph)).join(encodeURIComponent(local));
    }
    return out;
  }

  toRecorded(text) {
    let out = text;
    for (const [ph, local] of [...this.pairs].sort((a, b) => b[1].length - a[1].length)) {
      out = out.replace(new RegExp(`${PathMap.esc(local)}(?![\\w.-])`, 'g'), ph);
    }
    return out;
  }
}

/** ids seen in recorded answers -> the local server's ids for the same objects (to rewrite later requests). */
export class IdMap {
  constructor() {
    this.map = new Map();
  }

  learn(recorded, local) {
    const r = [...String(recorded).matchAll(new RegExp(`${ID32.source}|${UUID.source}`, 'g'))].map((m) => m[0]);
    const l = [...String(local).matchAll(new RegExp(`${ID32.source}|${UUID.source}`, 'g'))].map((m) => m[0]);
    for (let i = 0; i < Math.min(r.length, l.length); i++) if (!this.map.has(r[i])) this.map.set(r[i], l[i]);
  }

  apply(text) {
    let out = text;
    for (const [r, l] of this.map) out = out.split(r).join(l);
    return out;
  }
}

export function normText(s) {
  return s.replace(UUID, '<uuid>').replace(ID32, '<id>').replace(RFC3339, '<time>');
}

function normJson(v, key, numbers) {
  if (Array.isArray(v)) return v.map((x) => normJson(x, undefined, numbers));
  if (v && typeof v === 'object') {
    const out = {};
    for (const [k, x] of Object.entries(v)) out[normText(k)] = normJson(x, k, numbers);
    return out;
  }
  if (typeof v === 'number') {
    if (['timestamp', 'execution_time', 'execution_count', 'pid'].includes(key) || numbers) return '<n>';
    return v;
  }
  if (typeof v === 'string') return normText(v);
  return v;
}

/** A JSON text as the real execd would write it (Go encoding/json) — for the escaping check. */
export function goJson(text) {
  return text.replace(/[<>&\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/** Classifies one stream chunk: its framing and the event it carries. */
function chunkEvent(c, numbers) {
  if (c.truncated || c.data.length > 20 * 1024) {
    const m = /^\{"type":"(\w+)"/.exec(c.data);
    return { frame: '{…}\\n\\n', event: { type: m?.[1] ?? '?', text: `<line of ${c.original_length ?? Buffer.byteLength(c.data)} bytes>` } };
  }
  let frame;
  let body = c.data;
  if (body.endsWith('\n\n')) {
    frame = '{…}\\n\\n';
    body = body.slice(0, -2);
  } else if (body.endsWith('\n')) {
    frame = '{…}\\n';
    body = body.slice(0, -1);
  } else frame = '{…}';
  try {
    const raw = JSON.parse(body);
    const escaped = goJson(JSON.stringify(raw)) === body ? 'go' : 'not Go encoding/json compact';
    return { frame, event: normJson(raw, undefined, numbers), escaped };
  } catch {
    return { frame: `not JSON: ${JSON.stringify(c.data.slice(0, 80))}`, event: null };
  }
}

/** When the server wrote the event of chunk c, in the response's t_ms (Infinity when it cannot be told). */
function writtenAt(res, c) {
  if (res.epochMs === undefined) return Infinity;
  try {
    const stamp = JSON.parse(c.data).timestamp;
    return Number.isInteger(stamp) ? stamp - res.epochMs : Infinity;
  } catch {
    return Infinity;
  }
}

/** Output events in a run of stdout/stderr events are compared per stream (their interleaving is racy). */
function partitionOutput(events) {
  const out = [];
  let run = [];
  const flush = () => {
    out.push(...run.filter((e) => e.type === 'stdout'), ...run.filter((e) => e.type === 'stderr'));
    run = [];
  };
  for (const e of events) {
    if (e && (e.type === 'stdout' || e.type === 'stderr')) run.push(e);
    else {
      flush();
      out.push(e);
    }
  }
  flush();
  return out;
}

const COMPARED_HEADERS = ['content-type', 'connection', 'cache-control', 'x-accel-buffering', 'transfer-encoding', 'content-disposition',
  'content-range', 'accept-ranges', 'last-modified', 'location', 'execd-commands-tail-cursor', 'x-content-type-options', 'content-length'];

/**
 * The compared view of one HTTP response (recorded or local, local already mapped back to the placeholders).
 * res: transcript-shaped response; chunk data as strings (binary bodies as base64 with data_b64).
 */
export function httpView(res, { numbers = false } = {}) {
  const v = { status: res.status };
  const body = res.chunks.map((c) => (c.data_b64 ? Buffer.from(c.data, 'base64').toString('latin1') : c.data)).join('');
  const bodyLen = res.chunks.reduce((n, c) => n + (c.data_b64 ? Buffer.from(c.data, 'base64').length : (c.original_length ?? Buffer.byteLength(c.data))), 0);
  v.headers = Object.keys(res.headers).filter((h) => h !== 'date').sort().join(', ');
  for (const h of COMPARED_HEADERS) {
    let val = res.headers[h];
    if (val === undefined) continue;
    if (h === 'last-modified' && HTTP_DATE.test(val)) val = '<http-date>';
    if (h === 'content-length' && res.end_ms !== null && Number(val) === bodyLen) val = '<body length>';
    v[`header:${h}`] = val;
  }
  v.framing = res.framing;
  const ctype = res.headers['content-type'] ?? '';
  const stream = res.framing === 'chunked' && (ctype.startsWith('text/event-stream') || ctype.startsWith('application/json'));
  if (stream) {
    const cs = res.chunks.map((c) => chunkEvent(c, numbers));
    const frames = [];
    for (const c of cs) if (frames.at(-1) !== c.frame) frames.push(c.frame);
    v.chunking = frames.join(' then ');
    const escaping = [...new Set(cs.map((c) => c.escaped).filter(Boolean))];
    v.escaping = escaping.join(', ');
    const events = cs.map((c) => c.event);
    v.events = JSON.stringify(partitionOutput(events.filter((e) => e?.type !== 'ping')));
    v.pings = events.filter((e) => e?.type === 'ping').length;
    if (res.end_ms === null) v.tail = 'client closed before the end';
    else if (res.chunks.length) {
      // from when the server wrote the final event (its own timestamp, when known: a client that reads the event late,
      // on a loaded machine, must not shorten the tail the server kept) to the terminating chunk
      const gap = res.end_ms - Math.min(res.chunks.at(-1).t_ms, writtenAt(res, res.chunks.at(-1)));
      v.tail = gap >= 800 ? 'ends ~1 s after the final event' : 'ends right after the final event';
    }
  } else if (ctype.startsWith('application/json') && body) {
    try {
      const raw = JSON.parse(body);
      v.body = JSON.stringify(normJson(raw, undefined, numbers));
      v.escaping = goJson(JSON.stringify(raw)) === body ? 'go' : 'not Go encoding/json compact';
    } catch {
      v.body = normText(body);
    }
  } else if (res.chunks.some((c) => c.data_b64)) {
    v.body = `base64:${Buffer.from(body, 'latin1').toString('base64')}`;
  } else if (body) v.body = normText(body);
  v.eof = res.eof_ms === null ? 'server keeps the connection open' : 'server closes the connection';
  return v;
}

/** The compared view of a WebSocket session. frames: [{ dir, opcode, text | payload(Buffer) }]. */
export function wsView(session) {
  const v = { handshake: session.handshake.status };
  if (session.handshake.status !== 101) {
    v['handshake body'] = normText(session.handshake.body ?? '');
    v['handshake content-type'] = session.handshake.headers?.['content-type'] ?? '';
    v['tcp after refusal'] = session.tcp.server_fin_ms === undefined || session.tcp.server_fin_ms === null ? 'kept open' : 'closed by server';
    return v;
  }
  const texts = [];
  const out = { 1: '', 2: '' };
  const replay = [];
  let close = null;
  let closeAnswer = null;
  let clientClosed = false;
  const pty = /"mode":"pty"/.test(session.frames.map((f) => f.text ?? '').join(''));
  for (const f of session.frames) {
    if (f.dir === 'out') {
      if (f.opcode === 8 && !close) clientClosed = true;
      continue;
    }
    if (f.opcode === 1) texts.push(normText(f.text));
    else if (f.opcode === 2) {
      const b = f.payload;
      if (b[0] === 3) replay.push(`@${Number(b.readBigUInt64BE(1))}:${b.subarray(9).toString('utf8')}`);
      else if (b[0] === 1 || b[0] === 2) out[b[0]] += b.subarray(1).toString('utf8');
      else out[b[0]] = (out[b[0]] ?? '') + b.subarray(1).toString('utf8');
    } else if (f.opcode === 8) {
      const c = f.payload.length >= 2 ? `${f.payload.readUInt16BE(0)} ${JSON.stringify(f.payload.subarray(2).toString('utf8'))}` : 'no code';
      if (clientClosed) closeAnswer = c;
      else close = c;
    }
  }
  const term = (s) => (pty ? normText(s).replace(PROMPT, '<prompt> ') : normText(s));
  v['text frames'] = JSON.stringify(texts);
  v['text frames end with \\n'] = texts.every((t) => t.endsWith('\n'));
  v.stdout = JSON.stringify(term(out[1]));
  v.stderr = JSON.stringify(term(out[2]));
  for (const k of Object.keys(out)) if (!['1', '2'].includes(k)) v[`channel ${k}`] = JSON.stringify(out[k]);
  v.replay = JSON.stringify(replay.map(term));
  v['server close'] = close ?? 'none';
  if (clientClosed) v['answer to client close'] = closeAnswer ?? 'none';
  v['server closes TCP'] = session.tcp.server_fin_ms === undefined || session.tcp.server_fin_ms === null ? 'no' : 'yes';
  return v;
}

/** Differences between two views: [{ aspect, expected, actual }]. */
export function diffViews(expected, actual) {
  const out = [];
  for (const k of new Set([...Object.keys(expected), ...Object.keys(actual)])) {
    if (JSON.stringify(expected[k]) !== JSON.stringify(actual[k])) out.push({ aspect: k, expected: expected[k], actual: actual[k] });
  }
  return out;
}
