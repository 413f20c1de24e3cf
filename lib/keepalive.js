// Idle expiry for OpenSandboxSandbox (`idleTimeoutMinutes`): the remote sandbox expires `idleMs` after the last
// activity. While commands or processes are active the expiry is renewed ahead of time on every tick (to now + idle
// + one period), so a busy sandbox never expires mid-task; the first tick after the activity ended sets it to
// now + idle. A command starting or ending renews only when less than idleMs is left, to now + idle + half a
// period: an idle sandbox expires at least idleMs after its last activity (at most a period later), and
// back-to-back commands cost at most one renewal per half period.
// Expiry times are computed on the SERVER clock: the offset to the local clock is anchored on the HTTP Date header
// of every lifecycle answer (the server's clock at the answer, to the second, seen between two local instants); the
// bounds of all observations are intersected (a contradicting one, e.g. after a local clock step, starts over).
// Never on a sandbox's status.lastTransitionAt: upstream stamps it with the container's FinishedAt or creation time
// (Docker) or the workload's creationTimestamp (Kubernetes), not the time of our resume. Without an anchor the local
// clock is used.

const MIN_PERIOD_MS = 500;
const MAX_PERIOD_MS = 60000;

export class KeepAlive {
  #idleMs;
  #busy;
  #renew;
  #onError;
  #skewLo; // bounds of (server clock - local clock) in ms, when anchored
  #skewHi;
  #timer;
  #running = false;
  #wasBusy = false;
  #chain = Promise.resolve();
  #expiresAt; // the last expiry we set, server clock ms

  /** idleMs undefined disables everything. busy() -> boolean; renew(Date) -> Promise; onError(err). */
  constructor({ idleMs, busy, renew, onError }) {
    this.#idleMs = idleMs;
    this.#busy = busy;
    this.#renew = renew;
    this.#onError = onError;
  }

  get enabled() {
    return this.#idleMs !== undefined;
  }

  get periodMs() {
    return Math.min(MAX_PERIOD_MS, Math.max(MIN_PERIOD_MS, Math.floor((this.#idleMs ?? 0) / 3)));
  }

  /**
   * A server timestamp observed between the local instants sentAt and receivedAt (ms since the epoch);
   * precisionMs: how much the stamp may be truncated (an HTTP Date header: 1000).
   */
  anchor(serverTime, sentAt, receivedAt, precisionMs = 0) {
    const t = Date.parse(serverTime ?? '');
    if (Number.isNaN(t) || !(receivedAt >= sentAt)) return;
    const lo = t - receivedAt;
    const hi = t + precisionMs - sentAt;
    if (this.#skewLo === undefined || lo > this.#skewHi || hi < this.#skewLo) {
      this.#skewLo = lo;
      this.#skewHi = hi;
    } else {
      this.#skewLo = Math.max(this.#skewLo, lo);
      this.#skewHi = Math.min(this.#skewHi, hi);
    }
  }

  /** The server's current time, estimated. */
  serverNow() {
    return Date.now() + (this.#skewLo === undefined ? 0 : (this.#skewLo + this.#skewHi) / 2);
  }

  /** The sandbox is running: sets the expiry to now + idle and starts the ticks. */
  async start() {
    if (!this.enabled) return;
    this.stop();
    this.#running = true;
    this.#wasBusy = this.#busy();
    this.#expiresAt = undefined;
    await this.#renew_(0, true);
    if (!this.#running) return;
    this.#timer = setInterval(() => this.#tick(), this.periodMs);
    this.#timer.unref?.();
  }

  stop() {
    this.#running = false;
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /** A command started or ended: the idle countdown restarts now. */
  activity() {
    if (this.#running) this.#renew_(this.periodMs / 2, false);
  }

  #tick() {
    const busy = this.#busy();
    if (busy) this.#renew_(this.periodMs, true);
    else if (this.#wasBusy) this.#renew_(0, true); // activity ended (seen at tick granularity): idle counts from now
    this.#wasBusy = busy;
  }

  /** Renews to server-now + idle + ahead; unless forced, only when less than idle is left. */
  #renew_(ahead, force) {
    this.#chain = this.#chain.then(async () => {
      if (!this.#running) return;
      const now = this.serverNow();
      if (!force && this.#expiresAt !== undefined && this.#expiresAt >= now + this.#idleMs) return;
      const at = now + this.#idleMs + ahead;
      try {
        await this.#renew(new Date(at));
        this.#expiresAt = at;
      } catch (err) {
        this.#onError?.(err);
      }
    });
    return this.#chain;
  }
}
