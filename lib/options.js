// Option validation for OpenSandboxSandbox: checks every constructor option (unknown key or wrong type ->
// OpenSandboxOptionError naming it), applies the documented defaults, and builds the lifecycle base URL.
// Also validates the per-call options of executeCommand.
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import { OpenSandboxOptionError } from './errors.js';
import { LOGICAL_ID_LABEL, labelProblem } from './labels.js';
import { Template } from './template.js';
import { assertExactPath } from './files.js';

export const DEFAULTS = Object.freeze({
  domain: '127.0.0.1:8080',
  protocol: 'http',
  image: 'ubuntu:22.04',
  entrypoint: Object.freeze(['tail', '-f', '/dev/null']),
  timeoutSeconds: 600,
  resources: Object.freeze({ cpu: '1', memory: '2Gi' }),
  useServerProxy: false,
  requestTimeoutMs: 30000,
  readyTimeoutMs: 30000,
  createTimeoutMs: 180000,
  workingDirectory: '/workspace',
  /** executeCommand: newest bytes kept per stream (the rest is dropped from the result, counted; callbacks get all). */
  maxRetainedBytes: 16 * 1024 * 1024,
  keepCheckpoints: 3,
  snapshotTimeoutMs: 300000,
});

const KNOWN = new Set([
  'id', 'domain', 'apiKey', 'protocol', 'sandboxId', 'image', 'entrypoint', 'timeoutSeconds', 'resources', 'env',
  'metadata', 'volumes', 'networkPolicy', 'useServerProxy', 'execdAccessToken', 'requestTimeoutMs', 'readyTimeoutMs',
  'createTimeoutMs', 'instructions', 'onStart', 'onStop', 'onDestroy', 'workingDirectory', 'idleTimeoutMinutes', 'caFile',
  'checkpointName', 'seedCheckpointName', 'snapshotId', 'keepCheckpoints', 'snapshotTimeoutMs', 'template',
  'maxRetainedBytes',
]);

const fail = (option, message) => {
  throw new OpenSandboxOptionError(option, message);
};
const isPlainObject = v => v !== null && typeof v === 'object' && !Array.isArray(v) &&
  (Object.getPrototypeOf(v) === Object.prototype || Object.getPrototypeOf(v) === null);
const typeName = v => (v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v);

function optString(o, key, { nonEmpty = true } = {}) {
  const v = o[key];
  if (v === undefined) return undefined;
  if (typeof v !== 'string') fail(key, `expected a string, got ${typeName(v)}`);
  if (nonEmpty && v.trim() === '') fail(key, 'must not be empty');
  return v;
}

/** A PEM CA bundle for https/wss: must be a readable file now (the native clients read it on every connection). */
function parseCaFile(o) {
  const p = optString(o, 'caFile');
  if (p === undefined) return undefined;
  try {
    fs.accessSync(p, fs.constants.R_OK);
    if (!fs.statSync(p).isFile()) throw new Error('not a file');
  } catch {
    fail('caFile', `${JSON.stringify(p)} is not a readable file`);
  }
  return p;
}

function optPositiveInt(o, key) {
  const v = o[key];
  if (v === undefined) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v <= 0) fail(key, `expected a positive integer, got ${JSON.stringify(v)}`);
  return v;
}

/** maxRetainedBytes: 0, a positive integer, or Infinity (-1 for the native layer: unbounded); undefined stays. */
function parseRetained(v) {
  if (v === undefined) return undefined;
  if (v === Infinity) return -1;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0) {
    fail('maxRetainedBytes', `expected 0, a positive integer or Infinity, got ${JSON.stringify(v)}`);
  }
  return v;
}

function optFunction(o, key) {
  const v = o[key];
  if (v !== undefined && typeof v !== 'function') fail(key, `expected a function, got ${typeName(v)}`);
  return v;
}

function stringRecord(o, key, { allowUndefined = false } = {}) {
  const v = o[key];
  if (v === undefined) return undefined;
  if (!isPlainObject(v)) fail(key, `expected an object of strings, got ${typeName(v)}`);
  for (const [k, val] of Object.entries(v)) {
    if (k === '') fail(key, 'keys must not be empty');
    if (typeof val === 'string' || (allowUndefined && val === undefined)) continue;
    fail(key, `value of "${k}" must be a string${allowUndefined ? ' or undefined' : ''}, got ${typeName(val)}`);
  }
  return { ...v };
}

