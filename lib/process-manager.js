// OpenSandboxProcessManager: Mastra's SandboxProcessManager for OpenSandbox. Each process is an execd PTY session
// in pipe mode run by the native process table (src/opensandbox/process.c): live stdout/stderr kept apart, stdin,
// kill confirmed by execd, exact exit codes, reattach by pid after a restart. This file only speaks Mastra:
// UTF-8 decoding, the handle's result shape, the tracked-process table. See docs/processes.md.
import { StringDecoder } from 'node:string_decoder';
import { SandboxProcessManager, ProcessHandle } from '@mastra/core/workspace';
import { binding } from './native.js';
import { resolveCwd } from './files.js';
import {
  fromNative, OpenSandboxApiError, OpenSandboxCancelledError, OpenSandboxNotFoundError, OpenSandboxTransportError,
} from './errors.js';


export const DEFAULT_MAX_RETAINED_BYTES = 1024 * 1024;
/** Exit code reported for a process whose exit status cannot be known (session gone, taken over, shutdown). */
export const UNKNOWN_EXIT_CODE = -1;
/** pid format: "<execd PTY session id>.<32 hex nonce>". */
const PID_RE = /^[A-Za-z0-9_-]{1,99}\.[0-9a-f]{32}$/;

function pairs(obj) {
  const out = [];
  for (const [k, v] of Object.entries(obj ?? {})) if (v !== undefined && v !== null) out.push(k, String(v));
  return out;
}

/**
 * The typed error of a process that settled without an exit status (the native errorCode, see
 * src/opensandbox/process.h): session gone -> OpenSandboxNotFoundError, taken over -> OpenSandboxApiError (409),
 * ended unseen without a status -> OpenSandboxApiError, engine shutdown -> OpenSandboxCancelledError, no working connection within the reconnect window (and other
 * connection failures) -> OpenSandboxTransportError.
 */
function processError(pid, code, text) {
  const details = { operation: `process ${pid}`, code };
  if (code === 'PROCESS_GONE') return new OpenSandboxNotFoundError(text, { ...details, status: 404 });
  if (code === 'PROCESS_TAKEN_OVER') return new OpenSandboxApiError(text, { ...details, status: 409 });
  if (code === 'PROCESS_ENDED_UNSEEN') return new OpenSandboxApiError(text, details);
  if (code === 'SHUTDOWN') return new OpenSandboxCancelledError(text, details);
  return new OpenSandboxTransportError(text, details);
}

/** A remote process. Output arrives live; exitCode stays undefined until the process has ended. */
export class OpenSandboxProcessHandle extends ProcessHandle {
  pid;
  exitCode;
  #native;
  #result;
  #errorText = null;
  #error = null;
  #stdinIgnored;
  #stdinClosed = false;

  constructor(native, pid, sink, options = {}) {
    super(options);
    this.pid = pid;
    this.#native = native;
    this.#stdinIgnored = options.stdinMode === 'ignore';
    const started = Date.now();
    const out = new StringDecoder('utf8');
    const err = new StringDecoder('utf8');
    sink.attach((o, e) => {
      if (o) {
        const s = out.write(o);
        if (s) this.emitStdout(s);
      }
      if (e) {
        const s = err.write(e);
        if (s) this.emitStderr(s);
      }
    });
    this.#result = native.exited.then((x) => {
      const so = out.end();
      if (so) this.emitStdout(so);
      const se = err.end();
      if (se) this.emitStderr(se);
      if (x.errorText) {
        this.#errorText = x.errorText;
        this.#error = processError(pid, x.errorCode, x.errorText);
        this.emitStderr(`${this.stderr && !this.stderr.endsWith('\n') ? '\n' : ''}${x.errorText}\n`);
      }
      this.exitCode = x.exitCode;
      // An ended process keeps only its output (Mastra's bounded buffers, maxRetainedBytes per stream): the native
      // object is let go (kill/stdin check exitCode first).
      this.#native = null;
      return {
        success: x.exitCode === 0,
        exitCode: x.exitCode,
        stdout: this.stdout,
        stderr: this.stderr,
        executionTimeMs: Date.now() - started,
        killed: x.killed,
        timedOut: x.timedOut,
        ...(x.errorText ? { errorText: x.errorText, error: this.#error } : {}),
      };
    });
  }

