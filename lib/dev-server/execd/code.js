// execd route module: the code interpreter (`/code` API) with real persistent interpreters, one kernel
// process per context (python3, node, interactive bash; see code-kernel.js).
//   POST   /code/context            {"language","cwd"} -> {"id","language"[,"cwd"]}
//   GET    /code/contexts[?language=]  -> [{"id","language"}]     GET /code/contexts/{id} -> {"id","language"} | 404
//   DELETE /code/contexts/{id}       -> 200 | 404                DELETE /code/contexts?language=x -> 200
//   POST   /code  {"context":{"id","language"},"code"}  -> event stream (framing of /command)
//   DELETE /code?id=<context or shell-run id>             -> interrupt (SIGINT to the kernel's process group)
// Status codes and messages follow the real execd's controller (codeinterpreting.go).
import fs from 'node:fs';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import { HttpError, backpressure, decodeSegment, goJson, guard, openEventStream, readJson, sendEmpty, sendJson } from './http.js';
import { Kernel, SUPPORTED_LANGUAGES } from './code-kernel.js';
import { runShell } from './code-shell.js';
import { mkdirpSync } from './mkdirp.js';
import { expandPath } from './files-paths.js';

const PING_INTERVAL_MS = 3000;

/** Event with the field order of execd's Go struct; `timestamp` added. */
function eventJson(ev) {
  const out = { type: ev.type };
  if (ev.text !== undefined) out.text = ev.text;
  if (ev.execution_count) out.execution_count = ev.execution_count;
  if (ev.execution_time) out.execution_time = ev.execution_time;
  out.timestamp = Date.now();
  if (ev.results !== undefined) out.results = ev.results;
  if (ev.error !== undefined) out.error = ev.error;
  return goJson(out) + '\n\n';
}

/** A MIME bundle as execd forwards it: `text/plain` renamed to `text`. */
function renameBundle(data) {
  const out = {};
  for (const [k, v] of Object.entries(data ?? {})) out[k === 'text/plain' ? 'text' : k] = v;
  return out;
}

