// Client-side helpers over the native snapshot calls, shared by checkpoints (lib/checkpoints.js), templates
// (lib/template.js) and the raw handle: wait until a snapshot is Ready (deadline, abort), list every snapshot
// (all pages), capture = create + wait (a Failed capture is deleted and reported as OpenSandboxSnapshotError).
// Servers before 0.1.13 have no Snapshots API (`GET /snapshots` answers FastAPI's 404 {"detail":"Not Found"}): that
// is detected once per server (lifecycle base URL), and every call then fails with OpenSandboxUnsupportedError.
import { setTimeout as delay } from 'node:timers/promises';
import { SandboxAbortError } from '@mastra/core/workspace';
import { OpenSandboxNotFoundError, OpenSandboxSnapshotError, OpenSandboxTimeoutError, OpenSandboxUnsupportedError } from './errors.js';

export const SNAPSHOT_POLL_MS = 200;
/** Default deadline of a capture (snapshot() / template builds / createSnapshot({ wait: true })). */
export const DEFAULT_SNAPSHOT_TIMEOUT_MS = 300000;
const LIST_PAGE_SIZE = 100;
const MAX_LIST_PAGES = 100;

/** The upstream server version that introduced the Snapshots API. */
export const SNAPSHOTS_API_SINCE = '0.1.13';
const snapshotsApi = new Map(); // lifecycle base URL -> Promise<boolean> (does the server have the Snapshots API)

/** A 404 without a server code: the route itself does not exist (FastAPI's {"detail":"Not Found"}). */
const routeMissing = err => err?.status === 404 && (!err.code || err.code === 'HTTP_404');

const stateOf = snap => String(snap?.status?.state ?? 'Unknown');
const newestFirst = (a, b) => (Date.parse(b.createdAt) || 0) - (Date.parse(a.createdAt) || 0);

/**
 * `call(operation, fn)` runs fn(lifecycle) and maps native errors onto the typed errors (the sandbox's #lcCall).
 * All waits poll GET /snapshots/{id} every 200 ms until `timeoutMs`; `abortSignal` stops waiting (the server
 * may still finish the capture).
 */
