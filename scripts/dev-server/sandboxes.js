// The sandbox registry of the local server: create (volumes resolved, execd started, relay opened), get/list
// views, pause/resume, renew and TTL expiry, metadata patches, delete. Errors are ApiError with upstream codes.
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { ApiError, checkMetadata } from './validate.js';
import { SandboxProcess, startEntrypoint } from './runner.js';
import { startRelay } from './relay.js';

const MAX_TIMER_MS = 2 ** 31 - 1;

function iso(ms) {
  return new Date(ms).toISOString().replace(/Z$/, '000Z'); // microseconds, like Python's isoformat
}

function notFound(id) {
  return new ApiError(404, 'DOCKER::SANDBOX_NOT_FOUND', `Sandbox ${id} not found.`);
}

/** Resolves a volume list into bind mounts; enforces allowedHostPaths (realpaths, symlinks resolved). */
function resolveVolumes(volumes, { allowedHostPaths, volumesDir, dataDir }) {
  const binds = [];
  for (const v of volumes) {
    let src;
    if (v.host) {
      const allowed = allowedHostPaths.map((p) => {
        try {
          return fs.realpathSync(p);
        } catch {
          return path.resolve(p);
        }
      });
      const inside = (p) => allowed.some((a) => p === a || p.startsWith(a.endsWith('/') ? a : a + '/'));
      const requested = path.resolve(v.host.path, v.subPath ?? '');
      const denied = () => new ApiError(400, 'VOLUME::HOST_PATH_NOT_ALLOWED',
        `Host path ${requested} of volume '${v.name}' is not under an allowed host path${allowed.length ? '' : ' (no host paths are allowed on this server)'}.`);
      if (!inside(requested)) throw denied();
      fs.mkdirSync(requested, { recursive: true });
      src = fs.realpathSync(requested);
      if (!inside(src)) throw denied();
      const data = fs.realpathSync(dataDir);
      if (src === data || src.startsWith(data + '/') || data.startsWith(src + '/')) {
        throw new ApiError(400, 'VOLUME::HOST_PATH_NOT_ALLOWED', `Host path ${requested} of volume '${v.name}' overlaps the server's data directory.`);
      }
    } else if (v.pvc) {
      const base = path.join(volumesDir, v.pvc.claimName);
      if (!fs.existsSync(base) && v.pvc.createIfNotExists === false) {
        throw new ApiError(404, 'VOLUME::PVC_NOT_FOUND', `Volume '${v.pvc.claimName}' does not exist and createIfNotExists is false.`);
      }
      fs.mkdirSync(base, { recursive: true });
      src = path.join(base, v.subPath ?? '');
      fs.mkdirSync(src, { recursive: true });
      if (!fs.realpathSync(src).startsWith(fs.realpathSync(base))) {
        throw new ApiError(400, 'VOLUME::INVALID_SUB_PATH', `subPath of volume '${v.name}' leaves the volume.`);
      }
    } else {
      throw new ApiError(400, 'VOLUME::UNSUPPORTED_BACKEND', `Volume '${v.name}': ossfs volumes are not supported by the local server.`);
    }
    binds.push({ src, dest: path.posix.normalize(v.mountPath), readOnly: v.readOnly === true });
  }
  return binds;
}

export class Sandboxes {
  /** options: { dataDir, allowedHostPaths, isolation, bwrap, execdToken, commandTailMs, ptyExitRace, signalForwarding, ptyCloseLinger, endpointHeaders, log } */
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

  async create(req) {
    if (this.closing) throw new ApiError(503, 'GENERAL::UNAVAILABLE', 'The server is shutting down.');
    if (this.options.isolation === 'none' && req.volumes.length) {
      throw new ApiError(400, 'VOLUME::NOT_SUPPORTED', "Volumes need the server's bwrap isolation; this server runs with isolation 'none'.");
    }
    const id = crypto.randomUUID();
    const binds = resolveVolumes(req.volumes, { allowedHostPaths: this.options.allowedHostPaths, volumesDir: this.volumesDir, dataDir: this.options.dataDir });
    const proc = new SandboxProcess(
      { id, dir: path.join(this.sandboxDir, id), env: req.env, binds, allowNetwork: req.allowNetwork },
      this.options,
    );
    const now = Date.now();
    const sb = {
      id, proc, relay: null, timer: null, deleting: false,
      image: req.image, snapshotId: req.snapshotId, entrypoint: req.entrypoint, metadata: req.metadata,
      platform: req.platform ?? { os: 'linux', arch: process.arch === 'x64' ? 'amd64' : process.arch },
      createdAt: now, expiresAt: req.timeout == null ? null : now + req.timeout * 1000,
      status: { state: 'Pending', reason: 'CONTAINER_CREATING', message: 'Sandbox is starting.', lastTransitionAt: iso(now) },
    };
    if (req.snapshotId) {
      try {
        await this.snapshots.restoreInto(req.snapshotId, proc.dirs); // 404/409 as the spec gives them
      } catch (err) {
        proc.removeDirs();
        if (err instanceof ApiError) throw err;
        throw new ApiError(500, 'DOCKER::SANDBOX_START_FAILED', `Failed to restore snapshot ${req.snapshotId}: ${err.message}`);
      }
    }
    this.items.set(id, sb);
    try {
      await proc.start();
      // the default entrypoint only keeps a container alive; anything else runs like a container's main process
      if (req.entrypoint.join(' ') !== 'tail -f /dev/null') await startEntrypoint(proc.socketPath, req.entrypoint, this.options.execdToken);
      sb.relay = await startRelay(proc.socketPath, { ingressId: this.options.endpointHeaders ? id : null });
    } catch (err) {
      this.items.delete(id);
      await sb.relay?.close();
      await proc.kill();
      proc.removeDirs();
      throw new ApiError(500, 'DOCKER::SANDBOX_START_FAILED', `Failed to start sandbox: ${err.message}`);
    }
    if (sb.deleting || this.closing) throw notFound(id);
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
    this.options.log?.(`sandbox ${id} created${req.allowNetwork ? ' (network allowed)' : ''}`);
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
    if (sb.expiresAt != null) v.expiresAt = iso(sb.expiresAt);
    v.createdAt = iso(sb.createdAt);
    if (full) v.platform = sb.platform;
    return v;
  }

  list({ states, metadata, page, pageSize }) {
    const wanted = states.map((s) => s.toLowerCase());
    const all = [...this.items.values()]
      .filter((sb) => !sb.deleting)
      .filter((sb) => wanted.length === 0 || wanted.includes(sb.status.state.toLowerCase()))
      .filter((sb) => Object.entries(metadata).every(([k, v]) => sb.metadata[k] === v))
      .sort((a, b) => b.createdAt - a.createdAt);
    const totalPages = Math.ceil(all.length / pageSize);
    return {
      items: all.slice((page - 1) * pageSize, page * pageSize).map((sb) => this.view(sb)),
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
    await sb.proc.kill();
    try {
      sb.proc.removeDirs();
    } catch (err) {
      this.options.log?.(`sandbox ${id}: could not remove its directory: ${err.message}`);
    }
  }

  async closeAll() {
    this.closing = true;
    await Promise.all([...this.items.keys()].map((id) => this.remove(id).catch(() => {})));
  }
}
