// The sandbox registry of the local server: create (volumes resolved, execd started, relay opened), get/list
// views, pause/resume, renew and TTL expiry, metadata patches, delete. Errors are ApiError with upstream codes.
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ApiError, DISK_LIMIT_KEY, checkMetadata, parseResourceLimits } from './validate.js';
import { SandboxProcess, startEntrypoint } from './runner.js';
import { startRelay } from './relay.js';
import { newToken } from './security.js';
import { hostPathRule, resolveVolumes } from './volumes.js';
import { sandboxNetwork } from './network.js';
import { upstreamProfile } from './upstream.js';
import { parseReference } from './images/reference.js';
import { resolveImageUser } from './images/user.js';

const MAX_TIMER_MS = 2 ** 31 - 1;

function iso(ms) {
  const d = new Date(ms);
  if (Number.isNaN(d.getTime())) return null;
  return d.toISOString().replace(/Z$/, '000Z'); // microseconds, like Python's isoformat
}

/**
 * "123.4 ms: request 0.3, disk 20.1, spawn 4.4, …": a create's phases (in order; the total is their sum). request:
 * from the request's arrival to the start (validation, volumes); then the disk image, a restore, the runner's phases
 * (runner.js SandboxProcess.phases), relay: the entrypoint (when not the default) and the relay.
 */
export function phasesText(timing) {
  const total = timing.reduce((n, [, ms]) => n + ms, 0);
  return `${total.toFixed(1)} ms: ${timing.map(([name, ms]) => `${name} ${ms.toFixed(1)}`).join(', ')}`;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms).unref());
const PROGRESS_LOG_MS = 2000;

/** What a sandbox's record keeps of its create request (arrived at `at`, ms): both a sandbox and a pulling record list it. */
function requestFields(req, at) {
  return {
    image: req.image, snapshotId: req.snapshotId, entrypoint: req.entrypoint, metadata: req.metadata,
    platform: req.platform ?? { os: 'linux', arch: process.arch === 'x64' ? 'amd64' : process.arch }, platformRequested: req.platform != null,
    createdAt: at, exitCode: null, expiresAt: req.timeout == null ? null : at + req.timeout * 1000,
  };
}

/**
 * A pull's progress (the store's onProgress, called per chunk) as server log lines, bounded: one line per layer once
 * it is complete (or was stored already), and between those at most one every PROGRESS_LOG_MS with the bytes so far.
 */
function pullProgressLog(prefix, log) {
  if (!log) return undefined;
  const layers = new Map(); // digest -> { bytes, total, done }
  let last = Date.now();
  return ({ layer, bytes, total, cached }) => {
    let l = layers.get(layer);
    if (!l) layers.set(layer, (l = { bytes: 0, total, done: false }));
    if (l.done) return;
    l.bytes = bytes;
    l.total = total;
    if (total != null && bytes >= total) {
      l.done = true;
      log(`${prefix}: layer ${layer.slice(0, 19)} ${cached ? 'already stored' : `done, ${total} bytes`}`);
      return;
    }
    if (Date.now() - last < PROGRESS_LOG_MS) return;
    last = Date.now();
    const all = [...layers.values()];
    log(`${prefix}: ${all.reduce((n, x) => n + x.bytes, 0)}/${all.reduce((n, x) => n + (x.total ?? 0), 0)} bytes of the ${all.length} layers started`);
  };
}

export class Sandboxes {
  /**
   * options: { dataDir, allowedHostPaths, isolation, bwrap, hardening, execdToken, commandTailMs, ptyExitRace,
   * signalForwarding, ptyCloseLinger, endpointHeaders, network, defaultNetwork, log, limits, volumesProblem, profile }.
   * defaultNetwork: whether a create without networkPolicy gets network. volumesProblem: why this bwrap cannot mount
   * volumes race-free (runner.js bindFdProblem), or null. execdToken: execd's X-EXECD-ACCESS-TOKEN
   * (through a pipe: never in environ or argv). network: { slirp4netns, problem, insecure } (network.js) for bwrap. limits:
   * { cgroups (cgroups.js, or null), cgroupsWhy, disks (disk.js, or null), disksWhy, unenforced, maxPids (0: no cap),
   * diskLimit (bytes), defaultMemory (bytes, 0: none) }. profile: the emulated upstream deployment (upstream.js; default:
   * the local behaviour).
   */
  constructor(options) {
    this.options = options;
    this.profile = options.profile ?? upstreamProfile();
    this.items = new Map();
    this.sandboxDir = path.join(options.dataDir, 'sb');
    this.volumesDir = path.join(options.dataDir, 'volumes');
    fs.mkdirSync(this.sandboxDir, { recursive: true });
    fs.mkdirSync(this.volumesDir, { recursive: true });
    this.closing = false;
    this.snapshots = null; // set by the server (snapshots.js): the source of creates with snapshotId
  }

