// Test helper: wait for a condition with a deadline instead of sleeping.
// waitFor(fn, { timeoutMs, intervalMs, message }) calls fn (sync or async) until it returns a truthy value, which it
// resolves with; errors thrown by fn count as "not yet". After timeoutMs it rejects with message and the last error.

export async function waitFor(fn, { timeoutMs = 10000, intervalMs = 50, message = 'condition not met' } = {}) {
  const deadline = Date.now() + timeoutMs;
  let lastError;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
      lastError = undefined;
    } catch (err) {
      lastError = err;
    }
    if (Date.now() >= deadline) {
      const why = lastError ? ` (last error: ${lastError.message ?? lastError})` : '';
      throw new Error(`timed out after ${timeoutMs} ms: ${message}${why}`);
    }
    await new Promise((r) => setTimeout(r, Math.min(intervalMs, Math.max(1, deadline - Date.now()))));
  }
}