export function createRoutes(ctx) {
  /** id -> { id, language, cwd, kernel, count, running, deleted } */
  const contexts = new Map();
  /** language -> id of its default context, or a Promise of it while being created */
  const defaults = new Map();
  /** id -> runShell handle (code run without a language) */
  const shellRuns = new Map();
  const streams = new Set();

  function env() {
    return { ...process.env };
  }

  function defaultCwd() {
    try {
      if (ctx.workspace && fs.statSync(ctx.workspace).isDirectory()) return ctx.workspace;
    } catch { /* fall through */ }
    return process.cwd();
  }

  async function createContext(language, cwd) {
    if (!SUPPORTED_LANGUAGES.includes(language)) {
      throw new Error(`no kernel found for language ${JSON.stringify(language ?? '')} (supported: ${SUPPORTED_LANGUAGES.join(', ')})`);
    }
    // like upstream: $VAR and a leading ~ expanded (an undefined variable fails the create), created if missing;
    // a relative cwd is relative to execd's own working directory
    const dir = cwd ? path.resolve(expandPath(cwd)) : defaultCwd();
    mkdirpSync(dir);
    const kernel = await Kernel.start(language, dir, env());
    const c = { id: randomUUID(), language, cwd: cwd || '', dir, kernel, count: 0, running: false, deleted: false };
    contexts.set(c.id, c);
    return c;
  }

  /** The per-language default context used when POST /code names no context id. */
  async function defaultContext(language) {
    let entry = defaults.get(language);
    if (entry === undefined) {
      entry = createContext(language, '').then((c) => {
        defaults.set(language, c.id);
        return c.id;
      }, (err) => {
        defaults.delete(language);
        throw err;
      });
      defaults.set(language, entry);
    }
    return contexts.get(await entry);
  }

  function deleteContext(c) {
    c.deleted = true;
    contexts.delete(c.id);
    if (defaults.get(c.language) === c.id) defaults.delete(c.language);
    c.kernel.kill();
  }

  function publicContext(c) {
    return { id: c.id, language: c.language };
  }

  // ---- routes -------------------------------------------------------------------------------------------

  async function postContext(req, res) {
    const body = await readJson(req);
    if (body === null || typeof body !== 'object' || Array.isArray(body)) {
      throw new HttpError(400, 'INVALID_REQUEST_BODY', 'error parsing request, MAYBE invalid body format. expected a JSON object');
    }
    const language = body.language ?? '';
    const cwd = body.cwd ?? '';
    if (typeof language !== 'string' || typeof cwd !== 'string') {
      throw new HttpError(400, 'INVALID_REQUEST_BODY', 'error parsing request, MAYBE invalid body format. language and cwd must be strings');
    }
    let c;
    try {
      c = await createContext(language, cwd);
    } catch (err) {
      throw new HttpError(500, 'RUNTIME_ERROR', `error creating code context. ${err.message}`);
    }
    const out = { id: c.id, language: c.language };
    if (cwd) out.cwd = cwd;
    sendJson(res, 200, out);
  }

  function listContexts(res, url) {
    const language = url.searchParams.get('language') ?? '';
    const list = [...contexts.values()].filter((c) => !language || c.language === language).map(publicContext);
    sendJson(res, 200, list);
  }

  function getContext(res, id) {
    const c = contexts.get(id);
    if (!c) throw new HttpError(404, 'CONTEXT_NOT_FOUND', `context ${id} not found`);
    sendJson(res, 200, publicContext(c));
  }

  function deleteOne(res, id) {
    const c = contexts.get(id);
    if (!c) throw new HttpError(404, 'CONTEXT_NOT_FOUND', `context ${id} not found`);
    deleteContext(c);
    sendEmpty(res);
  }

  function deleteByLanguage(res, url) {
    const language = url.searchParams.get('language');
    if (!language) throw new HttpError(400, 'MISSING_QUERY', "missing query parameter 'language'");
    for (const c of [...contexts.values()]) {
      if (c.language === language) deleteContext(c);
    }
    sendEmpty(res);
  }

  /** Interrupts a context's running cell (200 when idle too) or a shell run; false when the id is unknown. */
  async function interruptId(id) {
    const c = contexts.get(id);
    if (c) {
      if (c.kernel.busy) c.kernel.interrupt();
      return true;
    }
    const run = shellRuns.get(id);
    if (run) {
      await run.interrupt();
      return true;
    }
    return false;
  }

  async function interrupt(res, url) {
    const id = url.searchParams.get('id');
    if (!id) throw new HttpError(400, 'MISSING_QUERY', "missing query parameter 'id'");
    if (!(await interruptId(id))) {
      throw new HttpError(500, 'RUNTIME_ERROR', 'error interruptting code context. no such session');
    }
    sendEmpty(res);
  }

  // ---- POST /code ---------------------------------------------------------------------------------------

  function openStream(res) {
    openEventStream(res, streams);
    /** false when the client's buffer is full */
    const write = (ev) => (res.destroyed || res.writableEnded ? true : res.write(eventJson(ev)));
    const pinger = setInterval(() => res.writableNeedDrain || write({ type: 'ping', text: 'pong' }), PING_INTERVAL_MS);
    const end = () => {
      clearInterval(pinger);
      if (!res.destroyed && !res.writableEnded) res.end();
    };
    res.on('close', () => clearInterval(pinger));
    return { write, end };
  }

  async function runCode(req, res) {
    const body = await readJson(req);
    if (body === null || typeof body !== 'object' || Array.isArray(body)) {
      throw new HttpError(400, 'INVALID_REQUEST_BODY', 'error parsing request, MAYBE invalid body format. expected a JSON object');
    }
    if (typeof body.code !== 'string' || body.code === '') {
      throw new HttpError(400, 'INVALID_REQUEST_BODY', "invalid request, validation error Key: 'RunCodeRequest.Code' Error:Field validation for 'Code' failed on the 'required' tag");
    }
    const spec = body.context ?? {};
    if (typeof spec !== 'object' || Array.isArray(spec)) {
      throw new HttpError(400, 'INVALID_REQUEST_BODY', 'error parsing request, MAYBE invalid body format. context must be an object');
    }
    if (!spec.language) return runWithoutLanguage(res, body.code);

    let c;
    if (spec.id) {
      c = contexts.get(String(spec.id));
      if (!c) throw new HttpError(500, 'RUNTIME_ERROR', 'error running codes context not found');
    } else {
      try {
        c = await defaultContext(String(spec.language));
      } catch (err) {
        throw new HttpError(500, 'RUNTIME_ERROR', `error running codes ${err.message}`);
      }
    }

    if (c.running) {
      const s = openStream(res);
      s.write({ type: 'init', text: c.id });
      res.write(goJson({ code: 'RUNTIME_ERROR', message: 'error running codes session is busy' })); // bare, no blank line
      return s.end();
    }
    c.running = true;
    try {
      await runCell(c, body.code, res);
    } finally {
      c.running = false;
    }
  }

  async function runCell(c, code, res) {
    if (c.kernel.exited) {
      // like Jupyter's auto-restart: a dead kernel is replaced by a fresh one (its state is gone)
      try {
        c.kernel = await Kernel.start(c.language, c.dir, env());
      } catch (err) {
        throw new HttpError(500, 'RUNTIME_ERROR', `error running codes ${err.message}`);
      }
    }
    const kernel = c.kernel;
    const s = openStream(res);
    const started = Date.now();
    s.write({ type: 'init', text: c.id });
    s.write({ type: 'ping', text: 'pong' });
    c.count += 1;
    s.write({ type: 'execution_count', execution_count: c.count });

    // Output flows as it arrives; a slow reader pauses the kernel's pipes (backpressure), a gone reader
    // interrupts the cell like the real execd does when the request context is cancelled.
    let paused = false;
    const resume = () => {
      paused = false;
      kernel.resumeOutput();
    };
    const forward = (type) => (text) => {
      s.write({ type, text });
      if (!paused && res.writableNeedDrain) {
        paused = true;
        kernel.pauseOutput();
        res.once('drain', resume);
      }
    };
    const onClose = () => {
      if (paused) resume();
      if (kernel.busy) kernel.interrupt();
    };
    res.on('close', onClose);
    const outcome = await kernel.run(code, { stdout: forward('stdout'), stderr: forward('stderr') });
    res.off('close', onClose);
    res.off('drain', resume);

    let error = null;
    for (const reply of outcome.replies) {
      if (reply.type === 'result') s.write({ type: 'result', results: renameBundle(reply.data) });
      else if (reply.type === 'error') error = { ename: reply.ename, evalue: reply.evalue, traceback: reply.traceback ?? [] };
    }
    if (outcome.died) {
      const evalue = c.deleted ? 'the context was deleted' : outcome.died;
      error = { ename: outcome.interrupted ? 'KeyboardInterrupt' : 'DeadKernelError', evalue, traceback: [evalue] };
    } else if (!error && outcome.exit) {
      error = outcome.interrupted && outcome.exit === 130
        ? { ename: 'KeyboardInterrupt', evalue: '', traceback: ['KeyboardInterrupt'] }
        : { ename: 'CommandExecError', evalue: String(outcome.exit), traceback: [`exit status ${outcome.exit}`] };
    }
    if (error) {
      s.write({ type: 'status', text: 'error' });
      s.write({ type: 'error', error });
    } else {
      s.write({ type: 'execution_complete', execution_time: Math.max(1, Date.now() - started) });
    }
    s.end();
  }

  async function runWithoutLanguage(res, code) {
    const s = openStream(res);
    let run = null;
    const check = backpressure(res, () => run?.pauseOutput(), () => run?.resumeOutput());
    run = runShell(code, defaultCwd(), env(), (ev) => check(s.write(ev)));
    shellRuns.set(run.id, run);
    s.write({ type: 'init', text: run.id });
    s.write({ type: 'ping', text: 'pong' });
    await run.done;
    shellRuns.delete(run.id);
    s.end();
  }

  // DELETE /command?id=<context id> interrupts contexts too, as in the real execd.
  (ctx.interrupters ??= []).push(interruptId);

  return {
    handle(req, res, url) {
      const p = url.pathname;
      const m = req.method;
      if (p === '/code' && m === 'POST') return guard(res, () => runCode(req, res)).then(() => true);
      if (p === '/code' && m === 'DELETE') return guard(res, () => interrupt(res, url)).then(() => true);
      if (p === '/code/context' && m === 'POST') return guard(res, () => postContext(req, res)).then(() => true);
      if (p === '/code/contexts' && m === 'GET') return guard(res, () => listContexts(res, url)).then(() => true);
      if (p === '/code/contexts' && m === 'DELETE') return guard(res, () => deleteByLanguage(res, url)).then(() => true);
      const id = /^\/code\/contexts\/([^/]+)$/.exec(p)?.[1];
      if (id && m === 'GET') return guard(res, () => getContext(res, decodeSegment(id))).then(() => true);
      if (id && m === 'DELETE') return guard(res, () => deleteOne(res, decodeSegment(id))).then(() => true);
      return false;
    },
    close() {
      for (const c of contexts.values()) c.kernel.kill();
      for (const run of shellRuns.values()) run.kill();
      for (const res of streams) res.destroy();
    },
  };
}
