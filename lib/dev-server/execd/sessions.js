// execd route module: bash sessions (POST /session, POST /session/{id}/run, DELETE /session/{id}), stateful but
// non-interactive like execd's: each run is a fresh `bash --noprofile --norc` that re-exports the saved environment
// and cds to the saved directory, then saves `export -p` and `pwd` for the next run. stdout and stderr are merged into
// `stdout` events. A run is cancelled when the client disconnects. Failures after the stream started are the bare
// `{"code":"RUNTIME_ERROR","message":…}` objects (no `type`) that the real execd sends.
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { HttpError, backpressure, decodeSegment, goJson, guard, openEventStream, readJson, sendJson, sendEmpty } from './http.js';
import { LineSplitter } from './lines.js';
import { goDurationMs, longTimeout } from './commands.js';
import { mkdirpSync } from './mkdirp.js';

const PING_INTERVAL_MS = 3000;
/** How long a session run may take when it asks for no (positive) timeout: upstream's 24 h. */
const SESSION_MAX_WAIT_MS = 24 * 3600 * 1000;

/** Go's time.Duration.String() of a whole number of milliseconds (> 0): "300ms", "1s", "1.5s", "1m30s", "24h0m0s". */
function goDurationText(ms) {
  if (ms < 1000) return `${ms}ms`;
  const frac = (x) => (x % 1000 ? `.${String(x % 1000).padStart(3, '0').replace(/0+$/, '')}` : '');
  const sec = Math.floor(ms / 1000);
  const s = `${sec % 60}${frac(ms)}s`;
  const min = Math.floor(sec / 60);
  if (min === 0) return s;
  const h = Math.floor(min / 60);
  return h === 0 ? `${min}m${s}` : `${h}h${min % 60}m${s}`;
}

