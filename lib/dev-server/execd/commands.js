// execd route module: commands (POST /command foreground + background, GET /command/status/{id},
// GET /command/{id}/logs?cursor=, DELETE /command?id=), framed like the real execd:
// compact JSON events each followed by a blank line, no `data:` prefix, stream held open a tail after the final event.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import crypto from 'node:crypto';
import { HttpError, backpressure, decodeSegment, goJson, guard, openEventStream, readJson, sendJson, sendEmpty } from './http.js';
import { LineSplitter } from './lines.js';
import { LogRing } from './log-ring.js';
import { OutputSockets } from './out-socket.js';
import { osMessage } from './files-info.js';
import { expandPath } from './files-paths.js';
import { spawn } from './spawn.js';

const PING_INTERVAL_MS = 3000;
const INTERRUPT_GRACE_MS = 3000;
/** After the process exits, how long its pipes may stay open (a grandchild holding them) before we stop reading. */
const PIPE_DRAIN_MS = 200;
/** Finished command records kept (status and logs stay answerable): the newest 1,000 … */
export const FINISHED_RECORDS_MAX = 1000;
/** … as long as their background logs together hold at most 16 MiB … */
export const FINISHED_LOG_BUDGET = 16 * 1024 * 1024;
/** … and for at most 24 h after they finished (checked when a command finishes and hourly). */
export const FINISHED_RETENTION_MS = 24 * 3600 * 1000;

/** Largest delay Node's setTimeout honours (a larger one fires after 1 ms). */
const MAX_TIMER_MS = 2 ** 31 - 1;
/** Largest `timeout` Go's JSON decoder puts into execd's int64 field: 2^63 - 1, which a double holds as 2^63. */
const INT64_MAX = 2 ** 63;

/**
 * execd's `time.Duration(timeoutMs) * time.Millisecond` (Go, upstream): int64 nanoseconds, wrapping on overflow.
 * Returns the duration in milliseconds, or 0 when it is not positive (Go: no deadline), e.g. 1e13 ms wraps negative.
 */
export function goDurationMs(timeoutMs) {
  const ns = BigInt.asIntN(64, BigInt(timeoutMs) * 1000000n);
  return ns > 0n ? Number(ns) / 1e6 : 0;
}

/**
 * setTimeout for any delay: beyond MAX_TIMER_MS it re-arms in steps toward one monotonic deadline, never handing Node a
 * delay it would clamp to 1 ms. Returns { clear() }.
 */
export function longTimeout(fn, ms) {
  const deadline = performance.now() + ms;
  const t = { timer: null, clear: () => clearTimeout(t.timer) };
  const arm = () => {
    const left = deadline - performance.now();
    t.timer = left > MAX_TIMER_MS ? setTimeout(arm, MAX_TIMER_MS) : setTimeout(fn, Math.max(0, left));
  };
  arm();
  return t;
}

const SIGNAL_TEXT = {
  SIGKILL: 'killed', SIGTERM: 'terminated', SIGINT: 'interrupt', SIGHUP: 'hangup', SIGQUIT: 'quit',
  SIGSEGV: 'segmentation fault', SIGABRT: 'aborted', SIGPIPE: 'broken pipe', SIGALRM: 'alarm clock',
  SIGUSR1: 'user defined signal 1', SIGUSR2: 'user defined signal 2', SIGBUS: 'bus error', SIGFPE: 'floating point exception',
};

/** RFC 3339 with nanoseconds, like Go's time.RFC3339Nano for UTC (trailing zeros trimmed). */
function rfc3339Nano(ms, extraNs) {
  const iso = new Date(ms).toISOString(); // 2026-11-29T07:15:42.461Z
  const frac = (iso.slice(20, 23) + String(extraNs).padStart(6, '0')).replace(/0+$/, '');
  return `${iso.slice(0, 19)}${frac ? '.' + frac : ''}Z`;
}
function nowStamp() {
  const ns = process.hrtime.bigint() % 1000000n;
  return rfc3339Nano(Date.now(), ns);
}

function findShell() {
  for (const dir of (process.env.PATH ?? '/usr/bin:/bin').split(':')) {
    if (dir && fs.existsSync(path.join(dir, 'bash'))) return 'bash';
  }
  return 'sh';
}

/** The type word of Go's json "cannot unmarshal X" errors. */
function jsonKind(v) {
  if (Array.isArray(v)) return 'array';
  return v === null ? 'null' : typeof v === 'boolean' ? 'bool' : typeof v;
}

