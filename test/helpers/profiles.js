// Test helper: the deployments the client's suites run against (issue 20). The local server's own behaviour, then
// the local server emulating upstream's Docker and Kubernetes runtimes (lib/dev-server/upstream.js) with the
// emulated durations shortened so a suite costs seconds, not minutes. Each profile carries what legitimately
// differs per runtime, so a suite asserts the profile's exact behaviour instead of skipping it.
//   for (const profile of [LOCAL, ...PROFILES]) describe(`suite${profile.title}`, () => { ... startProfileServer(profile, options) ... })
import { startServer } from '../../lib/dev-server/index.js';

/** The local server's own behaviour (no emulation). */
export const LOCAL = {
  name: 'local',
  title: '',
  options: {},
  notFoundCode: 'DOCKER::SANDBOX_NOT_FOUND',
  // pause freezes the processes (SIGSTOP): they survive it
  keepsProcesses: true,
  // the answer to a pause of a paused sandbox
  pauseAgain: { status: 409, code: 'DOCKER::SANDBOX_NOT_RUNNING' },
};

/** Upstream deployments of the newest emulated server version (0.1.14). */
export const PROFILES = [
  {
    ...LOCAL,
    name: 'docker',
    title: " (emulate: 'docker')",
    options: { emulate: 'docker', emulateDelays: { create: 50, snapshot: 100 } },
    // `docker pause` of a paused container: Docker's 409 wrapped in a 500
    pauseAgain: { status: 500, code: 'DOCKER::SANDBOX_PAUSE_FAILED' },
  },
  {
    ...LOCAL,
    name: 'kubernetes',
    title: " (emulate: 'kubernetes')",
    options: { emulate: 'kubernetes', emulateDelays: { create: 50, ready: 50, endpoint: 50, pause: 100, resume: 100, snapshot: 100 } },
    notFoundCode: 'KUBERNETES::SANDBOX_NOT_FOUND',
    // BatchSandbox pause commits the root filesystem and deletes the pod: files survive, processes do not
    keepsProcesses: false,
    pauseAgain: { status: 409, code: 'KUBERNETES::INVALID_STATE' },
  },
];

/**
 * Servers before the Snapshots API (0.1.13): every snapshot entry point is a typed unsupported error. (Kubernetes
 * 0.1.12 cannot pause at all, 501: only the snapshot suites use these profiles.)
 */
export const NO_SNAPSHOTS = PROFILES.map(p => ({
  ...p,
  name: `${p.name}-0.1.12`,
  title: ` (emulate: '${p.name}', serverVersion: '0.1.12')`,
  options: { ...p.options, serverVersion: '0.1.12' },
}));

/**
 * `it` for a test whose subject is the client alone (option parsing, hooks, aborts, a child process): it runs against
 * the local server only, where it costs least; every test about what the server answers runs against every profile.
 */
export function clientOnly(profile) {
  return profile === LOCAL ? it : () => {};
}

/** startServer for `profile`, with the suite's own `options` (port 0 unless given). */
export function startProfileServer(profile, options = {}) {
  return startServer({ port: 0, ...options, ...profile.options });
}
