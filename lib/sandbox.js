// OpenSandboxSandbox: a Mastra workspace sandbox (MastraSandbox subclass) backed by one OpenSandbox sandbox.
// Lifecycle (create / find by logical id / pause / resume / delete) goes through the native Lifecycle client,
// commands through the native Execd client. This file is the Mastra lifecycle; the concerns it wires in live in
// their own modules: commands.js (command requests and results), mounts.js (workspace mounts as host volumes),
// ports.js (port URLs), keepalive.js, files.js, recovery.js, checkpoints.js, template.js, handle.js (the raw handle).
import { setTimeout as delay } from 'node:timers/promises';
import { MastraSandbox, SandboxAbortError, SandboxNotReadyError } from '@mastra/core/workspace';
import { Lifecycle, Execd, binding } from './native.js';
import { OpenSandboxProcessManager } from './process-manager.js';
import { normalizeOptions, normalizeCommandCall } from './options.js';
import { LOGICAL_ID_LABEL, encodeLogicalId } from './labels.js';
import { fromNative, OpenSandboxError, OpenSandboxNotFoundError, OpenSandboxSandboxGoneError, OpenSandboxTimeoutError, OpenSandboxTransportError } from './errors.js';
import { parseResources, resourceWarnings } from './resources.js';
import { normalizeFiles, uploadFiles } from './files.js';
import { KeepAlive } from './keepalive.js';
import { SnapshotClient } from './snapshots.js';
import { Checkpoints, checkpointCandidates } from './checkpoints.js';
import { TEMPLATE_BUILD_LABEL, buildTemplate, templateStart } from './template.js';
import { BUILD_TEMPLATE, setTemplateSandbox } from './template-standalone.js';
import { withRecovery } from './recovery.js';
import { PauseWatch } from './pause-watch.js';
import { MOUNTS_LABEL, HostMounts } from './mounts.js';
import { commandLine, commandRequest, abortedResult, toResult, batchDelivery } from './commands.js';
import { checkPort, portNotExposable, portUrl } from './ports.js';
import { rawHandle } from './handle.js';

export const EXECD_PORT = 44772;
/** Upstream's egress sidecar (its /policy API), on every sandbox created with egress rules. */
export const EGRESS_PORT = 18080;

const STATE_POLL_MS = 200;
// What each upstream state means to the client (docs/sandbox.md "States"): Running = attach; Pending (being created)
// and Allocated (Kubernetes: the pod has an IP, not ready yet) = wait for Running; Pausing = wait for Paused, then
// resume; Paused = resume; Resuming = wait for Running. All of them are the live sandbox of its logical id (a lookup
// during any of them reattaches, never creates a second one). Stopping, Terminated, Failed, Unknown and anything
// else: not live (a start creates a new sandbox).
const LIVE_STATES = ['Running', 'Paused', 'Pending', 'Allocated', 'Pausing', 'Resuming'];
const WAIT_STATES = ['Pending', 'Allocated', 'Pausing', 'Resuming', 'Paused'];
const TRANSIENT_STATES = ['Pending', 'Allocated', 'Pausing', 'Resuming']; // the server is moving it to another state

// pause answers of servers that cannot pause at all: 400 KUBERNETES::INVALID_STATE (agent-sandbox provider; a 409 of
// that code is BatchSandbox's "not now", e.g. already paused), 501 SANDBOX::API_NOT_SUPPORTED (Kubernetes before 0.1.13)
const pauseUnsupported = err => (err.status === 400 && err.code === 'KUBERNETES::INVALID_STATE') || err.status === 501;
const pauseWarned = new Set(); // "<server>|<code>" already warned about (once per server)
const resourcesWarned = new Set(); // resource warnings already given (once per process)

const stateOf = remote => String(remote?.status?.state ?? 'Unknown');
const toDate = s => (s ? new Date(s) : undefined);

export class OpenSandboxSandbox extends MastraSandbox {
  id;
  name = 'OpenSandboxSandbox';
  provider = 'opensandbox';
  status = 'pending';
  /**
   * snapshot() persists real checkpoints (OpenSandbox snapshots) that later starts boot from. Becomes false at start()
   * on a server without the Snapshots API (before 0.1.13), where snapshot() rejects with OpenSandboxUnsupportedError.
   */
  supportsCheckpoints = true;

  #cfg;
  #lifecycleClient;
  #createClient; // #lcCreate()
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
  #options; // the constructor options as given (for clone)
  #mounts = new HostMounts({ manager: () => this.mounts, logger: () => this.logger }); // lib/mounts.js
  #keepAlive;
  #uploads = 0; // writeFiles calls in flight (activity for the keep-alive)
  #checkpoints; // lib/checkpoints.js, created on first use
  #pause; // the last stop() that could not pause: { paused: false, supported, code, reason }
  #pauseWatch; // lib/pause-watch.js: a call that waits on a sandbox paused behind our back resumes it

