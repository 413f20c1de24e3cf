// Golden transcripts of the real OpenSandbox lifecycle server (v0.1.14, Docker runtime;
// test/fixtures/opensandbox-lifecycle-transcripts/, format in its README.txt): every recorded scenario is replayed in
// order against the local server started with `emulate: 'docker'`, and each answer is compared with the recorded one
// after normalising what varies per run (ids, times, ports, request ids, container ids): status, body, header names.
// Sandboxes and snapshots a scenario uses but did not record creating (its setup) are created first, from what the
// recording shows of them (image, entrypoint, metadata, expiry, state). Every difference that stays is an entry of
// ALLOWED below, described with its reason under its id in docs/dev-server.md ("Lifecycle transcripts"); an unlisted
// difference fails, and so does an entry that matches nothing.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startServer } from '../lib/dev-server/index.js';
import { waitFor } from './helpers/poll.js';
import { request } from './helpers/raw.js';

const DIR = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fixtures', 'opensandbox-lifecycle-transcripts');
const DOC = new URL('../docs/dev-server.md', import.meta.url);
const KEY = 'golden-lifecycle-key';
const NIL = '00000000-0000-0000-0000-000000000000';
const RECORDED_ALLOWED_PATH = '/srv/allowed';

/**
 * What the recorder did between two recorded exchanges without recording it (its notes say so): before the exchange
 * whose label matches, the replay does the same.
 */
const UNRECORDED = [
  { files: /^snapshots\.json$/, labels: /\[source paused\]$/, before: (api, ids) => api(`/v1/sandboxes/${ids.get('<SANDBOX_ID_1>')}/pause`, { method: 'POST' }) },
  { files: /^renew_expiration\.json$/, labels: /\[while paused\]$/, before: (api, ids) => api(`/v1/sandboxes/${ids.get('<SANDBOX_ID_1>')}/pause`, { method: 'POST' }) },
];

/**
 * The differences that stay, each described under its id in docs/dev-server.md ("Lifecycle transcripts"). files and
 * labels are regular expressions matched against the file name and the exchange label (`METHOD path [note]`);
 * aspects against 'status', 'body', 'headers'; when: a further condition on { expected, actual }.
 */
const ALLOWED = [
  // headers: no `server: uvicorn`; Node's keep-alive pair on a connection the client did not close
  { id: 'L1', files: /./, labels: /./, aspects: /^headers$/, when: ({ expected, actual }) => strip(expected, ['server']) === strip(actual, ['keep-alive']) },
  // no images: an image that cannot be pulled, or is malformed, starts anyway
  { id: 'L2', files: /^create_invalid_image/, labels: /^POST \/v1\/sandboxes$/, aspects: /^(status|body|headers)$/ },
  // resourceLimits the local server cannot honour are refused, not ignored
  { id: 'L3', files: /^create_unknown_key/, labels: /\[unparseable resource limits\]|^(GET|DELETE) \/v1\/sandboxes\/<SANDBOX_ID_3>/, aspects: /^(status|body|headers)$/ },
  // endpoints carry the sandbox's own access token as a header
  { id: 'L4', files: /^(endpoints|restore_from_snapshot)/, labels: /\/endpoints\/\d+/, aspects: /^body$/, when: ({ expected, actual }) => sameWithout(expected, actual, 'headers') },
  // port 8080 is reached through execd's reverse proxy like every other port (no second published port)
  { id: 'L5', files: /^endpoints/, labels: /\/endpoints\/8080$/, aspects: /^body$/ },
  // the server proxy to a port nobody listens on: our proxy's 502 text
  { id: 'L6', files: /^endpoints/, labels: /\/proxy\/3000\//, aspects: /^(body|headers)$/ },
  // pydantic's datetime error for "tomorrow"
  { id: 'L7', files: /^renew_expiration/, labels: /\[malformed\]/, aspects: /^body$/ },
  // a snapshot whose source sandbox's creation was not recorded: that sandbox's metadata is unknown
  { id: 'L8', files: /^restore_from_snapshot/, labels: /^GET \/v1\/sandboxes\/<SANDBOX_ID_2>$/, aspects: /^body$/ },
  // pydantic 422 texts the local validation words differently
  { id: 'L9', files: /^create_bad_volume/, labels: /\[(two backends|relative mountPath|invalid volume name)\]/, aspects: /^body$/, when: ({ expected, actual }) => sameType422(expected, actual) },
  // host path refusal: our message (the code is upstream's)
  { id: 'L10', files: /^create_bad_volume/, labels: /\[path not in allowed_host_paths\]/, aspects: /^body$/, when: ({ expected, actual }) => sameCode(expected, actual, 'VOLUME::HOST_PATH_NOT_ALLOWED') },
  // a metadata patch answers the labels in key order (the real server: the old labels, then the new keys)
  { id: 'L11', files: /^patch_metadata/, labels: /^PATCH /, aspects: /^body$/, when: ({ expected, actual }) => sortedKeys(expected) === sortedKeys(actual) },
  // a wrong API key: our message text
  { id: 'L12', files: /^health_and_auth/, labels: /\[wrong OPEN-SANDBOX-API-KEY\]/, aspects: /^body$/, when: ({ expected, actual }) => sameCode(expected, actual, 'INVALID_API_KEY') },
  // FastAPI's json_invalid detail text
  { id: 'L13', files: /^create_unknown_key/, labels: /\[malformed JSON\]/, aspects: /^body$/, when: ({ expected, actual }) => sameType422(expected, actual) },
];

function strip(names, drop) {
  return names.split(', ').filter((n) => !drop.includes(n)).join(', ');
}
function parse(text) {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
function sameWithout(expected, actual, key) {
  const a = parse(actual);
  if (!a || typeof a !== 'object') return false;
  const { [key]: _, ...rest } = a;
  return JSON.stringify(rest) === expected;
}
/** JSON with every object's keys sorted. */
function sortedKeys(text) {
  const sort = (v) => (Array.isArray(v) ? v.map(sort) : v && typeof v === 'object'
    ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, sort(v[k])])) : v);
  return JSON.stringify(sort(parse(text)));
}
function sameCode(expected, actual, code) {
  return parse(expected)?.code === code && parse(actual)?.code === code;
}
/** Both 422 bodies list errors of the same types at the same locations. */
function sameType422(expected, actual) {
  const shape = (t) => JSON.stringify((parse(t)?.detail ?? []).map((d) => [d.type, d.loc]));
  return Array.isArray(parse(expected)?.detail) && shape(expected) === shape(actual);
}

