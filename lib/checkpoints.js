// Mastra's checkpoint convention on OpenSandbox snapshots. A checkpoint named N is the newest Ready snapshot named
// `mastra.checkpoint.N` on the server: `snapshot()` captures the sandbox into it (create + wait until Ready, then the
// older ones of that name beyond `keep` are deleted), and a start that finds no live sandbox boots from it (or from
// the seed checkpoint) instead of the base image. Captures of one sandbox are chained so they never interleave; a
// capture that fails is deleted and never becomes the newest, so the previous checkpoint stays in place.
import { OpenSandboxUnsupportedError } from './errors.js';
import { SnapshotClient, DEFAULT_SNAPSHOT_TIMEOUT_MS } from './snapshots.js';

/** Snapshot-name prefix of checkpoints (the spec's snapshots have a name, no labels). */
export const CHECKPOINT_PREFIX = 'mastra.checkpoint.';
/** How many Ready checkpoints of a name `snapshot()` keeps (the newest ones); option `keepCheckpoints`. */
export const DEFAULT_KEEP_CHECKPOINTS = 3;

export const checkpointSnapshotName = name => `${CHECKPOINT_PREFIX}${name}`;

// Snapshot ids whose delete conflicted (409), per "<server>|<snapshot name>", deleted again by the next prune of the
// name in this process (also when the server does not list `Deleting` records)
const conflicted = new Map();

export class Checkpoints {
  #snaps;
  #keep;
  #timeoutMs;
  #onError;
  #chain = Promise.resolve();

  /**
   * snaps: a SnapshotClient; keep: Ready checkpoints kept per name; timeoutMs: deadline of one capture;
   * onError(err): pruning problems (never thrown).
   */
  constructor({ snaps, keep = DEFAULT_KEEP_CHECKPOINTS, timeoutMs = DEFAULT_SNAPSHOT_TIMEOUT_MS, onError = () => {} }) {
    if (!(snaps instanceof SnapshotClient)) throw new TypeError('Checkpoints needs a SnapshotClient');
    this.#snaps = snaps;
    this.#onError = onError;
    this.#keep = keep;
    this.#timeoutMs = timeoutMs;
  }

  /** Whether the server can hold checkpoints (it has the Snapshots API). */
  available() {
    return this.#snaps.available();
  }

  /** The newest Ready checkpoint of `name` (a snapshot object), or null. */
  newest(name) {
    return this.#snaps.newestReady(checkpointSnapshotName(name));
  }

  /**
   * Captures into checkpoint `name`; `prepare()` runs first inside the chain and returns { sandboxId, release }
   * (release() runs after the capture, success or not: e.g. pause a sandbox that was resumed for it). Resolves the
   * Ready snapshot. Concurrent calls run one after the other.
   */
  capture(name, prepare, { timeoutMs = this.#timeoutMs, abortSignal } = {}) {
    const run = this.#chain.then(async () => {
      const { sandboxId, release } = await prepare();
      let snap;
      try {
        snap = await this.#snaps.capture(sandboxId, checkpointSnapshotName(name), { timeoutMs, abortSignal, operation: `snapshot sandbox ${sandboxId} into checkpoint ${name}` });
      } finally {
        await release?.();
      }
      await this.prune(name);
      return snap;
    });
    this.#chain = run.catch(() => {});
    return run;
  }

  /**
   * Deletes the Ready checkpoints of `name` older than the newest `keep`, and its Failed captures. Best effort: a
   * snapshot that cannot be deleted now (e.g. 409 SNAPSHOT::DELETE_CONFLICT while a sandbox created from it exists:
   * upstream then leaves the record `Deleting`) is reported to onError and deleted again by the next prune of the
   * name in this process, which also retries every `Deleting` record the server lists. Resolves the number deleted.
   */
  async prune(name) {
    const snapName = checkpointSnapshotName(name);
    const key = `${this.#snaps.server ?? ''}|${snapName}`;
    let all;
    try {
      all = await this.#snaps.listAll({ states: ['Ready', 'Failed', 'Deleting'], filter: s => s.name === snapName });
    } catch (err) {
      this.#onError(err);
      return 0;
    }
    const ready = all.filter(s => s.status?.state === 'Ready');
    const doomed = new Set([...ready.slice(this.#keep), ...all.filter(s => ['Failed', 'Deleting'].includes(s.status?.state))].map(s => s.id));
    for (const id of conflicted.get(key) ?? []) doomed.add(id);
    conflicted.delete(key);
    let n = 0;
    for (const id of doomed) {
      try {
        await this.#snaps.delete(id, { ignoreMissing: true });
        n++;
      } catch (err) {
        if (err.status === 409) conflicted.set(key, (conflicted.get(key) ?? new Set()).add(id));
        this.#onError(err);
      }
    }
    return n;
  }
}

/**
 * The checkpoints a fresh start may boot from, in order: the newest Ready checkpoint of `checkpointName`, else of
 * `seedCheckpointName` (boot-only). Yields { snapshotId, restoredFrom: { kind: 'checkpoint' | 'seed', name,
 * snapshotId } }; the caller tries each (one deleted meanwhile is skipped) before its base image or snapshot.
 * None on a server without the Snapshots API (a start there boots from the image).
 */
export async function* checkpointCandidates(checkpoints, { checkpointName, seedCheckpointName }) {
  if (!checkpointName && !seedCheckpointName) return;
  if (!(await checkpoints.available())) return;
  for (const [kind, name] of [['checkpoint', checkpointName], ['seed', seedCheckpointName]]) {
    if (!name) continue;
    let snap;
    try {
      snap = await checkpoints.newest(name);
    } catch (err) {
      if (err instanceof OpenSandboxUnsupportedError) return; // the server turned out to have no Snapshots API
      throw err;
    }
    if (snap) yield { snapshotId: snap.id, restoredFrom: { kind, name, snapshotId: snap.id } };
  }
}
