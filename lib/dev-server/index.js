// The local OpenSandbox-compatible server: `startServer(options)` serves the lifecycle API (routes under /v1 and
// without prefix) with plain node:http and runs each sandbox as a bubblewrap-isolated execd (see runner.js).
// Exported to users as `mastra-opensandbox/dev-server`; docs/dev-server.md describes options and differences.
import http from 'node:http';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import crypto from 'node:crypto';
import { Sandboxes } from './sandboxes.js';
import { Snapshots } from './snapshots.js';
import { bindFdProblem, findBwrap, probeBwrap, removeTree } from './runner.js';
import { checkExecdBinary, execdBinary } from './execd-binary.js';
import { probeNetwork } from './network.js';
import { hostNameserver, parseUpstream, EGRESS_PORT, EGRESS_AUTH_HEADER } from './egress.js';
import { detectCgroups } from './cgroups.js';
import { Disks, detectDisk } from './disk.js';
import { startReaper } from './reaper.js';
import {
  ApiError, MIN_DISK_BYTES, ValidationError, issue, parseMetadataFilter, parseTimestamp, validateCreate, validateSnapshotCreate,
} from './validate.js';
import { parseBytes } from './quantities.js';
import { upstreamProfile } from './upstream.js';
import { proxyRequest, proxyUpgrade, EXECD_PORT } from './proxy.js';
import { answerBadRequest, decodeSegment, parseTarget, sendBadRequest, readBody as readBodyLimited } from './http.js';
import { INGRESS_HEADER, TOKEN_HEADERS } from './relay.js';
import {
  DEFAULT_SANDBOX_UID, MAX_SANDBOX_UID, SECURE_ACCESS_HEADER, UID_BLOCK, browserOrigin, checkExecdAccess, httpAnswer, safeEqual, sandboxIdentities, seccompProgram,
} from './security.js';

const OPTION_NAMES = ['port', 'host', 'apiKey', 'allowedHostPaths', 'isolation', 'dataDir', 'execdAccessToken', 'execdEndpoint',
  'endpointHeaders', 'maxSandboxTimeoutSeconds', 'maxSnapshotBytes', 'commandTailMs', 'ptyExitRace', 'signalForwarding', 'ptyCloseLinger', 'log',
  'insecure', 'sandboxUid', 'cgroupParent', 'maxPids', 'diskLimit', 'defaultMemory', 'unenforcedLimits', 'emulate', 'serverVersion',
  'workloadProvider', 'emulateDelays', 'defaultNetworkPolicy', 'dnsUpstream', 'maxImageBytes', 'insecureRegistries', 'images'];
/** Whether ELF executable `file` has no program interpreter (PT_INTERP): statically linked. */
function isStaticElf(file) {
  const fd = fs.openSync(file, 'r');
  try {
    const h = Buffer.alloc(64);
    fs.readSync(fd, h, 0, 64, 0);
    if (h.readUInt32BE(0) !== 0x7f454c46 || h[4] !== 2) return false; // ELF64 only
    const phoff = Number(h.readBigUInt64LE(0x20));
    const size = h.readUInt16LE(0x36);
    const count = h.readUInt16LE(0x38);
    const ph = Buffer.alloc(size * count);
    fs.readSync(fd, ph, 0, ph.length, phoff);
    for (let i = 0; i < count; i++) if (ph.readUInt32LE(i * size) === 3) return false;
    return true;
  } finally {
    fs.closeSync(fd);
  }
}

/** Default pids.max of a sandbox (upstream's Docker runtime default pids_limit): execd is ~11 threads, and pids counts threads. */
const DEFAULT_MAX_PIDS = 4096;
/**
 * Default memory bound of a sandbox that asks for none (raw API creates, the official client): the client's own
 * default `resources.memory`, so a sandbox gets the same bound whichever client made it.
 */
const DEFAULT_MEMORY = '2Gi';
/** Smallest defaultMemory: execd is Node (about 50 MB resident); a smaller bound would OOM-kill every sandbox. */
const MIN_DEFAULT_MEMORY = 64 * 2 ** 20;
/** Default disk bound of a sandbox: a sparse image, so only what is written takes room. */
const DEFAULT_DISK_LIMIT = '10Gi';
const PROXY_STRIP = new Set(['open-sandbox-api-key', 'authorization', 'cookie', ...TOKEN_HEADERS]);
const JSON_TYPE = /^application\/([a-z0-9.+-]*\+)?json\s*(;|$)/i;
const BODY_LIMIT = 1024 * 1024;

