// OpenSandboxSandbox: a Mastra workspace sandbox (MastraSandbox subclass) backed by one OpenSandbox sandbox.
// Lifecycle (create / find by logical id / pause / resume / delete) goes through the native Lifecycle client,
// commands through the native Execd client; this file only speaks Mastra and maps results and errors.
import { setTimeout as delay } from 'node:timers/promises';
import { MastraSandbox, SandboxAbortError, SandboxNotReadyError } from '@mastra/core/workspace';
import { Lifecycle, Execd } from './native.js';
import { OpenSandboxProcessManager } from './process-manager.js';
import { normalizeOptions, normalizeCommandCall, shellQuote } from './options.js';
import { LOGICAL_ID_LABEL, encodeLogicalId } from './labels.js';
import { fromNative, OpenSandboxError, OpenSandboxNotFoundError, OpenSandboxSandboxGoneError, OpenSandboxTimeoutError } from './errors.js';
import { parseResources } from './resources.js';

export const EXECD_PORT = 44772;
/** Exit code reported for a command stopped through its abortSignal (like a shell's 128 + SIGINT). */
export const ABORTED_EXIT_CODE = 130;
/** Exit code reported for a command that timed out (like coreutils `timeout`). */
export const TIMED_OUT_EXIT_CODE = 124;
/** Exit code reported for a command killed by a signal we did not send (execd reports -1). */
export const KILLED_EXIT_CODE = 137;
/** Exit code reported when execd could not start the command (its reason is appended to stderr). */
export const START_FAILED_EXIT_CODE = 1;

const STATE_POLL_MS = 200;
const LIVE_STATES = ['Running', 'Paused', 'Pending'];

const stateOf = remote => String(remote?.status?.state ?? 'Unknown');
const toDate = s => (s ? new Date(s) : undefined);

export class OpenSandboxSandbox extends MastraSandbox {
  id;
  name = 'OpenSandboxSandbox';
  provider = 'opensandbox';
  status = 'pending';

  #cfg;
  #lifecycleClient;
  #remoteId; // remote OpenSandbox sandbox id, once known
  #explicitId; // true while #remoteId comes from the sandboxId option and was never attached
  #remote; // last sandbox object seen from the server
  #endpoint; // { endpoint, headers } of execd
  #execdUrl;
  #execdHeaders; // execd headers incl. the access token (for the process manager)
  #execd;
  #inflight = new Set();
  #constructedAt = new Date();
  #lastUsedAt;