export class SnapshotClient {
  #call;
  #rawCall;
  #server;
  /** server: the lifecycle base URL, the key of the capability detection (undefined: assume the API exists). */
  constructor(call, { server } = {}) {
    this.#rawCall = call;
    this.#server = server;
    this.#call = async (operation, fn) => {
      await this.require(operation);
      try {
        return await call(operation, fn);
      } catch (err) {
        // the route is missing although a server at this URL had it (another server now on that port): ask again
        if (this.#server === undefined || !routeMissing(err)) throw err;
        snapshotsApi.delete(this.#server);
        await this.require(operation);
        throw err;
      }
    };
  }

  /** The lifecycle base URL this client talks to (undefined when not given). */
  get server() {
    return this.#server;
  }

  /** Whether the server has the Snapshots API: asked once per server (GET /snapshots), then remembered. */
  available() {
    if (this.#server === undefined) return Promise.resolve(true);
    let known = snapshotsApi.get(this.#server);
    if (!known) {
      known = this.#rawCall('detect the Snapshots API', lc => lc.listSnapshots({ page: 1, pageSize: 1 })).then(() => true, err => {
        if (routeMissing(err)) return false;
        snapshotsApi.delete(this.#server); // not an answer about the API: ask again next time
        throw err;
      });
      snapshotsApi.set(this.#server, known);
    }
    return known;
  }

  /** Rejects with OpenSandboxUnsupportedError (naming the server version needed) when the server has no Snapshots API. */
  async require(operation) {
    if (await this.available()) return;
    throw new OpenSandboxUnsupportedError(
      `${operation}: this OpenSandbox server has no Snapshots API (GET /snapshots answers 404); snapshots, checkpoints, ` +
        `templates and the snapshotId option need OpenSandbox server ${SNAPSHOTS_API_SINCE} or later`,
      { operation, feature: 'snapshots', requiredServerVersion: SNAPSHOTS_API_SINCE });
  }

  create(sandboxId, name) {
    return this.#call(`create snapshot of sandbox ${sandboxId}`, lc => lc.createSnapshot(sandboxId, name === undefined ? {} : { name }));
  }

  get(id) {
    return this.#call(`get snapshot ${id}`, lc => lc.getSnapshot(id));
  }

  /** Deletes a snapshot; with `ignoreMissing` one already gone is fine. */
  async delete(id, { ignoreMissing = false } = {}) {
    try {
      await this.#call(`delete snapshot ${id}`, lc => lc.deleteSnapshot(id));
    } catch (err) {
      if (!ignoreMissing || !(err instanceof OpenSandboxNotFoundError)) throw err;
    }
  }

  list(query = {}) {
    return this.#call('list snapshots', lc => lc.listSnapshots(query));
  }

  /** Every snapshot in `states` (all pages), filtered by `filter(snapshot)`, newest first. */
  async listAll({ states, sandboxId, filter = () => true } = {}) {
    const out = [];
    for (let page = 1; page <= MAX_LIST_PAGES; page++) {
      const body = await this.list({ states, sandboxId, page, pageSize: LIST_PAGE_SIZE });
      const items = Array.isArray(body?.items) ? body.items : [];
      for (const s of items) if (s && typeof s.id === 'string' && filter(s)) out.push(s);
      if (!body?.pagination?.hasNextPage || items.length === 0) break;
    }
    return out.sort(newestFirst);
  }

  /** Newest Ready snapshot whose name is `name`, or null. */
  async newestReady(name) {
    const all = await this.listAll({ states: ['Ready'], filter: s => s.name === name && stateOf(s) === 'Ready' });
    return all[0] ?? null;
  }

  /** Polls until the snapshot is Ready (resolves it) or Failed (OpenSandboxSnapshotError); deadline and abort. */
  async waitReady(id, { timeoutMs = DEFAULT_SNAPSHOT_TIMEOUT_MS, abortSignal, operation = `wait for snapshot ${id}` } = {}) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (abortSignal?.aborted) throw new SandboxAbortError('snapshot', abortSignal.reason);
      const snap = await this.get(id);
      const state = stateOf(snap);
      if (state === 'Ready') return snap;
      if (state === 'Failed' || state === 'Deleting') {
        throw new OpenSandboxSnapshotError(`${operation}: snapshot ${id} is ${state}: ${snap?.status?.message || snap?.status?.reason || 'no reason given'}`, {
          operation, snapshotId: id, state, reason: snap?.status?.reason, serverMessage: snap?.status?.message,
        });
      }
      if (Date.now() >= deadline) {
        throw new OpenSandboxTimeoutError(`${operation}: snapshot ${id} still ${state} after ${timeoutMs} ms`, { operation, timeoutMs, code: 'SNAPSHOT_TIMEOUT' });
      }
      await delay(SNAPSHOT_POLL_MS, undefined, abortSignal ? { signal: abortSignal } : undefined).catch(() => {});
    }
  }

  /** Create + wait. A capture that fails is deleted (best effort) so it never shadows an earlier one. */
  async capture(sandboxId, name, opts = {}) {
    const created = await this.create(sandboxId, name);
    if (!created || typeof created.id !== 'string') {
      throw new OpenSandboxSnapshotError(`create snapshot of sandbox ${sandboxId}: the server answered without a snapshot id`, { operation: 'create snapshot' });
    }
    try {
      return await this.waitReady(created.id, { ...opts, operation: opts.operation ?? `snapshot sandbox ${sandboxId}` });
    } catch (err) {
      if (err instanceof OpenSandboxSnapshotError) await this.delete(created.id, { ignoreMissing: true }).catch(() => {});
      throw err;
    }
  }
}
