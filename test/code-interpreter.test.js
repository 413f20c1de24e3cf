// The code interpreter client: CodeInterpreter (C core over execd's /code API) and createCodeInterpreterTools
// (Mastra tools), against startServer() with real python3/node/bash kernels in a bubblewrap sandbox. Two tiny raw
// TCP peers inject what the local server cannot produce: a server that never answers (no kernel) and the
// Jupyter-backed ordering where execution_complete arrives before the output.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { execFileSync } from 'node:child_process';
import { Agent } from '@mastra/core/agent';
import { ToolStream } from '@mastra/core/tools';
import { startServer } from '../lib/dev-server/index.js';
import {
  OpenSandboxSandbox,
  OpenSandboxOptionError,
  OpenSandboxStreamError,
  OpenSandboxTimeoutError,
  OpenSandboxTransportError,
  CodeInterpreter,
  OpenSandboxContextNotFoundError,
  createCodeInterpreterTools,
  CODE_INTERPRETER_TOOLS,
} from '../lib/index.js';
import { stats } from '../lib/native.js';
import { waitFor } from './helpers/poll.js';
import { runNodeCode } from './helpers/run-node.js';
import { createScriptedModel } from './helpers/scripted-model.js';

const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
const EXECD_CONNECTION = Symbol.for('mastra-opensandbox.execdConnection');