// Go struct fields of execd's RunCommandRequest that a wrong JSON type is reported for, with their Go types
const FIELD_TYPES = { command: ['string', 'string'], cwd: ['string', 'string'], timeout: ['number', 'int64'], background: ['boolean', 'bool'] };

/** Validates like execd: decoder errors ("error parsing request, MAYBE invalid body format. …"), then the validator's. */
function validateBody(body) {
  const decode = (msg) => new HttpError(400, 'INVALID_REQUEST_BODY', `error parsing request, MAYBE invalid body format. ${msg}`);
  const invalid = (msg) => new HttpError(400, 'INVALID_REQUEST_BODY', `invalid request, validation error ${msg}`);
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw decode(`json: cannot unmarshal ${jsonKind(body)} into Go value of type model.RunCommandRequest`);
  }
  for (const [k, [js, go]] of Object.entries(FIELD_TYPES)) {
    if (body[k] != null && (typeof body[k] !== js || (js === 'number' && !Number.isInteger(body[k])))) {
      throw decode(`json: cannot unmarshal ${jsonKind(body[k])} into Go struct field RunCommandRequest.${k} of type ${go}`);
    }
  }
  if (Number.isInteger(body.timeout) && Math.abs(body.timeout) > INT64_MAX) {
    throw decode(`json: cannot unmarshal number ${BigInt(body.timeout)} into Go struct field RunCommandRequest.timeout of type int64`);
  }
  for (const k of ['uid', 'gid']) {
    if (body[k] != null && (!Number.isInteger(body[k]) || body[k] < 0)) throw decode(`${k} must be a non-negative integer`);
  }
  if (body.envs != null && (typeof body.envs !== 'object' || Array.isArray(body.envs))) throw decode('envs must be an object of strings');
  if (typeof body.command !== 'string' || body.command === '') {
    throw invalid("Key: 'RunCommandRequest.Command' Error:Field validation for 'Command' failed on the 'required' tag");
  }
  if (body.timeout != null && body.timeout < 0) {
    throw invalid("Key: 'RunCommandRequest.TimeoutMs' Error:Field validation for 'TimeoutMs' failed on the 'gte' tag");
  }
  if (body.gid != null && body.uid == null) throw invalid('uid is required when gid is provided');
}