  get(id) {
    const sb = this.items.get(id);
    if (!sb) throw this.profile.notFound(id);
    return sb;
  }

  /**
   * What enforces a create's resourceLimits: { cgroup: limits for cgroups.js or null, disk: bytes or null }. Limits
   * this server cannot enforce are a 400 unless it was started with unenforcedLimits (or insecure); isolation 'none'
   * enforces nothing (its start warning says so).
   */
  planLimits(resourceLimits) {
    const asked = parseResourceLimits(resourceLimits);
    const o = this.options.limits;
    if (!o || this.options.isolation === 'none') return { cgroup: null, disk: null };
    const problems = [];
    const missing = ['cpu', 'memory', 'pids'].filter((k) => asked[k] !== undefined && !o.cgroups?.controllers.has(k));
    if (missing.length) problems.push(`${missing.join(', ')}: ${o.cgroups ? `no ${missing.join('/')} controller in ${o.cgroups.describe()}` : o.cgroupsWhy}`);
    if (asked.disk !== undefined && !o.disks) problems.push(`${DISK_LIMIT_KEY}: ${o.disksWhy}`);
    if (problems.length && !o.unenforced) {
      throw new ApiError(400, 'SANDBOX::RESOURCE_LIMITS_NOT_ENFORCEABLE',
        `This server cannot enforce resourceLimits ${problems.join('; ')}. Run it as root or give it cgroupParent (a delegated cgroup v2 directory), or start it with unenforcedLimits (--unenforced-limits) to accept limits it does not enforce.`);
    }
    if (o.maxPids && asked.pids > o.maxPids) {
      throw new ApiError(400, 'SANDBOX::INVALID_PARAMETER', `resourceLimits.pids: ${asked.pids} exceeds the server maximum of ${o.maxPids} (maxPids)`);
    }
    const has = (c) => o.cgroups?.controllers.has(c);
    const cgroup = o.cgroups && {
      cpu: has('cpu') ? asked.cpu : undefined,
      memory: asked.memory ?? (o.defaultMemory || undefined), // a sandbox that asks for none: the server's default
      pids: asked.pids ?? (o.maxPids || null),
    };
    return { cgroup, disk: o.disks ? asked.disk ?? o.diskLimit : null };
  }