/**
 * Splits `domain` (host[:port][/path] or a full http(s) URL) into { protocol, base } where base has no trailing
 * slash. The lifecycle base URL is `${protocol}://${base}` + `/v1` unless the path already ends with /v1.
 */
function parseDomain(domain, protocolOpt) {
  let protocol = protocolOpt;
  let rest = domain.trim();
  const m = /^([a-zA-Z][a-zA-Z0-9+.-]*):\/\/(.*)$/.exec(rest);
  if (m) {
    const scheme = m[1].toLowerCase();
    if (scheme !== 'http' && scheme !== 'https') fail('domain', `unsupported URL scheme "${scheme}" (http or https)`);
    if (protocolOpt !== undefined && protocolOpt !== scheme) {
      fail('protocol', `"${protocolOpt}" contradicts the scheme of domain "${domain}"`);
    }
    protocol = scheme;
    rest = m[2];
  }
  rest = rest.replace(/\/+$/, '');
  let url;
  try {
    url = new URL(`${protocol ?? DEFAULTS.protocol}://${rest}`);
  } catch {
    fail('domain', `"${domain}" is not a host[:port][/path] or an http(s) URL`);
  }
  if (!url.hostname || url.username || url.password || url.search || url.hash) {
    fail('domain', `"${domain}" must be host[:port][/path] (no credentials, query or fragment)`);
  }
  const path = url.pathname.replace(/\/+$/, '');
  const base = `${url.host}${path}`;
  const lifecycleBaseUrl = `${url.protocol}//${base}${/\/v1$/.test(path) ? '' : '/v1'}`;
  return { protocol: protocol ?? DEFAULTS.protocol, domain: base, lifecycleBaseUrl };
}

function parseImage(v) {
  if (v === undefined) return DEFAULTS.image;
  if (typeof v === 'string') {
    if (v.trim() === '') fail('image', 'must not be empty');
    return v;
  }
  if (!isPlainObject(v) || typeof v.uri !== 'string' || v.uri.trim() === '') {
    fail('image', 'expected an image reference string or { uri: string, auth?: { username, password } }');
  }
  for (const k of Object.keys(v)) if (k !== 'uri' && k !== 'auth') fail('image', `unknown key "${k}" (uri, auth)`);
  if (v.auth !== undefined) {
    const a = v.auth;
    if (!isPlainObject(a) || typeof a.username !== 'string' || typeof a.password !== 'string') {
      fail('image', 'auth must be { username: string, password: string }');
    }
  }
  return { ...v };
}

function parseEntrypoint(v) {
  if (v === undefined) return [...DEFAULTS.entrypoint];
  if (!Array.isArray(v) || v.length === 0 || v.some(s => typeof s !== 'string' || s === '')) {
    fail('entrypoint', 'expected a non-empty array of non-empty strings');
  }
  return [...v];
}

function parseTimeoutSeconds(v) {
  if (v === undefined) return DEFAULTS.timeoutSeconds;
  if (v === null) return null;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 60) {
    fail('timeoutSeconds', `expected an integer >= 60 or null (no expiry), got ${JSON.stringify(v)}`);
  }
  return v;
}

function parseResources(v) {
  if (v === undefined) return { ...DEFAULTS.resources };
  const r = stringRecord({ resources: v }, 'resources');
  if (Object.keys(r).length === 0) fail('resources', 'must not be empty (e.g. { cpu: "1", memory: "2Gi" })');
  return r;
}

function parseWorkingDirectory(v) {
  if (v === undefined) return DEFAULTS.workingDirectory;
  if (typeof v !== 'string' || !v.startsWith('/')) fail('workingDirectory', `expected an absolute path, got ${JSON.stringify(v)}`);
  return v.length > 1 ? v.replace(/\/+$/, '') : v;
}

function parseIdleTimeoutMinutes(v) {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) {
    fail('idleTimeoutMinutes', `expected a positive number of minutes, got ${JSON.stringify(v)}`);
  }
  return v;
}