  constructor(options = {}) {
    const cfg = normalizeOptions(options);
    let self;
    // Background processes (sandbox.processes): execd PTY sessions through the native process table.
    const processes = new OpenSandboxProcessManager({ connection: () => self.#execdConnection() });
    super({
      processes,
      name: 'OpenSandboxSandbox',
      env: cfg.env,
      workingDirectory: cfg.workingDirectory,
      onStart: cfg.onStart,
      onStop: cfg.onStop,
      onDestroy: cfg.onDestroy,
    });
    self = this;
    this.#cfg = cfg;
    this.id = cfg.id;
    this.#remoteId = cfg.sandboxId;
    this.#explicitId = Boolean(cfg.sandboxId);
  }

  // ---------------------------------------------------------------- lifecycle (called through _start/_stop/_destroy)

  /**
   * Attaches to the remote sandbox: the `sandboxId` given (or the one from an earlier start), else the newest live
   * sandbox labelled with this logical id, else a new one. Paused sandboxes are resumed. Then resolves execd and
   * waits until it answers /ping.
   */
  async start(options) {
    const signal = options?.abortSignal;
    const checkAbort = () => {
      if (signal?.aborted) throw new SandboxAbortError('start', signal.reason);
    };
    checkAbort();
    let remote = null;
    let outcome = 'connected';
    if (this.#remoteId) remote = await this.#reattachKnown(checkAbort);
    if (!remote) {
      const found = await this.#findByLogicalId();
      checkAbort();
      if (found) {
        remote = await this.#wake(found, checkAbort);
      } else {
        remote = await this.#create();
        outcome = 'created';
      }
    }
    try {
      checkAbort();
      await this.#attach(remote);
    } catch (err) {
      // A sandbox we just created is deleted again (like the official SDK); one we reattached to is kept.
      if (outcome === 'created') {
        await this.#lc().delete(remote.id).catch(() => {});
        this.#forget();
      }
      throw err;
    }
    return { outcome };
  }

  /** Pauses the sandbox (processes and files survive); foreground commands still running are cancelled first. */
  async stop() {
    const id = this.#remoteId;
    if (!id || this.#explicitId) return;
    await this.#cancelInflight();
    await this.processes.killAll();
    this.#execd = undefined;
    try {
      await this.#lc().pause(id);
    } catch (e) {
      const err = this.#map(e, `pause sandbox ${id}`);
      if (err instanceof OpenSandboxNotFoundError) return this.#forget();
      if (err.status !== 409) throw err;
    }
    await this.#waitForState(id, s => s !== 'Pausing' && s !== 'Running', 'pause');
  }

  /** Deletes the sandbox (a sandbox already gone is fine); foreground commands still running are cancelled first. */
  async destroy() {
    const id = this.#remoteId;
    await this.#cancelInflight();
    await this.processes.killAll();
    this.#execd = undefined;
    if (id) {
      try {
        await this.#lc().delete(id);
      } catch (e) {
        const err = this.#map(e, `delete sandbox ${id}`);
        if (!(err instanceof OpenSandboxNotFoundError)) throw err; // the id is kept: destroy can be retried
      }
    }
    this.#forget();
  }

  // ---------------------------------------------------------------- commands

  async executeCommand(command, args, options) {
    const call = normalizeCommandCall(command, args, options);
    const full = call.args.length ? `${command} ${call.args.map(shellQuote).join(' ')}` : command;
    const started = Date.now();
    const base = { command: full, args: call.args };
    const abortedBeforeRun = () =>
      ({ ...base, success: false, exitCode: ABORTED_EXIT_CODE, stdout: '', stderr: '', executionTimeMs: Date.now() - started, timedOut: false, killed: true });
    if (call.abortSignal?.aborted) return abortedBeforeRun();
    await this.ensureRunning();
    if (call.abortSignal?.aborted) return abortedBeforeRun(); // aborted while the sandbox was starting
    const execd = this.#execd;
    if (!execd || this.status !== 'running') throw new SandboxNotReadyError(this.id);
    this.#lastUsedAt = new Date();

    const envs = {};
    for (const [k, v] of Object.entries({ ...this.getEnv(), ...call.env })) if (v !== undefined) envs[k] = String(v);
    const request = { command: full, cwd: call.cwd ?? this.workingDirectory, envs, timeoutMs: call.timeoutMs, maxRetainedBytes: call.maxRetainedBytes };
    const onBatch = call.onStdout || call.onStderr ? batch => this.#deliver(batch, call) : undefined;

    let cmd;
    try {
      cmd = execd.run(request, onBatch);
    } catch (e) {
      throw this.#map(e, 'run command');
    }
    const onAbort = () => cmd.cancel().catch(() => {});
    call.abortSignal?.addEventListener('abort', onAbort, { once: true });
    this.#inflight.add(cmd);
    let r;
    try {
      r = await cmd.result;
    } catch (e) {
      throw await this.#commandFailure(e);
    } finally {
      call.abortSignal?.removeEventListener('abort', onAbort);
      this.#inflight.delete(cmd);
    }
    this.#lastUsedAt = new Date();
    return { ...base, ...this.#toResult(r, started) };
  }

  #toResult(r, started) {
    let exitCode = r.exitCode;
    let killed = false;
    let startFailure;
    if (r.timedOut) {
      exitCode = TIMED_OUT_EXIT_CODE;
      killed = true;
    } else if (r.cancelled) {
      exitCode = ABORTED_EXIT_CODE;
      killed = true;
    } else if (typeof exitCode !== 'number' || exitCode < 0) {
      // execd reports -1 both for a process killed by a signal ("signal: killed") and for a start failure
      // (the reason in the error text): the first is a kill, the second a plain failure with the reason on stderr.
      if (/^signal: /m.test(r.errorText ?? '')) {
        exitCode = KILLED_EXIT_CODE;
        killed = true;
      } else {
        exitCode = START_FAILED_EXIT_CODE;
        startFailure = r.errorText || 'the command could not be started';
      }
    }
    let stderr = r.stderr ?? '';
    if (startFailure) stderr += (stderr && !stderr.endsWith('\n') ? '\n' : '') + startFailure;
    const stdoutDroppedBytes = r.stdoutDroppedBytes || 0;
    const stderrDroppedBytes = r.stderrDroppedBytes || 0;
    return {
      success: exitCode === 0,
      exitCode,
      stdout: r.stdout ?? '',
      stderr,
      executionTimeMs: Date.now() - started,
      timedOut: Boolean(r.timedOut),
      killed,
      stdoutTruncated: stdoutDroppedBytes > 0,
      stderrTruncated: stderrDroppedBytes > 0,
      stdoutDroppedBytes,
      stderrDroppedBytes,
    };
  }

  /** Calls the user's streaming callbacks; a throwing callback is logged, never allowed to break the stream. */
  #deliver(batch, call) {
    for (const [text, cb] of [[batch.stdout, call.onStdout], [batch.stderr, call.onStderr]]) {
      if (!text || !cb) continue;
      try {
        cb(text);
      } catch (err) {
        this.logger.warn('OpenSandboxSandbox: output callback threw', { error: err instanceof Error ? err.message : String(err) });
      }
    }
  }

  /** Maps a rejected command; when the sandbox itself is gone the handle resets so the next call re-provisions. */
  async #commandFailure(e) {
    const err = this.#map(e, 'run command');
    const suspicious = err.kind === 'transport' || (err.kind === 'api' && [404, 502, 503].includes(err.status));
    const id = this.#remoteId;
    if (!suspicious || !id) return err;
    try {
      await this.#lc().get(id);
      return err;
    } catch (probe) {
      const perr = this.#map(probe, `get sandbox ${id}`);
      if (!(perr instanceof OpenSandboxNotFoundError)) return err;
      this.#forget();
      if (this.status === 'running') this.status = 'stopped';
      const gone = new OpenSandboxSandboxGoneError(id, { operation: 'run command', serverMessage: perr.serverMessage, requestId: perr.requestId, code: perr.code });
      gone.cause = err;
      return gone;
    }
  }

  async #cancelInflight() {
    const cmds = [...this.#inflight];
    await Promise.all(cmds.map(c => c.cancel().catch(() => {})));
    await Promise.all(cmds.map(c => c.result.catch(() => {})));
  }

  // ---------------------------------------------------------------- info

  async getInfo() {
    const cfg = this.#cfg;
    const metadata = {
      id: cfg.id,
      domain: cfg.domain,
      protocol: cfg.protocol,
      image: typeof cfg.image === 'string' ? cfg.image : { uri: cfg.image.uri },
      entrypoint: [...cfg.entrypoint],
      timeoutSeconds: cfg.timeoutSeconds,
      resources: { ...cfg.resources },
      metadata: { ...cfg.metadata },
      ...(cfg.volumes ? { volumes: structuredClone(cfg.volumes) } : {}),
      ...(cfg.networkPolicy ? { networkPolicy: structuredClone(cfg.networkPolicy) } : {}),
      useServerProxy: cfg.useServerProxy,
      requestTimeoutMs: cfg.requestTimeoutMs,
      readyTimeoutMs: cfg.readyTimeoutMs,
      workingDirectory: cfg.workingDirectory,
      ...(typeof cfg.instructions === 'string' ? { instructions: cfg.instructions } : {}),
      ...(this.#remoteId ? { sandboxId: this.#remoteId } : {}),
    };
    return {
      id: this.id,
      name: this.name,
      provider: this.provider,
      status: this.status,
      createdAt: toDate(this.#remote?.createdAt) ?? this.#constructedAt,
      lastUsedAt: this.#lastUsedAt,
      timeoutAt: toDate(this.#remote?.expiresAt),
      resources: parseResources(cfg.resources),
      metadata,
    };
  }

  getInstructions(opts) {
    const wd = this.workingDirectory;
    const defaultInstructions =
      `OpenSandbox sandbox (a remote Linux container). Shell commands run with bash in "${wd}" unless a cwd is given. ` +
      `Files in ${wd} and /tmp persist across commands and across stop/start (the sandbox is paused, not deleted); ` +
      'everything is deleted when the sandbox is destroyed.';
    const ins = this.#cfg.instructions;
    if (typeof ins === 'string') return ins;
    if (typeof ins === 'function') return ins({ defaultInstructions, requestContext: opts?.requestContext });
    return defaultInstructions;
  }

  /**
   * The raw OpenSandbox handle for features Mastra does not model: the remote id, the execd endpoint, and the
   * lifecycle calls bound to this sandbox. Calls through it bypass `status` (e.g. pause() here does not mark the
   * sandbox stopped). Errors are the typed errors of this package.
   */
  get opensandbox() {
    const self = this;
    const need = () => {
      if (!self.#remoteId) throw new SandboxNotReadyError(self.id);
      return self.#remoteId;
    };
    const call = async (what, fn) => {
      const id = need();
      try {
        return await fn(self.#lc(), id);
      } catch (e) {
        throw self.#map(e, `${what} ${id}`);
      }
    };
    return {
      get sandboxId() {
        return self.#remoteId;
      },
      get execdUrl() {
        return self.#execdUrl;
      },
      get endpointHeaders() {
        return self.#endpoint ? Object.keys(self.#endpoint.headers ?? {}) : [];
      },
      get lifecycle() {
        return self.#lc();
      },
      get execd() {
        return self.#execd;
      },
      get: () => call('get sandbox', (lc, id) => lc.get(id)),
      pause: () => call('pause sandbox', (lc, id) => lc.pause(id)),
      resume: () => call('resume sandbox', (lc, id) => lc.resume(id)),
      renew: at => call('renew sandbox', (lc, id) => lc.renew(id, renewTime(at))),
      endpoint: (port, useServerProxy = self.#cfg.useServerProxy) => call('get endpoint of sandbox', (lc, id) => lc.endpoint(id, port, useServerProxy)),
      patchMetadata: patch => call('patch metadata of sandbox', (lc, id) => lc.patchMetadata(id, patch)),
    };
  }

  /**
   * @internal For this package's other execd clients (the code interpreter): `{ baseUrl, headers,
   * requestTimeoutMs }` of the current execd endpoint (headers include the access token: never log them), or
   * undefined while the sandbox is not running.
   */
  [Symbol.for('mastra-opensandbox.execdConnection')]() {
    if (!this.#execdUrl || !this.#endpoint) return undefined;
    const headers = { ...(this.#endpoint.headers ?? {}) };
    if (this.#cfg.execdAccessToken) headers['X-EXECD-ACCESS-TOKEN'] = this.#cfg.execdAccessToken;
    return { baseUrl: this.#execdUrl, headers, requestTimeoutMs: this.#cfg.requestTimeoutMs };
  }

  // ---------------------------------------------------------------- internals

  #lc() {
    if (!this.#lifecycleClient) {
      const { lifecycleBaseUrl, apiKey, requestTimeoutMs } = this.#cfg;
      this.#lifecycleClient = new Lifecycle({ baseUrl: lifecycleBaseUrl, apiKey, requestTimeoutMs });
    }
    return this.#lifecycleClient;
  }

  #secrets() {
    return [this.#cfg.apiKey, this.#cfg.execdAccessToken, ...Object.values(this.#endpoint?.headers ?? {})];
  }

  #map(e, operation) {
    return fromNative(e, { operation, secrets: this.#secrets() });
  }

  async #lcCall(operation, fn) {
    try {
      return await fn(this.#lc());
    } catch (e) {
      throw this.#map(e, operation);
    }
  }

  /** The execd endpoint for the process manager; undefined until started. */
  #execdConnection() {
    if (!this.#execdUrl) return undefined;
    return { baseUrl: this.#execdUrl, headers: this.#execdHeaders, requestTimeoutMs: this.#cfg.requestTimeoutMs };
  }

  #forget() {
    this.#remoteId = undefined;
    this.#explicitId = false;
    this.#remote = undefined;
    this.#endpoint = undefined;
    this.#execdUrl = undefined;
    this.#execdHeaders = undefined;
    this.#execd = undefined;
  }

  /** The remote sandbox of #remoteId, woken up; null when it is gone (the handle is reset). */
  async #reattachKnown(checkAbort) {
    const id = this.#remoteId;
    let remote;
    try {
      remote = await this.#lcCall(`get sandbox ${id}`, lc => lc.get(id));
    } catch (err) {
      if (!(err instanceof OpenSandboxNotFoundError) || this.#explicitId) throw err;
      this.#forget();
      return null;
    }
    if (!LIVE_STATES.includes(stateOf(remote)) && !['Pausing', 'Resuming'].includes(stateOf(remote))) {
      if (this.#explicitId) {
        throw new OpenSandboxNotFoundError(`sandbox ${id} (sandboxId option) is ${stateOf(remote)}, not running or paused`, {
          operation: `get sandbox ${id}`, status: 404, code: 'SANDBOX_NOT_LIVE',
        });
      }
      this.#forget();
      return null;
    }
    return this.#wake(remote, checkAbort);
  }

  async #findByLogicalId() {
    const label = encodeLogicalId(this.#cfg.id);
    const body = await this.#lcCall('list sandboxes', lc =>
      lc.list({ metadata: { [LOGICAL_ID_LABEL]: label }, states: LIVE_STATES, page: 1, pageSize: 50 }));
    const items = (Array.isArray(body?.items) ? body.items : []).filter(s => s?.metadata?.[LOGICAL_ID_LABEL] === label);
    items.sort((a, b) => (Date.parse(b.createdAt) || 0) - (Date.parse(a.createdAt) || 0));
    return items[0] ?? null;
  }

  async #create() {
    const cfg = this.#cfg;
    const request = {
      image: typeof cfg.image === 'string' ? { uri: cfg.image } : cfg.image,
      entrypoint: cfg.entrypoint,
      timeout: cfg.timeoutSeconds,
      resourceLimits: cfg.resources,
      metadata: { ...cfg.metadata, [LOGICAL_ID_LABEL]: encodeLogicalId(cfg.id) },
      ...(cfg.volumes ? { volumes: cfg.volumes } : {}),
      ...(cfg.networkPolicy ? { networkPolicy: cfg.networkPolicy } : {}),
    };
    const created = await this.#lcCall('create sandbox', lc => lc.create(request));
    if (!created || typeof created.id !== 'string') {
      throw new OpenSandboxError('create sandbox: the server answered without a sandbox id', 'PROTOCOL', { kind: 'protocol', operation: 'create sandbox' });
    }
    this.#remoteId = created.id;
    try {
      return stateOf(created) === 'Running' ? created : await this.#wake(created, () => {});
    } catch (err) {
      await this.#lc().delete(created.id).catch(() => {});
      this.#forget();
      throw err;
    }
  }

  /** Brings a sandbox to Running: resumes it if paused, waits through Pending/Pausing/Resuming. */
  async #wake(remote, checkAbort) {
    const id = remote.id;
    this.#remoteId = id;
    const deadline = Date.now() + this.#cfg.readyTimeoutMs;
    let resumed = false;
    for (;;) {
      const state = stateOf(remote);
      if (state === 'Running') return remote;
      if (state === 'Paused' && !resumed) {
        try {
          await this.#lcCall(`resume sandbox ${id}`, lc => lc.resume(id));
        } catch (err) {
          if (err.status !== 409) throw err;
        }
        resumed = true;
      } else if (!['Pending', 'Pausing', 'Resuming', 'Paused'].includes(state)) {
        throw new OpenSandboxNotFoundError(`sandbox ${id} is ${state}, not running or paused`, {
          operation: `start sandbox ${id}`, status: 404, code: 'SANDBOX_NOT_LIVE',
        });
      }
      if (state === 'Pausing') resumed = false;
      if (Date.now() >= deadline) {
        throw new OpenSandboxTimeoutError(`start sandbox ${id}: still ${state} after ${this.#cfg.readyTimeoutMs} ms (readyTimeoutMs)`, {
          operation: `start sandbox ${id}`, timeoutMs: this.#cfg.readyTimeoutMs,
        });
      }
      checkAbort();
      await delay(STATE_POLL_MS);
      remote = await this.#lcCall(`get sandbox ${id}`, lc => lc.get(id));
    }
  }

  async #waitForState(id, done, what) {
    const deadline = Date.now() + this.#cfg.readyTimeoutMs;
    for (;;) {
      let remote;
      try {
        remote = await this.#lcCall(`get sandbox ${id}`, lc => lc.get(id));
      } catch (err) {
        if (err instanceof OpenSandboxNotFoundError) return this.#forget();
        throw err;
      }
      this.#remote = remote;
      if (done(stateOf(remote))) return remote;
      if (Date.now() >= deadline) {
        throw new OpenSandboxTimeoutError(`${what} sandbox ${id}: still ${stateOf(remote)} after ${this.#cfg.readyTimeoutMs} ms`, {
          operation: `${what} sandbox ${id}`, timeoutMs: this.#cfg.readyTimeoutMs,
        });
      }
      await delay(STATE_POLL_MS);
    }
  }

  /** Resolves execd for a running sandbox, waits for /ping, and makes sure the working directory exists. */
  async #attach(remote) {
    const cfg = this.#cfg;
    const id = remote.id;
    const ep = await this.#lcCall(`get execd endpoint of sandbox ${id}`, lc => lc.endpoint(id, EXECD_PORT, cfg.useServerProxy));
    if (!ep || typeof ep.endpoint !== 'string' || ep.endpoint === '') {
      throw new OpenSandboxError(`get execd endpoint of sandbox ${id}: the server answered without an endpoint`, 'PROTOCOL', { kind: 'protocol' });
    }
    const headers = { ...(ep.headers ?? {}) };
    if (cfg.execdAccessToken) headers['X-EXECD-ACCESS-TOKEN'] = cfg.execdAccessToken;
    const baseUrl = /^https?:\/\//i.test(ep.endpoint) ? ep.endpoint.replace(/\/+$/, '') : `${cfg.protocol}://${ep.endpoint.replace(/\/+$/, '')}`;
    this.#endpoint = { endpoint: ep.endpoint, headers: ep.headers ?? {} };
    const execd = new Execd({ baseUrl, headers, requestTimeoutMs: cfg.requestTimeoutMs });
    try {
      await execd.waitReady(cfg.readyTimeoutMs);
    } catch (e) {
      throw this.#map(e, `wait for execd of sandbox ${id} (readyTimeoutMs ${cfg.readyTimeoutMs})`);
    }
    const mk = await this.#execdRun(execd, `mkdir -p ${shellQuote(this.workingDirectory)}`, '/', `create working directory in sandbox ${id}`);
    if (mk.exitCode !== 0) {
      throw new OpenSandboxError(
        `start sandbox ${id}: cannot create the working directory ${this.workingDirectory}: ${(mk.stderr || mk.errorText || '').trim()}`,
        'WORKING_DIRECTORY', { kind: 'internal', operation: 'start' });
    }
    this.#remote = remote;
    this.#remoteId = id;
    this.#explicitId = false;
    this.#execdUrl = baseUrl;
    this.#execdHeaders = headers;
    this.#execd = execd;
  }

  async #execdRun(execd, command, cwd, operation) {
    try {
      return await execd.run({ command, cwd, envs: {}, timeoutMs: this.#cfg.requestTimeoutMs, maxRetainedBytes: 65536 }).result;
    } catch (e) {
      throw this.#map(e, operation);
    }
  }
}

function renewTime(at) {
  if (at instanceof Date) return at.toISOString();
  if (typeof at === 'number' && Number.isFinite(at) && at > 0) return new Date(Date.now() + at * 1000).toISOString();
  if (typeof at === 'string' && !Number.isNaN(Date.parse(at))) return at;
  throw new OpenSandboxError('renew: expected a Date, an RFC 3339 string or a number of seconds from now', 'INVALID_OPTION', { kind: 'option' });
}