  async create(req) {
    if (this.closing) throw new ApiError(503, 'GENERAL::UNAVAILABLE', 'The server is shutting down.');
    const arrived = Date.now(); // upstream's createdAt: the request's arrival, before the (emulated) image pull
    const { delays } = this.profile;
    if (this.options.isolation === 'none' && req.volumes.length) {
      throw new ApiError(400, 'VOLUME::NOT_SUPPORTED', "Volumes need the server's bwrap isolation; this server runs with isolation 'none'.");
    }
    if (this.options.volumesProblem && req.volumes.length) {
      throw new ApiError(400, 'VOLUME::NOT_SUPPORTED', `Volumes cannot be mounted safely by this server: ${this.options.volumesProblem}.`);
    }
    const plan = this.planLimits(req.resourceLimits);
    // isolation 'none' is unconfined: its commands use the host network whatever the policy says
    // no networkPolicy: network like upstream (defaultNetwork false where the server refused it at start, warned)
    if (this.options.isolation === 'none' && (req.networkPolicy?.egress.length || req.networkPolicy?.defaultAction === 'deny')) {
      throw new ApiError(400, 'SANDBOX::NETWORK_NOT_AVAILABLE', "Egress rules need the server's bwrap isolation (its own network namespace and firewall); this server runs with isolation 'none'.");
    }
    const net = (req.allowNetwork ?? this.options.defaultNetwork) && this.options.network ? sandboxNetwork(this.options.network, req.networkPolicy) : null; // 400 when it cannot
    const id = crypto.randomUUID();
    // a root-started server runs each sandbox as a host uid of its own (security.js SandboxIdentities)
    const identities = this.options.hardening?.identities;
    // a restore served from the copy of the snapshot's image made ahead (disk.js keepSpare) runs as the uid its files have
    const spare = req.snapshotId && plan.disk ? this.snapshots.takeSpare(req.snapshotId, plan.disk) : null;
    const identity = spare?.identity ?? identities?.allocate() ?? null;
    let binds = [];
    let started = false;
    try {
      binds = resolveVolumes(req.volumes, {
        allowedHostPaths: this.options.allowedHostPaths, volumesDir: this.volumesDir, dataDir: this.options.dataDir, identity,
        missingPvcStatus: this.profile.missingPvcStatus,
      });
      // Docker pulls the image once the request is validated, before the container exists (nothing listed meanwhile);
      // Kubernetes waits in start(), listed
      if (this.profile.createWait === 'pull' && delays.create) await sleep(delays.create);
      const sb = await this.start(req, { id, plan, net, binds, identity, spare, arrived });
      started = true;
      return sb;
    } finally {
      // bubblewrap holds its own copies of the volumes' descriptors once started (and closes them once mounted)
      for (const b of binds) fs.closeSync(b.fd);
      if (identity && !started) identities.release(identity); // never ran, or disposed (release is idempotent)
      if (!started && this.items.get(id)?.pulling) this.items.delete(id); // its record listed while it pulled (Kubernetes)
      if (spare && !started) this.options.limits.disks.drop(spare).catch(() => {}); // unless mount() used it
    }
  }

