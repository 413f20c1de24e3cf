// Test helper: OpenSandboxSandbox instances against a local server, destroyed after the suite.
// sandboxes(() => server) -> { make(options), sh(sandbox, command) -> trimmed stdout (asserts exit 0), destroyAll() }
// warnings() -> { seen, logger }: a logger for sandbox.__setLogger that keeps the warnings.
import assert from 'node:assert/strict';
import { OpenSandboxSandbox } from '../../lib/index.js';

export function sandboxes(server) {
  const made = [];
  return {
    make(options = {}) {
      const s = new OpenSandboxSandbox({ domain: server().domain, ...options });
      made.push(s);
      return s;
    },
    track(s) {
      made.push(s);
      return s;
    },
    async sh(s, command) {
      const r = await s.executeCommand(command);
      assert.equal(r.exitCode, 0, r.stderr);
      return r.stdout.trim();
    },
    async destroyAll() {
      for (const s of made.splice(0)) await s._destroy().catch(() => {});
    },
  };
}

/** A logger that keeps the warnings (with their error's message); the rest is dropped. */
export function warnings() {
  const seen = [];
  const logger = { warn: (m, meta) => seen.push(`${m}${meta?.error ? ` ${meta.error}` : ''}`), debug() {}, info() {}, error() {}, trackException() {} };
  return { seen, logger };
}
