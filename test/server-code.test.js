// execd's code interpreter in the local server (/code API): real python3, node and bash kernels inside a
// bubblewrap sandbox, reached over raw HTTP through the sandbox's execd endpoint from startServer().
import assert from 'node:assert/strict';
import http from 'node:http';
import { startServer } from '../lib/dev-server/index.js';
import { waitFor } from './helpers/poll.js';
import { request, parseEvents, endpointHeadersFor } from './helpers/raw.js';

const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

/**
 * POST /code and follow the stream as it arrives: { events (grows live), status, headers, done }.
 * done resolves with the events at end-of-stream; the whole exchange has a deadline.
 */
function openCell(base, body, timeoutMs = 30000) {
  const cell = { events: [], status: 0, headers: {}, text: '' };
  cell.done = new Promise((resolve, reject) => {
    const req = cell.req = http.request(`${base}/code`, { method: 'POST', agent: false, headers: { ...endpointHeadersFor(base), 'Content-Type': 'application/json' } }, (res) => {
      cell.status = res.statusCode;
      cell.headers = res.headers;
      res.setEncoding('utf8');
      let pending = '';
      res.on('data', (d) => {
        cell.text += d;
        pending += d;
        let at;
        while ((at = pending.indexOf('\n\n')) >= 0) {
          cell.events.push(JSON.parse(pending.slice(0, at)));
          pending = pending.slice(at + 2);
        }
      });
      res.on('end', () => {
        clearTimeout(timer);
        if (pending !== '') reject(new Error(`stream ended inside an event: ${JSON.stringify(pending.slice(0, 80))}`));
        else resolve(cell.events);
      });
      res.on('error', reject);
    });
    const timer = setTimeout(() => req.destroy(new Error(`POST /code did not end within ${timeoutMs} ms`)), timeoutMs);
    req.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    req.end(JSON.stringify(body));
  });
  return cell;
}

const texts = (events, type) => events.filter((e) => e.type === type).map((e) => e.text).join('');
const results = (events) => events.filter((e) => e.type === 'result').map((e) => e.results);
const final = (events) => events[events.length - 1];