  /** The rest of create(), once the volumes are open: disk, snapshot, processes, relay. */
  async start(req, { id, plan, net, binds, identity, spare = null, arrived }) {
    const { delays } = this.profile;
    const began = performance.now();
    const timing = [['request', Date.now() - arrived]]; // [phase, ms] for the create's log line (see phasesText)
    let last = began;
    const phase = (name) => {
      const now = performance.now();
      timing.push([name, now - last]);
      last = now;
    };
    // the snapshot stays until the restore is done; 404/409 as the spec gives them
    const restore = req.snapshotId ? this.snapshots.acquire(req.snapshotId) : null;
    // images 'run': the image's layers (pulled once, shared) under the sandbox's own writable layer; a restore of a
    // snapshot of an image sandbox: that image (by digest, held by the snapshot) under the snapshot's layer
    let image = null;
    let pulling = null; // Kubernetes: the sandbox's record listed while its image is pulled (listPulling)
    const images = this.options.images;
    if (restore) {
      try {
        image = restore.containerImage();
      } catch (err) {
        restore.release();
        throw err;
      }
      if (image) phase('image');
    } else if (images && req.image?.uri) {
      // Kubernetes: the workload exists while its pod pulls the image: listed Pending, the create still waiting
      pulling = this.profile.createWait === 'ready' ? this.listPulling(req, id, arrived) : null;
      try {
        image = await images.store.acquire(this.offlineImagePath(req.image.uri), {
          auth: req.image.auth, platform: req.platform,
          onProgress: pullProgressLog(`sandbox ${id}: pulling ${req.image.uri}`, this.options.log),
        });
      } catch (err) {
        if (pulling) throw await this.pullFailed(pulling, err);
        // upstream's Docker runtime: 500 DOCKER::SANDBOX_IMAGE_PULL_FAILED with the registry's reason
        throw new ApiError(err.status ?? 500, err.code ?? 'DOCKER::SANDBOX_IMAGE_PULL_FAILED', `Failed to pull image ${req.image.uri}: ${err.message}`);
      }
      if (pulling?.deleting || this.closing) {
        image.release();
        throw this.profile.notFound(id); // deleted (or the server closed) while it pulled
      }
      phase('image');
    }
    // the image's User as Docker applies it (uid:gid, names from the image's /etc/passwd and /etc/group)
    let user = null;
    if (image) {
      try {
        user = resolveImageUser(image.layers, image.config?.User);
      } catch (err) {
        image.release();
        restore?.release();
        throw new ApiError(500, 'DOCKER::SANDBOX_START_FAILED', `Failed to start sandbox: ${err.message}`);
      }
    }
    const cgroup = plan.cgroup && this.options.limits.cgroups.sandbox(id, plan.cgroup);
    const proc = new SandboxProcess(
      {
        id, dir: path.join(this.sandboxDir, id), env: req.env, binds, identity,
        hostNetwork: net?.hostNetwork ?? false, resolvConf: net?.resolvConf ?? null, joinableUserns: net?.joinableUserns ?? false,
        attachments: [cgroup, net?.attachment].filter(Boolean),
        image: image && { layers: image.layers, config: image.config, owner: images.owner, user },
      },
      this.options,
    );
    const now = arrived;
    const sb = {
      egress: net?.attachment?.resolver ?? null, // egress rules: the resolver and its /policy API (egress.js)
      id, proc, identity, imageHandle: image, relay: null, timer: null, deleting: false, disk: null, finishedAt: null, released: false, endpointAt: 0,
      containerId: crypto.createHash('sha256').update(id).digest('hex'), // Docker's id of the emulated container
      token: newToken(), // the sandbox's own access token: endpoint header, never inside the sandbox
      ...requestFields(req, now), containerCreatedAt: Date.now(),
      status: { state: 'Pending', reason: 'CONTAINER_CREATING', message: 'Sandbox is starting.', lastTransitionAt: iso(now) },
    };
    // bwrap's gate spawned and its cgroup entered while the disk is made (runner.js prepare); a failure surfaces in
    // proc.start() (startProcesses), which kills what it started
    proc.prepare().catch(() => {});
    if (plan.disk) {
      try {
        // from the snapshot's disk image when it has one of this size: no file-by-file copy
        sb.disk = await this.options.limits.disks.mount(id, proc.dir, plan.disk, identity, restore?.image, spare);
        phase('disk');
      } catch (err) {
        await proc.kill();
        restore?.release();
        proc.removeDirs();
        throw new ApiError(500, 'DOCKER::SANDBOX_START_FAILED', `Failed to start sandbox: ${err.message}`);
      }
    }
    if (restore) {
      try {
        if (sb.disk?.restored) {
          // what the server, not the sandbox, kept in the source's directory: its execd socket, its resolv.conf, its
          // overlay's work dir (image sandboxes)
          fs.rmSync(proc.dirs.run, { recursive: true, force: true });
          if (proc.dirs.work) fs.rmSync(proc.dirs.work, { recursive: true, force: true });
          fs.rmSync(path.join(proc.dir, 'resolv.conf'), { force: true });
        } else {
          await restore.restoreInto(proc.dirs, identity);
        }
        // Docker: the image's labels (the source's metadata at capture) under the create's own
        if (this.profile.snapshotLabels) sb.metadata = { ...this.snapshots.labelsOf(req.snapshotId), ...req.metadata };
      } catch (err) {
        restore.release();
        await this.dispose(sb);
        if (err instanceof ApiError) throw err;
        if (/No space left on device/.test(err.message)) {
          throw new ApiError(400, 'SANDBOX::INVALID_PARAMETER',
            `Snapshot ${req.snapshotId} does not fit the sandbox's disk bound of ${plan.disk} bytes (resourceLimits.${DISK_LIMIT_KEY}, or the server's diskLimit): ${err.message}`);
        }
        throw new ApiError(500, 'DOCKER::SANDBOX_START_FAILED', `Failed to restore snapshot ${req.snapshotId}: ${err.message}`);
      }
      restore.release();
      phase('restore');
    }
    if (this.closing) {
      await this.dispose(sb); // closeAll() did not see it yet: its disk must not outlive the server
      throw new ApiError(503, 'GENERAL::UNAVAILABLE', 'The server is shutting down.');
    }
    if (pulling?.deleting) {
      await this.dispose(sb); // deleted while its disk was made: the delete answered for the record it saw
      throw this.profile.notFound(id);
    }
    if (pulling) {
      clearTimeout(pulling.timer);
      sb.expiresAt = pulling.expiresAt; // a renew while it pulled
    }
    this.items.set(id, sb);
    try {
      if (this.profile.createWait === 'ready' && delays.create) {
        await sleep(delays.create); // the workload exists (listed Pending) while its pod is scheduled
        if (sb.deleting) throw this.profile.notFound(id);
        last = performance.now(); // the emulated scheduling delay is no phase of ours
      }
      await this.startProcesses(sb);
      // startProcesses' own phases: the runner's, then what follows it
      const after = timing.length;
      phase('relay');
      timing.splice(after, 0, ...proc.phases);
      timing[timing.length - 1][1] -= proc.phases.reduce((n, [, ms]) => n + ms, 0);
    } catch (err) {
      this.items.delete(id);
      await sb.relay?.close();
      await this.dispose(sb);
      if (sb.deleting) throw this.profile.notFound(id); // deleted while it started: that, not the start, failed it
      if (err instanceof ApiError) throw err;
      throw new ApiError(500, 'DOCKER::SANDBOX_START_FAILED', `Failed to start sandbox: ${err.message}`);
    }
    if (sb.deleting || this.closing) {
      // deleted (or the server closed) while it started: remove()/closeAll() could not stop what did not run yet
      await sb.relay?.close();
      await this.dispose(sb);
      throw this.profile.notFound(id);
    }
    this.becomeReady(sb, 'Sandbox container started successfully.');
    this.schedule(sb);
    this.options.log?.(`sandbox ${id} created${net ? ` (network: ${net.hostNetwork ? 'the host\'s' : 'slirp4netns'})` : ''} in ${phasesText(timing)}`);
    if (sb.disk?.restored) this.snapshots.keepSpare(req.snapshotId); // its next restore's image copied ahead, off this one's path
    return sb;
  }