function parseVolumes(v) {
  if (v === undefined) return undefined;
  if (!Array.isArray(v)) fail('volumes', `expected an array of OpenSandbox volumes, got ${typeName(v)}`);
  v.forEach((vol, i) => {
    if (!isPlainObject(vol)) fail('volumes', `item ${i} must be an object`);
    if (typeof vol.name !== 'string' || vol.name === '') fail('volumes', `item ${i} needs a non-empty "name"`);
    if (typeof vol.mountPath !== 'string' || !vol.mountPath.startsWith('/')) {
      fail('volumes', `item ${i} ("${vol.name}") needs an absolute "mountPath"`);
    }
    const backends = ['host', 'pvc', 'ossfs'].filter(b => vol[b] !== undefined);
    if (backends.length !== 1) fail('volumes', `item ${i} ("${vol.name}") needs exactly one of host, pvc, ossfs`);
  });
  return structuredClone(v);
}

function parseMetadata(o) {
  const m = stringRecord(o, 'metadata') ?? {};
  for (const [k, v] of Object.entries(m)) {
    if (k === LOGICAL_ID_LABEL) fail('metadata', `"${k}" is set by this package from the "id" option`);
    const problem = labelProblem(k, v);
    if (problem) fail('metadata', `${problem} (OpenSandbox metadata uses Kubernetes label syntax)`);
  }
  return m;
}

/**
 * checkpointName: explicit string, or null (no checkpoints); undefined defaults to the caller-given `id` (a stable
 * id opts in; a generated id never matches a checkpoint).
 */
function parseCheckpointName(o) {
  if (o.checkpointName === null) return undefined;
  const explicit = optString(o, 'checkpointName');
  if (explicit !== undefined) return explicit;
  return typeof o.id === 'string' && o.id.trim() !== '' ? o.id : undefined;
}

/** Validates constructor options and returns the normalized configuration. */
export function normalizeOptions(input = {}, env = process.env) {
  if (!isPlainObject(input)) fail('options', `expected an options object, got ${typeName(input)}`);
  for (const key of Object.keys(input)) {
    if (!KNOWN.has(key)) fail(key, `unknown option (known: ${[...KNOWN].join(', ')})`);
  }
  const o = input;
  const protocolOpt = o.protocol;
  if (protocolOpt !== undefined && protocolOpt !== 'http' && protocolOpt !== 'https') {
    fail('protocol', `expected "http" or "https", got ${JSON.stringify(protocolOpt)}`);
  }
  const domainRaw = optString(o, 'domain') ?? (env.OPEN_SANDBOX_DOMAIN || DEFAULTS.domain);
  const { protocol, domain, lifecycleBaseUrl } = parseDomain(domainRaw, protocolOpt);
  const apiKey = optString(o, 'apiKey') ?? (env.OPEN_SANDBOX_API_KEY || undefined);

  const id = optString(o, 'id') ?? `opensandbox-${Date.now().toString(36)}-${randomBytes(4).toString('hex')}`;
  if (o.instructions !== undefined && typeof o.instructions !== 'string' && typeof o.instructions !== 'function') {
    fail('instructions', `expected a string or a function, got ${typeName(o.instructions)}`);
  }
  if (o.networkPolicy !== undefined && !isPlainObject(o.networkPolicy)) {
    fail('networkPolicy', `expected an object, got ${typeName(o.networkPolicy)}`);
  }
  if (o.useServerProxy !== undefined && typeof o.useServerProxy !== 'boolean') {
    fail('useServerProxy', `expected a boolean, got ${typeName(o.useServerProxy)}`);
  }

  if (o.snapshotId !== undefined && o.image !== undefined) {
    fail('snapshotId', 'a sandbox starts from either an image or a snapshot: do not give both "image" and "snapshotId"');
  }
  const template = o.template === undefined ? undefined : Template.fromJSON(o.template);
  if (template && (o.image !== undefined || o.snapshotId !== undefined)) {
    fail('template', 'a template has its own base image (Template({ image })): do not combine it with "image" or "snapshotId"');
  }
  if (o.idleTimeoutMinutes !== undefined && o.idleTimeoutMinutes !== null && o.timeoutSeconds === null) {
    fail('idleTimeoutMinutes', 'needs an expiring sandbox: timeoutSeconds must not be null');
  }
  return {
    id,
    domain,
    protocol,
    lifecycleBaseUrl,
    apiKey,
    sandboxId: optString(o, 'sandboxId'),
    image: template ? template.image : parseImage(o.image),
    template,
    entrypoint: parseEntrypoint(o.entrypoint),
    entrypointGiven: o.entrypoint !== undefined,
    timeoutSeconds: parseTimeoutSeconds(o.timeoutSeconds),
    resources: parseResources(o.resources),
    env: { ...template?.runtimeEnv(), ...stringRecord(o, 'env', { allowUndefined: true }) },
    metadata: parseMetadata(o),
    volumes: parseVolumes(o.volumes),
    networkPolicy: o.networkPolicy === undefined ? undefined : structuredClone(o.networkPolicy),
    useServerProxy: o.useServerProxy ?? DEFAULTS.useServerProxy,
    execdAccessToken: optString(o, 'execdAccessToken'),
    caFile: parseCaFile(o),
    requestTimeoutMs: optPositiveInt(o, 'requestTimeoutMs') ?? DEFAULTS.requestTimeoutMs,
    readyTimeoutMs: optPositiveInt(o, 'readyTimeoutMs') ?? DEFAULTS.readyTimeoutMs,
    createTimeoutMs: optPositiveInt(o, 'createTimeoutMs') ?? DEFAULTS.createTimeoutMs,
    instructions: o.instructions,
    onStart: optFunction(o, 'onStart'),
    onStop: optFunction(o, 'onStop'),
    onDestroy: optFunction(o, 'onDestroy'),
    workingDirectory: parseWorkingDirectory(o.workingDirectory ?? template?.workdir()),
    idleTimeoutMinutes: parseIdleTimeoutMinutes(o.idleTimeoutMinutes),
    checkpointName: parseCheckpointName(o),
    seedCheckpointName: optString(o, 'seedCheckpointName'),
    snapshotId: optString(o, 'snapshotId'),
    keepCheckpoints: optPositiveInt(o, 'keepCheckpoints') ?? DEFAULTS.keepCheckpoints,
    snapshotTimeoutMs: optPositiveInt(o, 'snapshotTimeoutMs') ?? DEFAULTS.snapshotTimeoutMs,
    maxRetainedBytes: parseRetained(o.maxRetainedBytes) ?? DEFAULTS.maxRetainedBytes,
  };
}