function send(res, status, body, headers = {}) {
  if (res.headersSent) return void res.destroy();
  if (body === undefined) {
    res.writeHead(status, { 'Content-Length': 0, ...headers });
    return void res.end();
  }
  let text;
  try {
    text = JSON.stringify(body);
  } catch (err) {
    // an answer that cannot be written (never expected: errors echo bounded input) is a 500, not a dead server
    status = 500;
    text = JSON.stringify({ code: 'GENERAL::UNKNOWN_ERROR', message: `answer not serializable: ${err.message}` });
  }
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

/** Longest error message answered: messages that quote a request's values are cut there ("…"), never echo it whole. */
const MESSAGE_LIMIT = 1024;
const boundedMessage = (text) => (text.length > MESSAGE_LIMIT ? `${text.slice(0, MESSAGE_LIMIT)}…` : text);

/** The body as text; a larger one than BODY_LIMIT is a 413 that the client gets to see (http.js readBody). */
async function readBody(req) {
  const tooLarge = (n) => new ApiError(413, 'GENERAL::REQUEST_TOO_LARGE', `request body larger than ${n} bytes`);
  return (await readBodyLimited(req, BODY_LIMIT, tooLarge)).toString('utf8');
}

/**
 * True when a malformed escape of a server proxy route target lies after `/proxy/{port}` (sandbox id well-formed): that
 * part is execd's, which answers Go's raw 400, so the route answers the same.
 */
function execdPart(target) {
  const m = /^(?:\/v1)?\/sandboxes\/([^/?]*)\/proxy\/\d+(?=[/?]|$)/.exec(target);
  return !!m && !/%(?![0-9a-fA-F]{2})/.test(m[1]);
}

/** A sandbox id from the path; a malformed percent-encoding is a 400. */
function pathId(segment) {
  try {
    return decodeSegment(segment);
  } catch (err) {
    throw new ApiError(400, 'GENERAL::BAD_REQUEST', err.message);
  }
}

/** JSON body like FastAPI: empty → 422 missing (undefined when `optional`); malformed → 422 json_invalid. A body needs
 * a JSON Content-Type (415 otherwise: a browser can send text/plain cross-origin without asking). */
async function readJson(req, { optional = false } = {}) {
  const text = await readBody(req);
  if (text.trim() === '' && optional) return undefined;
  if (!JSON_TYPE.test(req.headers['content-type'] ?? '')) {
    throw new ApiError(415, 'GENERAL::UNSUPPORTED_MEDIA_TYPE', `Content-Type must be application/json, got ${JSON.stringify(req.headers['content-type'] ?? '')}`);
  }
  if (text.trim() === '') throw new ValidationError([issue(['body'], 'Field required', 'missing', null)]);
  try {
    return JSON.parse(text);
  } catch (err) {
    // Python's json names the offset; so does V8, except at the end of the text
    const pos = Number(/position (\d+)/.exec(err.message)?.[1] ?? (/end of JSON input/.test(err.message) ? text.length : 0));
    throw new ValidationError([{ type: 'json_invalid', loc: ['body', pos], msg: 'JSON decode error', input: {}, ctx: { error: err.message } }]);
  }
}

function intQuery(url, name, def, min, max) {
  const raw = url.searchParams.get(name);
  if (raw === null) return def;
  const n = Number(raw);
  if (!/^-?\d+$/.test(raw.trim())) {
    throw new ValidationError([issue(['query', name], 'Input should be a valid integer, unable to parse string as an integer', 'int_parsing', raw)]);
  }
  if (n < min) throw new ValidationError([{ ...issue(['query', name], `Input should be greater than or equal to ${min}`, 'greater_than_equal', raw), ctx: { ge: min } }]);
  if (max != null && n > max) throw new ValidationError([{ ...issue(['query', name], `Input should be less than or equal to ${max}`, 'less_than_equal', raw), ctx: { le: max } }]);
  return n;
}

/**
 * Starts the server. Resolves { domain, baseUrl, port, close() }. See docs/dev-server.md for the options.
 */
export async function startServer(options = {}) {
  const unknown = Object.keys(options).filter((k) => !OPTION_NAMES.includes(k));
  if (unknown.length) throw new Error(`unknown option(s) ${unknown.join(', ')}; known: ${OPTION_NAMES.join(', ')}`);
  const opts = {
    port: 0, host: '127.0.0.1', apiKey: undefined, allowedHostPaths: [], isolation: 'bwrap', dataDir: undefined,
    execdAccessToken: undefined, execdEndpoint: 'direct', endpointHeaders: false, maxSandboxTimeoutSeconds: undefined,
    commandTailMs: 1000, ptyExitRace: false, signalForwarding: false, ptyCloseLinger: false, log: false, insecure: false,
    sandboxUid: DEFAULT_SANDBOX_UID, cgroupParent: undefined, maxPids: DEFAULT_MAX_PIDS, diskLimit: DEFAULT_DISK_LIMIT, defaultMemory: DEFAULT_MEMORY,
    unenforcedLimits: false, defaultNetworkPolicy: 'allow', images: 'host',
  };
  for (const [k, v] of Object.entries(options)) if (v !== undefined) opts[k] = v; // undefined = default
  const log = typeof opts.log === 'function' ? opts.log : opts.log === true ? (line) => console.error(`dev-server: ${line}`) : null;
  if (!['bwrap', 'none'].includes(opts.isolation)) throw new Error(`isolation must be 'bwrap' or 'none', got ${JSON.stringify(opts.isolation)}`);
  if (!['allow', 'deny'].includes(opts.defaultNetworkPolicy)) {
    throw new Error(`defaultNetworkPolicy must be 'allow' (a create without networkPolicy gets network, as upstream) or 'deny', got ${JSON.stringify(opts.defaultNetworkPolicy)}`);
  }
  if (!['direct', 'proxy'].includes(opts.execdEndpoint)) throw new Error(`execdEndpoint must be 'direct' or 'proxy', got ${JSON.stringify(opts.execdEndpoint)}`);
  if (!Array.isArray(opts.allowedHostPaths) || opts.allowedHostPaths.some((p) => typeof p !== 'string' || !path.isAbsolute(p))) {
    throw new Error('allowedHostPaths must be an array of absolute paths');
  }
  if (!Number.isInteger(opts.commandTailMs) || opts.commandTailMs < 0) throw new Error('commandTailMs must be an integer >= 0');
  if (!Number.isInteger(opts.port) || opts.port < 0 || opts.port > 65535) throw new Error('port must be an integer 0..65535');
  for (const k of ['host', 'apiKey', 'dataDir', 'execdAccessToken']) {
    if (opts[k] !== undefined && (typeof opts[k] !== 'string' || opts[k] === '')) throw new Error(`${k} must be a non-empty string`);
  }
  if (opts.maxSandboxTimeoutSeconds !== undefined && (!Number.isInteger(opts.maxSandboxTimeoutSeconds) || opts.maxSandboxTimeoutSeconds < 60)) {
    throw new Error('maxSandboxTimeoutSeconds must be an integer >= 60');
  }
  if (opts.maxSnapshotBytes !== undefined && (!Number.isInteger(opts.maxSnapshotBytes) || opts.maxSnapshotBytes < 0)) {
    throw new Error('maxSnapshotBytes must be an integer >= 0');
  }
  // the image store's options (lib/dev-server/images/store.js): its LRU bound and the registries allowed over plain HTTP
  if (opts.maxImageBytes !== undefined && (!Number.isInteger(opts.maxImageBytes) || opts.maxImageBytes < 0)) {
    throw new Error('maxImageBytes must be an integer >= 0');
  }
  if (opts.insecureRegistries !== undefined && (!Array.isArray(opts.insecureRegistries) || opts.insecureRegistries.some((r) => typeof r !== 'string' || !/^[A-Za-z0-9.\-\[\]:]+$/.test(r)))) {
    throw new Error('insecureRegistries must be an array of host[:port] strings');
  }
  if (typeof opts.log !== 'function' && typeof opts.log !== 'boolean') throw new Error('log must be a function or a boolean');
  if (typeof opts.signalForwarding !== 'boolean') throw new Error('signalForwarding must be a boolean');
  if (typeof opts.ptyCloseLinger !== 'boolean') throw new Error('ptyCloseLinger must be a boolean');
  if (typeof opts.insecure !== 'boolean') throw new Error('insecure must be a boolean');
  if (!Number.isInteger(opts.sandboxUid) || opts.sandboxUid < 1 || opts.sandboxUid > MAX_SANDBOX_UID + 1 - UID_BLOCK) {
    throw new Error(`sandboxUid must be an integer 1..${MAX_SANDBOX_UID + 1 - UID_BLOCK} (the first of the sandboxes' uids and their gid; each server takes ${UID_BLOCK} uids of the range up to ${MAX_SANDBOX_UID})`);
  }
  if (typeof opts.unenforcedLimits !== 'boolean') throw new Error('unenforcedLimits must be a boolean');
  if (!Number.isInteger(opts.maxPids) || opts.maxPids < 0 || opts.maxPids > 4194304) throw new Error('maxPids must be an integer 0..4194304 (0: no cap)');
  if (opts.cgroupParent !== undefined && (typeof opts.cgroupParent !== 'string' || !path.isAbsolute(opts.cgroupParent))) {
    throw new Error('cgroupParent must be an absolute path (a delegated cgroup v2 directory)');
  }
  const diskLimit = typeof opts.diskLimit === 'number' ? opts.diskLimit : typeof opts.diskLimit === 'string' ? parseBytes(opts.diskLimit) : NaN;
  if (!Number.isSafeInteger(diskLimit) || diskLimit < MIN_DISK_BYTES) {
    throw new Error(`diskLimit must be a byte quantity of at least 8Mi (e.g. "10Gi", or a number of bytes), got ${JSON.stringify(opts.diskLimit)}`);
  }
  // what the emulated upstream deployment does (upstream.js); throws naming the option
  const profile = upstreamProfile({
    emulate: opts.emulate, serverVersion: opts.serverVersion, workloadProvider: opts.workloadProvider, emulateDelays: opts.emulateDelays,
  });
  const defaultMemory = typeof opts.defaultMemory === 'number' ? opts.defaultMemory : typeof opts.defaultMemory === 'string' ? parseBytes(opts.defaultMemory) : NaN;
  if (!Number.isSafeInteger(defaultMemory) || (defaultMemory !== 0 && defaultMemory < MIN_DEFAULT_MEMORY)) {
    throw new Error(`defaultMemory must be a byte quantity of at least 64Mi (e.g. "2Gi", or a number of bytes) or 0 (no bound unless asked), got ${JSON.stringify(opts.defaultMemory)}`);
  }
  if (opts.dnsUpstream != null && !parseUpstream(opts.dnsUpstream)) {
    throw new Error(`dnsUpstream must be an IP address with an optional port (e.g. "10.0.0.2" or "127.0.0.1:5353"), got ${JSON.stringify(opts.dnsUpstream)}`);
  }
  const warn = log ?? ((m) => process.emitWarning(m));
  // every sandbox's execd is the C execd osb-execd: missing or not running, the start fails naming the path
  checkExecdBinary();
  let bwrap = null;
  let hardening = null;
  let network = null;
  let volumesProblem = null;
  const ownDataDir = !opts.dataDir;
  const dataDir = opts.dataDir ? path.resolve(opts.dataDir) : fs.mkdtempSync(path.join(os.tmpdir(), 'osb-'));
  fs.mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const fail = (err) => {
    hardening?.identities?.close();
    network?.helper?.close();
    if (ownDataDir) fs.rmSync(dataDir, { recursive: true, force: true });
    throw err;
  };
  if (opts.isolation === 'bwrap') {
    bwrap = findBwrap();
    if (!bwrap) fail(new Error("bubblewrap (bwrap) is not on PATH: install it (Debian: apt-get install bubblewrap) or start with isolation 'none' (commands then run unconfined)"));
    const problem = probeBwrap(bwrap);
    if (problem) fail(new Error(`bubblewrap cannot create sandboxes here (${problem}); fix that or start with isolation 'none'`));
    volumesProblem = bindFdProblem(bwrap);
    if (volumesProblem) warn(`dev-server: ${volumesProblem}: creates with volumes are refused (400 VOLUME::NOT_SUPPORTED)`);
    // the hardening: unprivileged user namespace, no capabilities, seccomp (docs/dev-server-security.md)
    let missing = null;
    try {
      const seccompPath = path.join(dataDir, 'seccomp.bpf');
      fs.writeFileSync(seccompPath, seccompProgram(), { mode: 0o600 });
      hardening = { seccompPath, identities: sandboxIdentities(opts.sandboxUid) };
      const why = probeBwrap(bwrap, hardening);
      if (why) missing = `an unprivileged user namespace with the seccomp filter cannot be created: ${why}`;
    } catch (err) {
      missing = err.message;
    }
    if (missing && !opts.insecure) {
      fail(new Error(`sandboxes cannot be confined here (${missing}); fix that, or start with insecure: true (--insecure) to run them without user namespace, capability drop and seccomp`));
    }
    if (missing || opts.insecure) {
      hardening?.identities?.close();
      hardening = null;
      warn(`dev-server: INSECURE: sandboxes run without user namespace, capability drop and seccomp${missing ? ` (${missing})` : ''}: code inside can take over this machine`);
    }
    // sandboxes given network get it through slirp4netns (network.js); without it: 400, or the host network if insecure
    // egress rules: names resolved through the server's resolver (egress.js), forwarded to dnsUpstream
    network = { ...probeNetwork(), insecure: opts.insecure, dnsUpstream: opts.dnsUpstream ?? hostNameserver() };
    if (network.problem && opts.insecure) {
      warn(`dev-server: INSECURE: ${network.problem}: sandboxes given network share this machine's network namespace (they reach its loopback services, this server's API and other sandboxes' relay ports)`);
    }
    // upstream gives a sandbox without networkPolicy full network; here only through slirp4netns, never the host's
    if (network.problem && opts.defaultNetworkPolicy === 'allow') {
      warn(`dev-server: ${network.problem}: sandboxes created without networkPolicy get NO network (a real OpenSandbox server gives them full network); install slirp4netns, or start with defaultNetworkPolicy 'deny' (--default-network-policy deny) to make that the rule`);
    }
  } else {
    warn('dev-server: isolation none: sandbox commands run unconfined as plain child processes of this server; resourceLimits and disk use are not enforced');
  }
  // resource limits (cgroups) and the disk bound: docs/dev-server-security.md "Resource limits"
  let limits = null;
  if (opts.isolation === 'bwrap') {
    let found;
    try {
      found = detectCgroups({ cgroupParent: opts.cgroupParent, log });
    } catch (err) {
      fail(err);
    }
    const { tools, why: disksWhy } = detectDisk();
    limits = {
      cgroups: found.cgroups, cgroupsWhy: found.why, disks: tools && new Disks({ tools, dataDir, log, identities: hardening?.identities ?? null }), disksWhy,
      unenforced: opts.unenforcedLimits || opts.insecure, maxPids: opts.maxPids, diskLimit, defaultMemory,
    };
    const optOut = opts.unenforcedLimits ? 'unenforcedLimits' : 'insecure';
    if (!limits.cgroups) {
      warn(limits.unenforced
        ? `dev-server: resourceLimits cpu, memory and pids are NOT enforced (${found.why}); they are accepted because of ${optOut}: a sandbox can use all of this machine's CPU, memory and processes`
        : `dev-server: no cgroups (${found.why}): creates with cpu, memory or pids limits are refused (400 SANDBOX::RESOURCE_LIMITS_NOT_ENFORCEABLE), no pids cap stops a fork bomb and no defaultMemory bounds a sandbox that asks for no memory; give cgroupParent or run as root`);
    }
    if (!limits.disks) {
      warn(`dev-server: no per-sandbox disk bound (${disksWhy}): a sandbox can fill the disk of ${dataDir}${limits.unenforced ? `; ephemeral-storage limits are accepted unenforced (${optOut})` : ''}`);
    }
    limits.disks?.prepare(diskLimit);
    if (limits.disks || limits.cgroups) {
      limits.reaper = startReaper({ sandboxDir: path.join(fs.realpathSync(dataDir), 'sb'), disksDir: limits.disks && fs.realpathSync(limits.disks.dir), cgroupDirs: limits.cgroups?.instanceDirs() ?? [] });
    }
    log?.(`limits: ${limits.cgroups ? limits.cgroups.describe() : 'no cgroups'}; disk bound: ${limits.disks ? `ext4 image per sandbox (default ${diskLimit} bytes)` : 'none'}; default memory: ${limits.cgroups && defaultMemory ? `${defaultMemory} bytes` : 'none'}`);
  }
  const releaseLimits = async () => {
    await limits?.cgroups?.close().catch((err) => log?.(err.message));
    await limits?.disks?.close();
    limits?.reaper?.close();
  };

  // images 'run': a create's image.uri is pulled (lib/dev-server/images/) and the sandbox runs on its layers
  // (runner.js, src/execd/rootfs.c); 'host' (default): the host's root, read-only, whatever the image
  let images = null;
  if (!['host', 'run'].includes(opts.images)) fail(new Error(`images must be 'host' or 'run', got ${JSON.stringify(opts.images)}`));
  if (opts.images === 'run') {
    if (opts.isolation !== 'bwrap') fail(new Error("images 'run' needs isolation 'bwrap' (the image's root is mounted in the sandbox's namespaces)"));
    // the execd copied into the image runs on the image's libraries, not the host's: it must be the static one
    const execdFile = execdBinary();
    if (!execdFile || !isStaticElf(execdFile)) {
      fail(new Error(`images 'run' needs a statically linked osb-execd (it runs inside images, without the host's libraries): ${execdFile ?? 'none'} is not; use the prebuilt one or set MASTRA_OPENSANDBOX_EXECD`));
    }
    // the layers' owner: for a root server a uid just below the sandboxes' block (idmapped to each sandbox's root),
    // else the server's own uid (root in the sandbox's user namespace)
    const owner = hardening ? { uid: opts.sandboxUid - 1, gid: opts.sandboxUid - 1 } : { uid: process.getuid(), gid: process.getgid() };
    let mod;
    try {
      mod = await import('./images/store.js');
    } catch (err) {
      fail(new Error(`images 'run': the image store (lib/dev-server/images/store.js) is not available: ${err.message}`));
    }
    const store = new mod.ImageStore({ dir: path.join(dataDir, 'images'), owner, log, maxImageBytes: opts.maxImageBytes, insecureRegistries: opts.insecureRegistries });
    await store.open();
    images = { store, owner };
  }

  const sandboxes = new Sandboxes({
    images,
    dataDir, allowedHostPaths: opts.allowedHostPaths, isolation: opts.isolation, bwrap, hardening,
    execdToken: opts.execdAccessToken, commandTailMs: opts.commandTailMs, ptyExitRace: opts.ptyExitRace,
    signalForwarding: opts.signalForwarding, ptyCloseLinger: opts.ptyCloseLinger,
    endpointHeaders: opts.endpointHeaders, network, log, limits, profile, volumesProblem,
    defaultNetwork: opts.defaultNetworkPolicy === 'allow' && !network?.problem,
  });
  const snapshots = new Snapshots({ dataDir, sandboxes, log, maxBytes: opts.maxSnapshotBytes, profile });
  sandboxes.snapshots = snapshots;
  let domain = '';

  /** Endpoint of a sandbox port; for execd its headers carry the sandbox's own token (OpenSandbox-Secure-Access). */
  function endpointFor(sb, port, useServerProxy) {
    // egress rules: upstream's sidecar /policy API on 18080 is served by the server (egress.js), behind its own token
    if (port === EGRESS_PORT && sb.egress?.policyPort) {
      const auth = { [EGRESS_AUTH_HEADER]: sb.egress.token };
      if (useServerProxy) return { endpoint: `${domain}${profile.proxyPrefix}/sandboxes/${sb.id}/proxy/${port}`, headers: auth };
      return { endpoint: `127.0.0.1:${sb.egress.policyPort}`, headers: auth };
    }
    const secure = port === EXECD_PORT ? { [SECURE_ACCESS_HEADER]: sb.token } : {};
    // Kubernetes: no pod IP yet (or the informer has not seen it), also when the server proxy is asked for
    if (profile.noPodIp && (!sb.relay || Date.now() < sb.endpointAt)) throw profile.noPodIp();
    if (useServerProxy) return { endpoint: `${domain}${profile.proxyPrefix}/sandboxes/${sb.id}/proxy/${port}`, headers: secure };
    if (!sb.relay) throw new ApiError(409, 'DOCKER::SANDBOX_NOT_RUNNING', `Sandbox ${sb.id} is not running (state ${sb.status.state}).`);
    const relay = `127.0.0.1:${sb.relay.port}`;
    if (port === EXECD_PORT) {
      const headers = opts.endpointHeaders ? { [INGRESS_HEADER]: `${sb.id}-${port}`, ...secure } : secure;
      return { endpoint: opts.execdEndpoint === 'direct' ? relay : `${relay}/proxy/${port}`, headers };
    }
    // header-routed gateway: the header picks the port; otherwise execd's reverse proxy does
    if (opts.endpointHeaders) return { endpoint: relay, headers: { [INGRESS_HEADER]: `${sb.id}-${port}`, ...secure } };
    return { endpoint: `${relay}/proxy/${port}`, headers: secure };
  }

  function checkAuth(req) {
    const why = browserOrigin(req.headers);
    if (why) throw new ApiError(403, 'GENERAL::FORBIDDEN', `browser-originated requests are refused (${why})`);
    if (!opts.apiKey) return;
    const key = req.headers['open-sandbox-api-key'];
    if (key === undefined) throw new ApiError(401, 'MISSING_API_KEY', 'Authentication credentials are missing. Provide API key via OPEN-SANDBOX-API-KEY header.');
    if (!safeEqual(key, opts.apiKey)) throw new ApiError(401, 'INVALID_API_KEY', 'Invalid API key.');
  }

  /**
   * `/sandboxes/{id}/proxy/{port}/rest` → { sb, target, path } for the server proxy, or null. Like upstream for
   * secureAccess sandboxes it demands the sandbox's token: an unknown id and a wrong token answer the same 401.
   */
  function proxyTarget(p, url, req) {
    const m = /^\/sandboxes\/([^/]+)\/proxy\/(\d+)(\/.*)?$/.exec(p);
    if (!m) return null;
    const id = pathId(m[1]);
    let sb = null;
    try {
      sb = sandboxes.get(id);
    } catch { /* answered like a wrong token below */ }
    const port = Number(m[2]);
    // execd needs the sandbox's token; the sandbox's own services (other ports) are open like upstream's
    const refusal = port === EXECD_PORT || !sb ? checkExecdAccess(req.headers, sb?.token) : null;
    if (refusal) throw new ApiError(refusal.status, refusal.body.code, refusal.body.message, { body: refusal.body });
    if (port < 1 || port > 65535) throw new ApiError(400, 'SANDBOX::INVALID_PORT', `invalid port ${m[2]}`);
    const rest = (m[3] ?? '/') + url.search;
    if (port === EGRESS_PORT && sb.egress?.policyPort) return { sb, target: { port: sb.egress.policyPort }, path: rest };
    const target = { socketPath: sb.proc.socketPath };
    return { sb, target, path: port === EXECD_PORT ? rest : `/proxy/${port}${rest}` };
  }

  async function route(req, res, url) {
    let p = url.pathname.replace(/\/+$/, '') || '/';
    if (p === '/v1' || p.startsWith('/v1/')) p = p.slice(3) || '/';
    const m = req.method;
    if (p === '/health' && m === 'GET') return send(res, 200, { status: 'healthy' });
    const prox = proxyTarget(url.pathname.replace(/^\/v1(?=\/)/, ''), url, req);
    if (prox) {
      // no API key (like upstream) but the sandbox's token; the tenant key and credentials never reach the sandbox
      proxyRequest(req, res, prox.target, prox.path, { drop: PROXY_STRIP });
      return;
    }
    checkAuth(req);
    if (p === '/sandboxes' && m === 'POST') {
      const body = await readJson(req);
      const spec = validateCreate(body, { maxTimeout: opts.maxSandboxTimeoutSeconds, profile });
      const sb = await sandboxes.create(spec);
      const v = sandboxes.view(sb, { full: false });
      if (profile.createStatus) v.status = profile.createStatus(v.status);
      return send(res, 202, v, profile.createLocation ? { Location: `${url.pathname.startsWith('/v1') ? '/v1' : ''}/sandboxes/${sb.id}` } : {});
    }
    if (p === '/sandboxes' && m === 'GET') {
      const raw = url.searchParams.get('metadata');
      const metadata = raw ? parseMetadataFilter(raw) : {};
      const states = url.searchParams.getAll('state').filter((s) => s !== '');
      const page = intQuery(url, 'page', 1, 1);
      const pageSize = intQuery(url, 'pageSize', 20, 1, 200);
      return send(res, 200, sandboxes.list({ states, metadata, page, pageSize }));
    }
    if (p === '/snapshots' && m === 'GET' && profile.snapshotsApi) {
      const sandboxId = url.searchParams.get('sandboxId');
      const states = url.searchParams.getAll('state').filter((s) => s !== '');
      const page = intQuery(url, 'page', 1, 1);
      const pageSize = intQuery(url, 'pageSize', 20, 1, 200);
      return send(res, 200, snapshots.list({ sandboxId: sandboxId || null, states, page, pageSize }));
    }
    let r = /^\/snapshots\/([^/]+)$/.exec(p);
    if (r && profile.snapshotsApi) {
      const id = pathId(r[1]);
      if (m === 'GET') return send(res, 200, snapshots.view(snapshots.get(id)));
      if (m === 'DELETE') {
        await snapshots.remove(id);
        return send(res, 204);
      }
    }
    r = /^\/sandboxes\/([^/]+)\/snapshots$/.exec(p);
    if (r && m === 'POST' && profile.snapshotsApi) {
      const spec = validateSnapshotCreate(await readJson(req, { optional: true }));
      const rec = snapshots.create(pathId(r[1]), spec);
      return send(res, 202, snapshots.view(rec), { Location: `${url.pathname.startsWith('/v1') ? '/v1' : ''}/snapshots/${rec.id}` });
    }
    if (p === '/metrics/events' && m === 'POST') {
      await readBody(req); // SDK telemetry: accepted and ignored
      return send(res, 204);
    }
    r = /^\/sandboxes\/([^/]+)$/.exec(p);
    if (r) {
      const id = pathId(r[1]);
      if (m === 'GET') return send(res, 200, sandboxes.view(sandboxes.get(id)));
      if (m === 'DELETE') {
        await sandboxes.remove(id);
        return send(res, 204);
      }
    }
    r = /^\/sandboxes\/([^/]+)\/(pause|resume|renew-expiration|metadata)$/.exec(p);
    if (r) {
      const id = pathId(r[1]);
      if (r[2] === 'pause' && m === 'POST') {
        sandboxes.pause(id);
        return send(res, 202);
      }
      if (r[2] === 'resume' && m === 'POST') {
        sandboxes.resume(id);
        return send(res, 202);
      }
      if (r[2] === 'renew-expiration' && m === 'POST') {
        const body = await readJson(req);
        if (body === null || typeof body !== 'object' || Array.isArray(body)) {
          throw new ValidationError([issue(['body'], 'Input should be a valid dictionary or object to extract fields from', 'model_attributes_type', body)]);
        }
        if (body.expiresAt === undefined) throw new ValidationError([issue(['body', 'expiresAt'], 'Field required', 'missing', body)]);
        const at = parseTimestamp(body.expiresAt);
        if (Number.isNaN(at)) throw new ValidationError([issue(['body', 'expiresAt'], 'Input should be a valid datetime', 'datetime_parsing', body.expiresAt)]);
        return send(res, 200, sandboxes.renew(id, at));
      }
      if (r[2] === 'metadata' && m === 'PATCH') {
        const body = await readJson(req);
        if (body === null || typeof body !== 'object' || Array.isArray(body)) {
          throw new ValidationError([issue(['body'], 'Input should be a valid dictionary', 'dict_type', body)]);
        }
        for (const [k, v] of Object.entries(body)) {
          if (v !== null && typeof v !== 'string') throw new ValidationError([issue(['body', k], 'Input should be a valid string', 'string_type', v)]);
        }
        return send(res, 200, sandboxes.view(sandboxes.patchMetadata(id, body)));
      }
    }
    r = /^\/sandboxes\/([^/]+)\/endpoints\/([^/]+)$/.exec(p);
    if (r && m === 'GET') {
      const id = pathId(r[1]);
      if (profile.invalidPort && /^-?\d+$/.test(r[2])) {
        // upstream: FastAPI parses an integer, the service refuses it out of range (before looking the sandbox up)
        if (Number(r[2]) < 1 || Number(r[2]) > 65535) throw profile.invalidPort();
      } else if (profile.invalidPort) {
        throw new ValidationError([issue(['path', 'port'], 'Input should be a valid integer, unable to parse string as an integer', 'int_parsing', r[2])]);
      } else if (!/^\d+$/.test(r[2]) || Number(r[2]) < 1 || Number(r[2]) > 65535) {
        throw new ValidationError([issue(['path', 'port'], 'Input should be a valid integer between 1 and 65535', 'int_parsing', r[2])]);
      }
      const sb = sandboxes.get(id);
      if (profile.signedRoutes && url.searchParams.has('expires')) throw profile.signedRoutes();
      const useProxy = /^(true|1|yes|on)$/i.test(url.searchParams.get('use_server_proxy') ?? '');
      return send(res, 200, endpointFor(sb, Number(r[2]), useProxy));
    }
    if (profile.fastapiRoutes || (!profile.snapshotsApi && /^\/(snapshots(\/[^/]+)?|sandboxes\/[^/]+\/snapshots)$/.test(p))) {
      // FastAPI (also a server too old for the Snapshots API, emulated or not): a known path with another method is a 405 naming the allowed ones, anything else a 404
      const allow = allowedMethods(p);
      if (allow) throw new ApiError(405, null, 'Method Not Allowed', { body: { detail: 'Method Not Allowed' }, headers: { Allow: allow } });
      throw new ApiError(404, null, 'Not Found', { body: { detail: 'Not Found' } });
    }
    throw new ApiError(404, 'GENERAL::NOT_FOUND', `Not Found: ${req.method} ${url.pathname}`);
  }

  /** The methods upstream serves on path `p` (without /v1), or null when it has no such route. */
  function allowedMethods(p) {
    const routes = [
      [/^\/sandboxes$/, 'GET, POST'], [/^\/sandboxes\/[^/]+$/, 'GET, DELETE'], [/^\/sandboxes\/[^/]+\/(pause|resume|renew-expiration)$/, 'POST'],
      [/^\/sandboxes\/[^/]+\/metadata$/, 'PATCH'], [/^\/sandboxes\/[^/]+\/endpoints\/[^/]+$/, 'GET'], [/^\/health$/, 'GET'],
      ...(profile.snapshotsApi ? [[/^\/sandboxes\/[^/]+\/snapshots$/, 'POST'], [/^\/snapshots$/, 'GET'], [/^\/snapshots\/[^/]+$/, 'GET, DELETE']] : []),
    ];
    return routes.find(([re]) => re.test(p))?.[1] ?? null;
  }

  const server = http.createServer((req, res) => {
    const requestId = req.headers['x-request-id'] || crypto.randomUUID().replace(/-/g, '');
    res.setHeader('X-Request-ID', requestId);
    // the target parsed once (http.js parseTarget): routes, the proxy route's token decision and what it
    // forwards all see this one canonical URL; dot segments, encoded separators and malformed escapes are a 400
    const t = parseTarget(req.url);
    if (t.error) {
      if (t.malformed && execdPart(req.url)) return sendBadRequest(res);
      req.resume();
      return send(res, 400, { code: 'GENERAL::BAD_REQUEST', message: t.error });
    }
    const { url } = t;
    // every failure of a handler becomes an answer (500 at worst); nothing throws out of the server
    Promise.resolve()
      .then(() => route(req, res, url))
      .catch((err) => {
        if (err instanceof ValidationError) return send(res, 422, { detail: err.detail });
        if (err instanceof ApiError) return send(res, err.status, err.extra.body ?? { code: err.code, message: boundedMessage(err.message) }, err.extra.headers);
        log?.(`internal error on ${req.method} ${url.pathname}: ${err?.stack ?? err}`);
        send(res, 500, { code: 'GENERAL::UNKNOWN_ERROR', message: boundedMessage(String(err?.message ?? err)) });
      })
      .catch((err) => {
        log?.(`answering ${req.method} ${url.pathname} failed: ${err?.stack ?? err}`);
        res.destroy();
      })
      .finally(() => log?.(`${req.method} ${url.pathname} -> ${res.statusCode}`));
  });
  server.on('upgrade', (req, socket, head) => {
    socket.on('error', () => socket.destroy());
    try {
      const t = parseTarget(req.url);
      if (t.error && t.malformed && execdPart(req.url)) return void answerBadRequest(socket);
      if (t.error) throw new ApiError(400, 'GENERAL::BAD_REQUEST', t.error);
      const { url } = t;
      const prox = proxyTarget(url.pathname.replace(/^\/v1(?=\/)/, ''), url, req);
      if (!prox) throw new ApiError(404, 'GENERAL::NOT_FOUND', 'no WebSocket route here');
      proxyUpgrade(req, socket, head, prox.target, prox.path, { drop: PROXY_STRIP });
    } catch (err) {
      const status = err instanceof ApiError ? err.status : 500;
      socket.end(httpAnswer(status, err.extra?.body ?? { code: err.code ?? 'GENERAL::UNKNOWN_ERROR', message: err.message }));
    }
  });
  server.on('clientError', (err, socket) => {
    if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n');
    else socket.destroy();
  });
  server.keepAliveTimeout = 30_000;
  // what the image store is built with (img-run: server.images)
  server.imageOptions = { maxImageBytes: opts.maxImageBytes, insecureRegistries: opts.insecureRegistries ?? [] };
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, opts.host, () => {
      server.off('error', reject);
      resolve();
    });
  }).catch(async (err) => {
    await releaseLimits();
    fail(err);
  });
  const port = server.address().port;
  const hostPart = opts.host.includes(':') ? `[${opts.host}]` : opts.host;
  domain = `${hostPart}:${port}`;
  log?.(`OpenSandbox-compatible server on http://${domain} (isolation ${opts.isolation}, data ${dataDir}${profile.runtime ? `, emulating ${profile.runtime}${profile.provider ? ` (${profile.provider})` : ''}` : ''} server ${profile.version})`);

  let closed = null;
  return {
    domain,
    baseUrl: `http://${domain}`,
    port,
    images: images?.store ?? null,
    close() {
      closed ??= (async () => {
        await new Promise((resolve) => {
          server.close(() => resolve());
          server.closeAllConnections();
        });
        await snapshots.drain();
        await sandboxes.closeAll();
        await releaseLimits();
        hardening?.identities?.close();
        network?.helper?.close();
        removeTree(ownDataDir ? dataDir : path.join(dataDir, 'sb'));
      })();
      return closed;
    },
  };
}