  /** Why no exit status is known (session gone, taken over, shutdown), else null. */
  get errorText() {
    return this.#errorText;
  }

  /** The typed error (OpenSandboxError, `code` e.g. PROCESS_CONNECTION_LOST) when no exit status is known, else null. */
  get error() {
    return this.#error;
  }

  async wait() {
    return this.#result;
  }

  /** SIGKILLs the remote process group (DELETE /pty/{id}); true once execd confirmed, false if already exited. */
  async kill() {
    if (this.exitCode !== undefined) return false;
    const killed = await this.#native.kill();
    if (killed) await this.#result;
    return killed;
  }

  async sendStdin(data) {
    if (this.#stdinIgnored) throw new Error(`Process ${this.pid} does not have stdin available (spawned with stdinMode 'ignore')`);
    if (this.exitCode !== undefined) throw new Error(`Process ${this.pid} has already exited with code ${this.exitCode}`);
    if (this.#stdinClosed) throw new Error(`Process ${this.pid}: stdin was closed (closeStdin), cannot send more input`);
    if (typeof data !== 'string' && !Buffer.isBuffer(data)) throw new TypeError('stdin data must be a string or a Buffer');
    try {
      await this.#native.write(data);
    } catch (e) {
      if (e?.code === 'PROCESS_EXITED') {
        await this.#result;
        throw new Error(`Process ${this.pid} has already exited with code ${this.exitCode}`);
      }
      throw e;
    }
  }

  /**
   * Ends the process's stdin after every byte sent before (programs reading to EOF — wc, sort, a compiler — then
   * finish). Our wrapper frames stdin and closes the command's stdin pipe at the end frame (execd's pipe mode has
   * no EOF of its own; see docs/processes.md). Idempotent; a no-op once the process has exited.
   */
  async closeStdin() {
    if (this.#stdinIgnored) throw new Error(`Process ${this.pid} does not have stdin available (spawned with stdinMode 'ignore')`);
    if (this.exitCode !== undefined) return;
    this.#stdinClosed = true;
    await this.#native.closeStdin();
  }
}

/** Collects output batches until the handle exists (batches may arrive before `started` is seen). */
function makeSink() {
  let target = null;
  const early = [];
  return {
    push(o, e) {
      if (target) target(o, e);
      else early.push([o, e]);
    },
    attach(fn) {
      target = fn;
      for (const [o, e] of early.splice(0)) fn(o, e);
    },
  };
}

export class OpenSandboxProcessManager extends SandboxProcessManager {
  #connection;
  #recover;
  #ackWaitS;

  /**
   * @param {object} [options]
   * @param {Record<string,string|undefined>} [options.env] environment for every process
   * @param {() => ({ baseUrl: string, headers?: Record<string,string>, requestTimeoutMs?: number, caFile?: string })} [options.connection]
   *   the execd endpoint; OpenSandboxSandbox passes its own. Without it, `sandbox.opensandbox.execdConnection()` is used.
   * @param {(attempt: () => Promise<any>, opts: { anyTransport?: boolean }) => Promise<any>} [options.recover] runs
   *   spawn/get through the sandbox's dead-sandbox recovery (OpenSandboxSandbox passes its own; see lib/recovery.js)
   * @param {number} [options.ackWaitSeconds] how long an ended process waits for a client to collect its exit status
   *   (default 600); after that its status is still recoverable by pid (from execd's replay, which holds the exit markers).
   */
  constructor({ env, connection, recover, ackWaitSeconds } = {}) {
    super({ env });
    if (connection !== undefined && typeof connection !== 'function') throw new TypeError('connection must be a function');
    if (recover !== undefined && typeof recover !== 'function') throw new TypeError('recover must be a function');
    if (ackWaitSeconds !== undefined && (!Number.isInteger(ackWaitSeconds) || ackWaitSeconds < 1)) {
      throw new TypeError('ackWaitSeconds must be an integer >= 1');
    }
    this.#connection = connection;
    this.#recover = recover ?? ((attempt) => attempt());
    this.#ackWaitS = ackWaitSeconds ?? 600;
  }

  #conn() {
    const c = this.#connection ? this.#connection() : this.sandbox?.opensandbox?.execdConnection?.();
    if (!c || typeof c.baseUrl !== 'string') throw new Error('the sandbox has no execd endpoint (is it running?)');
    return c;
  }

  #cwd(cwd) {
    return resolveCwd(cwd, this.sandbox?.workingDirectory);
  }

  // The native process retains no output of its own (0): every byte reaches the handle, whose Mastra buffers keep
  // the newest maxRetainedBytes per stream; a copy in C would only be copied again into JS at the exit, unused.
  #start(c, { command = null, cwd = null, env = {}, stdinIgnore = false, timeout = 0, pid = null }, sink) {
    return binding.processStart(
      c.baseUrl, pairs(c.headers), c.requestTimeoutMs ?? 30000, 0,
      command, cwd, pairs(env), stdinIgnore, timeout ?? 0, this.#ackWaitS, pid, 0,
      (o, e) => sink.push(o, e), c.caFile ?? null,
    );
  }