/** Validates executeCommand's (command, args, options) and returns the normalized per-call settings. */
export function normalizeCommandCall(command, args, options) {
  if (typeof command !== 'string' || command.trim() === '') fail('command', 'expected a non-empty string');
  if (args !== undefined && args !== null && (!Array.isArray(args) || args.some(a => typeof a !== 'string'))) {
    fail('args', 'expected an array of strings');
  }
  const o = options ?? {};
  if (typeof o !== 'object' || Array.isArray(o)) fail('options', `expected an object, got ${typeName(o)}`);
  const { timeout, cwd, env, onStdout, onStderr, abortSignal, maxRetainedBytes } = o;
  if (timeout !== undefined && timeout !== null && (typeof timeout !== 'number' || !(timeout >= 0) || !Number.isFinite(timeout))) {
    fail('timeout', `expected a non-negative number of milliseconds, got ${JSON.stringify(timeout)}`);
  }
  if (cwd !== undefined && cwd !== null && (typeof cwd !== 'string' || cwd === '')) fail('cwd', 'expected a non-empty string');
  assertExactPath(cwd, 'cwd'); // execd expands $VAR (and a leading ~) in a command's cwd
  if (env !== undefined && env !== null) {
    if (typeof env !== 'object' || Array.isArray(env)) fail('env', `expected an object, got ${typeName(env)}`);
    for (const [k, v] of Object.entries(env)) {
      if (v !== undefined && typeof v !== 'string') fail('env', `value of "${k}" must be a string or undefined, got ${typeName(v)}`);
    }
  }
  if (onStdout !== undefined && typeof onStdout !== 'function') fail('onStdout', 'expected a function');
  if (onStderr !== undefined && typeof onStderr !== 'function') fail('onStderr', 'expected a function');
  if (abortSignal !== undefined && abortSignal !== null && !(abortSignal instanceof AbortSignal)) {
    fail('abortSignal', 'expected an AbortSignal');
  }
  const retain = parseRetained(maxRetainedBytes); // undefined: the sandbox's maxRetainedBytes
  return {
    args: args ? [...args] : [],
    timeoutMs: timeout ? Math.ceil(timeout) : 0,
    cwd: cwd || undefined,
    env: env ?? {},
    onStdout,
    onStderr,
    abortSignal: abortSignal ?? undefined,
    maxRetainedBytes: retain,
  };
}
