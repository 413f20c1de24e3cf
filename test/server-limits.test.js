// The local server's execd stays within bounded memory under careless and hostile clients: a /command stream
// nobody reads (directly and through the server's proxy route), one 1 GiB output line, 1,500 commands, oversized
// request bodies and malformed percent-encoding. execd's RSS is read from /proc (the execd process is found in this
// process's tree: startServer runs in-process) and must stay under RSS_CEILING_MB throughout; the sandbox keeps
// working afterwards. Bounds: docs/dev-server-execd.md "Limits".
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { Sandbox, ConnectionConfig } from '@alibaba-group/opensandbox';
import { startServer } from '../lib/dev-server/index.js';
import { descendants } from '../lib/dev-server/proctree.js';
import { waitFor } from './helpers/poll.js';
import { request, parseEvents, endpointHeadersFor } from './helpers/raw.js';

/** execd's resident set must stay below this through every phase (idle it is ~50-70 MB). */
const RSS_CEILING_MB = 250;
const MiB = 1024 * 1024;
/** Commands of the record-retention soak (OSB_SOAK_COMMANDS overrides; it must exceed the 1,000-record bound). */
const COMMANDS = Number(process.env.OSB_SOAK_COMMANDS) || 1500;

function cmdline(pid) {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
  } catch {
    return [];
  }
}
/** An execd process (osb-execd; not bwrap). */
function isExecd(pid) {
  return Boolean(cmdline(pid)[0]?.endsWith('/osb-execd'));
}
/** Direct children of pid (Linux /proc/<pid>/task/<pid>/children). */
function childrenOf(pid) {
  try {
    return fs.readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}
/** Resident MB of pid; 0 once it is gone or a zombie (no VmRSS line, or no file: it exited between listing and reading). */
function rssMb(pid) {
  let status = '';
  try {
    status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  } catch {
    return 0;
  }
  const m = /VmRSS:\s+(\d+) kB/.exec(status);
  return m ? Number(m[1]) / 1024 : 0;
}
/** Bytes a process has written so far (Linux /proc/<pid>/io wchar). */
function written(pid) {
  return Number(/wchar: (\d+)/.exec(fs.readFileSync(`/proc/${pid}/io`, 'utf8'))[1]);
}

/**
 * A server without the command tail and one sandbox on it (official client); the endpoint answers are fetched once
 * through test/helpers/raw.js so its raw requests send the sandbox token back. execd: direct URL; viaProxy: the
 * server's proxy route to it.
 */
async function sandboxOnServer() {
  const server = await startServer({ commandTailMs: 0 });
  const sbx = await Sandbox.create({ connectionConfig: new ConnectionConfig({ domain: server.domain }), image: 'debian:12' });
  const execd = await sbx.getEndpointUrl(44772);
  const viaProxy = `${server.baseUrl}/v1/sandboxes/${sbx.id}/proxy/44772`;
  await request(`${server.baseUrl}/v1/sandboxes/${sbx.id}/endpoints/44772`);
  await request(`${server.baseUrl}/v1/sandboxes/${sbx.id}/endpoints/44772?use_server_proxy=true`);
  return { server, sbx, execd, viaProxy };
}

describe('dev-server execd bounded memory (soak)', function () {
  this.timeout(180000);
  let server;
  let sbx;
  let execd; // http://127.0.0.1:<port>, the relay to execd
  let viaProxy; // the same execd through the server's proxy route
  let execdPid;
  let peak = 0;
  let sampler;
  const phases = []; // [title, peak MB] per test

  const sample = () => {
    // execd alone (a command's vfork child shows execd's argv until it execs, and is gone a moment later; regression:
    // the sampler read a zombie's status without VmRSS and threw)
    const mb = rssMb(execdPid);
    peak = Math.max(peak, mb);
    if (phases.length) phases.at(-1)[1] = Math.max(phases.at(-1)[1], mb);
    return mb;
  };
  beforeEach(function () {
    phases.push([this.currentTest.title.slice(0, 40), 0]);
  });
  const assertUnderCeiling = (what) => {
    const mb = sample();
    assert.ok(peak < RSS_CEILING_MB, `${what}: execd RSS peaked at ${peak.toFixed(1)} MB (now ${mb.toFixed(1)} MB), ceiling ${RSS_CEILING_MB} MB`);
  };
  /** The pid (host view) of the sandbox process whose argv[0] is `name`. */
  const findProc = (name) => descendants(execdPid).find((p) => cmdline(p)[0] === name);

  before(async () => {
    ({ server, sbx, execd, viaProxy } = await sandboxOnServer());
    const pids = descendants(process.pid).filter(isExecd); // parents first: the sandbox's execd (a command's vfork child, before its exec, below it)
    execdPid = pids[0];
    assert.deepEqual(pids.filter((p) => p !== execdPid && !childrenOf(execdPid).includes(p)), [], 'exactly one execd in this process tree');
    sample();
    sampler = setInterval(sample, 50);
  });
  after(async () => {
    clearInterval(sampler);
    await sbx?.kill().catch(() => {});
    await sbx?.close();
    await server?.close();
    console.log(`      execd RSS peak over the soak: ${peak.toFixed(1)} MB (ceiling ${RSS_CEILING_MB} MB); per test: ${phases.map(([t, mb]) => `${t}… ${mb.toFixed(0)} MB`).join('; ')}`);
  });

  /**
   * POSTs `body` to `url` over a raw socket, reads up to the stream's init event, then stops reading: the socket is
   * paused, so the kernel buffers fill and execd has to hold back. Resolves { id: the init text, socket }.
   */
  function startUnread(url, body) {
    const u = new URL(url);
    const text = JSON.stringify(body);
    return new Promise((resolve, reject) => {
      const socket = net.connect(Number(u.port), u.hostname);
      let got = '';
      const timer = setTimeout(() => reject(new Error('no init event within 20 s')), 20000);
      socket.on('error', reject);
      socket.on('connect', () => {
        const extra = Object.entries(endpointHeadersFor(url)).map(([k, v]) => `${k}: ${v}\r\n`).join('');
        socket.write(`POST ${u.pathname} HTTP/1.1\r\nHost: ${u.host}\r\n${extra}Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(text)}\r\n\r\n${text}`);
      });
      socket.on('data', function onData(d) {
        got += d.toString('latin1');
        const m = /"type":"init","text":"([^"]+)"/.exec(got);
        if (!m) return;
        clearTimeout(timer);
        socket.off('data', onData);
        socket.pause();
        resolve({ id: m[1], socket });
      });
    });
  }

  /** Waits until `yes` (pid) stops writing because nobody reads; resolves the bytes it wrote. */
  async function blocked(pid) {
    let last = -1;
    await waitFor(() => {
      const now = written(pid);
      const stalled = now === last;
      last = now;
      return stalled;
    }, { timeoutMs: 30000, intervalMs: 500, message: 'yes blocks on its output while the client does not read' });
    assert.ok(last < 256 * MiB, `yes wrote ${last} bytes before blocking`);
    return last;
  }

  async function nonReadingClient(base) {
    const { id, socket } = await startUnread(`${base}/command`, { command: 'yes' });
    const yes = await waitFor(() => findProc('yes'), { message: 'yes runs' });
    const last = await blocked(yes);
    assertUnderCeiling('non-reading client');
    // the client goes away: the command goes on (as with the real execd), its output now read and discarded
    socket.destroy();
    await waitFor(() => written(yes) > last + 64 * MiB, { timeoutMs: 30000, message: 'yes runs on after the client left' });
    assertUnderCeiling('after the non-reading client left');
    const del = await request(`${execd}/command?id=${id}`, { method: 'DELETE' });
    assert.equal(del.status, 200);
    await waitFor(() => !findProc('yes'), { message: 'yes stopped' });
  }

  it('a /command client that stops reading: the process blocks, execd does not buffer; freed when it leaves', async () => {
    await nonReadingClient(execd);
  });

  it('the same through the server proxy route', async () => {
    await nonReadingClient(viaProxy);
  });

  it('/session runs and language-less /code runs block too; leaving cancels the session run', async () => {
    const sid = (await request(`${execd}/session`, { method: 'POST' })).json.session_id;
    const run = await startUnread(`${execd}/session/${sid}/run`, { command: 'yes' });
    await blocked(await waitFor(() => findProc('yes'), { message: 'yes runs in the session' }));
    assertUnderCeiling('non-reading /session client');
    run.socket.destroy();
    await waitFor(() => !findProc('yes'), { message: 'the session run is cancelled when its client leaves' });

    const cell = await startUnread(`${execd}/code`, { code: 'yes' });
    await blocked(await waitFor(() => findProc('yes'), { message: 'yes runs as a language-less /code run' }));
    assertUnderCeiling('non-reading /code client');
    cell.socket.destroy();
    assert.equal((await request(`${execd}/code?id=${cell.id}`, { method: 'DELETE' })).status, 200);
    await waitFor(() => !findProc('yes'), { message: 'the /code run is interrupted' });
  });

  it('one 1 GiB output line: 1 MiB events, never the whole line; discarded once the client leaves', async () => {
    const body = JSON.stringify({ command: 'head -c 1073741824 /dev/zero | tr "\\0" x; echo; echo end' });
    // read the first three 1 MiB pieces, then go away (the command goes on, like with the real execd)
    const { id, pieces } = await new Promise((resolve, reject) => {
      const req = http.request(`${execd}/command`, { method: 'POST', headers: { ...endpointHeadersFor(execd), 'Content-Type': 'application/json' }, agent: false }, (res) => {
        const seen = [];
        let pending = '';
        res.setEncoding('utf8');
        res.on('data', (d) => {
          pending += d;
          let i;
          while ((i = pending.indexOf('\n\n')) >= 0) {
            seen.push(JSON.parse(pending.slice(0, i)));
            pending = pending.slice(i + 2);
          }
          const stdout = seen.filter((e) => e.type === 'stdout');
          if (stdout.length >= 3) {
            req.destroy();
            resolve({ id: seen[0].text, pieces: stdout.map((e) => e.text) });
          }
        });
        res.on('error', () => {});
      });
      req.on('error', (err) => reject(err));
      req.setTimeout(60000, () => req.destroy(new Error('no 1 MiB pieces within 60 s')));
      req.end(body);
    });
    assert.deepEqual(pieces.map((t) => [t.length, /^x+$/.test(t)]), [[MiB, true], [MiB, true], [MiB, true]]);
    const st = await waitFor(async () => {
      const r = await request(`${execd}/command/status/${id}`);
      return r.json?.running === false && r.json;
    }, { timeoutMs: 150000, intervalMs: 200, message: 'the 1 GiB command finishes after its client left' });
    assert.equal(st.exit_code, 0);
    assertUnderCeiling('1 GiB line');
  });

  it(`${COMMANDS} commands of 50 KB output each: old records dropped, newest kept, execd under the ceiling`, async function () {
    // spawning dominates: 15-90 ms a process on a loaded 2-core machine
    this.timeout(120000 + COMMANDS * 200);
    const agent = new http.Agent({ keepAlive: true, maxSockets: 8 });
    const start = () => new Promise((resolve, reject) => {
      const req = http.request(`${execd}/command`, { method: 'POST', agent, headers: { ...endpointHeadersFor(execd), 'Content-Type': 'application/json' } }, (res) => {
        let t = '';
        res.setEncoding('utf8');
        res.on('data', (d) => { t += d; });
        res.on('end', () => resolve(parseEvents(t)[0].text));
        res.on('error', reject);
      });
      req.on('error', reject);
      req.end(JSON.stringify({ command: 'printf "%50000s" ""', background: true }));
    });
    const ids = [];
    let next = 0;
    await Promise.all(Array.from({ length: 8 }, async () => {
      while (next < COMMANDS) {
        const i = next++;
        ids[i] = await start();
      }
    }));
    agent.destroy();
    assertUnderCeiling(`${COMMANDS} commands`);
    const last = ids.at(-1);
    await waitFor(async () => (await request(`${execd}/command/status/${last}`)).json?.running === false, { message: 'last command done' });
    const logs = await request(`${execd}/command/${last}/logs`);
    assert.equal(logs.text, ' '.repeat(50000));
    const first = await request(`${execd}/command/status/${ids[0]}`);
    assert.equal(first.status, 404, 'the oldest finished record was dropped');
  });

  it('the sandbox keeps working afterwards', async () => {
    const ex = await sbx.commands.run('echo still-here');
    assert.deepEqual(ex.logs.stdout.map((m) => m.text), ['still-here']);
    assertUnderCeiling('at the end');
  });
});