describe('dev-server execd code interpreter (/code)', function () {
  this.timeout(60000);
  let server;
  let sandboxId;
  let execd; // http://<endpoint>

  const api = (p, opts = {}) => request(`${server.baseUrl}${p}`, { ...opts, headers: { 'Content-Type': 'application/json', ...opts.headers } });
  const ex = (p, opts = {}) => request(`${execd}${p}`, { timeoutMs: 30000, ...opts, headers: { 'Content-Type': 'application/json', ...opts.headers } });

  async function newContext(language, extra = {}) {
    const r = await ex('/code/context', { method: 'POST', body: { language, ...extra } });
    assert.equal(r.status, 200, r.text);
    assert.match(r.json.id, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    assert.equal(r.json.language, language);
    return r.json.id;
  }

  /** Runs a cell to the end of its stream and returns the parsed events (framing checked). */
  async function run(id, language, code) {
    const cell = openCell(execd, { context: { id, language }, code });
    await cell.done;
    assert.equal(cell.status, 200);
    assert.equal(cell.headers['content-type'], 'text/event-stream');
    assert.deepEqual(parseEvents(cell.text), cell.events);
    return cell.events;
  }

  async function value(id, language, code) {
    const events = await run(id, language, code);
    assert.equal(final(events).type, 'execution_complete', JSON.stringify(events));
    return results(events).map((r) => r.text);
  }

  async function sandboxCommand(command) {
    const r = await ex('/command', { method: 'POST', body: { command } });
    assert.equal(r.status, 200, r.text);
    return r;
  }

  before(async () => {
    server = await startServer({ commandTailMs: 0 });
    const created = await api('/v1/sandboxes', {
      method: 'POST',
      body: { image: { uri: 'python:3.11' }, entrypoint: ['tail', '-f', '/dev/null'], resourceLimits: { cpu: '1', memory: '1Gi' } },
    });
    assert.equal(created.status, 202, created.text);
    sandboxId = created.json.id;
    const ep = await api(`/v1/sandboxes/${sandboxId}/endpoints/44772`);
    assert.equal(ep.status, 200, ep.text);
    execd = `http://${ep.json.endpoint}`;
    await waitFor(async () => (await ex('/ping', { timeoutMs: 2000 })).status === 200, { timeoutMs: 30000, message: 'execd ping' });
  });
  after(async () => {
    if (sandboxId) await api(`/v1/sandboxes/${sandboxId}`, { method: 'DELETE' }).catch(() => {});
    await server?.close();
  });

  it('python: state persists in a context and not across contexts; x + 1 -> "42"', async () => {
    const a = await newContext('python');
    const b = await newContext('python');
    assert.deepEqual(await value(a, 'python', 'x = 41'), []);
    const events = await run(a, 'python', 'x + 1');
    assert.deepEqual(events.map((e) => e.type), ['init', 'ping', 'execution_count', 'result', 'execution_complete']);
    assert.equal(events[0].text, a);
    assert.deepEqual(events[3].results, { text: '42' });
    assert.ok(events[4].execution_time >= 1);
    assert.deepEqual(await value(a, 'python', 'None'), []);
    const other = await run(b, 'python', 'x');
    assert.equal(final(other).type, 'error');
    assert.equal(final(other).error.ename, 'NameError');
    assert.equal(final(other).error.evalue, "name 'x' is not defined");
  });

  it('javascript: REPL-like completion values in a persistent vm context, isolated per context', async () => {
    const a = await newContext('javascript');
    const b = await newContext('javascript');
    assert.deepEqual(await value(a, 'javascript', 'var x = 41; let y = "kept";'), []);
    assert.deepEqual(await value(a, 'javascript', 'x + 1'), ['42']);
    assert.deepEqual(await value(a, 'javascript', 'y'), ["'kept'"]);
    assert.deepEqual(await value(a, 'javascript', 'Promise.resolve({ n: x })'), ['{ n: 41 }']);
    const other = await run(b, 'javascript', 'x');
    assert.equal(final(other).error.ename, 'ReferenceError');
    assert.equal(final(other).error.evalue, 'x is not defined');
  });

  it('bash: variables, functions and cwd persist; exit status != 0 is an error event', async () => {
    const a = await newContext('bash');
    const b = await newContext('bash');
    assert.equal(final(await run(a, 'bash', 'x=41; twice() { echo $(( $1 * 2 )); }; cd /tmp')).type, 'execution_complete');
    const events = await run(a, 'bash', 'echo $((x + 1)); twice 21; pwd');
    assert.equal(texts(events, 'stdout'), '42\n42\n/tmp\n');
    assert.deepEqual(results(events), []);
    assert.equal(final(events).type, 'execution_complete');
    assert.equal(texts(await run(b, 'bash', 'echo "[$x]"'), 'stdout'), '[]\n');
    const failed = await run(a, 'bash', 'echo out; exit_with() { return $1; }; exit_with 3');
    assert.equal(texts(failed, 'stdout'), 'out\n');
    assert.deepEqual(failed.slice(-2), [
      { type: 'status', text: 'error', timestamp: failed[failed.length - 2].timestamp },
      { type: 'error', timestamp: final(failed).timestamp, error: { ename: 'CommandExecError', evalue: '3', traceback: ['exit status 3'] } },
    ]);
  });

  it('streams raw stdout/stderr text (newlines kept) while the cell is still running', async () => {
    const id = await newContext('python');
    const flag = `/tmp/code-go-${process.pid}-${Date.now()}`;
    const cell = openCell(execd, {
      context: { id, language: 'python' },
      code: `import os, sys, time\nprint('first line')\nprint('second', end='')\nsys.stderr.write('warn\\n')\nwhile not os.path.exists(${JSON.stringify(flag)}):\n    time.sleep(0.02)\nprint(' and done')`,
    });
    await waitFor(() => texts(cell.events, 'stdout') === 'first line\nsecond' && texts(cell.events, 'stderr') === 'warn\n',
      { timeoutMs: 20000, message: 'output of the running cell' });
    assert.ok(!cell.events.some((e) => e.type === 'execution_complete'));
    await sandboxCommand(`touch ${flag}`);
    const events = await cell.done;
    assert.equal(texts(events, 'stdout'), 'first line\nsecond and done\n');
    assert.equal(final(events).type, 'execution_complete');
  });

  it('exceptions: error event with ename, evalue and a traceback list (python, javascript)', async () => {
    const py = await newContext('python');
    const events = await run(py, 'python', "print('before')\ndef f():\n    raise ValueError('bad value')\nf()");
    assert.equal(texts(events, 'stdout'), 'before\n');
    assert.deepEqual(events.slice(-2).map((e) => e.type), ['status', 'error']);
    assert.equal(events[events.length - 2].text, 'error');
    const { error } = final(events);
    assert.equal(error.ename, 'ValueError');
    assert.equal(error.evalue, 'bad value');
    assert.ok(Array.isArray(error.traceback) && error.traceback.every((l) => typeof l === 'string'));
    assert.equal(error.traceback[0], 'Traceback (most recent call last):');
    assert.ok(error.traceback.some((l) => l.includes('in f') && l.includes("raise ValueError('bad value')")), error.traceback.join('\n'));
    assert.equal(error.traceback[error.traceback.length - 1], 'ValueError: bad value');
    assert.ok(!error.traceback.some((l) => l.includes('code-python-kernel')), 'kernel frames leak into the traceback');
    const syntax = final(await run(py, 'python', 'def broken(:'));
    assert.equal(syntax.error.ename, 'SyntaxError');

    const js = await newContext('javascript');
    const jsErr = final(await run(js, 'javascript', 'function g() { throw new TypeError("nope"); }\ng()'));
    assert.equal(jsErr.error.ename, 'TypeError');
    assert.equal(jsErr.error.evalue, 'nope');
    assert.equal(jsErr.error.traceback[0], 'TypeError: nope');
    assert.ok(jsErr.error.traceback.some((l) => l.includes('at g (<cell-')), jsErr.error.traceback.join('\n'));
  });

  it('a cell on a busy context gets init + the bare "session is busy" error; interrupt ends the busy cell', async () => {
    const id = await newContext('python');
    const spinning = openCell(execd, { context: { id, language: 'python' }, code: "print('spinning', flush=True)\nwhile True: pass" });
    await waitFor(() => texts(spinning.events, 'stdout') === 'spinning\n', { timeoutMs: 20000, message: 'cell started' });
    const busy = await ex('/code', { method: 'POST', body: { context: { id, language: 'python' }, code: '1' } });
    assert.equal(busy.status, 200);
    assert.equal(busy.headers['content-type'], 'text/event-stream');
    // like execd: the busy error is a bare object, without `type` and without a blank line after it
    const [initText, bare, ...rest] = busy.text.split('\n\n');
    assert.deepEqual(rest, []);
    const init = JSON.parse(initText);
    assert.equal(init.type, 'init');
    assert.equal(init.text, id);
    assert.equal(bare, '{"code":"RUNTIME_ERROR","message":"error running codes session is busy"}');
    const del = await ex(`/code?id=${id}`, { method: 'DELETE' });
    assert.equal(del.status, 200);
    assert.equal(final(await spinning.done).error.ename, 'KeyboardInterrupt');
  });

  it('interrupt: `while True: pass` ends with KeyboardInterrupt and the context keeps its state', async () => {
    const id = await newContext('python');
    assert.deepEqual(await value(id, 'python', 'x = 41'), []);
    const cell = openCell(execd, { context: { id, language: 'python' }, code: "print('spinning', flush=True)\nwhile True: pass" });
    await waitFor(() => texts(cell.events, 'stdout') === 'spinning\n', { timeoutMs: 20000, message: 'cell started' });
    const del = await ex(`/code?id=${id}`, { method: 'DELETE' });
    assert.equal(del.status, 200);
    assert.equal(del.text, '');
    const events = await cell.done;
    assert.deepEqual(events.slice(-2).map((e) => e.type), ['status', 'error']);
    assert.equal(final(events).error.ename, 'KeyboardInterrupt');
    assert.ok(!events.some((e) => e.type === 'execution_complete'));
    assert.deepEqual(await value(id, 'python', 'x + 1'), ['42']);
  });

  it('interrupt: javascript busy loop and bash sleep (also via DELETE /command?id=<context>)', async () => {
    const js = await newContext('javascript');
    await value(js, 'javascript', 'var kept = 7');
    const jsCell = openCell(execd, { context: { id: js, language: 'javascript' }, code: 'console.log("spinning"); while (true) {}' });
    await waitFor(() => texts(jsCell.events, 'stdout') === 'spinning\n', { timeoutMs: 20000, message: 'js cell started' });
    assert.equal((await ex(`/code?id=${js}`, { method: 'DELETE' })).status, 200);
    assert.equal(final(await jsCell.done).error.ename, 'KeyboardInterrupt');
    assert.deepEqual(await value(js, 'javascript', 'kept * 6'), ['42']);

    const sh = await newContext('bash');
    await run(sh, 'bash', 'kept=42');
    const shCell = openCell(execd, { context: { id: sh, language: 'bash' }, code: 'echo sleeping; sleep 30; echo never' });
    await waitFor(() => texts(shCell.events, 'stdout') === 'sleeping\n', { timeoutMs: 20000, message: 'bash cell started' });
    assert.equal((await ex(`/command?id=${sh}`, { method: 'DELETE' })).status, 200);
    const events = await shCell.done;
    assert.equal(final(events).error.ename, 'KeyboardInterrupt');
    assert.ok(!texts(events, 'stdout').includes('never'));
    assert.equal(texts(await run(sh, 'bash', 'echo $kept'), 'stdout'), '42\n');
  });

  it('a client that goes away interrupts its cell; the context becomes free again', async () => {
    const id = await newContext('python');
    await value(id, 'python', 'kept = 42');
    const cell = openCell(execd, { context: { id, language: 'python' }, code: "print('spinning', flush=True)\nwhile True: pass" });
    cell.done.catch(() => {});
    await waitFor(() => texts(cell.events, 'stdout') === 'spinning\n', { timeoutMs: 20000, message: 'cell started' });
    cell.req.destroy();
    const events = await waitFor(async () => {
      const ev = await run(id, 'python', 'kept');
      return final(ev).type === 'execution_complete' && ev;
    }, { timeoutMs: 10000, intervalMs: 100, message: 'context free after the client left' });
    assert.deepEqual(results(events), [{ text: '42' }]);
  });

  it('a cell that redirects or closes the kernel\'s stdout still completes (bash, python)', async () => {
    const sh = await newContext('bash');
    const shEvents = await run(sh, 'bash', 'echo visible; exec >/dev/null; echo hidden');
    assert.equal(texts(shEvents, 'stdout'), 'visible\n');
    assert.equal(final(shEvents).type, 'execution_complete');
    assert.equal(final(await run(sh, 'bash', 'echo still-hidden; echo err-visible >&2')).type, 'execution_complete');
    const py = await newContext('python');
    const pyEvents = await run(py, 'python', "import os, sys\nprint('visible', flush=True)\nos.close(1)\nos.close(2)\n6 * 7");
    assert.equal(texts(pyEvents, 'stdout'), 'visible\n');
    assert.deepEqual(results(pyEvents), [{ text: '42' }]);
  });

  it('unknown context ids and unknown languages get execd errors', async () => {
    const missing = 'f'.repeat(32);
    const get = await ex(`/code/contexts/${missing}`);
    assert.equal(get.status, 404);
    assert.deepEqual(get.json, { code: 'CONTEXT_NOT_FOUND', message: `context ${missing} not found` });
    const del = await ex(`/code/contexts/${missing}`, { method: 'DELETE' });
    assert.equal(del.status, 404);
    assert.equal(del.json.code, 'CONTEXT_NOT_FOUND');
    const runMissing = await ex('/code', { method: 'POST', body: { context: { id: missing, language: 'python' }, code: '1' } });
    assert.equal(runMissing.status, 500);
    assert.deepEqual(runMissing.json, { code: 'RUNTIME_ERROR', message: 'error running codes context not found' });
    const intr = await ex(`/code?id=${missing}`, { method: 'DELETE' });
    assert.equal(intr.status, 500);
    assert.equal(intr.json.code, 'RUNTIME_ERROR');
    const noId = await ex('/code', { method: 'DELETE' });
    assert.equal(noId.status, 400);
    assert.equal(noId.json.code, 'MISSING_QUERY');

    // cwd as upstream: $VAR / ~ expanded (an undefined one fails the create), relative to execd's own cwd (/)
    const undef = await ex('/code/context', { method: 'POST', body: { language: 'bash', cwd: '/tmp/$OSB_NO_SUCH_VAR' } });
    assert.deepEqual({ status: undef.status, json: undef.json }, {
      status: 500, json: { code: 'RUNTIME_ERROR', message: 'error creating code context. path references undefined environment variables: OSB_NO_SUCH_VAR' },
    });
    for (const [cwd, want] of [['tmp/ctx-rel', '/tmp/ctx-rel'], ['$HOME', null]]) {
      const id = await newContext('bash', { cwd });
      const pwd = (await run(id, 'bash', 'pwd')).filter((e) => e.type === 'stdout').map((e) => e.text).join('');
      const home = (await run(id, 'bash', 'echo "$HOME"')).filter((e) => e.type === 'stdout').map((e) => e.text).join('');
      assert.equal(pwd, want ? `${want}\n` : home, cwd);
    }

    const lang = await ex('/code/context', { method: 'POST', body: { language: 'cobol' } });
    assert.equal(lang.status, 500);
    assert.equal(lang.json.code, 'RUNTIME_ERROR');
    assert.match(lang.json.message, /^error creating code context\. .*"cobol"/);
    const runLang = await ex('/code', { method: 'POST', body: { context: { language: 'cobol' }, code: '1' } });
    assert.equal(runLang.status, 500);
    assert.match(runLang.json.message, /"cobol"/);
    const noCode = await ex('/code', { method: 'POST', body: { context: { language: 'python' } } });
    assert.equal(noCode.status, 400);
    assert.equal(noCode.json.code, 'INVALID_REQUEST_BODY');
  });

  it('lists contexts, deletes by id and by language (the kernel process goes away)', async () => {
    const p1 = await newContext('python');
    const p2 = await newContext('python');
    const sh = await newContext('bash');
    const pid = Number((await value(p1, 'python', 'import os\nos.getpid()'))[0]);
    assert.ok(pid > 1);

    const list = (await ex('/code/contexts?language=python')).json;
    assert.ok(list.some((c) => c.id === p1 && c.language === 'python'));
    assert.ok(list.some((c) => c.id === p2));
    assert.ok(!list.some((c) => c.id === sh));
    assert.ok((await ex('/code/contexts')).json.some((c) => c.id === sh && c.language === 'bash'));
    assert.deepEqual((await ex(`/code/contexts/${sh}`)).json, { id: sh, language: 'bash' });

    const del = await ex(`/code/contexts/${p1}`, { method: 'DELETE' });
    assert.equal(del.status, 200);
    assert.equal(del.text, '');
    assert.equal((await ex(`/code/contexts/${p1}`)).status, 404);
    await waitFor(async () => (await sandboxCommand(`test -e /proc/${pid} && echo alive || echo gone`)).text.includes('"text":"gone"'),
      { timeoutMs: 10000, message: 'kernel process of the deleted context exits' });

    assert.equal((await ex('/code/contexts', { method: 'DELETE' })).status, 400);
    assert.equal((await ex('/code/contexts?language=python', { method: 'DELETE' })).status, 200);
    assert.deepEqual((await ex('/code/contexts?language=python')).json, []);
    assert.equal((await ex(`/code/contexts/${sh}`)).status, 200);
    assert.equal((await ex('/code', { method: 'POST', body: { context: { id: p2, language: 'python' }, code: '1' } })).status, 500);
  });

  it('without context.id a per-language default context is created and reused', async () => {
    const first = await run(undefined, 'python', 'default_value = 5');
    assert.equal(final(first).type, 'execution_complete');
    const second = await run(undefined, 'python', 'default_value * 2');
    assert.equal(second[0].text, first[0].text);
    assert.deepEqual(results(second), [{ text: '10' }]);
    assert.ok((await ex('/code/contexts?language=python')).json.some((c) => c.id === first[0].text));
  });

  it('without context.language the code runs as a shell command with /command semantics', async () => {
    const cell = openCell(execd, { code: 'echo a; echo; echo b >&2; printf partial; exit 3' });
    const events = await cell.done;
    assert.equal(events[0].type, 'init');
    assert.deepEqual(events.filter((e) => e.type === 'stdout').map((e) => e.text), ['a', '\n', 'partial']);
    assert.deepEqual(events.filter((e) => e.type === 'stderr').map((e) => e.text), ['b']);
    assert.deepEqual(final(events).error, { ename: 'CommandExecError', evalue: '3', traceback: ['exit status 3'] });
  });

  it('a context runs in its cwd (created when missing)', async () => {
    const id = await newContext('python', { cwd: '/workspace/code-cwd/sub' });
    assert.deepEqual(await value(id, 'python', 'import os\nos.getcwd()'), ["'/workspace/code-cwd/sub'"]);
  });

  it('a matplotlib figure and an object with _repr_png_ come back as image/png results', async () => {
    const id = await newContext('python');
    const plot = await run(id, 'python', 'import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title("t")\nplt.show()');
    assert.equal(final(plot).type, 'execution_complete', JSON.stringify(plot.slice(-2)));
    const [fig] = results(plot);
    assert.equal(fig.text, '<Figure size 640x480 with 1 Axes>');
    assert.deepEqual(Buffer.from(fig['image/png'], 'base64').subarray(0, 8), PNG_SIGNATURE);
    assert.equal(texts(plot, 'stderr'), '');

    const custom = await run(id, 'python', [
      'import struct, zlib',
      'def chunk(t, d): return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))',
      'class Dot:',
      '    def _repr_png_(self):',
      '        ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0)',
      '        return b"\\x89PNG\\r\\n\\x1a\\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\\x00\\x00")) + chunk(b"IEND", b"")',
      '    def __repr__(self): return "<Dot>"',
      'Dot()',
    ].join('\n'));
    const [dot] = results(custom);
    assert.equal(dot.text, '<Dot>');
    assert.deepEqual(Buffer.from(dot['image/png'], 'base64').subarray(0, 8), PNG_SIGNATURE);
  });

  it('megabytes of output are streamed to the end, byte for byte', async () => {
    const id = await newContext('python');
    const events = await run(id, 'python', "import sys\nfor i in range(4096):\n    sys.stdout.write(('%05d' % i) + 'x' * 1018 + '\\n')");
    const out = texts(events, 'stdout');
    assert.equal(out.length, 4096 * 1024);
    assert.ok(out.startsWith('00000xxx'));
    assert.ok(out.endsWith('04095' + 'x'.repeat(1018) + '\n'));
    assert.equal(final(events).type, 'execution_complete');

    const js = await newContext('javascript');
    const jsEvents = await run(js, 'javascript', "process.stdout.write('y'.repeat(3 * 1024 * 1024)); 'end'");
    assert.equal(texts(jsEvents, 'stdout').length, 3 * 1024 * 1024);
    assert.deepEqual(results(jsEvents), [{ text: "'end'" }]);
  });

  it('a kernel that dies ends the cell with an error; the next cell gets a fresh kernel', async () => {
    const id = await newContext('python');
    await value(id, 'python', 'lost = 1');
    const events = await run(id, 'python', "print('bye', flush=True)\nimport os\nos._exit(3)");
    assert.equal(texts(events, 'stdout'), 'bye\n');
    assert.equal(final(events).error.ename, 'DeadKernelError');
    const after = final(await run(id, 'python', 'lost'));
    assert.equal(after.error.ename, 'NameError');
    assert.deepEqual(await value(id, 'python', '6 * 7'), ['42']);
  });
});