  async spawn(command, options = {}) {
    if (typeof command !== 'string' || command.trim() === '') throw new TypeError('command must be a non-empty string');
    const timeout = options.timeout;
    if (timeout !== undefined && (typeof timeout !== 'number' || !Number.isFinite(timeout) || timeout < 0)) {
      throw new TypeError('timeout must be a number of milliseconds >= 0');
    }
    // a failed POST /pty started nothing (the wrapper waits for our go line): any failure may be retried
    const { native, pid, sink } = await this.#recover(async () => {
      const sink = makeSink();
      const conn = this.#conn();
      const native = this.#start(conn, {
        command,
        cwd: this.#cwd(options.cwd),
        env: { ...this.env, ...options.env },
        stdinIgnore: options.stdinMode === 'ignore',
        timeout: timeout ? Math.ceil(timeout) : 0,
      }, sink);
      try {
        return { native, sink, pid: await native.started };
      } catch (e) {
        throw fromNative(e, { operation: 'spawn process', secrets: Object.values(conn.headers ?? {}) });
      }
    }, { anyTransport: true });
    const handle = new OpenSandboxProcessHandle(native, pid, sink, options);
    this._tracked.set(pid, handle);
    return handle;
  }

  async list() {
    return Array.from(this._tracked.values()).map((h) => ({
      pid: h.pid,
      ...(h.command !== undefined ? { command: h.command } : {}),
      running: h.exitCode === undefined,
      ...(h.exitCode !== undefined ? { exitCode: h.exitCode } : {}),
    }));
  }

  /**
   * A tracked process, or — for a pid of this provider not tracked here (e.g. spawned before a restart) — a new
   * handle attached to it that replays the output execd still holds. Unknown pid -> undefined.
   */
  async get(pid) {
    if (typeof pid !== 'string') return undefined;
    const tracked = this._tracked.get(pid);
    if (tracked) return tracked;
    if (!PID_RE.test(pid)) return undefined;
    // a sandbox gone behind our back is provisioned again; the pid is then unknown there (undefined)
    const attached = await this.#recover(async () => {
      const sink = makeSink();
      const conn = this.#conn();
      const native = this.#start(conn, { pid }, sink);
      try {
        await native.started;
      } catch (e) {
        if (e?.code === 'PROCESS_NOT_FOUND') return undefined;
        throw fromNative(e, { operation: `attach to process ${pid}`, secrets: Object.values(conn.headers ?? {}) });
      }
      return { native, sink };
    }, { anyTransport: true });
    if (!attached) return undefined;
    const { native, sink } = attached;
    const handle = new OpenSandboxProcessHandle(native, pid, sink, {});
    this._tracked.set(pid, handle);
    return handle;
  }

  /** Kills every tracked process that is still running (stop/destroy of the sandbox). */
  async killAll() {
    const running = Array.from(this._tracked.values()).filter((h) => h.exitCode === undefined);
    await Promise.all(running.map((h) => this.kill(h.pid).catch(() => false)));
  }
}