  constructor(options = {}) {
    const cfg = normalizeOptions(options);
    let self;
    // Background processes (sandbox.processes): execd PTY sessions through the native process table.
    const processes = new OpenSandboxProcessManager({
      connection: () => self.#execdConnection(),
      recover: (attempt, opts) => self.#recovering(attempt, opts),
    });
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
    this.#options = { ...options };
    this.#cfg = cfg;
    this.id = cfg.id;
    this.networking = { getPortUrl: port => this.#getPortUrl(port) };
    this.#keepAlive = new KeepAlive({
      idleMs: cfg.idleTimeoutMinutes === undefined ? undefined : Math.round(cfg.idleTimeoutMinutes * 60000),
      busy: () => this.#inflight.size > 0 || this.#uploads > 0 || this.#runningProcesses() > 0,
      renew: at => this.#renewForKeepAlive(at),
      onError: err => this.logger.warn('OpenSandboxSandbox: keep-alive renew failed', { error: err.message }),
    });
    this.#remoteId = cfg.sandboxId;
    this.#explicitId = Boolean(cfg.sandboxId);
    this.#pauseWatch = new PauseWatch({
      subject: () => (this.status === 'running' && this.#execd ? this.#remoteId : undefined),
      state: async id => stateOf(await this.#lcCall(`get sandbox ${id}`, lc => lc.get(id))),
      snapshotting: async id => {
        const snaps = this.#snapshotClient();
        if (!(await snaps.available())) return false;
        const body = await snaps.list({ sandboxId: id, states: ['Creating'], page: 1, pageSize: 1 });
        return Array.isArray(body?.items) && body.items.length > 0;
      },
      resume: async id => {
        try {
          await this.#lcCall(`resume sandbox ${id}`, lc => lc.resume(id));
        } catch (err) {
          if (err.status !== 409) throw err; // 409: resumed by someone else meanwhile
        }
      },
      warn: (message, meta) => this.logger.warn(message, meta),
    });
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
    let extra = {}; // restoredFrom (checkpoint/seed/snapshot) of a created sandbox
    if (this.#remoteId) remote = await this.#reattachKnown(checkAbort);
    if (!remote) {
      const found = await this.#findByLogicalId();
      checkAbort();
      if (found) {
        remote = await this.#wake(found, checkAbort);
      } else {
        ({ remote, extra } = await this.#provision(checkAbort));
        outcome = 'created';
      }
    }
    try {
      checkAbort();
      await this.#attach(remote);
      this.#mounts.check(remote, outcome);
      await this.#keepAlive.start();
      // asked once per server (already known when this start looked for checkpoints); a failed question leaves it
      this.supportsCheckpoints = await this.#snapshotClient().available().catch(() => this.supportsCheckpoints);
    } catch (err) {
      // A sandbox we just created is deleted again (like the official SDK); one we reattached to is kept.
      if (outcome === 'created') {
        await this.#lc().delete(remote.id).catch(() => {});
        this.#forget();
      }
      throw err;
    }
    return { outcome, ...extra };
  }

  /**
   * Captures the sandbox into the checkpoint named by `checkpointName` (default: the caller-given `id`) and waits
   * until it is Ready (`snapshotTimeoutMs`, optional `abortSignal`); older checkpoints of that name beyond
   * `keepCheckpoints` are deleted. A paused sandbox is resumed for the capture and paused again. Concurrent calls
   * run one after the other; a failed capture (OpenSandboxSnapshotError) leaves the previous checkpoint in place.
   * No checkpoint name: resolves without doing anything (like Mastra's LocalSandbox).
   */
  async snapshot(options = {}) {
    const name = this.#cfg.checkpointName;
    if (!name) return;
    const { abortSignal, timeoutMs } = options ?? {};
    if (abortSignal?.aborted) throw new SandboxAbortError('snapshot', abortSignal.reason);
    await this.#snapshotClient().require(`snapshot into checkpoint ${name}`);
    await this.#checkpointStore().capture(name, () => this.#prepareCapture(), { abortSignal, timeoutMs });
  }

  /** The remote sandbox to capture, resumed if paused ({ sandboxId, release } for Checkpoints.capture). */
  async #prepareCapture() {
    const id = this.#remoteId;
    if (!id) throw new SandboxNotReadyError(this.id);
    const remote = await this.#lcCall(`get sandbox ${id}`, lc => lc.get(id));
    if (stateOf(remote) !== 'Paused') return { sandboxId: id };
    await this.#lcCall(`resume sandbox ${id}`, lc => lc.resume(id));
    await this.#waitForState(id, s => s === 'Running', 'resume');
    // paused again like stop() does it: every upstream answer, and the wait through Pausing (Kubernetes) for Paused
    return { sandboxId: id, release: () => this.#pauseRemote(id) };
  }

  /**
   * Pauses the sandbox (processes and files survive); foreground commands still running are cancelled first. A
   * server that cannot pause (Kubernetes: 400 KUBERNETES::INVALID_STATE, 501 SANDBOX::API_NOT_SUPPORTED) leaves it
   * running: warned once per server, reported by getInfo() (`pause`); Docker's 500
   * DOCKER::SANDBOX_PAUSE_FAILED is "already paused" (done) or "being committed by a snapshot" (left running).
   * Mastra's Workspace calls `_stop()`, which sets the status around this; called directly, a stop that paused (or
   * found the sandbox gone) leaves the status 'stopped' too, so that the next call starts (resumes) the sandbox again.
   */
  async stop() {
    const id = this.#remoteId;
    if (!id || this.#explicitId) return;
    this.#keepAlive.stop();
    await this.#cancelInflight();
    await this.processes.killAll();
    this.#execd = undefined;
    await this.#pauseRemote(id);
    // left running by a server that cannot pause: the status stays true ('running')
    if (!this.#pause) this.#stoppedDirectly();
  }

  /** stop()'s pause request and the wait for Paused, per upstream answer (see stop()). */
  async #pauseRemote(id) {
    for (let again = false; ; again = true) {
      try {
        await this.#lc().pause(id);
        break;
      } catch (e) {
        const err = this.#map(e, `pause sandbox ${id}`);
        if (err instanceof OpenSandboxNotFoundError) return this.#forget();
        if (pauseUnsupported(err)) return this.#leftRunning(err, true);
        if (err.code === 'DOCKER::SANDBOX_PAUSE_FAILED') {
          // Docker refuses to pause a paused container, and one that `docker commit` (a snapshot) is pausing
          const remote = await this.#waitForState(id, () => true, 'pause');
          if (!remote || stateOf(remote) === 'Paused') return (this.#pause = undefined);
          return this.#leftRunning(err, false);
        }
        if (err.status !== 409) throw err;
        // not pausable now: already paused, or between states (Pending/Allocated/Pausing/Resuming): once it settles,
        // Paused (or no longer live) is done, Running (it was being created or resumed) is paused once more
        const remote = await this.#waitForState(id, st => !TRANSIENT_STATES.includes(st), 'pause');
        if (!remote) return undefined;
        if (stateOf(remote) !== 'Running' || again) return (this.#pause = undefined);
      }
    }
    this.#pause = undefined;
    await this.#waitForState(id, s => s !== 'Pausing' && s !== 'Running', 'pause');
  }

  /** A stop() not wrapped by Mastra's _stop() (status still 'running'): the status says what happened. */
  #stoppedDirectly() {
    if (this.status === 'running') this.status = 'stopped';
  }

  /** stop() on a sandbox the server would not pause: it stays running (the next start reattaches to it). */
  #leftRunning(err, unsupported) {
    this.#pause = { paused: false, supported: !unsupported, code: err.code, reason: err.serverMessage };
    const key = `${this.#cfg.lifecycleBaseUrl}|${err.code}`;
    if (unsupported && pauseWarned.has(key)) return;
    if (unsupported) pauseWarned.add(key);
    this.logger.warn(`OpenSandboxSandbox: the server cannot pause sandbox ${this.#remoteId} (${err.code}); stop() left it running`, { error: err.message });
  }

  /** Deletes the sandbox (a sandbox already gone is fine); foreground commands still running are cancelled first. */
  async destroy() {
    const id = this.#remoteId;
    this.#keepAlive.stop();
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
    const full = commandLine(command, call);
    const started = Date.now();
    const base = { command: full, args: call.args };
    if (call.abortSignal?.aborted) return abortedResult(base, started);
    await this.ensureRunning();
    if (call.abortSignal?.aborted) return abortedResult(base, started); // aborted while the sandbox was starting
    const request = commandRequest(full, { ...call, maxRetainedBytes: call.maxRetainedBytes ?? this.#cfg.maxRetainedBytes }, this.getEnv(), this.workingDirectory);
    const onBatch = batchDelivery(call, () => this.logger);
    // every transport failure before the stream's init event means execd started nothing: safe to retry
    const r = await this.#recovering(() => this.#runOnce(request, onBatch, call.abortSignal), {
      anyTransport: true, aborted: () => call.abortSignal?.aborted,
    });
    this.#lastUsedAt = new Date();
    return { ...base, ...toResult(r, started) };
  }

  /** One POST /command on the current execd; rejects with typed errors. */
  async #runOnce(request, onBatch, abortSignal) {
    const execd = this.#execd;
    if (!execd || this.status !== 'running') throw new SandboxNotReadyError(this.id);
    this.#lastUsedAt = new Date();
    let cmd;
    try {
      cmd = execd.run(request, onBatch);
    } catch (e) {
      throw this.#map(e, 'run command');
    }
    const onAbort = () => cmd.cancel().catch(() => {});
    abortSignal?.addEventListener('abort', onAbort, { once: true });
    this.#inflight.add(cmd);
    this.#keepAlive.activity();
    try {
      return await cmd.result;
    } catch (e) {
      throw this.#map(e, 'run command');
    } finally {
      abortSignal?.removeEventListener('abort', onAbort);
      this.#inflight.delete(cmd);
      this.#keepAlive.activity();
    }
  }

  /**
   * Runs `attempt` (typed errors) through the dead-sandbox recovery (lib/recovery.js): a sandbox gone behind our back
   * resets the handle, and a request that provably started nothing is retried once on a newly provisioned sandbox.
   * Also used by the process manager and the code interpreter tools ([RECOVER]).
   */
  #recovering(attempt, { anyTransport = false, aborted } = {}) {
    return withRecovery({
      remoteId: () => this.#remoteId,
      goneError: (id, err) => this.#goneError(id, err),
      reset: id => {
        if (this.#remoteId !== id) return; // another call re-provisioned meanwhile
        this.#forget();
        if (this.status === 'running') this.status = 'stopped';
      },
      pausedElsewhere: async id => {
        const remote = await this.#lc().get(id).catch(() => null);
        if (this.#remoteId !== id || !['Pausing', 'Paused'].includes(stateOf(remote))) return false;
        // like a stop() of this handle: the next start resumes the same sandbox (and asks for its endpoint again)
        this.#keepAlive.stop();
        this.#execd = undefined;
        if (this.status === 'running') this.status = 'stopped';
        return true;
      },
      ensureRunning: () => this.ensureRunning(),
      aborted,
    }, () => this.#pauseWatch.track(attempt()), { anyTransport });
  }

  /** OpenSandboxSandboxGoneError when the lifecycle API says sandbox `id` is gone (404 or not live), else null. */
  async #goneError(id, err) {
    let perr;
    try {
      const remote = await this.#lc().get(id);
      if (LIVE_STATES.includes(stateOf(remote))) return null;
    } catch (probe) {
      perr = this.#map(probe, `get sandbox ${id}`);
      if (!(perr instanceof OpenSandboxNotFoundError)) return null;
    }
    const gone = new OpenSandboxSandboxGoneError(id, { operation: err.operation, serverMessage: perr?.serverMessage, requestId: perr?.requestId, code: perr?.code });
    gone.cause = err;
    return gone;
  }

  async #cancelInflight() {
    const cmds = [...this.#inflight];
    await Promise.all(cmds.map(c => c.cancel().catch(() => {})));
    await Promise.all(cmds.map(c => c.result.catch(() => {})));
  }

  // ---------------------------------------------------------------- files, ports, mounts, clone

  /**
   * Writes files in one execd upload request: relative paths resolve against the working directory, parent
   * directories are created, `mode` (0o001–0o777) is applied (default 0o644).
   */
  async writeFiles(files, options = {}) {
    const signal = options?.abortSignal;
    const batch = normalizeFiles(files, this.workingDirectory);
    if (batch.paths.length === 0) return;
    if (signal?.aborted) throw new SandboxAbortError('writeFiles', signal.reason);
    await this.ensureRunning();
    if (signal?.aborted) throw new SandboxAbortError('writeFiles', signal.reason);
    await this.#recovering(async () => {
      const conn = this.#execdConnection();
      if (!conn || this.status !== 'running') throw new SandboxNotReadyError(this.id);
      this.#lastUsedAt = new Date();
      this.#uploads++;
      this.#keepAlive.activity();
      try {
        await uploadFiles(conn, batch, { abortSignal: signal });
      } catch (e) {
        if (signal?.aborted) throw new SandboxAbortError('writeFiles', signal.reason);
        const done = e?.filesWritten ? ` (the first ${e.filesWritten}, in earlier requests, were written)` : '';
        throw this.#map(e, `write ${batch.paths.length} file(s)${done}`);
      } finally {
        this.#uploads--;
        this.#keepAlive.activity();
      }
      // writes are idempotent and whatever reached a sandbox confirmed gone went with it: any transport failure
      // (a cut mid-body, curl's "select/poll returned error" on a dying execd) is retried once on the new sandbox
    }, { anyTransport: true, aborted: () => signal?.aborted });
  }

