// Workspace mounts as OpenSandbox host volumes, for OpenSandboxSandbox. OpenSandbox volumes are fixed when a sandbox
// is created: the mounts the workspace declares at start become host volumes of the create request (with a hash of
// them in the MOUNTS_LABEL metadata label), a reconnect compares that hash, and a mount() after creation only reports
// whether the mount is already there. HostMounts holds what the remote sandbox was created with.
import { createHash } from 'node:crypto';
import path from 'node:path';
import { shellQuote } from './shell.js';

/** Metadata label holding a hash of the workspace mounts a sandbox was created with (reconnect check). */
export const MOUNTS_LABEL = 'mastra.ai/mounts';

/** Why a mount cannot become an OpenSandbox host volume, or null. */
function mountProblem(mountPath, config) {
  if (typeof mountPath !== 'string' || !/^\/[A-Za-z0-9_.\-/]+$/.test(mountPath) || mountPath.split('/').some(p => p === '.' || p === '..')) {
    return `invalid mount path ${JSON.stringify(mountPath)} (absolute, [A-Za-z0-9_.-/], no . or ..)`;
  }
  if (!config) return `the filesystem at ${mountPath} cannot be mounted (it has no mount config)`;
  if (config.type !== 'local' || typeof config.basePath !== 'string') {
    return `the ${config.type} filesystem at ${mountPath} cannot be mounted: OpenSandbox host volumes need a local filesystem (pass pvc/ossfs volumes through the "volumes" option)`;
  }
  return null;
}

/**
 * The host path sent for a local filesystem's basePath: absolute and normalised (no `//`, `.`, `..` or trailing
 * `/`). Upstream refuses the unnormalised forms with 400 VOLUME::INVALID_HOST_PATH; the local server resolved them.
 */
export const hostPathOf = basePath => path.posix.resolve(basePath);

/** 16 hex chars of sha256 over the sorted mounts, or undefined when there are none. */
function mountsHash(mounted) {
  if (mounted.size === 0) return undefined;
  const list = [...mounted].sort(([a], [b]) => (a < b ? -1 : 1)).map(([p, m]) => [p, m.hostPath, m.readOnly]);
  return createHash('sha256').update(JSON.stringify(list)).digest('hex').slice(0, 16);
}

export class HostMounts {
  #manager; // () => the sandbox's Mastra MountManager (sandbox.mounts), possibly undefined
  #logger; // () => the sandbox's logger
  #mounted = new Map(); // mount path -> { hostPath, readOnly } of the volumes the remote sandbox was created with
  #mismatch; // why the workspace mounts differ from the remote sandbox's (reconnect), or undefined

  constructor({ manager, logger }) {
    this.#manager = manager;
    this.#logger = logger;
  }

  /** The workspace mounts known now, as OpenSandbox host volumes, and their hash (the MOUNTS_LABEL value). */
  plan() {
    const volumes = [];
    const mounted = new Map();
    for (const [mountPath, entry] of this.#manager()?.entries ?? []) {
      const config = entry.filesystem?.getMountConfig?.();
      if (mountProblem(mountPath, config)) continue; // mount() reports the problem
      const readOnly = Boolean(entry.filesystem.readOnly);
      const hostPath = hostPathOf(config.basePath);
      mounted.set(mountPath, { hostPath, readOnly });
      const name = `mastra-mount-${createHash('sha256').update(mountPath).digest('hex').slice(0, 12)}`;
      volumes.push({ name, host: { path: hostPath }, mountPath, readOnly });
    }
    const hash = mountsHash(mounted);
    return { volumes, mounted, hash };
  }

  /** After attach: remembers the mounts the remote sandbox has; a reconnect with different mounts is reported. */
  check(remote, outcome) {
    const plan = this.plan();
    this.#mounted = plan.mounted;
    this.#mismatch = undefined;
    if (outcome === 'created') return;
    const remoteHash = remote?.metadata?.[MOUNTS_LABEL] ?? '';
    if (remoteHash !== (plan.hash ?? '')) {
      this.#mismatch = `sandbox ${remote.id} was created with different mounts than this workspace declares ` +
        `(${MOUNTS_LABEL} ${remoteHash || 'none'} != ${plan.hash || 'none'}); OpenSandbox volumes are fixed at creation: ` +
        'destroy the sandbox to apply the new mounts';
      this.#mounted = new Map();
      this.#logger().warn(`OpenSandboxSandbox: ${this.#mismatch}`);
    }
  }

  /** The remote sandbox is gone or forgotten. */
  clear() {
    this.#mounted.clear();
    this.#mismatch = undefined;
  }

  /**
   * OpenSandboxSandbox.mount: `created` when the remote sandbox exists; `runCheck(command, operation)` runs a shell
   * check on its execd (undefined when there is none).
   */
  async mount(filesystem, mountPath, { created, runCheck }) {
    const fail = (error, extra = {}) => ({ success: false, mountPath, error, ...extra });
    const config = filesystem?.getMountConfig?.();
    const problem = mountProblem(mountPath, config);
    if (problem) return fail(problem);
    const manager = this.#manager();
    if (!created) {
      // Not created yet: the mount becomes a host volume when the sandbox is created.
      if (manager && !manager.has(mountPath)) manager.add({ [mountPath]: filesystem });
      return { success: true, mountPath };
    }
    if (this.#mismatch && (this.#mounted.has(mountPath) || manager?.has(mountPath))) return fail(this.#mismatch);
    const have = this.#mounted.get(mountPath);
    if (have) {
      if (have.hostPath === hostPathOf(config.basePath) && have.readOnly === Boolean(filesystem.readOnly)) return { success: true, mountPath };
      return fail(`${mountPath} is mounted from ${have.hostPath}${have.readOnly ? ' (read-only)' : ''}; ` +
        'OpenSandbox volumes are fixed at sandbox creation: destroy the sandbox to change it');
    }
    if (runCheck) {
      const q = shellQuote(mountPath);
      const r = await runCheck(`[ -d ${q} ] && [ -n "$(ls -A ${q} 2>/dev/null)" ] && echo non-empty || true`, `check mount path ${mountPath}`);
      if (r.stdout.includes('non-empty')) return fail(`Cannot mount at ${mountPath}: the directory is not empty`);
    }
    return fail(`Cannot mount at ${mountPath} while the sandbox is running: OpenSandbox volumes are fixed at sandbox creation. ` +
      'Add the mount to the Workspace before the sandbox starts (or destroy the sandbox and start it again).');
  }

  /** Forgets a mount. The host volume itself stays in the running sandbox until it is destroyed (volumes are fixed). */
  unmount(mountPath) {
    this.#mounted.delete(mountPath);
    const manager = this.#manager();
    if (manager?.has(mountPath)) manager.delete(mountPath);
  }
}