/** A raw HTTP peer: answers every request with handler(socket, requestText) once the headers and body are in. */
async function rawPeer(handler) {
  const sockets = new Set();
  const server = net.createServer((sock) => {
    sockets.add(sock);
    sock.on('close', () => sockets.delete(sock));
    sock.on('error', () => {});
    let buf = '';
    sock.on('data', (d) => {
      buf += d.toString('latin1');
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      const len = Number(/content-length:\s*(\d+)/i.exec(buf.slice(0, end))?.[1] ?? 0);
      if (buf.length < end + 4 + len) return;
      const text = buf;
      buf = '';
      handler(sock, text);
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    close: () => new Promise((r) => {
      for (const s of sockets) s.destroy();
      server.close(r);
    }),
  };
}

describe('code interpreter client', function () {
  this.timeout(60000);
  let server;
  let sandbox;
  let ci;

  before(async function () {
    server = await startServer({ port: 0 });
    sandbox = new OpenSandboxSandbox({ domain: server.domain });
    await sandbox._start();
    ci = new CodeInterpreter(sandbox[EXECD_CONNECTION]());
  });

  after(async function () {
    await sandbox?._destroy();
    await server?.close();
  });

  const run = (opts, onOutput) => ci.run(opts, onOutput).result;

  describe('CodeInterpreter', () => {
    it('creates, gets, lists and deletes contexts', async () => {
      const py = await ci.createContext({ language: 'python' });
      const js = await ci.createContext({ language: 'javascript' });
      assert.match(py.id, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
      assert.equal(py.language, 'python');
      assert.deepEqual(await ci.getContext(py.id), { id: py.id, language: 'python' });
      const all = await ci.listContexts();
      assert.ok(all.some((c) => c.id === py.id) && all.some((c) => c.id === js.id));
      assert.deepEqual((await ci.listContexts('javascript')).filter((c) => c.id === js.id), [{ id: js.id, language: 'javascript' }]);
      await ci.deleteContext(py.id);
      await assert.rejects(ci.getContext(py.id), (e) => e instanceof OpenSandboxContextNotFoundError && e.status === 404 && e.contextId === py.id);
      await assert.rejects(ci.deleteContext(py.id), OpenSandboxContextNotFoundError);
      await ci.deleteContexts('javascript');
      assert.deepEqual(await ci.listContexts('javascript'), []);
    });

    it('keeps state across runs in one context and not across contexts', async () => {
      const a = await ci.createContext({ language: 'python' });
      const b = await ci.createContext({ language: 'python' });
      const r1 = await run({ code: 'x = 41\nprint("set")', language: 'python', contextId: a.id });
      assert.equal(r1.success, true);
      assert.equal(r1.stdout, 'set\n');
      assert.equal(r1.contextId, a.id);
      assert.equal(r1.executionCount, 1);
      const r2 = await run({ code: 'x + 1', language: 'python', contextId: a.id });
      assert.deepEqual(r2.results, [{ text: '42' }]);
      assert.equal(r2.executionCount, 2);
      assert.equal(r2.completed, true);
      const r3 = await run({ code: 'x + 1', language: 'python', contextId: b.id });
      assert.equal(r3.success, false);
      assert.equal(r3.error.ename, 'NameError');
      assert.equal(r3.error.evalue, "name 'x' is not defined");
      assert.deepEqual(r3.results, []);
    });

    it('errors carry the exception name, message and traceback; stderr is separate', async () => {
      const r = await run({ code: 'import sys\nprint("before")\nprint("warn", file=sys.stderr)\n1/0', language: 'python' });
      assert.equal(r.success, false);
      assert.equal(r.stdout, 'before\n');
      assert.equal(r.stderr, 'warn\n');
      assert.equal(r.error.ename, 'ZeroDivisionError');
      assert.equal(r.error.evalue, 'division by zero');
      assert.equal(r.error.traceback.at(-1), 'ZeroDivisionError: division by zero');
      assert.equal(r.status, 'error');
      assert.match(r.contextId, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/); // the server's default python context
    });

    it('streams output in batches while the cell runs; the result comes at the end of the stream', async () => {
      const ctx = await ci.createContext({ language: 'python' });
      const batches = [];
      const cell = ci.run({
        code: 'import time\nfor i in range(3):\n    print(f"tick {i}", flush=True)\n    time.sleep(0.2)\n"end"',
        language: 'python',
        contextId: ctx.id,
      }, (b) => batches.push(b));
      await waitFor(() => batches.length > 0, { timeoutMs: 10000, message: 'first batch' });
      const r = await cell.result;
      assert.equal(batches.map((b) => b.stdout ?? '').join(''), 'tick 0\ntick 1\ntick 2\n');
      assert.ok(batches.length >= 2, `batches: ${batches.length}`);
      assert.equal(r.stdout, 'tick 0\ntick 1\ntick 2\n');
      assert.deepEqual(r.results, [{ text: "'end'" }]);
    });

    it('interrupt stops `while True: pass` and the context keeps its state', async () => {
      const ctx = await ci.createContext({ language: 'python' });
      await run({ code: 'kept = "yes"', language: 'python', contextId: ctx.id });
      const seen = [];
      const cell = ci.run({ code: 'print("spinning", flush=True)\nwhile True: pass', language: 'python', contextId: ctx.id }, (b) => seen.push(b));
      await waitFor(() => seen.length > 0, { timeoutMs: 10000, message: 'the cell is running' });
      const out = [];
      await new Promise((resolve) => {
        const c2 = ci.run({ code: 'pass', language: 'python', contextId: ctx.id }); // busy: rejects at once
        c2.result.catch((e) => out.push(e)).finally(resolve);
      });
      assert.ok(out[0] instanceof OpenSandboxStreamError, String(out[0]));
      assert.equal(out[0].code, 'RUNTIME_ERROR');
      assert.match(out[0].message, /busy/);
      await cell.interrupt();
      const r = await cell.result;
      assert.equal(r.interrupted, true);
      assert.equal(r.timedOut, false);
      assert.equal(r.error.ename, 'KeyboardInterrupt');
      assert.equal(r.stdout, 'spinning\n');
      assert.deepEqual((await run({ code: 'kept', language: 'python', contextId: ctx.id })).results, [{ text: "'yes'" }]);
      await cell.interrupt(); // after the end: nothing to do, resolves
    });

    it('a cell timeout interrupts the kernel and reports timedOut; the context still works', async () => {
      const ctx = await ci.createContext({ language: 'python' });
      const r = await run({ code: 'import time\ntime.sleep(30)', language: 'python', contextId: ctx.id, timeoutMs: 300 });
      assert.equal(r.timedOut, true);
      assert.equal(r.success, false);
      assert.equal(r.error.ename, 'KeyboardInterrupt');
      assert.ok(r.executionTimeMs < 10000, `took ${r.executionTimeMs} ms`);
      assert.deepEqual((await run({ code: '6 * 7', language: 'python', contextId: ctx.id })).results, [{ text: '42' }]);
    });

    it('bounds output per stream in C, drains the rest and cuts on a character boundary', async () => {
      const ctx = await ci.createContext({ language: 'python' });
      const batches = [];
      const r = await run({
        code: 'import sys\nsys.stdout.write("a" * 3000000)\nsys.stderr.write("é" * 1000)\n"after"',
        language: 'python',
        contextId: ctx.id,
        maxOutputBytes: 1001,
      }, (b) => batches.push(b));
      assert.equal(r.stdout, 'a'.repeat(1001));
      assert.equal(r.stdoutDroppedBytes, 3000000 - 1001);
      assert.equal(r.stdoutTruncated, true);
      assert.equal(r.stderr, 'é'.repeat(500)); // 1000 bytes: the 1001st would split a character
      assert.equal(r.stderrDroppedBytes, 1000);
      assert.equal(r.stderrTruncated, true);
      assert.deepEqual(r.results, [{ text: "'after'" }]); // everything after the output was still read
      assert.equal(batches.map((b) => b.stdout ?? '').join(''), r.stdout); // only kept bytes are forwarded
      const small = await run({ code: 'print("ok")', language: 'python', contextId: ctx.id, maxOutputBytes: 1001 });
      assert.equal(small.stdout, 'ok\n');
      assert.equal(small.stdoutTruncated, false);
    });

    it('returns a plot as an image/png result, and bounds result bytes', async () => {
      const ctx = await ci.createContext({ language: 'python' });
      const code = 'import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()';
      const r = await run({ code, language: 'python', contextId: ctx.id });
      assert.equal(r.success, true);
      assert.equal(r.results.length, 1);
      assert.match(r.results[0].text, /^<Figure size \d+x\d+ with 1 Axes>$/);
      assert.deepEqual(Buffer.from(r.results[0]['image/png'], 'base64').subarray(0, 8), PNG_SIGNATURE);
      const small = await run({ code, language: 'python', contextId: ctx.id, maxResultBytes: 100 });
      assert.deepEqual(small.results, []);
      assert.equal(small.resultsDropped, 1);
      assert.equal(small.resultsTruncated, true);
    });

    it('runs javascript and bash contexts with their own state', async () => {
      const js = await ci.createContext({ language: 'javascript' });
      await run({ code: 'globalThis.n = 20', language: 'javascript', contextId: js.id });
      assert.deepEqual((await run({ code: 'n + 22', language: 'javascript', contextId: js.id })).results, [{ text: '42' }]);
      const sh = await ci.createContext({ language: 'bash' });
      await run({ code: 'V=hello', language: 'bash', contextId: sh.id });
      assert.equal((await run({ code: 'echo "$V"', language: 'bash', contextId: sh.id })).stdout, 'hello\n');
      const failed = await run({ code: 'false', language: 'bash', contextId: sh.id });
      assert.deepEqual([failed.error.ename, failed.error.evalue], ['CommandExecError', '1']);
    });

    it('an unknown context id is a typed error on run (500) and on get/delete (404)', async () => {
      await assert.rejects(run({ code: '1', language: 'python', contextId: 'f'.repeat(32) }),
        (e) => e instanceof OpenSandboxContextNotFoundError && e.status === 500 && e.contextId === 'f'.repeat(32));
      await assert.rejects(ci.interrupt('f'.repeat(32)), (e) => e.status === 500);
    });

    it('rejects bad input before any request', () => {
      assert.throws(() => ci.run({ code: '', language: 'python' }), OpenSandboxOptionError);
      assert.throws(() => ci.run({ code: '1' }), OpenSandboxOptionError);
      assert.throws(() => ci.run({ code: '1', language: 'python', timeoutMs: -1 }), OpenSandboxOptionError);
      assert.throws(() => ci.run({ code: '1', language: 'python', maxOutputBytes: 'x' }), OpenSandboxOptionError);
      assert.throws(() => new CodeInterpreter({ baseUrl: 'ftp://x' }), OpenSandboxOptionError);
      assert.throws(() => new CodeInterpreter({ baseUrl: 'http://x', headers: { 'OPEN-SANDBOX-API-KEY': 'k' } }), OpenSandboxOptionError);
    });

    it('a process exiting with a cell in flight, or after an idle client, exits cleanly', async () => {
      const lib = new URL('../lib/code-interpreter.js', import.meta.url).href;
      const script = (body) => `import { CodeInterpreter } from ${JSON.stringify(lib)};
        const ci = new CodeInterpreter(${JSON.stringify(sandbox[EXECD_CONNECTION]())});
        ${body}`;
      const runNode = (code) => runNodeCode(code, { timeoutMs: 20000 });
      const idle = await runNode(script("const r = await ci.run({ code: '40 + 2', language: 'python' }).result; console.log(r.results[0].text);"));
      assert.deepEqual([idle.code, idle.signal, idle.out.trim()], [0, null, '42']);
      const busy = await runNode(script("ci.run({ code: 'echo up; sleep 20', language: 'bash' }, () => process.exit(7));"));
      assert.deepEqual([busy.code, busy.signal, busy.out], [7, null, '']);
    });

    it('works in worker_threads; terminating a worker with a cell in flight leaves the main thread usable', async () => {
      const { Worker } = await import('node:worker_threads');
      const lib = new URL('../lib/code-interpreter.js', import.meta.url).href;
      const code = `const { parentPort } = require('node:worker_threads');
        (async () => {
          const { CodeInterpreter } = await import(${JSON.stringify(lib)});
          const ci = new CodeInterpreter(${JSON.stringify(sandbox[EXECD_CONNECTION]())});
          const ctx = await ci.createContext({ language: 'python' });
          const r = await ci.run({ code: 'print("from-worker")', language: 'python', contextId: ctx.id }).result;
          ci.run({ code: 'import time\\ntime.sleep(20)', language: 'python', contextId: ctx.id });
          parentPort.postMessage(r.stdout);
        })();`;
      const w = new Worker(code, { eval: true });
      const msg = await new Promise((resolve, reject) => { w.once('message', resolve); w.once('error', reject); });
      assert.equal(msg, 'from-worker\n');
      assert.equal(await w.terminate(), 1);
      assert.deepEqual((await run({ code: '2 + 2', language: 'python' })).results, [{ text: '4' }]);
    });

    it('speaks https with caFile (a TLS-terminating proxy in front of execd); an untrusted certificate is a transport error', async () => {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'osb-code-tls-'));
      const caFile = path.join(dir, 'cert.pem');
      execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
        '-keyout', path.join(dir, 'key.pem'), '-out', caFile, '-days', '1', '-subj', '/CN=127.0.0.1',
        '-addext', 'subjectAltName=IP:127.0.0.1'], { stdio: 'ignore' });
      const conn = sandbox[EXECD_CONNECTION]();
      const plain = new URL(conn.baseUrl);
      const sockets = new Set();
      const proxy = tls.createServer({ key: fs.readFileSync(path.join(dir, 'key.pem')), cert: fs.readFileSync(caFile) }, (s) => {
        const up = net.connect(Number(plain.port), plain.hostname);
        sockets.add(s);
        s.on('close', () => sockets.delete(s));
        s.on('error', () => up.destroy());
        up.on('error', () => s.destroy());
        s.pipe(up).pipe(s);
      });
      await new Promise((r) => proxy.listen(0, '127.0.0.1', r));
      try {
        const baseUrl = `https://127.0.0.1:${proxy.address().port}${plain.pathname.replace(/\/$/, '')}`;
        const secure = new CodeInterpreter({ ...conn, baseUrl, caFile });
        const ctx = await secure.createContext({ language: 'python' });
        const r = await secure.run({ code: 'print("over tls")\n6 * 7', language: 'python', contextId: ctx.id }).result;
        assert.deepEqual([r.stdout, r.results], ['over tls\n', [{ text: '42' }]]);
        await secure.deleteContext(ctx.id);
        const untrusted = new CodeInterpreter({ ...conn, baseUrl });
        await assert.rejects(untrusted.listContexts(), (e) => e.kind === 'transport' && /certificate/i.test(e.message));
        assert.throws(() => new CodeInterpreter({ ...conn, caFile: path.join(dir, 'missing.pem') }), /caFile/);
      } finally {
        for (const s of sockets) s.destroy();
        await new Promise((r) => proxy.close(r));
        fs.rmSync(dir, { recursive: true, force: true });
      }
    });

    it('a server that never answers fails the cell at the idle deadline, and a plain call at its timeout', async () => {
      const peer = await rawPeer(() => {}); // accepts, reads, never answers (like execd retrying for a kernel)
      try {
        const slow = new CodeInterpreter({ baseUrl: peer.url, requestTimeoutMs: 400, idleTimeoutMs: 400 });
        await assert.rejects(slow.run({ code: '1', language: 'python' }).result,
          (e) => e instanceof OpenSandboxTimeoutError && e.code === 'STREAM_IDLE' && /sent nothing for 400 ms/.test(e.message));
        await assert.rejects(slow.createContext({ language: 'python' }), (e) => e instanceof OpenSandboxTimeoutError && e.code === 'TIMEOUT');
      } finally {
        await peer.close();
      }
    });

    it('waits for the end of the stream: output after execution_complete (Jupyter ordering) is kept', async () => {
      const ev = (o) => `${JSON.stringify(o)}\n\n`;
      const peer = await rawPeer((sock) => {
        sock.write('HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n');
        const chunk = (s) => sock.write(`${Buffer.byteLength(s).toString(16)}\r\n${s}\r\n`);
        chunk(ev({ type: 'init', text: 'ctx1' }) + ev({ type: 'execution_complete', execution_time: 5 }));
        setImmediate(() => {
          chunk(ev({ type: 'stdout', text: 'late\n' }) + ev({ type: 'result', results: { text: '42' } }) + ev({ type: 'execution_count', execution_count: 7 }));
          sock.end('0\r\n\r\n');
        });
      });
      try {
        const quirky = new CodeInterpreter({ baseUrl: peer.url });
        const r = await quirky.run({ code: 'x', language: 'python', contextId: 'ctx1' }).result;
        assert.equal(r.stdout, 'late\n');
        assert.deepEqual(r.results, [{ text: '42' }]);
        assert.equal(r.executionCount, 7);
        assert.equal(r.executionTimeMs, 5);
        assert.equal(r.completed, true);
        assert.equal(r.success, true);
      } finally {
        await peer.close();
      }
    });
    it('an event larger than the parser bound (maxEventBytes) keeps the start of its text and counts the rest; larger results are counted', async () => {
      const ctx = await ci.createContext({ language: 'python' });
      const code = 'import sys\nprint("o" * 300000)\nsys.stderr.write("\\u00e9" * 100000)\nsys.stderr.flush()\n"r" * 200000';
      const r = await run({ code, language: 'python', contextId: ctx.id, maxEventBytes: 65536, maxOutputBytes: -1 });
      assert.equal(r.success, true);
      assert.ok(r.stdout.length > 60000 && r.stdout.length < 65536, `kept ${r.stdout.length}`);
      assert.equal(r.stdout, 'o'.repeat(r.stdout.length));
      assert.equal(r.stdout.length + r.stdoutDroppedBytes, 300001); // the '\n' of print is counted too
      assert.equal(r.stdoutTruncated, true);
      assert.equal(r.stderr, 'é'.repeat(r.stderr.length)); // cut on a character boundary
      assert.equal(Buffer.byteLength(r.stderr) + r.stderrDroppedBytes, 200000);
      assert.deepEqual(r.results, []);
      assert.equal(r.resultsDropped, 1);
      assert.equal(r.resultsTruncated, true);
      assert.throws(() => ci.run({ code: '1', language: 'python', maxEventBytes: 10 }), /maxEventBytes/);
    });

    it("Jupyter's IOPub rate-limit notice (its server dropped the stream) marks the output truncated", async () => {
      // notebook 6.4 / jupyter_server send this on stderr INSTEAD of stream messages over iopub_data_rate_limit (1 MB/s
      // over 3 s by default): a 3 MB print reaches execd as this notice only
      const notice = 'IOPub data rate exceeded.\nThe notebook server will temporarily stop sending output\nto the client in order to avoid crashing it.\n' +
        'To change this limit, set the config variable\n`--NotebookApp.iopub_data_rate_limit`.\n\nCurrent values:\n' +
        'NotebookApp.iopub_data_rate_limit=1000000.0 (bytes/sec)\nNotebookApp.rate_limit_window=3.0 (secs)\n\n';
      const ev = (o) => `${JSON.stringify(o)}\n\n`;
      const peer = await rawPeer((sock) => {
        sock.write('HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n');
        const chunk = (x) => sock.write(`${Buffer.byteLength(x).toString(16)}\r\n${x}\r\n`);
        chunk(ev({ type: 'init', text: 'ctx1' }) + ev({ type: 'stderr', text: notice }) + ev({ type: 'execution_count', execution_count: 3 }) +
          ev({ type: 'execution_complete', execution_time: 150 }));
        sock.end('0\r\n\r\n');
      });
      try {
        const jupyter = new CodeInterpreter({ baseUrl: peer.url });
        const r = await jupyter.run({ code: "print('x' * 3_000_000)", language: 'python', contextId: 'ctx1' }).result;
        assert.equal(r.stdout, '');
        assert.equal(r.outputRateLimited, true);
        assert.equal(r.stdoutTruncated, true);
        assert.equal(r.stderrTruncated, true);
        assert.equal(r.stdoutDroppedBytes, 0); // what Jupyter dropped is not known to execd or to us
        assert.equal(r.success, true);
        const plain = await run({ code: 'print("IOPub data rate exceeded. (just text)")', language: 'python' });
        assert.equal(plain.outputRateLimited, false); // only on stderr, where Jupyter puts it
      } finally {
        await peer.close();
      }
    });

    it('a stream that ends after init without the end of the cell is a typed transport error, not a success', async () => {
      // what a sandbox deleted under a running cell can look like on the real execd: the response ends cleanly
      const peer = await rawPeer((sock) => {
        sock.write('HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n');
        const x = '{"type":"init","text":"ctx1"}\n\n{"type":"ping","text":"pong"}\n\n';
        sock.end(`${Buffer.byteLength(x).toString(16)}\r\n${x}\r\n0\r\n\r\n`);
      });
      try {
        const cut = new CodeInterpreter({ baseUrl: peer.url });
        await assert.rejects(cut.run({ code: '6 * 7', language: 'python', contextId: 'ctx1' }).result, (e) => {
          assert.ok(e instanceof OpenSandboxTransportError, String(e));
          assert.equal(e.code, 'CODE_STREAM_CUT');
          assert.match(e.message, /ended before the cell reported its end/);
          return true;
        });
      } finally {
        await peer.close();
      }
    });
  });

  describe('createCodeInterpreterTools', () => {
    it('validates its options', () => {
      assert.throws(() => createCodeInterpreterTools({}), /must be an OpenSandboxSandbox/);
      assert.throws(() => createCodeInterpreterTools(sandbox, { languages: ['cobol'] }), /unknown language "cobol"; supported: python, bash/);
      assert.throws(() => createCodeInterpreterTools(sandbox, { languages: ['python'], defaultLanguage: 'bash' }), OpenSandboxOptionError);
      assert.throws(() => createCodeInterpreterTools(sandbox, { requireApproval: { runCodes: true } }), /unknown tool/);
      assert.throws(() => createCodeInterpreterTools(sandbox, { timeoutMs: -5 }), OpenSandboxOptionError);
    });

    it('offers four tools with zod schemas and per-tool approval', () => {
      const tools = createCodeInterpreterTools(sandbox, { requireApproval: { runCode: true } });
      assert.deepEqual(Object.keys(tools), Object.values(CODE_INTERPRETER_TOOLS));
      assert.equal(tools.run_code.requireApproval, true);
      assert.equal(tools.list_code_contexts.requireApproval, false);
      assert.equal(createCodeInterpreterTools(sandbox, { requireApproval: true }).delete_code_context.requireApproval, true);
      assert.equal(tools.run_code.inputSchema.safeParse({ code: 'x', language: 'cobol' }).success, false);
      assert.equal(tools.run_code.inputSchema.safeParse({ code: 'x', language: 'bash' }).success, true);
    });

    it('run_code reuses a default context per language, compacts the result and reports the full one', async () => {
      const full = [];
      const tools = createCodeInterpreterTools(sandbox, { onResult: (entry) => full.push(entry), tracebackLines: 2 });
      const a = await tools.run_code.execute({ code: 'x = 41' }, {});
      const b = await tools.run_code.execute({ code: 'print("p")\nx + 1', language: 'python' }, {});
      assert.equal(a.contextId, b.contextId);
      assert.equal(b.result, '42');
      assert.equal(b.stdout, 'p\n');
      assert.equal(b.success, true);
      assert.equal(b.error, null);
      const js = await tools.run_code.execute({ code: '[1, 2].length', language: 'javascript' }, {});
      assert.notEqual(js.contextId, a.contextId);
      assert.equal(js.result, '2');
      const err = await tools.run_code.execute({ code: 'def f():\n    raise ValueError("bad")\nf()' }, {});
      assert.equal(err.success, false);
      assert.deepEqual(err.error, { name: 'ValueError', message: 'bad', traceback: '    raise ValueError("bad")\nValueError: bad' });
      const plot = await tools.run_code.execute({ code: 'import matplotlib.pyplot as plt\nplt.plot([0, 1])\nplt.show()' }, {});
      assert.deepEqual(plot.richOutputs, ['image/png']);
      assert.equal(full.length, 5);
      assert.equal(full[4].contextId, a.contextId);
      assert.deepEqual(Buffer.from(full[4].result.results[0]['image/png'], 'base64').subarray(0, 8), PNG_SIGNATURE);
      assert.equal(full[3].result.error.ename, 'ValueError');
    });

    it('parallel calls on one context wait their turn instead of failing busy', async () => {
      const tools = createCodeInterpreterTools(sandbox);
      const cells = ['import time\ntime.sleep(0.3)\na = 1', 'import time\ntime.sleep(0.3)\nb = 2', 'c = 3'];
      const outs = await Promise.all(cells.map((code) => tools.run_code.execute({ code }, {})));
      assert.deepEqual(outs.map((r) => r.success), [true, true, true]);
      assert.equal(new Set(outs.map((r) => r.contextId)).size, 1);
      assert.equal((await tools.run_code.execute({ code: 'a + b + c' }, {})).result, '6');
      const ac = new AbortController();
      ac.abort();
      await assert.rejects(tools.run_code.execute({ code: '1' }, { abortSignal: ac.signal }), /aborted before the cell started/);
    });

    it('clips output for the model and keeps flags; limits come from the options', async () => {
      const full = [];
      const tools = createCodeInterpreterTools(sandbox, { maxOutputBytes: 5000, maxModelOutputChars: 100, onResult: (e) => full.push(e) });
      const r = await tools.run_code.execute({ code: 'print("z" * 200000)' }, {});
      assert.equal(r.stdoutTruncated, true);
      assert.equal(r.stdout, `${'z'.repeat(100)}\n[... 4900 more characters not shown]`);
      assert.equal(full[0].result.stdout.length, 5000);
      assert.equal(full[0].result.stdoutDroppedBytes, 200001 - 5000);
    });

    it('a 3 MB print, stderr and result with the default limits: the start of each, marked truncated, the dropped bytes counted', async () => {
      const full = [];
      const tools = createCodeInterpreterTools(sandbox, { onResult: (e) => full.push(e.result) });
      const out = await tools.run_code.execute({ code: "print('x' * 3_000_000)" }, {});
      assert.equal(out.success, true);
      assert.equal(out.stdout, `${'x'.repeat(8000)}\n[... ${1048576 - 8000} more characters not shown]`);
      assert.equal(out.stdoutTruncated, true);
      assert.equal(out.outputRateLimited, false);
      assert.equal(full[0].stdout, 'x'.repeat(1048576));
      assert.equal(full[0].stdoutDroppedBytes, 3000001 - 1048576);
      const err = await tools.run_code.execute({ code: "import sys\nsys.stderr.write('y' * 3_000_000)" }, {});
      assert.equal(err.stderrTruncated, true);
      assert.equal(full[1].stderr.length + full[1].stderrDroppedBytes, 3000000);
      const res = await tools.run_code.execute({ code: "'z' * 3_000_000" }, {});
      assert.equal(res.resultsTruncated, true); // clipped for the model
      assert.equal(res.result.length, 8000 + `\n[... ${3000002 - 8000} more characters not shown]`.length);
      assert.equal(full[2].results[0].text.length, 3000002); // repr() quotes: the whole bundle is kept (maxResultBytes 8 MiB)
    });

    it('unknown language: a clear error before any request; unknown context: a typed error', async () => {
      const fresh = new OpenSandboxSandbox({ domain: server.domain });
      const tools = createCodeInterpreterTools(fresh, { languages: ['python', 'bash'] });
      const bad = await tools.run_code.execute({ code: '1', language: 'javascript' }, {}); // Mastra validates the zod input
      assert.equal(bad.error, true);
      assert.match(bad.message, /language: Invalid option: expected one of "python"\|"bash"/);
      assert.equal(fresh.status, 'pending'); // nothing was started
      const live = createCodeInterpreterTools(sandbox);
      await assert.rejects(live.run_code.execute({ code: '1', contextId: 'e'.repeat(32) }, {}), OpenSandboxContextNotFoundError);
      await assert.rejects(live.delete_code_context.execute({ contextId: 'e'.repeat(32) }, {}), OpenSandboxContextNotFoundError);
    });

    it('create_code_context: a relative cwd resolves against the working directory, a cwd with "$" is refused', async () => {
      await sandbox.executeCommand('mkdir -p ci-sub');
      const tools = createCodeInterpreterTools(sandbox);
      const created = await tools.create_code_context.execute({ language: 'bash', cwd: 'ci-sub' }, {});
      assert.equal((await tools.run_code.execute({ code: 'pwd', contextId: created.contextId }, {})).stdout, '/workspace/ci-sub\n');
      await assert.rejects(tools.create_code_context.execute({ language: 'bash', cwd: '$HOME' }, {}), (e) => e instanceof OpenSandboxOptionError && e.option === 'cwd');
      assert.throws(() => createCodeInterpreterTools(sandbox, { cwd: '~/$X' }), (e) => e instanceof OpenSandboxOptionError && e.option === 'cwd');
      await tools.delete_code_context.execute({ contextId: created.contextId }, {});
    });

    it('creates, lists and deletes contexts; a deleted default context is replaced', async () => {
      const tools = createCodeInterpreterTools(sandbox);
      const created = await tools.create_code_context.execute({ language: 'bash' }, {});
      assert.equal(created.language, 'bash');
      await tools.run_code.execute({ code: 'Y=7', contextId: created.contextId }, {});
      const y = await tools.run_code.execute({ code: 'echo $Y', contextId: created.contextId }, {});
      assert.equal(y.stdout, '7\n');
      assert.equal(y.language, 'bash'); // learned from the context
      const def = await tools.run_code.execute({ code: 'z = 1' }, {});
      const listed = await tools.list_code_contexts.execute({}, {});
      assert.deepEqual(listed.contexts.find((c) => c.contextId === created.contextId), { contextId: created.contextId, language: 'bash', isDefault: false });
      assert.deepEqual(listed.contexts.find((c) => c.contextId === def.contextId), { contextId: def.contextId, language: 'python', isDefault: true });
      assert.deepEqual(await tools.delete_code_context.execute({ contextId: def.contextId }, {}), { contextId: def.contextId, deleted: true });
      const again = await tools.run_code.execute({ code: "'z' in globals()" }, {});
      assert.notEqual(again.contextId, def.contextId);
      assert.equal(again.result, 'False');
      await ci.deleteContext(again.contextId); // behind the tools' back: the next run makes a new default context
      const third = await tools.run_code.execute({ code: '3' }, {});
      assert.equal(third.result, '3');
      assert.notEqual(third.contextId, again.contextId);
    });

    it('streams through the tool writer and interrupts the cell when the call is aborted', async () => {
      const tools = createCodeInterpreterTools(sandbox);
      const chunks = [];
      const ac = new AbortController();
      const writer = new ToolStream({ prefix: 'tool', callId: 'call-1', name: 'run_code', runId: 'run-1' }, async (chunk) => {
        chunks.push(chunk);
        if (chunk.type === 'data-code-stdout') ac.abort();
      });
      const r = await tools.run_code.execute({ code: 'print("spin", flush=True)\nwhile True: pass' },
        { writer, abortSignal: ac.signal, agent: { toolCallId: 'call-1' } });
      assert.equal(r.interrupted, true);
      assert.equal(r.success, false);
      assert.equal(r.error.name, 'KeyboardInterrupt');
      assert.equal(r.stdout, 'spin\n');
      // print() writes "spin" and "\n" separately: one chunk or two, as the batches fall; together exactly the output
      assert.equal(chunks.map((c) => c.data.output).join(''), 'spin\n');
      assert.deepEqual([...new Set(chunks.map((c) => `${c.type} ${c.data.toolCallId} ${c.transient}`))], ['data-code-stdout call-1 true']);
      assert.equal((await tools.run_code.execute({ code: '1 + 1' }, {})).result, '2'); // the context still works
    });

    it('a real Agent keeps state across tool calls and streams output through the tool writer', async () => {
      const tools = createCodeInterpreterTools(sandbox);
      const model = createScriptedModel([
        { toolCall: { toolName: 'run_code', input: { code: 'x = 41\nprint("defined")' } } },
        { toolCall: { toolName: 'run_code', input: { code: 'x + 1' } } },
        (ctx) => ({ text: `the answer is ${JSON.parse(ctx.lastToolResult).result}` }),
      ]);
      const agent = new Agent({ id: 'code-agent', name: 'code agent', instructions: 'Use the code interpreter.', model, tools });
      const out = await agent.stream('Compute.', { maxSteps: 4 });
      const stdout = [];
      for await (const chunk of out.fullStream) {
        if (chunk.type === 'data-code-stdout') stdout.push(chunk.data.output);
      }
      assert.equal(await out.text, 'the answer is 42');
      assert.equal(stdout.join(''), 'defined\n'); // print() writes "defined" and "\n" separately: one chunk or two
      const offered = (model.calls[0].tools ?? []).map((t) => t.name).sort();
      assert.deepEqual(offered, Object.values(CODE_INTERPRETER_TOOLS).sort());
    });
  });

  describe('through an endpoint with a path prefix, routing headers and an execd access token', () => {
    const TOKEN = `code-token-${process.pid}-${Date.now()}`;
    let proxied;
    let psandbox;

    before(async function () {
      proxied = await startServer({ port: 0, execdEndpoint: 'proxy', endpointHeaders: true, execdAccessToken: TOKEN });
      psandbox = new OpenSandboxSandbox({ domain: proxied.domain, execdAccessToken: TOKEN });
    });

    after(async function () {
      await psandbox?._destroy().catch(() => {});
      await proxied?.close();
    });

    it('sends the headers on every request; state survives a stop/start; a wrong token is a typed 401 without the token', async () => {
      const tools = createCodeInterpreterTools(psandbox, { timeoutMs: 500 });
      const a = await tools.run_code.execute({ code: 'x = 41' }, {}); // starts the sandbox lazily
      assert.equal(a.success, true);
      assert.match(psandbox.opensandbox.execdUrl, /\/proxy\/44772$/);
      const conn = psandbox[EXECD_CONNECTION]();
      assert.deepEqual(Object.keys(conn.headers).sort(), ['OpenSandbox-Ingress-To', 'OpenSandbox-Secure-Access', 'X-EXECD-ACCESS-TOKEN']);
      const timed = await tools.run_code.execute({ code: 'import time\ntime.sleep(30)' }, {}); // interrupt via DELETE /code
      assert.deepEqual([timed.timedOut, timed.error?.name], [true, 'KeyboardInterrupt']);
      await psandbox._stop();
      const b = await tools.run_code.execute({ code: 'x + 1' }, {});
      assert.equal(b.result, '42');
      assert.equal(b.contextId, a.contextId);
      const wrong = new CodeInterpreter({ ...conn, headers: { ...conn.headers, 'X-EXECD-ACCESS-TOKEN': `wrong-${TOKEN}` } });
      // (a GET: the local server's proxy can answer 502 when execd refuses a POST before reading its body)
      await assert.rejects(wrong.listContexts(), (e) => {
        assert.equal(e.status, 401);
        assert.match(e.message, /Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN/);
        assert.ok(!e.message.includes(TOKEN), 'token leaked');
        return true;
      });
    });
  });

  describe('afterwards', () => {
    it('leaves no requests, operations or promises behind', async () => {
      const idle = () => {
        const s = stats();
        return s.requestsInFlight === 0 && s.operations === 0 && s.pendingPromises === 0;
      };
      await waitFor(idle, { timeoutMs: 10000, message: 'native stats back to idle' }).catch((e) => {
        throw new Error(`${e.message}: ${JSON.stringify(stats())}`);
      });
    });
  });
});
