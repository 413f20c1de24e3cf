// The sandbox registry of the local server: create (volumes resolved, execd started, relay opened), get/list
// views, pause/resume, renew and TTL expiry, metadata patches, delete. Errors are ApiError with upstream codes.
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { ApiError, DISK_LIMIT_KEY, checkMetadata, parseResourceLimits } from './validate.js';
import { SandboxProcess, startEntrypoint } from './runner.js';
import { startRelay } from './relay.js';
import { grantVolumeAccess, newToken } from './security.js';
import { sandboxNetwork } from './network.js';

const MAX_TIMER_MS = 2 ** 31 - 1;

function iso(ms) {
  const d = new Date(ms);
  if (Number.isNaN(d.getTime())) return null;
  return d.toISOString().replace(/Z$/, '000Z'); // microseconds, like Python's isoformat
}

function notFound(id) {
  return new ApiError(404, 'DOCKER::SANDBOX_NOT_FOUND', `Sandbox ${id} not found.`);
}

const within = (p, dir) => p === dir || p.startsWith(dir.endsWith('/') ? dir : dir + '/');

/**
 * The realpath `p` will have once `mkdir -p` created it: the deepest existing ancestor resolved, the missing names
 * appended. null when a component is a dangling symlink (mkdir would follow it somewhere unchecked).
 */
function prospectiveRealpath(p) {
  const missing = [];
  for (let cur = p; ; cur = path.dirname(cur)) {
    try {
      return path.join(fs.realpathSync(cur), ...missing.reverse());
    } catch (err) {
      if (err.code !== 'ENOENT') throw err;
      try {
        fs.lstatSync(cur);
        return null; // exists, yet does not resolve: a dangling symlink
      } catch { /* really missing */ }
      missing.push(path.basename(cur));
    }
  }
}

/**
 * Resolves a volume list into bind mounts; enforces allowedHostPaths (realpaths, symlinks resolved). Every volume is
 * checked before any directory is created; a directory is created only where its resolved path was allowed.
 * With `identity` (root-started server), the sandbox uid gets access to what it mounts.
 */
function resolveVolumes(volumes, { allowedHostPaths, volumesDir, dataDir, identity }) {
  const allowed = allowedHostPaths.map((p) => {
    try {
      return fs.realpathSync(p);
    } catch {
      return path.resolve(p);
    }
  });
  const data = fs.realpathSync(dataDir);
  const plans = volumes.map((v) => {
    if (v.host) {
      const requested = path.resolve(v.host.path, v.subPath ?? '');
      const denied = () => new ApiError(400, 'VOLUME::HOST_PATH_NOT_ALLOWED',
        `Host path ${requested} of volume '${v.name}' is not under an allowed host path${allowed.length ? '' : ' (no host paths are allowed on this server)'}.`);
      const target = prospectiveRealpath(requested);
      if (!allowed.some((a) => within(requested, a)) || target === null || !allowed.some((a) => within(target, a))) throw denied();
      if (within(target, data) || within(data, target)) {
        throw new ApiError(400, 'VOLUME::HOST_PATH_NOT_ALLOWED', `Host path ${requested} of volume '${v.name}' overlaps the server's data directory.`);
      }
      return { v, dir: requested, check: (src) => allowed.some((a) => within(src, a)) && !within(src, data) && !within(data, src), denied };
    }
    if (v.pvc) {
      const base = path.join(volumesDir, v.pvc.claimName);
      if (!fs.existsSync(base) && v.pvc.createIfNotExists === false) {
        throw new ApiError(404, 'VOLUME::PVC_NOT_FOUND', `Volume '${v.pvc.claimName}' does not exist and createIfNotExists is false.`);
      }
      const root = fs.realpathSync(volumesDir);
      const denied = () => new ApiError(400, 'VOLUME::INVALID_SUB_PATH', `subPath of volume '${v.name}' leaves the volume.`);
      const target = prospectiveRealpath(path.join(base, v.subPath ?? ''));
      if (target === null || !within(target, path.join(root, v.pvc.claimName))) throw denied();
      return { v, base, dir: path.join(base, v.subPath ?? ''), check: (src) => within(src, path.join(root, v.pvc.claimName)), denied };
    }
    throw new ApiError(400, 'VOLUME::UNSUPPORTED_BACKEND', `Volume '${v.name}': ossfs volumes are not supported by the local server.`);
  });
  return plans.map(({ v, base, dir, check, denied }) => {
    const made = [base, dir].filter(Boolean).map((d) => fs.mkdirSync(d, { recursive: true })).filter(Boolean);
    const src = fs.realpathSync(dir);
    if (!check(src)) throw denied(); // changed between the check and mkdir
    if (identity && v.pvc) {
      // server-managed volume: the sandbox uid owns what the server created for it
      for (const first of made) for (let d = dir; within(d, first); d = path.dirname(d)) fs.chownSync(d, identity.uid, identity.gid);
    } else if (identity) {
      const need = v.readOnly === true ? 0o5 : 0o7;
      if ((fs.statSync(src).mode & need) !== need) grantVolumeAccess(src, identity.uid, v.readOnly !== true);
    }
    return { src, dest: path.posix.normalize(v.mountPath), readOnly: v.readOnly === true };
  });
}