export function createRoutes(ctx) {
  const shell = findShell();
  const tailMs = ctx.commandTailMs ?? 1000;
  const forwarding = ctx.signalForwarding === true;
  /** Foreground commands execd relays the signals it receives to (signalForwarding; see relaySignal). */
  const relayTo = new Set();
  /** id -> command record */
  const commands = new Map();
  /** finished records, oldest first (see prune) */
  const finished = [];
  const streams = new Set();
  const outSockets = new OutputSockets();
  const sweeper = setInterval(prune, 3600 * 1000);
  sweeper.unref();

  /** Drops the oldest finished records beyond the count, log-bytes and age bounds. */
  function prune() {
    let logBytes = 0;
    for (const rec of finished) logBytes += rec.log?.size ?? 0;
    const oldest = Date.now() - FINISHED_RETENTION_MS;
    while (finished.length > 0 && (finished.length > FINISHED_RECORDS_MAX || logBytes > FINISHED_LOG_BUDGET || finished[0].endMs < oldest)) {
      const rec = finished.shift();
      logBytes -= rec.log?.size ?? 0;
      rec.reader?.destroy(); // a grandchild may still write: its output goes nowhere now
      commands.delete(rec.id);
    }
  }

  function defaultCwd() {
    try {
      if (ctx.workspace && fs.statSync(ctx.workspace).isDirectory()) return ctx.workspace;
    } catch { /* fall through */ }
    return process.cwd();
  }

  function buildEnv(envs) {
    const env = { ...process.env };
    const file = process.env.EXECD_ENVS;
    if (file) {
      try {
        for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
          const i = line.indexOf('=');
          if (i > 0) env[line.slice(0, i).trim()] = line.slice(i + 1);
        }
      } catch { /* a missing EXECD_ENVS file is ignored */ }
    }
    for (const [k, v] of Object.entries(envs ?? {})) env[k] = v == null ? '' : String(v);
    return env;
  }

  /**
   * Starts the process; resolves the record. Throws a start error (caller turns it into an error event).
   * Foreground output is read through pipes that pauseOutput()/resumeOutput() stop and restart (the process
   * then blocks on its writes, as on a terminal nobody reads); background output goes into a bounded LogRing.
   */
  async function start(body, background) {
    const id = crypto.randomBytes(16).toString('hex');
    const rec = {
      id, content: body.command, background, running: true, exitCode: undefined, error: undefined,
      startedAt: nowStamp(), finishedAt: undefined, startMs: Date.now(), endMs: undefined, child: null, log: null,
      reader: null, done: null, onLine: null, pipes: [], splitters: [], paused: false, afterResume: null,
      pauseOutput() {
        rec.paused = true;
        for (const p of rec.pipes) p.pause();
      },
      resumeOutput() {
        rec.paused = false;
        for (const sp of rec.splitters) sp.resume();
        if (rec.paused) return; // what was held filled the client's buffer again
        for (const p of rec.pipes) p.resume();
        const f = rec.afterResume;
        rec.afterResume = null;
        f?.();
      },
    };
    let done;
    rec.done = new Promise((r) => { done = r; });
    const opts = { cwd: body.cwd ?? defaultCwd(), env: buildEnv(body.envs), detached: true };
    if (body.uid != null) opts.uid = body.uid;
    if (body.gid != null) opts.gid = body.gid;
    let writer = null;
    if (background) {
      const pair = await outSockets.pair();
      writer = pair.writer;
      rec.reader = pair.reader;
      rec.log = new LogRing();
      rec.reader.on('data', (b) => rec.log.push(b));
      rec.reader.on('close', () => { rec.reader = null; });
      opts.stdio = ['ignore', writer, writer];
    } else {
      opts.stdio = ['ignore', 'pipe', 'pipe'];
    }
    let child;
    try {
      child = spawn(shell, ['-c', body.command], opts);
    } catch (err) {
      rec.reader?.destroy();
      throw err;
    } finally {
      writer?.destroy(); // the process has its own copy; EOF comes when it and its children are done
    }
    rec.child = child;
    commands.set(id, rec);
    if (!background && forwarding && child.pid) relayTo.add(rec);

    const finish = (code, signal, spawnError) => {
      if (!rec.running) return;
      rec.running = false;
      if (!background) relayTo.clear(); // upstream resets its signal handling process-wide when a command ends
      rec.finishedAt = nowStamp();
      rec.endMs = Date.now();
      rec.timer?.clear();
      if (spawnError) {
        rec.exitCode = -1;
        rec.error = spawnError.message;
        rec.startError = spawnError;
      } else if (signal) {
        rec.exitCode = -1;
        rec.error = `signal: ${SIGNAL_TEXT[signal] ?? signal}`;
      } else {
        rec.exitCode = code;
        rec.error = code === 0 ? undefined : `exit status ${code}`;
      }
      rec.child = null;
      finished.push(rec);
      prune();
      done();
    };

    if (!background) {
      const out = new LineSplitter((t) => rec.onLine?.('stdout', t));
      const err = new LineSplitter((t) => rec.onLine?.('stderr', t));
      rec.pipes = [child.stdout, child.stderr];
      rec.splitters = [out, err];
      rec.discardOutput = () => {
        out.discard();
        err.discard();
      };
      child.stdout.on('data', (b) => out.push(b));
      child.stderr.on('data', (b) => err.push(b));
      let exited = null;
      let closed = 0;
      const end = () => {
        out.flush();
        err.flush();
        finish(exited.code, exited.signal);
      };
      const onClose = () => {
        closed += 1;
        if (closed === 2 && exited) end();
      };
      child.stdout.on('close', onClose);
      child.stderr.on('close', onClose);
      child.on('exit', (code, signal) => {
        exited = { code, signal };
        if (closed === 2) return end();
        // A grandchild may keep the pipes open; like execd (which waits for the process, not the pipes) stop reading
        // soon — counting only time in which we read: output held back for a slow client is not dropped.
        const stopReading = () => {
          if (!rec.running) return;
          if (rec.paused) {
            rec.afterResume = () => setTimeout(stopReading, PIPE_DRAIN_MS).unref();
            return;
          }
          child.stdout.destroy();
          child.stderr.destroy();
          end();
        };
        setTimeout(stopReading, PIPE_DRAIN_MS).unref();
      });
    } else {
      child.on('exit', (code, signal) => finish(code, signal));
    }
    child.on('error', (e) => {
      // spawn failure (bad uid, ENOENT …): no exit event follows
      if (rec.child && rec.child.pid === undefined) finish(null, null, e);
    });
    const timeoutMs = body.timeout ? goDurationMs(body.timeout) : 0;
    if (timeoutMs > 0) rec.timer = longTimeout(() => signalGroup(rec, 'SIGKILL'), timeoutMs);
    return rec;
  }

  function signalGroup(rec, sig) {
    const pid = rec.child?.pid;
    if (!pid) return;
    try { process.kill(-pid, sig); } catch { /* already gone */ }
  }

  /**
   * signalForwarding: upstream execd relays every signal it receives (signal.Notify for all signals) to the process
   * group of the foreground command running at that moment, until a command ends and resets the handling. A write to
   * a command stream whose client already closed the connection raises SIGPIPE in execd, which is relayed like any
   * other: a client that closes a stream before its end kills whatever foreground command runs when execd next writes
   * to it (the end of the stream, a tail after the final event). Here every such write relays SIGPIPE (upstream needs
   * a second write after the reset, so this is the strict version of the race).
   */
  function relaySignal(sig) {
    for (const rec of relayTo) signalGroup(rec, sig);
  }
  function writeToClosed(res) {
    if (forwarding && res.destroyed && !res.writableEnded) relaySignal('SIGPIPE');
  }

  /** Writes one event; false when the client's buffer is full (the caller should wait for 'drain'). */
  function writeEvent(res, ev) {
    if (res.destroyed || res.writableEnded) {
      writeToClosed(res);
      return true;
    }
    // field order of execd's Go struct: type, text, execution_time, timestamp, error
    const { type, text, execution_time: time, error } = ev;
    const out = { type };
    if (text !== undefined) out.text = text;
    if (time !== undefined) out.execution_time = time;
    out.timestamp = Date.now();
    if (error !== undefined) out.error = error;
    return res.write(goJson(out) + '\n\n');
  }

  function endStream(res) {
    // execd keeps the response open for its graceful-shutdown tail after the final event
    const t = setTimeout(() => {
      if (!res.destroyed) res.end();
      else writeToClosed(res); // the terminating chunk written to a stream its client closed
    }, tailMs);
    if (!forwarding) res.on('close', () => clearTimeout(t));
  }

  function finalEvent(rec, withTime) {
    if (rec.startError) {
      return { type: 'error', error: { ename: 'CommandExecError', evalue: rec.startError.message, traceback: [rec.startError.message] } };
    }
    if (rec.exitCode === 0) {
      const ev = { type: 'execution_complete' };
      // Go's omitempty: a 0 ms execution_time is left out
      if (withTime && Date.now() > rec.startMs) ev.execution_time = Date.now() - rec.startMs;
      return ev;
    }
    return { type: 'error', error: { ename: 'CommandExecError', evalue: String(rec.exitCode), traceback: [rec.error] } };
  }

  /**
   * The cwd of a request, like upstream: validated with `$VAR`/`${VAR}` and a leading `~` expanded from execd's
   * environment, then expanded again with the request's envs over it; a relative result is relative to execd's own
   * working directory (`/`, like a container's), not to the workspace.
   */
  function requestCwd(body) {
    const invalid = (m) => new HttpError(400, 'INVALID_REQUEST_BODY', `invalid request, validation error ${m}`);
    let checked;
    try {
      checked = expandPath(body.cwd);
    } catch (err) {
      throw invalid(`cannot resolve working directory ${JSON.stringify(body.cwd)}: ${err.message}`);
    }
    let st;
    try {
      st = fs.statSync(checked);
    } catch (err) {
      throw invalid(`working directory does not exist: ${body.cwd}: ${osMessage(err)}`);
    }
    if (!st.isDirectory()) throw invalid(`working directory path is not a directory: ${body.cwd}`);
    try {
      return path.resolve(expandPath(body.cwd, buildEnv(body.envs)));
    } catch (err) {
      throw new HttpError(500, 'RUNTIME_ERROR', `error running commands resolve request cwd ${body.cwd}: ${err.message}`);
    }
  }

  async function run(req, res) {
    const body = await readJson(req);
    validateBody(body);
    const cwd = body.cwd ? requestCwd(body) : defaultCwd();
    const background = body.background === true;
    let rec;
    let startError = null;
    try {
      rec = await start({ ...body, cwd }, background);
    } catch (e) {
      startError = e;
    }
    openEventStream(res, streams);
    writeEvent(res, { type: 'init', text: rec?.id ?? crypto.randomBytes(16).toString('hex') });
    writeEvent(res, { type: 'ping', text: 'pong' });
    if (startError) {
      writeEvent(res, { type: 'error', error: { ename: 'CommandExecError', evalue: startError.message, traceback: [startError.message] } });
      return endStream(res);
    }
    if (background) {
      // the spawn error (if any) is reported through the status route
      writeEvent(res, { type: 'execution_complete' });
      return endStream(res);
    }
    // no ping while output waits for the client: it would only pile up behind it
    const pinger = setInterval(() => res.writableNeedDrain || writeEvent(res, { type: 'ping', text: 'pong' }), PING_INTERVAL_MS);
    // Backpressure: when the client's buffer is full, stop reading the process's pipes until it drains. A client
    // that goes away does not stop the command (as with the real execd); its output is then read and discarded.
    const check = backpressure(res, () => rec.pauseOutput(), () => rec.resumeOutput());
    rec.onLine = (type, text) => check(writeEvent(res, { type, text })); // false: hold the rest of the chunk
    res.on('close', () => {
      clearInterval(pinger);
      rec.onLine = null;
      rec.discardOutput?.();
    });
    await rec.done;
    clearInterval(pinger);
    writeEvent(res, finalEvent(rec, true));
    endStream(res);
  }

  function status(res, id) {
    const rec = commands.get(id);
    if (!rec) throw new HttpError(404, 'INVALID_REQUEST_BODY', `command not found: ${id}`);
    const body = { id: rec.id, content: rec.content, running: rec.running };
    if (!rec.running) {
      body.exit_code = rec.exitCode;
      if (rec.error) body.error = rec.error;
    }
    body.started_at = rec.startedAt;
    if (!rec.running) body.finished_at = rec.finishedAt;
    sendJson(res, 200, body);
  }

  async function logs(res, id, url) {
    const rec = commands.get(id);
    if (!rec) throw new HttpError(400, 'INVALID_REQUEST_BODY', `command not found: ${id}`);
    if (!rec.background) throw new HttpError(400, 'INVALID_REQUEST_BODY', `command ${id} is not running in background`);
    // like execd: a cursor that is not an integer counts as 0; a negative one fails the seek (execd's text names the
    // log file it would keep in $TMPDIR; ours is the in-memory ring)
    const raw = url.searchParams.get('cursor') ?? '';
    const cursor = /^[+-]?\d+$/.test(raw) ? Number(raw) : 0;
    if (cursor < 0) throw new HttpError(400, 'INVALID_REQUEST_BODY', `error seek file: seek ${path.join(os.tmpdir(), `${id}.output`)}: invalid argument`);
    const log = rec.log;
    const data = cursor < log.end ? log.read(cursor) : Buffer.alloc(0);
    const headers = {
      'Content-Type': 'text/plain; charset=utf-8',
      'Content-Length': data.length,
      'Execd-Commands-Tail-Cursor': String(cursor < log.end ? log.end : cursor),
    };
    // bytes between the cursor and the oldest retained byte were dropped from the bounded log
    if (cursor < log.start) headers['Execd-Commands-Dropped-Bytes'] = String(log.start - cursor);
    res.writeHead(200, headers);
    res.end(data);
  }

  async function interrupt(res, url) {
    const id = url.searchParams.get('id');
    if (!id) throw new HttpError(400, 'MISSING_QUERY', "missing query parameter 'id'");
    const rec = commands.get(id);
    if (!rec) {
      for (const fn of ctx.interrupters ?? []) {
        if (await fn(id)) return sendEmpty(res);
      }
      throw new HttpError(500, 'RUNTIME_ERROR', 'error interruptting code context. no such session'); // execd's spelling
    }
    if (!rec.running) throw new HttpError(500, 'RUNTIME_ERROR', `error interruptting code context. command session ${id} is not running`);
    signalGroup(rec, 'SIGTERM');
    const killer = setTimeout(() => signalGroup(rec, 'SIGKILL'), INTERRUPT_GRACE_MS);
    await rec.done;
    clearTimeout(killer);
    sendEmpty(res);
  }

  return {
    handle(req, res, url) {
      const p = url.pathname;
      if (p === '/command' && req.method === 'POST') return guard(res, () => run(req, res)).then(() => true);
      if (p === '/command' && req.method === 'DELETE') return guard(res, () => interrupt(res, url)).then(() => true);
      let m = /^\/command\/status\/([^/]+)$/.exec(p);
      if (m && req.method === 'GET') return guard(res, () => status(res, decodeSegment(m[1]))).then(() => true);
      m = /^\/command\/([^/]+)\/logs$/.exec(p);
      if (m && req.method === 'GET') return guard(res, () => logs(res, decodeSegment(m[1]), url)).then(() => true);
      return false;
    },
    relaySignal,
    close() {
      for (const rec of commands.values()) {
        if (rec.running) signalGroup(rec, 'SIGKILL');
      }
      for (const res of streams) res.destroy();
      for (const rec of commands.values()) rec.reader?.destroy();
      clearInterval(sweeper);
      outSockets.close();
    },
  };
}