  /**
   * Kubernetes: the record of a sandbox whose pod pulls its image, listed (Pending: upstream's BatchSandbox phase while
   * its pod is not ready) until start() replaces it with the sandbox itself. It has no processes: a delete marks it
   * (start() then ends with 404), its endpoint is the pod without an IP.
   */
  listPulling(req, id, arrived) {
    const rec = {
      id, proc: null, relay: null, timer: null, deleting: false, pulling: true, endpointAt: 0,
      ...requestFields(req, arrived), containerCreatedAt: arrived,
      status: { state: 'Pending', reason: 'BATCHSANDBOX_PENDING', message: 'BatchSandbox is pending allocation', lastTransitionAt: iso(arrived) },
    };
    this.items.set(id, rec);
    return rec;
  }

  /**
   * Kubernetes: a pull failed under `rec` (listPulling). Upstream's controller sets the BatchSandbox's phase Failed with
   * its PodFailed condition (ErrImagePull), the server lists it Failed; its create keeps waiting for Running until
   * sandbox_create_timeout_seconds (`delays.createTimeout`), then deletes the workload and answers 504
   * KUBERNETES::POD_READY_TIMEOUT. Here the wait also ends when the sandbox is deleted or the server closes. The
   * registry's reason (kubelet's event upstream) is in the server log. Resolves to the error the create answers.
   */
  async pullFailed(rec, err) {
    const { id } = rec;
    this.options.log?.(`sandbox ${id}: pulling ${rec.image.uri} failed (ErrImagePull): ${err.message}`);
    if (!rec.deleting) this.transition(rec, 'Failed', 'FAILED', `1/1 observed pods failed; primary reason=ErrImagePull; sample pod=${id}-0`);
    const began = rec.createdAt;
    await new Promise((resolve) => {
      const timer = setTimeout(resolve, Math.max(0, began + this.profile.delays.createTimeout - Date.now()));
      timer.unref();
      rec.onDelete = () => {
        clearTimeout(timer);
        resolve();
      };
      if (rec.deleting || this.closing) rec.onDelete();
    });
    if (this.items.get(id) === rec) this.items.delete(id);
    rec.deleting = true;
    return new ApiError(504, 'KUBERNETES::POD_READY_TIMEOUT',
      `Timeout waiting for sandbox ${id} to be Running with IP. Elapsed: ${((Date.now() - began) / 1000).toFixed(1)}s, Last state: Failed`);
  }

