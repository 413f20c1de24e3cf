// The raw OpenSandbox handle of OpenSandboxSandbox (`sandbox.opensandbox`): the remote id, the execd endpoint and
// the lifecycle and snapshot calls bound to the sandbox, for features Mastra does not model. Errors are typed.
import { SandboxNotReadyError } from '@mastra/core/workspace';
import { OpenSandboxError } from './errors.js';

/**
 * `s`: the sandbox's side — id (logical), remoteId(), execdUrl(), endpoint() ({ endpoint, headers } or undefined),
 * lifecycle() (the native Lifecycle client), execd() (the native Execd client), map(err, operation) (typed error),
 * snaps (a SnapshotClient), useServerProxy, egress(kind, args, operation) (one /policy call of the egress sidecar).
 */
export function rawHandle(s) {
  const need = () => {
    const id = s.remoteId();
    if (!id) throw new SandboxNotReadyError(s.id);
    return id;
  };
  const call = async (what, fn) => {
    const id = need();
    try {
      return await fn(s.lifecycle(), id);
    } catch (e) {
      throw s.map(e, `${what} ${id}`);
    }
  };
  return {
    get sandboxId() {
      return s.remoteId();
    },
    get execdUrl() {
      return s.execdUrl();
    },
    get endpointHeaders() {
      const ep = s.endpoint();
      return ep ? Object.keys(ep.headers ?? {}) : [];
    },
    get lifecycle() {
      return s.lifecycle();
    },
    get execd() {
      return s.execd();
    },
    get: () => call('get sandbox', (lc, id) => lc.get(id)),
    pause: () => call('pause sandbox', (lc, id) => lc.pause(id)),
    resume: () => call('resume sandbox', (lc, id) => lc.resume(id)),
    renew: at => call('renew sandbox', (lc, id) => lc.renew(id, renewTime(at))),
    endpoint: (port, useServerProxy = s.useServerProxy) => call('get endpoint of sandbox', (lc, id) => lc.endpoint(id, port, useServerProxy)),
    patchMetadata: patch => call('patch metadata of sandbox', (lc, id) => lc.patchMetadata(id, patch)),
    // upstream SDK's getEgressPolicy / patchEgressRules / deleteEgressRules: the egress sidecar's /policy API on the
    // sandbox's port 18080 endpoint (a sandbox created with networkPolicy egress rules)
    getEgressPolicy: async () => JSON.parse(await s.egress('policyGet', [], 'get egress policy of sandbox')),
    patchEgressRules: async rules => {
      if (!Array.isArray(rules) || rules.some(r => typeof r?.action !== 'string' || typeof r?.target !== 'string')) {
        throw new OpenSandboxError('patchEgressRules: expected a list of { action, target } rules', 'INVALID_OPTION', { kind: 'option' });
      }
      await s.egress('policyPatch', rules.flatMap(r => [r.action, r.target]), 'patch egress rules of sandbox');
    },
    deleteEgressRules: async targets => {
      if (!Array.isArray(targets) || targets.some(t => typeof t !== 'string')) {
        throw new OpenSandboxError('deleteEgressRules: expected a list of targets', 'INVALID_OPTION', { kind: 'option' });
      }
      await s.egress('policyDelete', targets, 'delete egress rules of sandbox');
    },
    ...snapshotHandle(s.snaps, need),
  };
}

/** Snapshot calls of the raw handle; `need()` is the remote id of this sandbox (throws when not started). */
function snapshotHandle(snaps, need) {
  return {
    /** Snapshot of this sandbox; `{ wait: true }` resolves once it is Ready (deadline timeoutMs, abortSignal). */
    createSnapshot: async ({ name, wait = false, timeoutMs, abortSignal } = {}) => {
      const id = need();
      return wait ? snaps.capture(id, name, { timeoutMs, abortSignal }) : snaps.create(id, name);
    },
    getSnapshot: id => snaps.get(id),
    /** One page of GET /snapshots ({ items, pagination }); every sandbox's unless `sandboxId` is given. */
    listSnapshots: (query = {}) => snaps.list(query),
    deleteSnapshot: id => snaps.delete(id),
    waitForSnapshot: (id, { timeoutMs, abortSignal } = {}) => snaps.waitReady(id, { timeoutMs, abortSignal }),
  };
}

function renewTime(at) {
  if (at instanceof Date) return at.toISOString();
  if (typeof at === 'number' && Number.isFinite(at) && at > 0) return new Date(Date.now() + at * 1000).toISOString();
  if (typeof at === 'string' && !Number.isNaN(Date.parse(at))) return at;
  throw new OpenSandboxError('renew: expected a Date, an RFC 3339 string or a number of seconds from now', 'INVALID_OPTION', { kind: 'option' });
}