  /**
   * `sandbox.networking.getPortUrl(port)`: the URL at which a server listening on `port` inside the sandbox is
   * reachable, from the endpoints API (scheme added, path prefix kept). null when the server cannot expose the
   * port, or when reaching it needs extra request headers (a plain URL would not work).
   */
  async #getPortUrl(port) {
    checkPort(port);
    await this.ensureRunning();
    let ep;
    try {
      // a 404 because our sandbox is gone: provisioned again, asked once more (a read: nothing started)
      ep = await this.#recovering(async () => {
        const id = this.#remoteId;
        if (!id) throw new SandboxNotReadyError(this.id);
        return await this.#endpointOf(id, port, `get endpoint of port ${port} of sandbox ${id}`);
      }, { anyTransport: true });
    } catch (err) {
      if (portNotExposable(err)) return null;
      throw err;
    }
    return portUrl(ep, this.#cfg.protocol, { serverProxy: this.#cfg.useServerProxy });
  }

  /**
   * Called by Mastra's MountManager after start. OpenSandbox volumes are fixed at creation: the workspace mounts
   * known at start became host volumes then, so for those this only reports the outcome. Anything else fails.
   */
  async mount(filesystem, mountPath) {
    const execd = this.#execd;
    return this.#mounts.mount(filesystem, mountPath, {
      created: Boolean(this.#remoteId),
      runCheck: execd ? (command, operation) => this.#execdRun(execd, command, '/', operation) : undefined,
    });
  }

  /** Forgets a mount. The host volume itself stays in the running sandbox until it is destroyed (volumes are fixed). */
  async unmount(mountPath) {
    this.#mounts.unmount(mountPath);
  }

  /**
   * An unstarted sibling with the same configuration: a new logical id (unless `id` is given), so it provisions
   * its own remote sandbox. Overrides: any constructor option, plus Mastra's clone options `env`,
   * `workingDirectory`, `idleTimeoutMinutes`, `sandboxId`, `id`, `checkpointName`, `seedCheckpointName`.
   * The checkpoint name is inherited only when it was given explicitly (a default one follows the clone's own id).
   */
  clone(overrides = {}) {
    if (overrides === null || typeof overrides !== 'object') throw new OpenSandboxError('clone: overrides must be an object', 'INVALID_OPTION', { kind: 'option' });
    const { actingUserId: _actingUserId, ...rest } = overrides;
    const options = { ...this.#options, env: { ...this.getEnv() }, ...rest };
    if (!('id' in rest)) delete options.id;
    if (!('sandboxId' in rest)) delete options.sandboxId;
    return new OpenSandboxSandbox(options);
  }

  #runningProcesses() {
    let n = 0;
    for (const h of this.processes?._tracked?.values() ?? []) if (h.exitCode === undefined) n++;
    return n;
  }

  async #renewForKeepAlive(at) {
    const id = this.#remoteId;
    if (!id || this.#explicitId) return undefined;
    const r = await this.#lcCall(`renew sandbox ${id}`, lc => lc.renew(id, at.toISOString()));
    if (this.#remote && r?.expiresAt) this.#remote = { ...this.#remote, expiresAt: r.expiresAt };
    return r;
  }

  // ---------------------------------------------------------------- info

  async getInfo() {
    const cfg = this.#cfg;
    const metadata = {
      id: cfg.id,
      domain: cfg.domain,
      protocol: cfg.protocol,
      ...(cfg.template ? { template: cfg.template.toJSON() }
        : cfg.snapshotId ? { snapshotId: cfg.snapshotId } : { image: typeof cfg.image === 'string' ? cfg.image : { uri: cfg.image.uri } }),
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
      ...(cfg.idleTimeoutMinutes !== undefined ? { idleTimeoutMinutes: cfg.idleTimeoutMinutes } : {}),
      ...(this.#options.checkpointName !== undefined ? { checkpointName: this.#options.checkpointName } : {}),
      ...(cfg.seedCheckpointName ? { seedCheckpointName: cfg.seedCheckpointName } : {}),
      ...(this.#options.keepCheckpoints !== undefined ? { keepCheckpoints: cfg.keepCheckpoints } : {}),
      ...(this.#options.snapshotTimeoutMs !== undefined ? { snapshotTimeoutMs: cfg.snapshotTimeoutMs } : {}),
      ...(this.#options.createTimeoutMs !== undefined ? { createTimeoutMs: cfg.createTimeoutMs } : {}),
      ...(Number.isFinite(this.#options.maxRetainedBytes) ? { maxRetainedBytes: cfg.maxRetainedBytes } : {}),
      // the remote id only when it was configured: otherwise a stored config reconnects by logical id
      ...(this.#options.sandboxId ? { sandboxId: this.#options.sandboxId } : {}),
    };
    const mounts = [];
    for (const [path, entry] of this.mounts?.entries ?? []) {
      if (entry.state === 'mounted') mounts.push({ path, filesystem: entry.filesystem?.provider ?? 'unknown' });
    }
    return {
      id: this.id,
      name: this.name,
      provider: this.provider,
      status: this.status,
      createdAt: toDate(this.#remote?.createdAt) ?? this.#constructedAt,
      lastUsedAt: this.#lastUsedAt,
      timeoutAt: toDate(this.#remote?.expiresAt),
      resources: parseResources(cfg.resources),
      mounts,
      metadata,
      // the last stop() left the sandbox running (the server could not pause it); not in metadata (the stored config)
      ...(this.#pause ? { pause: { ...this.#pause } } : {}),
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
    return rawHandle({
      id: this.id,
      remoteId: () => this.#remoteId,
      execdUrl: () => this.#execdUrl,
      endpoint: () => this.#endpoint,
      lifecycle: () => this.#lc(),
      execd: () => this.#execd,
      map: (e, operation) => this.#map(e, operation),
      snaps: this.#snapshotClient(),
      useServerProxy: this.#cfg.useServerProxy,
      egress: (kind, args, operation) => this.#egressOp(kind, args, operation),
    });
  }

  /**
   * @internal For this package's other execd clients (the code interpreter): `{ baseUrl, headers,
   * requestTimeoutMs, caFile }` of the current execd endpoint (headers include the access token: never log them), or
   * undefined while the sandbox is not running.
   */
  [Symbol.for('mastra-opensandbox.execdConnection')]() {
    if (!this.#execdUrl || !this.#endpoint) return undefined;
    const headers = { ...(this.#endpoint.headers ?? {}) };
    if (this.#cfg.execdAccessToken) headers['X-EXECD-ACCESS-TOKEN'] = this.#cfg.execdAccessToken;
    return { baseUrl: this.#execdUrl, headers, requestTimeoutMs: this.#cfg.requestTimeoutMs, caFile: this.#cfg.caFile };
  }

  /**
   * @internal OpenSandboxFilesystem's requests go through here: the sandbox is started on demand, `fn(conn)` (conn
   * as from the execdConnection symbol) runs as sandbox activity (keep-alive, last use), through the dead-sandbox
   * recovery like writeFiles' (a sandbox deleted behind our back: provisioned again and retried once when nothing
   * started, else OpenSandboxSandboxGoneError; execd's own FILE_NOT_FOUND is not a reason to ask the lifecycle server).
   */
  async [Symbol.for('mastra-opensandbox.fileRequest')](operation, fn, { anyTransport = false } = {}) {
    await this.ensureRunning();
    return this.#recovering(async () => {
      const conn = this[Symbol.for('mastra-opensandbox.execdConnection')]();
      if (!conn || this.status !== 'running') throw new SandboxNotReadyError(this.id);
      this.#lastUsedAt = new Date();
      this.#uploads++;
      this.#keepAlive.activity();
      try {
        return await fn(conn);
      } catch (e) {
        if (typeof e?.kind !== 'string') throw e; // the filesystem's own errors (Mastra's FileNotFoundError, …)
        throw this.#map(e, operation);
      } finally {
        this.#uploads--;
        this.#keepAlive.activity();
      }
    }, { anyTransport });
  }

  /**
   * @internal For this package's other clients of the sandbox (the code interpreter tools): runs `attempt` (typed
   * errors) through the dead-sandbox recovery (see #recovering and lib/recovery.js).
   */
  [Symbol.for('mastra-opensandbox.recover')](attempt, options) {
    return this.#recovering(attempt, options);
  }

  // ---------------------------------------------------------------- internals

  #lc() {
    if (!this.#lifecycleClient) {
      const { lifecycleBaseUrl, apiKey, requestTimeoutMs, caFile } = this.#cfg;
      this.#lifecycleClient = new Lifecycle({
        baseUrl: lifecycleBaseUrl, apiKey, requestTimeoutMs, caFile,
        // the server clock for the keep-alive's expiry times (lib/keepalive.js)
        onServerDate: (date, sentAt, receivedAt) => this.#keepAlive.anchor(date, sentAt, receivedAt, 1000),
      });
    }
    return this.#lifecycleClient;
  }

  /** The lifecycle client of creates: the same server with the create deadline (createTimeoutMs) per request. */
  #lcCreate() {
    if (!this.#createClient) {
      const { lifecycleBaseUrl, apiKey, createTimeoutMs, caFile } = this.#cfg;
      this.#createClient = new Lifecycle({
        baseUrl: lifecycleBaseUrl, apiKey, requestTimeoutMs: createTimeoutMs, caFile,
        onServerDate: (date, sentAt, receivedAt) => this.#keepAlive.anchor(date, sentAt, receivedAt, 1000),
      });
    }
    return this.#createClient;
  }

  #checkpointStore() {
    this.#checkpoints ??= new Checkpoints({
      snaps: this.#snapshotClient(),
      keep: this.#cfg.keepCheckpoints,
      timeoutMs: this.#cfg.snapshotTimeoutMs,
      onError: err => this.logger.warn('OpenSandboxSandbox: pruning old checkpoints failed', { error: err.message }),
    });
    return this.#checkpoints;
  }

  #snapshotClient() {
    return new SnapshotClient((operation, fn) => this.#lcCall(operation, fn), { server: this.#cfg.lifecycleBaseUrl });
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
    return { baseUrl: this.#execdUrl, headers: this.#execdHeaders, requestTimeoutMs: this.#cfg.requestTimeoutMs, caFile: this.#cfg.caFile };
  }

  #forget() {
    this.#keepAlive.stop();
    this.#mounts.clear();
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
    if (!LIVE_STATES.includes(stateOf(remote))) {
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

  /**
   * A new remote sandbox for a start that found none: from the newest checkpoint (or seed checkpoint) when there is
   * one, else from the `snapshotId` option, else from the image. Resolves { remote, extra } (extra.restoredFrom).
   */
  async #provision(checkAbort) {
    const cfg = this.#cfg;
    for await (const c of checkpointCandidates(this.#checkpointStore(), cfg)) {
      checkAbort();
      try {
        return { remote: await this.#create({ snapshotId: c.snapshotId }), extra: { restoredFrom: c.restoredFrom } };
      } catch (err) {
        // deleted or no longer Ready between the list and the create: the next candidate
        if (!(err instanceof OpenSandboxNotFoundError) && err.status !== 409) throw err;
        this.logger.warn(`OpenSandboxSandbox: cannot restore ${c.restoredFrom.kind} ${c.restoredFrom.name}`, { error: err.message });
      }
    }
    checkAbort();
    if (cfg.snapshotId) {
      await this.#snapshotClient().require(`create sandbox from snapshot ${cfg.snapshotId} (snapshotId option)`);
      return { remote: await this.#create({ snapshotId: cfg.snapshotId }), extra: { restoredFrom: { kind: 'snapshot', snapshotId: cfg.snapshotId } } };
    }
    if (cfg.template) {
      const templateId = cfg.template.templateId;
      const from = await templateStart(cfg.template, this.#templateContext(), async () => {
        const body = await this.#lcCall('list template builders', lc =>
          lc.list({ metadata: { [TEMPLATE_BUILD_LABEL]: templateId }, states: ['Pending', 'Allocated', 'Running'], page: 1, pageSize: 1 }));
        return (body?.items ?? []).length > 0;
      });
      checkAbort();
      return { remote: await this.#create(from.snapshotId ? { snapshotId: from.snapshotId } : {}), extra: from.extra };
    }
    return { remote: await this.#create(), extra: {} };
  }

  /** What lib/template.js needs to build this sandbox's template: a builder sandbox on the template's image. */
  #templateContext() {
    const o = this.#options;
    const connection = ['domain', 'apiKey', 'protocol', 'resources', 'networkPolicy', 'useServerProxy', 'execdAccessToken',
      'requestTimeoutMs', 'readyTimeoutMs', 'createTimeoutMs', 'timeoutSeconds', 'snapshotTimeoutMs'];
    const base = Object.fromEntries(connection.filter(k => o[k] !== undefined).map(k => [k, o[k]]));
    return {
      key: `${this.#cfg.lifecycleBaseUrl}|${this.#cfg.template.snapshotName}`,
      snaps: this.#snapshotClient(),
      timeoutMs: this.#cfg.snapshotTimeoutMs,
      makeBuilder: labels => new OpenSandboxSandbox({
        ...base, image: this.#cfg.template.image, metadata: labels, checkpointName: null,
        id: `template-build-${this.#cfg.template.templateId}-${Date.now().toString(36)}`,
      }),
    };
  }

  /** @internal template.build(): builds this sandbox's template (if not built yet) without provisioning it. */
  [BUILD_TEMPLATE]() {
    return buildTemplate(this.#cfg.template, this.#templateContext());
  }

  /** Creates the remote sandbox from the image, or from `source.snapshotId` (entrypoint only when configured). */
  async #create(source = {}) {
    const cfg = this.#cfg;
    const plan = this.#mounts.plan();
    const volumes = [...(cfg.volumes ?? []), ...plan.volumes];
    const request = {
      ...(source.snapshotId
        ? { snapshotId: source.snapshotId, ...(cfg.entrypointGiven ? { entrypoint: cfg.entrypoint } : {}) }
        : { image: typeof cfg.image === 'string' ? { uri: cfg.image } : cfg.image, entrypoint: cfg.entrypoint }),
      timeout: cfg.timeoutSeconds,
      resourceLimits: cfg.resources,
      metadata: {
        // Docker snapshots are `docker commit`s: a restore inherits the source's labels unless the create sets them
        ...(source.snapshotId ? { [TEMPLATE_BUILD_LABEL]: '', [MOUNTS_LABEL]: '' } : {}),
        ...cfg.metadata, [LOGICAL_ID_LABEL]: encodeLogicalId(cfg.id), ...(plan.hash ? { [MOUNTS_LABEL]: plan.hash } : {}),
      },
      ...(volumes.length ? { volumes } : {}),
      ...(cfg.networkPolicy ? { networkPolicy: cfg.networkPolicy } : {}),
    };
    for (const w of resourceWarnings(cfg.resources)) {
      if (resourcesWarned.has(w)) continue;
      resourcesWarned.add(w);
      this.logger.warn(`OpenSandboxSandbox: ${w}`);
    }
    let created;
    try {
      created = await this.#lcCall('create sandbox', () => this.#lcCreate().create(request));
    } catch (err) {
      // the server may have gone on creating it after our deadline (or a cut connection): adopt it, never a second one
      if (!(err instanceof OpenSandboxTimeoutError || err instanceof OpenSandboxTransportError)) throw err;
      const found = await this.#findByLogicalId().catch(() => null);
      if (!found) throw err;
      this.logger.warn(`OpenSandboxSandbox: create sandbox timed out; adopting sandbox ${found.id} the server created for it`, { error: err.message });
      created = found;
    }
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
    const deadline = Date.now() + this.#cfg.createTimeoutMs;
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
      } else if (!WAIT_STATES.includes(state)) {
        throw new OpenSandboxNotFoundError(`sandbox ${id} is ${state}, not running or paused`, {
          operation: `start sandbox ${id}`, status: 404, code: 'SANDBOX_NOT_LIVE',
        });
      }
      if (state === 'Pausing') resumed = false;
      if (Date.now() >= deadline) {
        throw new OpenSandboxTimeoutError(`start sandbox ${id}: still ${state} after ${this.#cfg.createTimeoutMs} ms (createTimeoutMs)`, {
          operation: `start sandbox ${id}`, timeoutMs: this.#cfg.createTimeoutMs,
        });
      }
      checkAbort();
      await delay(STATE_POLL_MS);
      remote = await this.#lcCall(`get sandbox ${id}`, lc => lc.get(id));
    }
  }

  async #waitForState(id, done, what) {
    const deadline = Date.now() + this.#cfg.createTimeoutMs;
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
        throw new OpenSandboxTimeoutError(`${what} sandbox ${id}: still ${stateOf(remote)} after ${this.#cfg.createTimeoutMs} ms (createTimeoutMs)`, {
          operation: `${what} sandbox ${id}`, timeoutMs: this.#cfg.createTimeoutMs,
        });
      }
      await delay(STATE_POLL_MS);
    }
  }

  /** Resolves execd for a running sandbox, waits for /ping, and makes sure the working directory exists. */
  async #attach(remote) {
    const cfg = this.#cfg;
    const id = remote.id;
    const ep = await this.#endpointOf(id, EXECD_PORT, `get execd endpoint of sandbox ${id}`);
    if (!ep || typeof ep.endpoint !== 'string' || ep.endpoint === '') {
      throw new OpenSandboxError(`get execd endpoint of sandbox ${id}: the server answered without an endpoint`, 'PROTOCOL', { kind: 'protocol' });
    }
    const headers = { ...(ep.headers ?? {}) };
    if (cfg.execdAccessToken) headers['X-EXECD-ACCESS-TOKEN'] = cfg.execdAccessToken;
    const baseUrl = /^https?:\/\//i.test(ep.endpoint) ? ep.endpoint.replace(/\/+$/, '') : `${cfg.protocol}://${ep.endpoint.replace(/\/+$/, '')}`;
    this.#endpoint = { endpoint: ep.endpoint, headers: ep.headers ?? {} };
    const execd = new Execd({ baseUrl, headers, requestTimeoutMs: cfg.requestTimeoutMs, caFile: cfg.caFile });
    try {
      await execd.waitReady(cfg.readyTimeoutMs);
    } catch (e) {
      throw this.#map(e, `wait for execd of sandbox ${id} (readyTimeoutMs ${cfg.readyTimeoutMs})`);
    }
    // mkdir -p through execd's files API (POST /directories): one request, no shell started in the sandbox
    const kv = Object.entries(headers).flatMap(([k, v]) => [k, String(v)]);
    const files = new binding.FilesClient(baseUrl, kv, cfg.requestTimeoutMs, 10000, cfg.caFile ?? null);
    try {
      await files.op('mkdir', [this.workingDirectory], null, null, 755, -1, -1, 0, 0).result;
    } catch (e) {
      if (e?.kind === 'api') {
        throw new OpenSandboxError(`start sandbox ${id}: cannot create the working directory ${this.workingDirectory}: ${e.message}`,
          'WORKING_DIRECTORY', { kind: 'internal', operation: 'start' });
      }
      throw this.#map(e, `create working directory in sandbox ${id}`);
    }
    this.#remote = remote;
    this.#remoteId = id;
    this.#explicitId = false;
    this.#execdUrl = baseUrl;
    this.#execdHeaders = headers;
    this.#execd = execd;
  }

  /**
   * One call of the egress sidecar's /policy API (upstream's port 18080, its endpoint and OPENSANDBOX-EGRESS-AUTH
   * header from the lifecycle API): kind policyGet (resolves the policy object), policyPatch (args: action, target
   * pairs), policyDelete (args: targets). The request and the answer's check are the native files client's.
   */
  async #egressOp(kind, args, operation) {
    const cfg = this.#cfg;
    const id = this.#remoteId;
    if (!id) throw new SandboxNotReadyError(this.id);
    const ep = await this.#endpointOf(id, EGRESS_PORT, `get egress endpoint of sandbox ${id}`);
    if (!ep || typeof ep.endpoint !== 'string' || ep.endpoint === '') {
      throw new OpenSandboxError(`${operation} ${id}: the server answered without an endpoint for port ${EGRESS_PORT}`, 'PROTOCOL', { kind: 'protocol' });
    }
    const baseUrl = /^https?:\/\//i.test(ep.endpoint) ? ep.endpoint.replace(/\/+$/, '') : `${cfg.protocol}://${ep.endpoint.replace(/\/+$/, '')}`;
    const kv = Object.entries(ep.headers ?? {}).flatMap(([k, v]) => [k, String(v)]);
    const client = new binding.FilesClient(baseUrl, kv, cfg.requestTimeoutMs, 10000, cfg.caFile ?? null);
    try {
      return await client.op(kind, args, null, null, 0, -1, -1, 0, 0).result;
    } catch (e) {
      throw this.#map(e, `${operation} ${id}`);
    }
  }

  /**
   * GET …/endpoints/{port}: Kubernetes answers 404 KUBERNETES::POD_IP_NOT_AVAILABLE until the pod has an IP (its
   * informer lags the pod), so that answer is asked again within readyTimeoutMs.
   */
  async #endpointOf(id, port, operation) {
    const deadline = Date.now() + this.#cfg.readyTimeoutMs;
    for (;;) {
      try {
        return await this.#lcCall(operation, lc => lc.endpoint(id, port, this.#cfg.useServerProxy));
      } catch (err) {
        if (err.code !== 'KUBERNETES::POD_IP_NOT_AVAILABLE' || Date.now() >= deadline) throw err;
      }
      await delay(STATE_POLL_MS);
    }
  }

  async #execdRun(execd, command, cwd, operation) {
    try {
      return await execd.run({ command, cwd, envs: {}, timeoutMs: this.#cfg.requestTimeoutMs, maxRetainedBytes: 65536 }).result;
    } catch (e) {
      throw this.#map(e, operation);
    }
  }
}

setTemplateSandbox(OpenSandboxSandbox);
