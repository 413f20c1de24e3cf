// What each upstream OpenSandbox deployment does, in one table the local server's handlers consult: per runtime
// (`emulate`: none = the local server's own behaviour, 'docker', 'kubernetes') and per server version
// (`serverVersion`). A reader finds here "what Kubernetes answers to a pause"; the handlers only ask the profile.
// Sources: the recordings of the real server v0.1.14 on Docker and upstream's server/opensandbox_server/services/
// (docker/docker_service.py, k8s/kubernetes_service.py, k8s/batchsandbox_provider.py, validators.py). Every behaviour
// is listed in docs/dev-server.md ("Emulating an upstream deployment").
import { ApiError } from './validate.js';

/** Runtimes `emulate` accepts. */
export const RUNTIMES = ['docker', 'kubernetes'];
/** Kubernetes workload providers (upstream's `[kubernetes].workload_provider`). */
export const WORKLOAD_PROVIDERS = ['batchsandbox', 'agent-sandbox'];
/** The newest server version emulated; the default of `serverVersion`. */
export const LATEST_VERSION = '0.1.14';
/** The version that brought the Snapshots API and BatchSandbox pause/resume on Kubernetes. */
export const SNAPSHOTS_SINCE = '0.1.13';
/** Kubernetes: since 0.1.10 a create's answer says Running where the pod is only Allocated (status_helpers.py
 * _normalize_create_status, upstream commit 74117c26); a get or list right after still says Allocated. */
export const CREATE_STATUS_NORMALIZED_SINCE = '0.1.10';
/** Durations (ms) the emulation takes; `emulateDelays` overrides any of them. */
export const DELAY_NAMES = ['create', 'ready', 'endpoint', 'pause', 'resume', 'snapshot', 'createTimeout'];

const DEFAULT_DELAYS = {
  // the local server answers as fast as it can
  local: { create: 0, ready: 0, endpoint: 0, pause: 0, resume: 0, snapshot: 0, createTimeout: 0 },
  // Docker: the create answers once the (local) image is pulled and the container runs (0.5-1 s recorded);
  // pause/unpause are immediate; `docker commit` of a snapshot takes 0.2-1 s
  docker: { create: 700, ready: 0, endpoint: 0, pause: 0, resume: 0, snapshot: 300, createTimeout: 0 },
  // Kubernetes: the create waits for the pod's IP (Allocated), readiness follows; the endpoint reads the informer
  // cache, which lags the pod; BatchSandbox pause commits and pushes the root filesystem, resume schedules a new pod
  // a SandboxSnapshot commits and pushes an image too; a create whose pod never runs (its image pull failed) is
  // answered 504 after sandbox_create_timeout_seconds (60 by default)
  kubernetes: { create: 3000, ready: 2000, endpoint: 1000, pause: 20000, resume: 15000, snapshot: 20000, createTimeout: 60000 },
};

/** 'X.Y.Z' → [X, Y, Z], or null. */
function parseVersion(v) {
  const m = typeof v === 'string' ? /^(\d{1,4})\.(\d{1,4})\.(\d{1,4})$/.exec(v) : null;
  return m ? m.slice(1).map(Number) : null;
}

function atLeast(v, than) {
  const t = parseVersion(than);
  for (let i = 0; i < 3; i++) if (v[i] !== t[i]) return v[i] > t[i];
  return true;
}

const err = (status, code, message) => new ApiError(status, code, message);

/** Seconds precision, like a Kubernetes creationTimestamp. */
const k8sTime = (ms) => new Date(Math.floor(ms / 1000) * 1000).toISOString().replace(/\.000Z$/, 'Z');

/** docker_service.py: a sandbox's status as get/list derive it from the container's state. */
const DOCKER_STATUS = {
  Running: () => ({ reason: 'CONTAINER_RUNNING', message: 'Sandbox container is running.' }),
  Paused: () => ({ reason: 'CONTAINER_PAUSED', message: 'Sandbox container is paused.' }),
  Terminated: () => ({ reason: 'CONTAINER_EXITED', message: 'Sandbox container exited successfully.' }),
  Failed: (sb) => ({ reason: 'CONTAINER_EXITED_ERROR', message: `Sandbox container exited with code ${sb.exitCode}.` }),
};

/**
 * The behaviours of one deployment. Each entry is data or a small function of the sandbox record; `null` where the
 * deployment behaves as the local server does by default.
 */