describe('dev-server execd limits (bounded logs, lines, bodies, URLs)', function () {
  this.timeout(60000);
  let server;
  let sbx;
  let execd;
  let viaProxy;

  before(async () => {
    ({ server, sbx, execd, viaProxy } = await sandboxOnServer());
  });
  after(async () => {
    await sbx?.kill().catch(() => {});
    await sbx?.close();
    await server?.close();
  });

  const json = { 'Content-Type': 'application/json' };
  const startBackground = async (command) => {
    const r = await request(`${execd}/command`, { method: 'POST', headers: json, body: { command, background: true } });
    const id = parseEvents(r.text)[0].text;
    await waitFor(async () => (await request(`${execd}/command/status/${id}`)).json?.running === false, { message: 'command done' });
    return id;
  };

  it('background logs keep the newest 1 MiB; the cursor stays a byte offset and dropped bytes are reported', async () => {
    // 3 MiB: "0000000\n" "0000001\n" … (8-byte records), so every offset names its record
    const id = await startBackground('seq -f "%07g" 0 393215');
    const total = 3 * MiB;
    const all = await request(`${execd}/command/${id}/logs`);
    assert.equal(all.headers['execd-commands-tail-cursor'], String(total));
    assert.equal(all.headers['execd-commands-dropped-bytes'], String(total - MiB));
    assert.equal(all.text.length, MiB);
    assert.equal(all.text.slice(0, 8), `${String((total - MiB) / 8).padStart(7, '0')}\n`);
    assert.equal(all.text.slice(-8), '0393215\n');
    // a cursor inside the retained bytes: exact, nothing reported dropped
    const mid = await request(`${execd}/command/${id}/logs?cursor=${total - 16}`);
    assert.equal(mid.text, '0393214\n0393215\n');
    assert.equal(mid.headers['execd-commands-dropped-bytes'], undefined);
    const end = await request(`${execd}/command/${id}/logs?cursor=${total}`);
    assert.equal(end.text, '');
    assert.equal(end.headers['execd-commands-tail-cursor'], String(total));
  });

  it('a line over 1 MiB is split into 1 MiB events without cutting a UTF-8 character', async () => {
    // 1 MiB - 1 bytes of "a", then "é" (2 bytes) straddling the 1 MiB boundary, then "b"
    const r = await request(`${execd}/command`, {
      method: 'POST', headers: json, timeoutMs: 30000,
      body: { command: 'head -c 1048575 /dev/zero | tr "\\0" a; printf "\\303\\251b\\n"; echo next' },
    });
    const out = parseEvents(r.text).filter((e) => e.type === 'stdout').map((e) => e.text);
    assert.equal(out.length, 3);
    assert.equal(out[0], 'a'.repeat(MiB - 1));
    assert.equal(out[1], 'éb');
    assert.equal(out[2], 'next');
  });

  /** POSTs `size` bytes (Content-Length or chunked), never reading before it is all sent; resolves status and body. */
  function postBig(url, size, { chunked = false } = {}) {
    return new Promise((resolve, reject) => {
      const headers = { ...endpointHeadersFor(url), ...json };
      if (!chunked) headers['Content-Length'] = size;
      const req = http.request(url, { method: 'POST', headers, agent: false }, (res) => {
        let t = '';
        res.on('data', (d) => { t += d; });
        res.on('end', () => resolve({ status: res.statusCode, json: JSON.parse(t) }));
      });
      req.on('error', reject);
      req.setTimeout(60000, () => req.destroy(new Error('no answer within 60 s')));
      const chunk = Buffer.alloc(MiB, 0x20);
      let sent = 0;
      const pump = () => {
        while (sent < size) {
          const n = Math.min(chunk.length, size - sent);
          sent += n;
          if (!req.write(chunk.subarray(0, n))) return void req.once('drain', pump);
        }
        req.end();
      };
      pump();
    });
  }

  it('a 100 MB body gets its 413 (execd, with and without Content-Length, and through the server proxy)', async () => {
    const tooLarge = { code: 'INVALID_REQUEST_BODY', message: `request body larger than ${64 * MiB} bytes` };
    for (const [url, opts] of [[`${execd}/command`, {}], [`${execd}/command`, { chunked: true }], [`${viaProxy}/command`, {}]]) {
      const r = await postBig(url, 100e6, opts);
      assert.deepEqual([r.status, r.json], [413, tooLarge], `${url} ${JSON.stringify(opts)}`);
    }
    // the connection stays usable: the sandbox answers normally afterwards
    assert.equal((await request(`${execd}/ping`)).status, 200);
  });

  it('a 5 MB body to the lifecycle API gets its 413', async () => {
    const r = await postBig(`${server.baseUrl}/v1/sandboxes`, 5e6);
    assert.deepEqual([r.status, r.json], [413, { code: 'GENERAL::REQUEST_TOO_LARGE', message: `request body larger than ${MiB} bytes` }]);
  });

  it('malformed percent-encoding is a 400, on execd (Go\'s answer) and on the server proxy route', async () => {
    for (const base of [execd, viaProxy]) {
      const r = await request(`${base}/command/status/%zz`);
      assert.deepEqual([r.status, r.text], [400, '400 Bad Request'], base);
    }
    const id = await request(`${server.baseUrl}/v1/sandboxes/%zz/proxy/44772/ping`);
    assert.deepEqual([id.status, id.json], [400, { code: 'GENERAL::BAD_REQUEST', message: 'invalid URL escape in "%zz"' }]);
    // a well-formed escape that is not UTF-8 is just an unknown id (was a 500 "URI malformed")
    const ff = await request(`${execd}/command/status/%ff`);
    assert.equal(ff.status, 404);
    assert.equal(ff.json.code, 'INVALID_REQUEST_BODY');
  });
});