  /**
   * Starts the sandbox's execd (and its entrypoint) and opens its relay; at create and when an emulated Kubernetes
   * resume brings up a new pod. Watches execd: when it dies on its own, the sandbox stays listed, like an exited
   * container.
   */
  async startProcesses(sb) {
    const { proc } = sb;
    await proc.start();
    // the default entrypoint only keeps a container alive; anything else runs like a container's main process
    if (sb.entrypoint.join(' ') !== 'tail -f /dev/null') await startEntrypoint(proc.socketPath, sb.entrypoint, this.options.execdToken);
    sb.relay = await startRelay(proc.socketPath, {
      ingressId: this.options.endpointHeaders ? sb.id : null, token: sb.token,
    });
    proc.exitPromise.then(() => {
      if (sb.deleting || sb.released) return;
      const { code, signal, error } = proc.exited;
      const ok = code === 0;
      const why = error ? error.message : signal ? `killed by ${signal}` : `exit code ${code}`;
      sb.finishedAt = Date.now();
      sb.exitCode = code ?? 128 + (os.constants.signals[signal] ?? 0);
      this.transition(sb, ok ? 'Terminated' : 'Failed', ok ? 'CONTAINER_EXITED' : 'CONTAINER_FAILED', `Sandbox main process exited (${why}).`);
      this.options.log?.(`sandbox ${sb.id}: execd exited (${why})`);
    });
  }

  /** Running, or first Allocated for `ready` ms where the emulated runtime has that state; the endpoint lags by `endpoint` ms. */
  becomeReady(sb, message) {
    const { delays, createdState } = this.profile;
    sb.endpointAt = Date.now() + delays.endpoint;
    if (createdState === 'Allocated' && delays.ready) {
      this.transition(sb, 'Allocated', 'IP_ASSIGNED', 'Pod has IP assigned but not ready (1/1 allocated, 0 ready)');
      const timer = setTimeout(() => {
        if (sb.status.state === 'Allocated' && !sb.deleting) this.transition(sb, 'Running', 'POD_READY_WITH_IP', 'Pod is ready with IP (1/1 ready)');
      }, delays.ready);
      timer.unref();
      return;
    }
    if (createdState === 'Allocated') this.transition(sb, 'Running', 'POD_READY_WITH_IP', 'Pod is ready with IP (1/1 ready)');
    else this.transition(sb, 'Running', 'CONTAINER_RUNNING', message);
  }

  transition(sb, state, reason, message) {
    sb.status = { state, reason, message, lastTransitionAt: iso(Date.now()) };
  }

  schedule(sb) {
    clearTimeout(sb.timer);
    sb.timer = null;
    if (sb.expiresAt == null) return;
    const wait = Math.max(0, Math.min(sb.expiresAt - Date.now(), MAX_TIMER_MS));
    sb.timer = setTimeout(() => {
      if (sb.expiresAt > Date.now()) return this.schedule(sb); // long TTLs re-arm
      this.options.log?.(`sandbox ${sb.id} expired`);
      this.remove(sb.id).catch(() => {});
    }, wait);
    sb.timer.unref();
  }

  view(sb, { full = true } = {}) {
    const v = { id: sb.id };
    // the create response has neither the startup source (image / snapshotId) nor platform
    if (sb.image && full) v.image = sb.image;
    if (sb.snapshotId && full) v.snapshotId = sb.snapshotId;
    const { lastTransitionAt: at, statusView, viewCreatedAt, platformView, omitEmptyMetadata, sortedMetadata, entrypointLast } = this.profile;
    // get and list describe the sandbox's current state (Docker: from the container); the create answer what it did
    const status = full && statusView ? { ...sb.status, ...statusView(sb) } : sb.status;
    v.status = at === 'transition' ? status : { ...status, lastTransitionAt: at(sb, iso) };
    if (!omitEmptyMetadata || Object.keys(sb.metadata).length) {
      v.metadata = full && sortedMetadata ? Object.fromEntries(Object.entries(sb.metadata).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) : sb.metadata;
    }
    v.entrypoint = sb.entrypoint;
    if (sb.expiresAt != null && iso(sb.expiresAt) !== null) v.expiresAt = iso(sb.expiresAt);
    v.createdAt = iso(full && viewCreatedAt === 'container' ? sb.containerCreatedAt : sb.createdAt);
    if (!full && entrypointLast) {
      delete v.entrypoint;
      v.entrypoint = sb.entrypoint;
    }
    if (full && (platformView === 'always' || sb.platformRequested)) v.platform = sb.platform;
    return v;
  }