export class Sandboxes {
  /**
   * options: { dataDir, allowedHostPaths, isolation, bwrap, hardening, execdToken, commandTailMs, ptyExitRace,
   * signalForwarding, ptyCloseLinger, endpointHeaders, network, log, limits }. execdToken: execd's X-EXECD-ACCESS-TOKEN
   * (through a pipe: never in environ or argv). network: { slirp4netns, problem, insecure } (network.js) for bwrap. limits:
   * { cgroups (cgroups.js, or null), cgroupsWhy, disks (disk.js, or null), disksWhy, unenforced, maxPids (0: no cap),
   * diskLimit (bytes) }.
   */
  constructor(options) {
    this.options = options;
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
    if (!sb) throw notFound(id);
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
      memory: asked.memory,
      pids: asked.pids ?? (o.maxPids || null),
    };
    return { cgroup, disk: o.disks ? asked.disk ?? o.diskLimit : null };
  }

  async create(req) {
    if (this.closing) throw new ApiError(503, 'GENERAL::UNAVAILABLE', 'The server is shutting down.');
    if (this.options.isolation === 'none' && req.volumes.length) {
      throw new ApiError(400, 'VOLUME::NOT_SUPPORTED', "Volumes need the server's bwrap isolation; this server runs with isolation 'none'.");
    }
    const plan = this.planLimits(req.resourceLimits);
    // isolation 'none' is unconfined: its commands use the host network whatever the policy says
    const net = req.allowNetwork && this.options.network ? sandboxNetwork(this.options.network) : null; // 400 when it cannot
    const id = crypto.randomUUID();
    const binds = resolveVolumes(req.volumes, {
      allowedHostPaths: this.options.allowedHostPaths, volumesDir: this.volumesDir, dataDir: this.options.dataDir,
      identity: this.options.hardening?.identity,
    });
    const cgroup = plan.cgroup && this.options.limits.cgroups.sandbox(id, plan.cgroup);
    const proc = new SandboxProcess(
      {
        id, dir: path.join(this.sandboxDir, id), env: req.env, binds,
        hostNetwork: net?.hostNetwork ?? false, resolvConf: net?.resolvConf ?? null, joinableUserns: net?.joinableUserns ?? false,
        attachments: [cgroup, net?.attachment].filter(Boolean),
      },
      this.options,
    );
    const now = Date.now();
    const sb = {
      id, proc, relay: null, timer: null, deleting: false, disk: null,
      token: newToken(), // the sandbox's own access token: endpoint header, never inside the sandbox
      image: req.image, snapshotId: req.snapshotId, entrypoint: req.entrypoint, metadata: req.metadata,
      platform: req.platform ?? { os: 'linux', arch: process.arch === 'x64' ? 'amd64' : process.arch },
      createdAt: now, expiresAt: req.timeout == null ? null : now + req.timeout * 1000,
      status: { state: 'Pending', reason: 'CONTAINER_CREATING', message: 'Sandbox is starting.', lastTransitionAt: iso(now) },
    };
    // the snapshot stays until the restore is done; 404/409 as the spec gives them
    let restore = null;
    try {
      restore = req.snapshotId ? this.snapshots.acquire(req.snapshotId) : null;
    } catch (err) {
      await this.dispose(sb);
      throw err;
    }
    if (plan.disk) {
      try {
        // from the snapshot's disk image when it has one of this size: no file-by-file copy
        sb.disk = await this.options.limits.disks.mount(id, proc.dir, plan.disk, this.options.hardening?.identity, restore?.image);
      } catch (err) {
        restore?.release();
        proc.removeDirs();
        throw new ApiError(500, 'DOCKER::SANDBOX_START_FAILED', `Failed to start sandbox: ${err.message}`);
      }
    }
    if (restore) {
      try {
        if (sb.disk?.restored) {
          // what the server, not the sandbox, kept in the source's directory: its execd socket, its resolv.conf
          fs.rmSync(proc.dirs.run, { recursive: true, force: true });
          fs.rmSync(path.join(proc.dir, 'resolv.conf'), { force: true });
        } else {
          await restore.restoreInto(proc.dirs);
        }
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
    }
    if (this.closing) {
      await this.dispose(sb); // closeAll() did not see it yet: its disk must not outlive the server
      throw new ApiError(503, 'GENERAL::UNAVAILABLE', 'The server is shutting down.');
    }
    this.items.set(id, sb);
    try {
      await proc.start();
      // the default entrypoint only keeps a container alive; anything else runs like a container's main process
      if (req.entrypoint.join(' ') !== 'tail -f /dev/null') await startEntrypoint(proc.socketPath, req.entrypoint, this.options.execdToken);
      sb.relay = await startRelay(proc.socketPath, {
        ingressId: this.options.endpointHeaders ? id : null, token: sb.token,
      });
    } catch (err) {
      this.items.delete(id);
      await sb.relay?.close();
      await this.dispose(sb);
      if (sb.deleting) throw notFound(id); // deleted while it started: that, not the start, failed it
      throw new ApiError(500, 'DOCKER::SANDBOX_START_FAILED', `Failed to start sandbox: ${err.message}`);
    }
    if (sb.deleting || this.closing) {
      // deleted (or the server closed) while it started: remove()/closeAll() could not stop what did not run yet
      await sb.relay?.close();
      await this.dispose(sb);
      throw notFound(id);
    }
    this.transition(sb, 'Running', 'CONTAINER_RUNNING', 'Sandbox container started successfully.');
    this.schedule(sb);
    // execd (the sandbox's main process) died on its own: the sandbox stays listed, like an exited container
    proc.exitPromise.then(() => {
      if (sb.deleting) return;
      const { code, signal, error } = proc.exited;
      const ok = code === 0;
      const why = error ? error.message : signal ? `killed by ${signal}` : `exit code ${code}`;
      this.transition(sb, ok ? 'Terminated' : 'Failed', ok ? 'CONTAINER_EXITED' : 'CONTAINER_FAILED', `Sandbox main process exited (${why}).`);
      this.options.log?.(`sandbox ${id}: execd exited (${why})`);
    });
    this.options.log?.(`sandbox ${id} created${net ? ` (network: ${net.hostNetwork ? 'the host\'s' : 'slirp4netns'})` : ''}`);
    return sb;
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
    v.status = sb.status;
    v.metadata = sb.metadata;
    v.entrypoint = sb.entrypoint;
    if (sb.expiresAt != null && iso(sb.expiresAt) !== null) v.expiresAt = iso(sb.expiresAt);
    v.createdAt = iso(sb.createdAt);
    if (full) v.platform = sb.platform;
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

  pause(id) {
    const sb = this.get(id);
    if (sb.status.state !== 'Running') {
      throw new ApiError(409, 'DOCKER::SANDBOX_NOT_RUNNING', `Sandbox ${id} is not running (state ${sb.status.state}).`);
    }
    sb.proc.pause();
    this.transition(sb, 'Paused', 'CONTAINER_PAUSED', 'Sandbox container is paused.');
  }

  resume(id) {
    const sb = this.get(id);
    if (sb.status.state !== 'Paused') {
      throw new ApiError(409, 'DOCKER::SANDBOX_NOT_PAUSED', `Sandbox ${id} is not paused (state ${sb.status.state}).`);
    }
    sb.proc.resume();
    this.transition(sb, 'Running', 'CONTAINER_RUNNING', 'Sandbox container is running.');
  }

  renew(id, expiresAtMs) {
    const sb = this.get(id);
    if (sb.expiresAt == null) {
      throw new ApiError(409, 'DOCKER::INVALID_EXPIRATION', `Sandbox ${id} does not expire; it cannot be renewed.`);
    }
    if (!(expiresAtMs > Date.now())) {
      throw new ApiError(400, 'DOCKER::INVALID_EXPIRATION', 'New expiration time must be in the future.');
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
    checkMetadata(next);
    sb.metadata = next;
    return sb;
  }

  /** Kills the sandbox's processes, closes its relay and removes its dirs; it disappears at once. */
  async remove(id) {
    const sb = this.get(id);
    this.items.delete(id);
    sb.deleting = true;
    clearTimeout(sb.timer);
    await sb.relay?.close();
    await this.dispose(sb);
  }

  /** Kills the sandbox's processes (which releases its cgroups), unmounts its disk and removes its directories. */
  async dispose(sb) {
    await sb.proc.kill();
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
