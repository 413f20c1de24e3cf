// Dead-sandbox recovery: the one place every call that reaches a sandbox goes through (executeCommand,
// processes.spawn/get, writeFiles, OpenSandboxFilesystem, the code interpreter tools, getPortUrl). Mastra's convention for a sandbox that
// died outside the provider's control (deleted, expired): the next call notices, resets the handle, provisions again
// (ensureRunning) and retries once. Here the retry happens only when the failed request provably never started
// anything — the server or a proxy refused it (404/502/503, the server proxy's 401 SANDBOX::UNAUTHORIZED), the connection was refused, or (for calls whose
// transport failures all come before anything runs, e.g. a command stream cut before its init event) any transport
// failure — and the lifecycle API confirms the sandbox is gone. A request that may have run something, on a sandbox
// that is gone, rejects with OpenSandboxSandboxGoneError (the handle is reset: the next call provisions again);
// every other failure rejects with its own typed error. A sandbox another process paused (Kubernetes deletes the pod:
// its execd refuses connections) is resumed and the request retried once, under the same "never started" rule.

const REFUSED = /couldn't connect|could not connect|connection refused|failed to connect/i;

// The server proxy route (useServerProxy) of a sandbox it no longer knows answers 401 SANDBOX::UNAUTHORIZED (one
// answer for an unknown sandbox and a wrong token, so ids cannot be probed): a refusal before anything ran.
const proxyRefused = err => err?.kind === 'api' && err.status === 401 && err.code === 'SANDBOX::UNAUTHORIZED';

/** Errors worth asking the lifecycle API whether the sandbox still exists. */
export function suspicious(err) {
  if (err?.code === 'FILE_NOT_FOUND') return false; // execd's own 404 for a path
  return err?.kind === 'transport' || (err?.kind === 'api' && [404, 502, 503].includes(err.status)) || proxyRefused(err);
}

/**
 * True when `err` proves the request started nothing. anyTransport: every transport failure of this call happens
 * before anything starts (the native layer marks a command stream cut after its init event COMMAND_STREAM_CUT, and a
 * code cell's stream that ended after its init without the cell's end CODE_STREAM_CUT: both may have run something).
 */
export function neverStarted(err, anyTransport = false) {
  if (err?.kind === 'api') return [404, 502, 503].includes(err.status) || proxyRefused(err);
  if (err?.kind !== 'transport' || err.code === 'COMMAND_STREAM_CUT' || err.code === 'CODE_STREAM_CUT') return false;
  return anyTransport || REFUSED.test(err.message ?? '');
}

/**
 * Runs `attempt()` (which throws this package's typed errors) for a sandbox `host`:
 *   host.remoteId()          the remote sandbox id the next attempt talks to (undefined: none)
 *   host.goneError(id, err)  resolves to an OpenSandboxSandboxGoneError when the lifecycle API says `id` is gone
 *                            (404, or no longer Running/Paused/Pending), else null
 *   host.reset(id)           forgets `id` (only if it is still the current one) and marks the handle stopped
 *   host.pausedElsewhere(id) true when the lifecycle API says `id` is Pausing or Paused (not by this handle); the
 *                            handle is then marked stopped, `id` kept, so that ensureRunning() resumes it
 *   host.ensureRunning()     provisions again
 *   host.aborted()           true when the caller gave up (never retried)
 */
export async function withRecovery(host, attempt, { anyTransport = false } = {}) {
  for (let retried = false; ; retried = true) {
    const id = host.remoteId();
    try {
      return await attempt();
    } catch (err) {
      if (!id || !suspicious(err)) throw err;
      const gone = await host.goneError(id, err);
      const retry = !retried && neverStarted(err, anyTransport) && !host.aborted?.();
      if (gone) {
        host.reset(id);
        if (!retry) throw gone;
      } else if (!retry || !(await host.pausedElsewhere(id))) {
        throw err;
      }
    }
    await host.ensureRunning();
  }
}