  /** view() that cannot fail: one broken record never makes a list fail (it is listed with what is known). */
  safeView(sb) {
    try {
      return this.view(sb);
    } catch (err) {
      this.options.log?.(`sandbox ${sb.id}: cannot describe it: ${err.message}`);
      return { id: sb.id, status: sb.status, metadata: {}, entrypoint: [], createdAt: iso(sb.createdAt) };
    }
  }

  list({ states, metadata, page, pageSize }) {
    const wanted = states.map((s) => s.toLowerCase());
    const all = [...this.items.values()]
      .filter((sb) => !sb.deleting)
      .filter((sb) => wanted.length === 0 || wanted.includes(sb.status.state.toLowerCase()))
      .filter((sb) => Object.entries(metadata).every(([k, v]) => (sb.metadata ?? {})[k] === v))
      .sort((a, b) => b.createdAt - a.createdAt);
    const totalPages = Math.ceil(all.length / pageSize);
    return {
      items: all.slice((page - 1) * pageSize, page * pageSize).map((sb) => this.safeView(sb)),
      pagination: { page, pageSize, totalItems: all.length, totalPages, hasNextPage: page < totalPages },
    };
  }

  /** Pause as the emulated runtime does it (upstream.js `pause`): freeze the processes, or release the pod. */
  pause(id) {
    const { pause, pauseRefusal } = this.profile;
    if (typeof pause === 'function') throw pause(id);
    const sb = this.get(id);
    const { state } = sb.status;
    if (!(state === 'Running' || (pause === 'release' && state === 'Allocated'))) throw pauseRefusal(id, state, sb);
    if (pause === 'release') return this.release(sb);
    sb.proc.pause();
    this.transition(sb, 'Paused', 'CONTAINER_PAUSED', 'Sandbox container is paused.');
  }

  resume(id) {
    const { pause, resume, resumeRefusal } = this.profile;
    if (typeof resume === 'function') throw resume(id);
    const sb = this.get(id);
    if (sb.status.state !== 'Paused') throw resumeRefusal(id, sb.status.state, sb);
    if (pause === 'release') return this.reacquire(sb);
    sb.proc.resume();
    this.transition(sb, 'Running', 'CONTAINER_RUNNING', 'Sandbox container is running.');
  }

  /**
   * Kubernetes BatchSandbox pause: Pausing while the root filesystem is committed and pushed (`pause` ms), then the
   * pod is released: every process ends (the files stay), the endpoint answers 404 until a resume brings a new pod.
   */
  release(sb) {
    this.transition(sb, 'Pausing', 'PAUSING', 'Pausing sandbox');
    sb.released = true;
    sb.phaseTimer = setTimeout(async () => {
      if (sb.deleting) return;
      try {
        await sb.relay?.close();
        sb.relay = null;
        await sb.proc.kill();
      } catch (err) {
        this.options.log?.(`sandbox ${sb.id}: releasing its processes failed: ${err.message}`);
      }
      if (!sb.deleting) this.transition(sb, 'Paused', 'PAUSED', 'Sandbox is paused');
    }, this.profile.delays.pause);
    sb.phaseTimer.unref();
  }