function behaviours(runtime, version, provider) {
  const snapshotsApi = atLeast(version, SNAPSHOTS_SINCE);
  const base = {
    snapshotsApi,
    // 404 of an unknown sandbox on every route
    notFound: (id) => err(404, 'DOCKER::SANDBOX_NOT_FOUND', `Sandbox ${id} not found.`),
    // status.lastTransitionAt: 'transition' (the time of the last state change), or a function (sb, iso) → string
    lastTransitionAt: 'transition',
    // pause: 'freeze' (SIGSTOP, processes kept), 'release' (Pausing → Paused, processes lost), or an ApiError factory
    pause: 'freeze',
    // resume: null (follows pause), or an ApiError factory
    resume: null,
    // answer to a pause of a sandbox in `state` that cannot be paused, and to a resume of one that cannot be resumed
    pauseRefusal: (id, state) => err(409, 'DOCKER::SANDBOX_NOT_RUNNING', `Sandbox ${id} is not running (state ${state}).`),
    resumeRefusal: (id, state) => err(409, 'DOCKER::SANDBOX_NOT_PAUSED', `Sandbox ${id} is not paused (state ${state}).`),
    // get/list: { reason, message } of the sandbox's current state (sb) → object, or null: as the last transition said
    statusView: null,
    // get/list createdAt: 'request' (the create's arrival, as its answer says) or 'container' (Docker: after the pull)
    viewCreatedAt: 'request',
    // get/list platform: 'always', or 'requested' (only when the create gave one)
    platformView: 'always',
    // where a create spends `delays.create`: null, 'pull' (before the sandbox exists: Docker pulls the image), or
    // 'ready' (listed as Pending meanwhile: Kubernetes waits for the pod)
    createWait: null,
    // a create's state once it answers: 'Running', or 'Allocated' (pod has an IP, not ready yet; Running `ready` ms later)
    createdState: 'Running',
    // the status a create answers with, from the sandbox's own (status → status), or null: that status
    createStatus: null,
    // upstream's FastAPI answers: unknown route {"detail":"Not Found"}, wrong method {"detail":"Method Not Allowed"}
    fastapiRoutes: false,
    // validators.py: '//', a trailing '/' or '/..' in a host path → 400 VOLUME::INVALID_HOST_PATH
    hostPathSyntax: false,
    // a create with snapshotId and no metadata gets the source sandbox's metadata (docker commit keeps the labels)
    snapshotLabels: false,
    // DELETE of a snapshot a live sandbox was created from: 409 SNAPSHOT::DELETE_CONFLICT, the record stays Deleting
    snapshotDeleteConflict: false,
    // renew: the order of its checks — 'lookup' (404), 'past' (400: not in the future), 'expiry' (409: no expiry)
    renewChecks: ['lookup', 'expiry', 'past'],
    noExpiry: (id) => err(409, 'DOCKER::INVALID_EXPIRATION', `Sandbox ${id} does not expire; it cannot be renewed.`),
    // codes where upstream differs from the local server's own
    timeoutTooLong: null, // null: the local 400 SANDBOX::INVALID_TIMEOUT
    invalidPort: null, // null: 422 like a schema failure
    // answer to an endpoint asked for with `?expires=` (a signed route); null: the parameter is ignored
    signedRoutes: null,
    // sandbox views leave out empty metadata (upstream's response models exclude None, and no labels read back as None)
    omitEmptyMetadata: false,
    // pydantic model validators: the first failing one is the only error ("Exactly one of image or snapshotId",
    // then "resourceLimits is required when poolRef is not provided")
    modelValidators: false,
    // the create answer: a Location header; entrypoint last (upstream's CreateSandboxResponse field order)
    createLocation: true,
    entrypointLast: false,
    // get/list metadata in key order (Docker reads it back from labels, a sorted map)
    sortedMetadata: false,
    snapshotReadyMessage: 'Snapshot created successfully.',
    // path prefix of the endpoint `use_server_proxy=true` hands out (upstream's has no /v1)
    proxyPrefix: '/v1',
    // the endpoint's answer while the pod has no IP (or the informer cache lags `delays.endpoint`); null: no such state
    noPodIp: null,
    missingPvcStatus: 404,
    reservedMetadata: null, // null: the local message
    invalidMetadataKey: null,
    invalidMetadataValue: null,
  };
  if (runtime === null) return base;
  const upstream = {
    ...base,
    fastapiRoutes: true,
    hostPathSyntax: true,
    proxyPrefix: '',
    omitEmptyMetadata: true,
    modelValidators: true,
    createLocation: false,
    entrypointLast: true,
    timeoutTooLong: (timeout, max) => err(400, 'SANDBOX::INVALID_PARAMETER', `Sandbox timeout ${timeout}s exceeds configured maximum of ${max}s.`),
    reservedMetadata: (key) => err(400, 'SANDBOX::INVALID_METADATA_LABEL',
      `Metadata key '${key}' uses the reserved prefix 'opensandbox.io/'. Keys under this prefix are managed by the system and cannot be set via metadata.`),
    // validators.py ensure_metadata_labels
    invalidMetadataKey: (key) => err(400, 'SANDBOX::INVALID_METADATA_LABEL', `Metadata key '${key}' is invalid: must be either a name or a DNS-subdomain prefix and name separated by /, where the name is up to 63 characters and matches [A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?, and the optional prefix is a valid DNS subdomain up to 253 characters.`),
    invalidMetadataValue: (value) => err(400, 'SANDBOX::INVALID_METADATA_LABEL', `Metadata value '${value}' is invalid: must be 63 characters or less, start/end with an alphanumeric character, and contain only alphanumeric, '-', '_', or '.' characters.`),
    noExpiry: (id) => err(409, 'DOCKER::INVALID_EXPIRATION', `Sandbox ${id} does not have automatic expiration enabled.`),
    // validators.py ensure_valid_port (both runtimes share the DOCKER:: code)
    invalidPort: () => err(400, 'DOCKER::INVALID_PORT', 'Port must be between 1 and 65535.'),
    missingPvcStatus: 400,
  };
  if (runtime === 'docker') {
    return {
      ...upstream,
      // container FinishedAt, or its creation time while it never stopped; pause/unpause do not change it
      lastTransitionAt: (sb, iso) => iso(sb.finishedAt ?? sb.containerCreatedAt),
      statusView: (sb) => DOCKER_STATUS[sb.status.state]?.(sb) ?? null,
      viewCreatedAt: 'container',
      platformView: 'requested',
      createWait: 'pull',
      // Docker's State.Running stays true while paused: a second pause reaches `docker pause`, which answers 409
      pauseRefusal: (id, state, sb) => (state === 'Paused'
        ? err(500, 'DOCKER::SANDBOX_PAUSE_FAILED', `Failed to pause sandbox container: 409 Client Error for http+docker://localhost/v1.41/containers/${sb.containerId}/pause: Conflict ("Container ${sb.containerId} is already paused")`)
        : err(409, 'DOCKER::SANDBOX_NOT_RUNNING', 'Sandbox is not in a running state.')),
      resumeRefusal: () => err(409, 'DOCKER::SANDBOX_NOT_PAUSED', 'Sandbox is not in a paused state.'),
      snapshotLabels: true,
      snapshotDeleteConflict: true,
      renewChecks: ['lookup', 'past', 'expiry'],
      sortedMetadata: true,
      snapshotReadyMessage: 'Docker snapshot image created successfully.',
      signedRoutes: () => err(400, 'SANDBOX::API_NOT_SUPPORTED',
        "Signed routes (expires parameter) are not supported when runtime.type='docker'. Use the Kubernetes runtime for signed routes."),
    };
  }
  // kubernetes
  const k8s = {
    ...upstream,
    notFound: (id) => err(404, 'KUBERNETES::SANDBOX_NOT_FOUND', `Sandbox '${id}' not found`),
    lastTransitionAt: (sb) => k8sTime(sb.createdAt), // the workload's creationTimestamp
    // batchsandbox_provider.py get_status while the pod is not scheduled yet
    statusView: (sb) => (sb.status.state === 'Pending' ? { reason: 'BATCHSANDBOX_PENDING', message: 'BatchSandbox is pending allocation' } : null),
    createWait: 'ready',
    createdState: 'Allocated',
    createStatus: atLeast(version, CREATE_STATUS_NORMALIZED_SINCE)
      ? (st) => (st.state === 'Allocated' ? { ...st, state: 'Running', message: 'Pod has IP assigned and sandbox is ready for requests' } : st)
      : null,
    noPodIp: () => err(404, 'KUBERNETES::POD_IP_NOT_AVAILABLE', 'Pod IP is not yet available. The Pod may still be starting.'),
    // the time is checked before the workload is looked up
    renewChecks: ['past', 'lookup', 'expiry'],
  };
  if (!snapshotsApi) {
    // before 0.1.13 the Kubernetes runtime had no pause at all
    const unsupported = (what) => () => err(501, 'SANDBOX::API_NOT_SUPPORTED', `${what} operation is not supported in Kubernetes runtime`);
    return { ...k8s, pause: unsupported('Pause'), resume: unsupported('Resume') };
  }
  if (provider === 'agent-sandbox') {
    return {
      ...k8s,
      pause: () => err(400, 'KUBERNETES::INVALID_STATE', 'Pause is not supported for this sandbox type'),
      resume: () => err(400, 'KUBERNETES::INVALID_STATE', 'Resume is not supported for this sandbox type'),
    };
  }
  // BatchSandbox: phases Pausing → Paused → Resuming → Running; every refusal is 409 KUBERNETES::INVALID_STATE
  const phase = (state) => (state === 'Running' || state === 'Allocated' ? 'Succeed' : state);
  return {
    ...k8s,
    pause: 'release',
    pauseRefusal: (id, state) => err(409, 'KUBERNETES::INVALID_STATE', state === 'Paused' ? 'Sandbox is already paused'
      : ['Pausing', 'Resuming', 'Pending'].includes(state) ? `Cannot pause: ${state === 'Pending' ? 'sandbox is being created' : 'operation in progress'} (phase=${state})`
        : `Cannot pause sandbox in phase ${phase(state)}`),
    resumeRefusal: (id, state) => err(409, 'KUBERNETES::INVALID_STATE', ['Pausing', 'Resuming'].includes(state)
      ? `Cannot resume: operation in progress (phase=${state})`
      : `Cannot resume sandbox in phase ${phase(state)}, expected Paused`),
  };
}