export function createRoutes(ctx) {
  const sessions = new Map(); // id -> { id, cwd, envFile, cwdFile, busy, child }
  const dir = os.tmpdir();

  function kill(s) {
    if (s.child?.pid) {
      try { process.kill(-s.child.pid, 'SIGKILL'); } catch { /* gone */ }
    }
  }

  function remove(id) {
    const s = sessions.get(id);
    if (!s) return false;
    kill(s);
    sessions.delete(id);
    fs.rmSync(s.envFile, { force: true });
    fs.rmSync(s.cwdFile, { force: true });
    fs.rmSync(s.scriptFile, { force: true });
    return true;
  }
  ctx.interrupters?.push(async (id) => remove(id));

  async function create(req, res) {
    const body = (await readJson(req, { optional: true })) ?? {};
    if (typeof body !== 'object' || Array.isArray(body)) throw new HttpError(400, 'INVALID_REQUEST_BODY', 'error parsing request, MAYBE invalid body format: expected an object');
    if (body.cwd != null && typeof body.cwd !== 'string') throw new HttpError(400, 'INVALID_REQUEST_BODY', 'error parsing request, MAYBE invalid body format: cwd must be a string');
    let cwd = body.cwd || ctx.workspace;
    if (body.cwd) {
      try {
        mkdirpSync(body.cwd);
      } catch (err) {
        throw new HttpError(500, 'RUNTIME_ERROR', `error creating session: ${err.message}`);
      }
    } else if (!fs.existsSync(cwd)) cwd = process.cwd();
    const id = crypto.randomUUID();
    const base = path.join(dir, `session-${id}`);
    sessions.set(id, { id, cwd, envFile: `${base}.env`, cwdFile: `${base}.cwd`, scriptFile: `${base}.sh`, busy: false, child: null });
    sendJson(res, 200, { session_id: id });
  }

  function script(s, command, cwdOverride) {
    let env = '';
    try { env = fs.readFileSync(s.envFile, 'utf8'); } catch { /* first run */ }
    let cwd = s.cwd;
    try { cwd = fs.readFileSync(s.cwdFile, 'utf8').trim() || cwd; } catch { /* first run */ }
    const q = (p) => `'${p.replace(/'/g, `'\\''`)}'`;
    return [
      env,
      `cd ${q(cwdOverride || cwd)} || exit 1`,
      command,
      '__osb_rc=$?',
      `export -p > ${q(s.envFile)}`,
      `pwd > ${q(s.cwdFile)}`,
      'exit $__osb_rc',
      '',
    ].join('\n');
  }

  async function run(req, res, id) {
    const body = await readJson(req);
    if (body === null || typeof body !== 'object' || typeof body.command !== 'string' || body.command === '') {
      throw new HttpError(400, 'INVALID_REQUEST_BODY', "invalid request. Key: 'RunInSessionRequest.Command' Error:Field validation for 'Command' failed on the 'required' tag");
    }
    if (body.timeout != null && (!Number.isInteger(body.timeout) || body.timeout < 0)) {
      throw new HttpError(400, 'INVALID_REQUEST_BODY', 'error parsing request, MAYBE invalid body format. timeout must be a non-negative integer');
    }
    const s = sessions.get(id);
    if (!s) throw new HttpError(500, 'RUNTIME_ERROR', 'error running in session. context not found');
    openEventStream(res);
    /** false when the client's buffer is full */
    const write = (obj) => (res.destroyed || res.writableEnded ? true : res.write(goJson(obj) + '\n\n'));
    // a failure is execd's bare {"code","message"} object, without `type` and without the blank line
    const fail = (message) => {
      if (!res.destroyed && !res.writableEnded) res.write(goJson({ code: 'RUNTIME_ERROR', message }));
    };
    const event = (type, extra = {}) => write({ type, ...extra, timestamp: Date.now() });
    const finish = () => res.end(); // unlike /command, no tail after the final event
    event('init', { text: id });
    event('ping', { text: 'pong' });
    if (s.busy) {
      fail('error running in session: session is busy');
      return finish();
    }
    s.busy = true;
    const started = Date.now();
    fs.writeFileSync(s.scriptFile, script(s, body.command, body.cwd));
    const child = spawn('bash', ['--noprofile', '--norc', s.scriptFile], { stdio: ['ignore', 'pipe', 'pipe'], detached: true, env: process.env });
    s.child = child;
    // a client that does not read pauses the run's output (the run blocks on its writes); leaving cancels it
    let held = false;
    const hold = () => {
      held = true;
      child.stdout.pause();
      child.stderr.pause();
    };
    const release = () => {
      held = false;
      lines.resume();
      if (held) return; // what the splitter held filled the client's buffer again
      child.stdout.resume();
      child.stderr.resume();
    };
    const check = backpressure(res, hold, release);
    const lines = new LineSplitter((text) => check(event('stdout', { text })));
    child.stdout.on('data', (b) => lines.push(b));
    child.stderr.on('data', (b) => lines.push(b));
    const pinger = setInterval(() => res.writableNeedDrain || event('ping', { text: 'pong' }), PING_INTERVAL_MS);
    let timedOut = false;
    // upstream: the run's deadline is time.Duration(timeout ms) (int64 ns, wrapping), 24 h when not positive
    const waitMs = goDurationMs(body.timeout ?? 0) || SESSION_MAX_WAIT_MS;
    const timer = longTimeout(() => { timedOut = true; kill(s); }, waitMs);
    // a session run belongs to its request: the client leaving cancels it
    const onClose = () => { if (s.child === child) kill(s); };
    res.on('close', onClose);
    const result = await new Promise((resolve) => {
      child.on('error', (err) => resolve({ error: err }));
      child.on('close', (code, signal) => resolve({ code, signal }));
    });
    clearInterval(pinger);
    timer.clear();
    res.off('close', onClose);
    lines.flush();
    s.child = null;
    s.busy = false;
    if (timedOut) {
      fail(`error running in session. timeout after ${goDurationText(waitMs)}`);
    } else if (result.error) {
      fail(`error running in session: ${result.error.message}`);
    } else if (result.code === 0) {
      event('execution_complete', { execution_time: Date.now() - started });
    } else {
      const evalue = result.signal ? '-1' : String(result.code);
      const tb = result.signal ? 'signal: killed' : `exit status ${result.code}`;
      write({ type: 'error', timestamp: Date.now(), error: { ename: 'CommandExecError', evalue, traceback: [tb] } });
    }
    finish();
  }

  return {
    handle(req, res, url) {
      const p = url.pathname;
      if (p === '/session' && req.method === 'POST') return guard(res, () => create(req, res)).then(() => true);
      let m = /^\/session\/([^/]+)\/run$/.exec(p);
      if (m && req.method === 'POST') return guard(res, () => run(req, res, decodeSegment(m[1]))).then(() => true);
      m = /^\/session\/([^/]+)$/.exec(p);
      if (m && req.method === 'DELETE') {
        const id = decodeSegment(m[1]);
        if (remove(id)) sendEmpty(res);
        else sendJson(res, 404, { code: 'CONTEXT_NOT_FOUND', message: `session ${id} not found` });
        return true;
      }
      return false;
    },
    close() {
      for (const id of [...sessions.keys()]) remove(id);
    },
  };
}