  /**
   * An image from the server's own disk (`oci:<dir>`, `docker-archive:<file>`) is read only under an allowedHostPaths
   * entry and never inside the data directory, as host volumes are: the path is resolved once (realpath) and that
   * resolved path is what the store reads. Registry references pass through unchanged.
   */
  offlineImagePath(uri) {
    let ref;
    try {
      ref = parseReference(uri);
    } catch {
      return uri; // the store reports the bad reference as the pull failure it is
    }
    if (ref.transport !== 'oci' && ref.transport !== 'docker-archive') return uri;
    const requested = ref.transport === 'oci' ? ref.dir : ref.file;
    const denied = (why) => new ApiError(400, 'IMAGE::HOST_PATH_NOT_ALLOWED', `Image path ${requested} ${why}.`);
    let real;
    try {
      real = fs.realpathSync(requested);
    } catch {
      throw denied('does not exist on this server');
    }
    const why = hostPathRule(this.options.allowedHostPaths, this.options.dataDir).refusal(real);
    if (why) throw denied(why);
    return ref.transport === 'oci' ? `oci:${real}${ref.tag !== null ? ':' + ref.tag : ''}` : `docker-archive:${real}`;
  }

  /** Kubernetes BatchSandbox resume: Resuming while a new pod is scheduled (`resume` ms), then a fresh execd. */
  reacquire(sb) {
    this.transition(sb, 'Resuming', 'RESUMING', 'Resuming sandbox');
    sb.phaseTimer = setTimeout(async () => {
      if (sb.deleting) return;
      sb.released = false;
      try {
        await this.startProcesses(sb);
      } catch (err) {
        this.options.log?.(`sandbox ${sb.id}: the resumed pod did not start: ${err.message}`);
        if (!sb.deleting) this.transition(sb, 'Failed', 'FAILED', `Resume failed: ${err.message}`);
        return;
      }
      if (sb.deleting) {
        // deleted while the new pod started: remove() could not stop what did not run yet
        await sb.relay?.close();
        await sb.proc.kill();
        return;
      }
      sb.endpointAt = Date.now() + this.profile.delays.endpoint;
      this.transition(sb, 'Running', 'RUNNING', 'Sandbox is running');
    }, this.profile.delays.resume);
    sb.phaseTimer.unref();
  }

  /** renew-expiration, its checks in the emulated deployment's order (upstream.js `renewChecks`). */
  renew(id, expiresAtMs) {
    let sb;
    for (const check of this.profile.renewChecks) {
      if (check === 'lookup') sb = this.get(id);
      else if (check === 'expiry' && sb.expiresAt == null) throw this.profile.noExpiry(id);
      else if (check === 'past' && !(expiresAtMs > Date.now())) {
        throw new ApiError(400, 'DOCKER::INVALID_EXPIRATION', 'New expiration time must be in the future.');
      }
    }
    sb.expiresAt = expiresAtMs;
    this.schedule(sb);
    return { expiresAt: iso(sb.expiresAt) };
  }

  patchMetadata(id, patch) {
    const sb = this.get(id);
    const next = { ...sb.metadata };
    for (const [k, v] of Object.entries(patch)) {
      if (v === null) delete next[k];
      else next[k] = v;
    }
    checkMetadata(next, this.profile);
    sb.metadata = next;
    return sb;
  }

  /** Kills the sandbox's processes, closes its relay and removes its dirs; it disappears at once. */
  async remove(id) {
    const sb = this.get(id);
    this.items.delete(id);
    sb.deleting = true;
    clearTimeout(sb.timer);
    clearTimeout(sb.phaseTimer);
    if (sb.pulling) return sb.onDelete?.(); // its image still pulling (Kubernetes): start() ends it
    await sb.relay?.close();
    await this.dispose(sb);
  }

  /**
   * Kills the sandbox's processes (which releases its cgroups), gives its uid back, unmounts its disk and removes
   * its directories.
   */
  async dispose(sb) {
    await sb.proc.kill();
    sb.imageHandle?.release(); // its layers are no longer mounted
    sb.imageHandle = null;
    if (sb.identity) this.options.hardening.identities.release(sb.identity); // its processes are gone
    try {
      await sb.disk?.release();
    } catch (err) {
      this.options.log?.(`sandbox ${sb.id}: could not unmount its disk: ${err.message}`);
      return; // its directory is still a mount: never rm -r through it
    }
    try {
      sb.proc.removeDirs();
    } catch (err) {
      this.options.log?.(`sandbox ${sb.id}: could not remove its directory: ${err.message}`);
    }
  }

  async closeAll() {
    this.closing = true;
    await Promise.all([...this.items.keys()].map((id) => this.remove(id).catch(() => {})));
  }
}