const UUID = /\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b/g;
const RFC3339 = /\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?/g;

/** Recorded text with its numbered placeholders reduced to what the comparison keeps. */
function normRecorded(text) {
  return text.replace(/<(TIME|HOST_PORT|REQUEST_ID|CONTAINER_ID|BRIDGE_IP)_\d+>/g, '<$1>');
}

/** Canonical JSON (keys in their order) or the text itself. */
function canon(text) {
  const v = parse(text);
  return v === undefined ? text : JSON.stringify(v);
}

describe('golden transcripts of the real lifecycle server replayed against the local server (emulate: docker)', function () {
  this.timeout(600000);
  let server;
  let allowedDir;
  const found = []; // { file, label, aspect, expected, actual }
  const files = fs.readdirSync(DIR).filter((f) => f.endsWith('.json')).sort();

  before(async () => {
    allowedDir = fs.mkdtempSync(path.join(os.tmpdir(), 'osb-golden-'));
    server = await startServer({
      apiKey: KEY, emulate: 'docker', emulateDelays: { create: 0 }, execdEndpoint: 'proxy', allowedHostPaths: [allowedDir],
      maxSandboxTimeoutSeconds: 86400, unenforcedLimits: true, commandTailMs: 50, log: () => {},
    });
  });
  after(async () => {
    await server?.close();
    fs.rmSync(allowedDir, { recursive: true, force: true });
  });

  for (const file of files) {
    it(file, async () => {
      const t = JSON.parse(fs.readFileSync(path.join(DIR, file), 'utf8'));
      const ids = new Map(); // placeholder -> local id
      const made = { sandboxes: new Set(), snapshots: new Set() };
      const api = (p, opts = {}) => request(`${server.baseUrl}${p}`, { ...opts, headers: { 'OPEN-SANDBOX-API-KEY': KEY, 'Content-Type': 'application/json', ...opts.headers } });
      /** The first recorded object (in any response body) with this id. */
      const recordedObject = (ph) => {
        let hit = null;
        const walk = (v) => {
          if (hit || v === null || typeof v !== 'object') return;
          if (v.id === ph && v.status) hit = v;
          else Object.values(v).forEach(walk);
        };
        for (const r of t.responses) walk(parse(r.body));
        return hit;
      };
      const setupSandbox = async (ph) => {
        const o = recordedObject(ph) ?? {};
        const body = {
          image: { uri: o.image?.uri ?? 'opensandbox-local/base:bookworm' }, entrypoint: o.entrypoint ?? ['tail', '-f', '/dev/null'],
          resourceLimits: { cpu: '500m', memory: '512Mi' }, timeout: o.expiresAt || !o.id ? 600 : null, ...(o.metadata ? { metadata: o.metadata } : {}),
        };
        const r = await api('/v1/sandboxes', { method: 'POST', body });
        assert.equal(r.status, 202, `setup of ${ph}: ${r.text}`);
        ids.set(ph, r.json.id);
        made.sandboxes.add(r.json.id);
        const pausedByScenario = t.requests.some((q) => q.method === 'POST' && q.path.includes(`${ph}/pause`));
        if (o.status?.state === 'Paused' && !pausedByScenario) assert.equal((await api(`/v1/sandboxes/${r.json.id}/pause`, { method: 'POST' })).status, 202);
      };
      const setupSnapshot = async (ph) => {
        const o = recordedObject(ph) ?? {};
        const source = o.sandboxId ?? '<SETUP_SOURCE>';
        if (!ids.has(source)) await setupSandbox(source);
        const r = await api(`/v1/sandboxes/${ids.get(source)}/snapshots`, { method: 'POST', body: o.name ? { name: o.name } : {} });
        assert.equal(r.status, 202, `setup of ${ph}: ${r.text}`);
        ids.set(ph, r.json.id);
        made.snapshots.add(r.json.id);
        await waitFor(async () => (await api(`/v1/snapshots/${r.json.id}`)).json.status.state === 'Ready', { timeoutMs: 60000, message: `setup snapshot ${ph} Ready` });
      };
      const timeFor = (note) => {
        const now = Date.now();
        if (/past/.test(note)) return new Date(now - 3600_000).toISOString();
        if (/beyond/.test(note)) return new Date(now + 2 * 86400_000).toISOString();
        if (/no timezone/.test(note)) return new Date(now + 3600_000).toISOString().replace(/\.\d+Z$/, '');
        return new Date(now + 1800_000).toISOString();
      };
      // placeholders a scenario uses before any recorded answer gives them: its setup (oldest first: the recorder
      // numbered them in the order its first answer listed them, newest first)
      const given = new Set();
      for (const r of t.responses) for (const m of r.statusLine.includes(' 202 ') ? r.body.matchAll(/^\{"id":"(<(SANDBOX|SNAPSHOT)_ID_\d+>)"/g) : []) given.add(m[1]);
      const texts = [...t.requests.map((q) => `${q.path} ${q.body ?? ''}`), ...t.responses.map((r) => r.body)];
      const used = [...new Set(texts.flatMap((x) => [...x.matchAll(/<(SANDBOX|SNAPSHOT)_ID_\d+>/g)].map((m) => m[0])))];
      // a snapshot's source named only inside the snapshot's record is made by the snapshot's setup
      const sources = new Set(used.filter((ph) => ph.startsWith('<SNAPSHOT') && !given.has(ph)).map((ph) => recordedObject(ph)?.sandboxId));
      const setups = used.filter((ph) => !given.has(ph) && !(sources.has(ph) && !texts.slice(0, t.requests.length).some((x) => x.includes(ph))));
      for (const ph of setups.filter((p) => p.startsWith('<SANDBOX')).reverse()) await setupSandbox(ph);
      for (const ph of setups.filter((p) => p.startsWith('<SNAPSHOT'))) await setupSnapshot(ph);

      const local = (text, note) => text
        .replace(/<(SANDBOX|SNAPSHOT)_ID_\d+>/g, (ph) => ids.get(ph) ?? ph)
        .replace(/<NONEXISTENT_ID>/g, NIL)
        .replace(/<API_KEY>/g, KEY)
        .replace(/<TIME_\d+>/g, () => timeFor(note))
        .split(RECORDED_ALLOWED_PATH).join(allowedDir);
      const recordedNames = new Map([...ids].map(([ph, id]) => [id, ph]));
      const normActual = (text) => text
        .replace(UUID, (id) => recordedNames.get(id) ?? (id === NIL ? '<NONEXISTENT_ID>' : id))
        .replace(RFC3339, '<TIME>')
        .replace(/\b[0-9a-f]{64}\b/g, '<CONTAINER_ID>')
        .split(`127.0.0.1:${server.port}`).join('127.0.0.1:<SERVER_PORT>')
        .replace(/127\.0\.0\.1:\d+/g, (m) => (m.endsWith('<SERVER_PORT>') ? m : '127.0.0.1:<HOST_PORT>'))
        .split(allowedDir).join(RECORDED_ALLOWED_PATH);

      const endpointHeaders = new Map(); // sandbox id -> the headers its endpoint answers gave (a client sends them back)
      for (let i = 0; i < t.requests.length; i++) {
        const q = t.requests[i];
        const rec = t.responses[i];
        const note = q.note ?? '';
        const label = `${q.method} ${q.path}${note ? ` [${note}]` : ''}`;
        for (const step of UNRECORDED.filter((u) => u.files.test(file) && u.labels.test(label))) await step.before(api, ids);
        const headers = Object.fromEntries(q.headers.filter(([n]) => !/^(host|content-length|connection)$/i.test(n)).map(([n, v]) => [n, local(v, note)]));
        const proxied = /\/sandboxes\/(<SANDBOX_ID_\d+>)\/proxy\/(\d+)\//.exec(q.path);
        if (proxied) Object.assign(headers, endpointHeaders.get(`${ids.get(proxied[1])}:${proxied[2]}`));
        const send = () => request(`${server.baseUrl}${local(q.path, note)}`, { method: q.method, headers, body: q.body === null ? undefined : local(q.body, note), endpointHeaders: false });
        // the recorder polled until the state it notes ("Ready after 211ms"): so does the replay, with a deadline
        const awaited = /\bafter \d+ms\b/.test(note) ? parse(rec.body)?.status?.state : undefined;
        const res = awaited === undefined ? await send()
          : await waitFor(async () => {
            const r = await send();
            return r.json?.status?.state === awaited && r;
          }, { timeoutMs: 30000, message: `${file} ${label}: state ${awaited}` });
        if (res.status === 202 && q.method === 'POST' && /^\/v1\/sandboxes$/.test(q.path)) made.sandboxes.add(res.json.id);
        const endpointOf = /\/sandboxes\/(<SANDBOX_ID_\d+>)\/endpoints\/(\d+)/.exec(q.path);
        if (endpointOf && res.json?.headers) endpointHeaders.set(`${ids.get(endpointOf[1])}:${endpointOf[2]}`, res.json.headers);
        // learn the ids the recorded answers introduce
        const recId = /^\{"id":"(<(SANDBOX|SNAPSHOT)_ID_\d+>)"/.exec(rec.body)?.[1];
        if (recId && !ids.has(recId) && typeof res.json?.id === 'string') {
          ids.set(recId, res.json.id);
          recordedNames.set(res.json.id, recId);
          if (recId.startsWith('<SNAPSHOT')) made.snapshots.add(res.json.id);
        }
        const compare = (aspect, expected, actual) => {
          if (expected !== actual) found.push({ file, label, aspect, expected, actual });
        };
        compare('status', String(rec.status), String(res.status));
        compare('body', canon(normRecorded(rec.body)), canon(normActual(res.text)));
        const names = (pairs) => pairs.map(([n]) => n.toLowerCase()).filter((n) => !['date', 'content-length', 'x-request-id'].includes(n)).sort().join(', ');
        const actualPairs = [];
        for (let k = 0; k < res.rawHeaders.length; k += 2) actualPairs.push([res.rawHeaders[k], res.rawHeaders[k + 1]]);
        compare('headers', names(rec.headers), names(actualPairs));
        // every answer of the real server has a Date and an X-Request-ID header; so must ours
        assert.ok(res.headers.date && res.headers['x-request-id'], `${file} ${label}: Date and X-Request-ID headers`);
      }
      for (const id of made.sandboxes) await api(`/v1/sandboxes/${id}`, { method: 'DELETE' });
      for (const id of made.snapshots) await api(`/v1/snapshots/${id}`, { method: 'DELETE' });
    });
  }

  it('every difference from the real server is allowed, and every allowance is used and documented', () => {
    const doc = fs.readFileSync(DOC, 'utf8');
    const unexplained = [];
    const used = new Set();
    for (const d of found) {
      const entry = ALLOWED.find((a) => a.files.test(d.file) && a.labels.test(d.label) && a.aspects.test(d.aspect) && (!a.when || a.when(d)));
      if (entry) used.add(entry.id);
      else unexplained.push(`${d.file} ${d.label} ${d.aspect}:\n  recorded ${d.expected}\n  local    ${d.actual}`);
    }
    assert.deepEqual(unexplained, [], `differences without an ALLOWED entry:\n${unexplained.join('\n')}`);
    assert.deepEqual(ALLOWED.filter((a) => !used.has(a.id)).map((a) => a.id), [], 'ALLOWED entries that match nothing');
    for (const a of ALLOWED) assert.match(doc, new RegExp(`\\| ${a.id} \\|`), `${a.id} is described in docs/dev-server.md`);
  });
});
