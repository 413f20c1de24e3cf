// A sandbox paused behind our back. Another client's POST /pause on Docker freezes the container: its execd still
// accepts connections (the kernel does) and answers nothing, so a request would wait for the stream-idle timeout and
// fail. While calls are in flight, the watch asks the lifecycle API for the sandbox's state once a call has waited
// FIRST_PROBE_MS, then again at doubling intervals (up to MAX_PROBE_MS) while it still waits. A sandbox found Paused,
// with no snapshot of it being captured (Docker's commit pauses the container too), is resumed: the waiting request
// goes on where it was, as the frozen execd still holds it. Pausing/Resuming are left alone, a gone sandbox is left to
// the dead-sandbox recovery (recovery.js), and a sandbox whose pause releases its pod (Kubernetes) refuses connections
// instead of freezing them, which that recovery handles.

export const FIRST_PROBE_MS = 2000;
export const MAX_PROBE_MS = 60000;

export class PauseWatch {
  #host;
  #probing = null; // the probe in progress, shared by every call that asks meanwhile
  #lastProbe = 0;

  /**
   * host.subject()            the remote sandbox id to watch now, or undefined (not running as this handle knows it)
   * host.state(id)            resolves the lifecycle state of `id` (a string), rejects when it cannot tell
   * host.snapshotting(id)     resolves true when a snapshot of `id` is being captured (Creating)
   * host.resume(id)           resumes `id`
   * host.warn(message, meta)  reports what the watch did or could not do
   */
  constructor(host) {
    this.#host = host;
  }

  /** Resolves as `promise` does; while it is pending the sandbox is watched (see the top of this file). */
  track(promise) {
    let wait = FIRST_PROBE_MS;
    let timer;
    const arm = () => {
      timer = setTimeout(() => {
        this.#probe().finally(() => {
          if (!timer) return; // settled meanwhile
          wait = Math.min(wait * 2, MAX_PROBE_MS);
          arm();
        });
      }, wait);
      timer.unref?.();
    };
    arm();
    const stop = () => {
      clearTimeout(timer);
      timer = undefined;
    };
    promise.then(stop, stop);
    return promise;
  }

  #probe() {
    if (this.#probing) return this.#probing;
    if (Date.now() - this.#lastProbe < FIRST_PROBE_MS) return Promise.resolve();
    this.#probing = this.#check().catch((err) => {
      this.#host.warn('OpenSandboxSandbox: could not check whether a silent sandbox was paused', { error: err.message });
    }).finally(() => {
      this.#lastProbe = Date.now();
      this.#probing = null;
    });
    return this.#probing;
  }

  async #check() {
    const id = this.#host.subject();
    if (!id || (await this.#host.state(id)) !== 'Paused') return;
    if (await this.#host.snapshotting(id)) return; // a capture pauses it and resumes it itself
    if (this.#host.subject() !== id) return; // stopped, destroyed or provisioned again meanwhile
    await this.#host.resume(id);
    this.#host.warn(`OpenSandboxSandbox: sandbox ${id} was paused by another client while a call waited on it; resumed it`);
  }
}