/**
 * The profile of `startServer({ emulate, serverVersion, workloadProvider, emulateDelays })`: throws an Error naming
 * the option for an unknown runtime or provider, a malformed version or delay.
 */
export function upstreamProfile({ emulate, serverVersion, workloadProvider, emulateDelays } = {}) {
  if (emulate !== undefined && !RUNTIMES.includes(emulate)) {
    throw new Error(`emulate must be one of ${RUNTIMES.map((r) => `'${r}'`).join(', ')} (or left out: the local server's own behaviour), got ${JSON.stringify(emulate)}`);
  }
  const runtime = emulate ?? null;
  if (serverVersion !== undefined && !parseVersion(serverVersion)) {
    throw new Error(`serverVersion must be an OpenSandbox server version 'X.Y.Z' (e.g. '${LATEST_VERSION}'), got ${JSON.stringify(serverVersion)}`);
  }
  const version = serverVersion ?? LATEST_VERSION;
  if (workloadProvider !== undefined) {
    if (runtime !== 'kubernetes') throw new Error("workloadProvider needs emulate: 'kubernetes'");
    if (!WORKLOAD_PROVIDERS.includes(workloadProvider)) {
      throw new Error(`workloadProvider must be one of ${WORKLOAD_PROVIDERS.map((p) => `'${p}'`).join(', ')}, got ${JSON.stringify(workloadProvider)}`);
    }
  }
  const provider = runtime === 'kubernetes' ? workloadProvider ?? 'batchsandbox' : null;
  const delays = { ...DEFAULT_DELAYS[runtime ?? 'local'] };
  if (emulateDelays !== undefined) {
    if (emulateDelays === null || typeof emulateDelays !== 'object' || Array.isArray(emulateDelays)) {
      throw new Error(`emulateDelays must be an object with some of ${DELAY_NAMES.join(', ')} (milliseconds)`);
    }
    for (const [k, v] of Object.entries(emulateDelays)) {
      if (!DELAY_NAMES.includes(k)) throw new Error(`emulateDelays.${k} is unknown; known: ${DELAY_NAMES.join(', ')}`);
      if (!Number.isInteger(v) || v < 0 || v > 600_000) throw new Error(`emulateDelays.${k} must be an integer 0..600000 (milliseconds), got ${JSON.stringify(v)}`);
      delays[k] = v;
    }
  }
  return { runtime, version, provider, delays, ...behaviours(runtime, parseVersion(version), provider) };
}
