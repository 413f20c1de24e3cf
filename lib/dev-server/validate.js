// Request validation of the lifecycle API, shaped like the real server: schema failures are FastAPI/pydantic 422
// `{"detail":[{type,loc,msg,input}]}`; semantic failures are ApiError (status + `{code,message}`).
import path from 'node:path';
import { parseBytes, parseCpu } from './quantities.js';
import { normalizePolicy } from './egress.js';
import { mountPathConflict } from './runner.js';

export class ApiError extends Error {
  constructor(status, code, message, extra = {}) {
    super(message);
    this.status = status;
    this.code = code;
    this.extra = extra;
  }
}

/** A 422 with pydantic-style details. */
export class ValidationError extends Error {
  constructor(detail) {
    super('validation error');
    this.detail = detail;
  }
}

/** How much of a request's input a 422 echoes: a copy cut at these bounds, so an answer never grows with the input. */
const ECHO = { depth: 8, entries: 64, chars: 1024, nodes: 1024 };

/**
 * A bounded copy of `value` for an error answer: containers deeper than ECHO.depth or past ECHO.nodes values become
 * "…", at most ECHO.entries entries each (then "…"), strings cut at ECHO.chars characters (then "…"). Recursion is
 * bounded by the depth, whatever the input's nesting.
 */
export function boundedInput(value) {
  let nodes = 0;
  const copy = (v, depth) => {
    nodes += 1;
    if (typeof v === 'string') return v.length > ECHO.chars ? `${v.slice(0, ECHO.chars)}…` : v;
    if (v === null || typeof v !== 'object') return v;
    if (depth >= ECHO.depth || nodes > ECHO.nodes) return '…';
    if (Array.isArray(v)) {
      const out = v.slice(0, ECHO.entries).map((x) => copy(x, depth + 1));
      if (v.length > ECHO.entries) out.push('…');
      return out;
    }
    const out = {};
    const keys = Object.keys(v);
    for (const k of keys.slice(0, ECHO.entries)) {
      Object.defineProperty(out, copy(k, depth), { value: copy(v[k], depth + 1), enumerable: true, writable: true, configurable: true });
    }
    if (keys.length > ECHO.entries) out['…'] = '…';
    return out;
  };
  return copy(value, 0);
}

export function issue(loc, msg, type, input) {
  const d = { type, loc: loc.map((part) => boundedInput(part)), msg };
  if (input !== undefined) d.input = boundedInput(input);
  if (type === 'value_error') d.ctx = { error: {} }; // pydantic's ctx of a validator's ValueError
  return d;
}

const isObj = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

const LABEL_NAME = /^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
export const RESERVED_PREFIX = 'opensandbox.io/';
/** Largest `timeout` (seconds, ten years): larger values are a 422 before anything is created. */
export const MAX_TIMEOUT_SECONDS = 10 * 365 * 86400;

/**
 * Kubernetes label syntax for metadata; throws 400 SANDBOX::INVALID_METADATA_LABEL. `profile` (upstream.js) may give
 * the emulated deployment's answers (messages) to a reserved, malformed key or value.
 */
export function checkMetadata(metadata, profile = null) {
  for (const [key, value] of Object.entries(metadata)) {
    const bad = (why) => new ApiError(400, 'SANDBOX::INVALID_METADATA_LABEL', `invalid metadata label ${JSON.stringify(key)}: ${why}`);
    if (typeof value !== 'string') throw bad('value must be a string');
    if (key.startsWith(RESERVED_PREFIX)) throw profile?.reservedMetadata?.(key) ?? bad(`the prefix ${RESERVED_PREFIX} is reserved`);
    const slash = key.lastIndexOf('/');
    const prefix = slash >= 0 ? key.slice(0, slash) : null;
    const name = slash >= 0 ? key.slice(slash + 1) : key;
    const badKey = prefix !== null && (prefix.length === 0 || prefix.length > 253 || !DNS_SUBDOMAIN.test(prefix))
      || name.length === 0 || name.length > 63 || !LABEL_NAME.test(name);
    if (badKey && profile?.invalidMetadataKey) throw profile.invalidMetadataKey(key);
    const badValue = value.length > 63 || (value !== '' && !LABEL_NAME.test(value));
    if (badValue && profile?.invalidMetadataValue) throw profile.invalidMetadataValue(value);
    if (prefix !== null && (prefix.length === 0 || prefix.length > 253 || !DNS_SUBDOMAIN.test(prefix))) {
      throw bad('prefix must be a DNS subdomain (lowercase alphanumerics, "-" and ".", at most 253 characters)');
    }
    if (name.length === 0 || name.length > 63 || !LABEL_NAME.test(name)) {
      throw bad('name must be 1-63 characters of [A-Za-z0-9-_.], starting and ending with an alphanumeric');
    }
    if (badValue) {
      throw new ApiError(400, 'SANDBOX::INVALID_METADATA_LABEL',
        `invalid metadata value for ${JSON.stringify(key)}: must be at most 63 characters of [A-Za-z0-9-_.], starting and ending with an alphanumeric`);
    }
  }
}

function stringMap(v, loc, errs) {
  if (v == null) return {};
  if (!isObj(v)) {
    errs.push(issue(loc, 'Input should be a valid dictionary', 'dict_type', v));
    return {};
  }
  const out = {};
  for (const [k, val] of Object.entries(v)) {
    if (typeof val !== 'string') errs.push(issue([...loc, k], 'Input should be a valid string', 'string_type', val));
    else out[k] = val;
  }
  return out;
}

function validateVolume(v, i, errs) {
  const loc = ['body', 'volumes', i];
  if (!isObj(v)) {
    errs.push(issue(loc, 'Input should be a valid dictionary or object to extract fields from', 'model_attributes_type', v));
    return null;
  }
  if (typeof v.name !== 'string') errs.push(issue([...loc, 'name'], v.name === undefined ? 'Field required' : 'Input should be a valid string', v.name === undefined ? 'missing' : 'string_type', v.name));
  else if (v.name.length > 63 || !DNS_LABEL.test(v.name)) errs.push(issue([...loc, 'name'], "String should match pattern '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'", 'string_pattern_mismatch', v.name));
  if (typeof v.mountPath !== 'string') errs.push(issue([...loc, 'mountPath'], v.mountPath === undefined ? 'Field required' : 'Input should be a valid string', v.mountPath === undefined ? 'missing' : 'string_type', v.mountPath));
  else if (!v.mountPath.startsWith('/')) errs.push(issue([...loc, 'mountPath'], "String should match pattern '^/.*'", 'string_pattern_mismatch', v.mountPath));
  if (v.readOnly != null && typeof v.readOnly !== 'boolean') errs.push(issue([...loc, 'readOnly'], 'Input should be a valid boolean', 'bool_type', v.readOnly));
  if (v.subPath != null) {
    if (typeof v.subPath !== 'string') errs.push(issue([...loc, 'subPath'], 'Input should be a valid string', 'string_type', v.subPath));
    else if (v.subPath.startsWith('/') || v.subPath.split('/').includes('..')) {
      errs.push(issue([...loc], 'Value error, subPath must be a relative path without ".." components', 'value_error', v));
    }
  }
  const backends = ['host', 'pvc', 'ossfs'].filter((b) => v[b] != null);
  if (backends.length !== 1) {
    errs.push(issue(loc, `Value error, Exactly one backend (host, pvc, ossfs) must be specified, but ${backends.length ? 'multiple were' : 'none was'} provided.`, 'value_error', v));
  }
  if (v.host != null) {
    if (!isObj(v.host) || typeof v.host.path !== 'string') errs.push(issue([...loc, 'host', 'path'], 'Field required', 'missing', v.host));
    else if (!v.host.path.startsWith('/')) errs.push(issue([...loc, 'host', 'path'], 'Value error, host path must be absolute', 'value_error', v.host.path));
  }
  if (v.pvc != null && (!isObj(v.pvc) || typeof v.pvc.claimName !== 'string' || !DNS_SUBDOMAIN.test(v.pvc.claimName))) {
    errs.push(issue([...loc, 'pvc', 'claimName'], 'Value error, claimName must be a DNS subdomain name', 'value_error', v.pvc?.claimName));
  }
  return v;
}

/**
 * A NUL byte cannot be part of an argv entry, an environment variable or a path (the kernel cuts C strings there;
 * Node throws): 400 SANDBOX::INVALID_PARAMETER naming the field, before anything is created.
 */
function refuseNulBytes(spec) {
  const fields = [['image.uri', spec.image?.uri], ['snapshotId', spec.snapshotId]];
  spec.entrypoint?.forEach((e, i) => fields.push([`entrypoint[${i}]`, e]));
  const key = (k) => JSON.stringify(k.length > 64 ? `${k.slice(0, 64)}…` : k);
  for (const map of ['env', 'extensions']) {
    for (const [k, v] of Object.entries(spec[map])) fields.push([`${map} key ${key(k)}`, k], [`${map}[${key(k)}]`, v]);
  }
  spec.volumes.forEach((v, i) => {
    fields.push([`volumes[${i}].mountPath`, v.mountPath], [`volumes[${i}].subPath`, v.subPath], [`volumes[${i}].host.path`, v.host?.path]);
  });
  fields.push(['platform.os', spec.platform?.os], ['platform.arch', spec.platform?.arch]);
  for (const [field, value] of fields) {
    if (typeof value === 'string' && value.includes('\0')) throw new ApiError(400, 'SANDBOX::INVALID_PARAMETER', `${field}: must not contain a NUL byte`);
  }
}

/**
 * Upstream's host-path syntax (validators.py ensure_valid_host_path): a path with '/..' or with '//' or a trailing
 * '/' is refused, not resolved. Throws 400 VOLUME::INVALID_HOST_PATH.
 */
function checkHostPathSyntax(p) {
  if (p.includes('/..')) throw new ApiError(400, 'VOLUME::INVALID_HOST_PATH', `Host path '${p}' contains path traversal component '..'.`);
  if (p.includes('//') || (p.length > 1 && p.endsWith('/'))) {
    throw new ApiError(400, 'VOLUME::INVALID_HOST_PATH', `Host path '${p}' is not normalized. Remove redundant slashes.`);
  }
}

/**
 * Validates a CreateSandboxRequest. Returns a normalized object; throws ValidationError (422) or ApiError (400).
 * `maxTimeout` (seconds) caps `timeout` when set; `profile` (upstream.js) gives the emulated deployment's answers.
 */
export function validateCreate(body, { maxTimeout, profile = null } = {}) {
  if (!isObj(body)) throw new ValidationError([issue(['body'], 'Input should be a valid dictionary or object to extract fields from', 'model_attributes_type', body)]);
  const errs = [];
  const out = {};
  // image / snapshotId
  if (body.image != null) {
    if (!isObj(body.image)) errs.push(issue(['body', 'image'], 'Input should be a valid dictionary or object to extract fields from', 'model_attributes_type', body.image));
    else if (typeof body.image.uri !== 'string' || body.image.uri.length === 0) {
      errs.push(issue(['body', 'image', 'uri'], body.image.uri === undefined ? 'Field required' : 'String should have at least 1 character', body.image.uri === undefined ? 'missing' : 'string_too_short', body.image.uri));
    } else out.image = { uri: body.image.uri };
  }
  if (body.snapshotId != null) {
    if (typeof body.snapshotId !== 'string' || body.snapshotId === '') errs.push(issue(['body', 'snapshotId'], 'Input should be a valid string', 'string_type', body.snapshotId));
    else out.snapshotId = body.snapshotId;
  }
  // upstream's model validator: the first that fails ends validation (its message does not say which case)
  const model = profile?.modelValidators ? (msg) => {
    throw new ValidationError([issue(['body'], `Value error, ${msg}`, 'value_error', body)]);
  } : null;
  if (model && (body.image == null || body.image?.uri === '') === (body.snapshotId == null)) model('Exactly one of image or snapshotId must be provided.');
  if (body.image != null && body.snapshotId != null) {
    errs.push(issue(['body'], 'Value error, Exactly one of image or snapshotId must be provided, not both.', 'value_error', body));
  } else if (body.image == null && body.snapshotId == null) {
    errs.push(issue(['body'], 'Value error, Exactly one of image or snapshotId must be provided.', 'value_error', body));
  }
  // entrypoint
  if (body.entrypoint != null) {
    if (!Array.isArray(body.entrypoint)) errs.push(issue(['body', 'entrypoint'], 'Input should be a valid list', 'list_type', body.entrypoint));
    else if (body.entrypoint.length === 0) {
      errs.push({ ...issue(['body', 'entrypoint'], 'List should have at least 1 item after validation, not 0', 'too_short', body.entrypoint), ctx: { field_type: 'List', min_length: 1, actual_length: 0 } });
    }
    else {
      body.entrypoint.forEach((e, i) => {
        if (typeof e !== 'string') errs.push(issue(['body', 'entrypoint', i], 'Input should be a valid string', 'string_type', e));
      });
      out.entrypoint = body.entrypoint;
    }
  } else if (body.image != null) {
    errs.push(issue(['body'], 'Value error, entrypoint is required when image is specified.', 'value_error', body));
  } else {
    out.entrypoint = ['tail', '-f', '/dev/null'];
  }
  // timeout
  out.timeout = null;
  if (body.timeout != null) {
    if (typeof body.timeout === 'string') {
      errs.push(issue(['body', 'timeout'], 'Input should be a valid integer, unable to parse string as an integer', 'int_parsing', body.timeout));
    } else if (typeof body.timeout !== 'number' || !Number.isInteger(body.timeout)) {
      errs.push(issue(['body', 'timeout'], 'Input should be a valid integer', 'int_type', body.timeout));
    } else if (body.timeout < 60) {
      errs.push({ ...issue(['body', 'timeout'], 'Input should be greater than or equal to 60', 'greater_than_equal', body.timeout), ctx: { ge: 60 } });
    } else if (body.timeout > MAX_TIMEOUT_SECONDS) {
      errs.push({ ...issue(['body', 'timeout'], `Input should be less than or equal to ${MAX_TIMEOUT_SECONDS}`, 'less_than_equal', body.timeout), ctx: { le: MAX_TIMEOUT_SECONDS } });
    } else out.timeout = body.timeout;
  }
  // resourceLimits (required unless pool mode)
  const pool = isObj(body.extensions) && body.extensions.poolRef != null;
  if (body.resourceLimits == null) {
    if (!pool && model) model('resourceLimits is required when poolRef is not provided.');
    if (!pool) errs.push(issue(['body', 'resourceLimits'], 'Field required', 'missing', undefined));
  } else out.resourceLimits = stringMap(body.resourceLimits, ['body', 'resourceLimits'], errs);
  out.env = stringMap(body.env, ['body', 'env'], errs);
  out.metadata = stringMap(body.metadata, ['body', 'metadata'], errs);
  out.extensions = stringMap(body.extensions, ['body', 'extensions'], errs);
  // networkPolicy
  out.allowNetwork = null; // no networkPolicy: the server's defaultNetworkPolicy decides
  out.networkPolicy = null;
  if (body.networkPolicy != null) {
    const np = body.networkPolicy;
    if (!isObj(np)) errs.push(issue(['body', 'networkPolicy'], 'Input should be a valid dictionary or object to extract fields from', 'model_attributes_type', np));
    else {
      if (np.defaultAction != null && np.defaultAction !== 'allow' && np.defaultAction !== 'deny') {
        errs.push(issue(['body', 'networkPolicy', 'defaultAction'], "Input should be 'allow' or 'deny'", 'literal_error', np.defaultAction));
      }
      if (np.egress != null && !Array.isArray(np.egress)) errs.push(issue(['body', 'networkPolicy', 'egress'], 'Input should be a valid list', 'list_type', np.egress));
      const rules = Array.isArray(np.egress) ? np.egress : [];
      rules.forEach((r, i) => {
        if (!isObj(r) || (r.action !== 'allow' && r.action !== 'deny') || typeof r.target !== 'string') {
          errs.push(issue(['body', 'networkPolicy', 'egress', i], 'Value error, an egress rule needs action allow|deny and a target', 'value_error', r));
        } else if (!r.target.trim()) {
          // upstream: min_length 1 (its sidecar also refuses a target of blanks)
          errs.push(issue(['body', 'networkPolicy', 'egress', i, 'target'], 'String should have at least 1 character', 'string_too_short', r.target));
        }
      });
      out.allowNetwork = np.defaultAction === 'allow' || rules.some((r) => isObj(r) && r.action === 'allow');
      out.networkPolicy = errs.length ? null : normalizePolicy(np); // the egress rules network.js enforces
    }
  }
  // volumes
  out.volumes = [];
  if (body.volumes != null) {
    if (!Array.isArray(body.volumes)) errs.push(issue(['body', 'volumes'], 'Input should be a valid list', 'list_type', body.volumes));
    else body.volumes.forEach((v, i) => {
      const ok = validateVolume(v, i, errs);
      if (ok) out.volumes.push(ok);
    });
  }
  // platform
  if (body.platform != null) {
    if (!isObj(body.platform) || typeof body.platform.os !== 'string' || typeof body.platform.arch !== 'string') {
      errs.push(issue(['body', 'platform'], 'Value error, platform needs string os and arch', 'value_error', body.platform));
    } else out.platform = { os: body.platform.os, arch: body.platform.arch };
  }
  if (body.secureAccess != null && typeof body.secureAccess !== 'boolean') {
    errs.push(issue(['body', 'secureAccess'], 'Input should be a valid boolean', 'bool_type', body.secureAccess));
  }
  if (errs.length) throw new ValidationError(errs);
  if (out.timeout != null && maxTimeout && out.timeout > maxTimeout) {
    throw profile?.timeoutTooLong?.(out.timeout, maxTimeout) ?? new ApiError(400, 'SANDBOX::INVALID_TIMEOUT', `timeout ${out.timeout}s exceeds the server maximum of ${maxTimeout}s`);
  }
  checkMetadata(out.metadata, profile);
  refuseNulBytes(out);
  if (profile?.hostPathSyntax) for (const v of out.volumes) if (v.host) checkHostPathSyntax(v.host.path);
  out.volumes.forEach((v, i) => {
    const clash = mountPathConflict(path.posix.normalize(v.mountPath));
    if (clash) {
      throw new ApiError(400, 'VOLUME::INVALID_MOUNT_PATH',
        `volumes[${i}].mountPath ${JSON.stringify(v.mountPath.slice(0, 256))} overlaps ${clash}, which the sandbox itself mounts; choose another path (e.g. under /mnt, /data or /workspace)`);
    }
  });
  return out;
}

/** Python's repr() of a str, as upstream's messages show one. */
function pyRepr(text) {
  const q = text.includes("'") && !text.includes('"') ? '"' : "'";
  return q + text.replace(/\\/g, '\\\\').replace(new RegExp(q, 'g'), `\\${q}`) + q;
}

/** Python's parse_qsl(strict_parsing=True) for the `metadata` list filter; throws 400 INVALID_METADATA_FORMAT. */
export function parseMetadataFilter(text) {
  const out = {};
  for (const part of text.split('&')) {
    const eq = part.indexOf('=');
    if (eq < 0) throw new ApiError(400, 'INVALID_METADATA_FORMAT', `Invalid metadata format: bad query field: ${pyRepr(part)}`);
    const dec = (s) => {
      try {
        return decodeURIComponent(s.replace(/\+/g, ' '));
      } catch {
        return s;
      }
    };
    const k = dec(part.slice(0, eq));
    const v = dec(part.slice(eq + 1));
    if (v.length > 0) out[k] = v; // parse_qsl drops blank values unless keep_blank_values
  }
  return out;
}

/** Parses an RFC 3339 timestamp (fractional seconds optional, Z or offset required); returns ms or NaN. */
export function parseTimestamp(s) {
  if (typeof s !== 'string') return NaN;
  const m = /^(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})(\.\d+)?(Z|[+-]\d{2}:?\d{2})?$/i.exec(s.trim());
  if (!m) return NaN;
  const frac = m[3] ? m[3].slice(0, 4) : '';
  const zone = (m[4] ?? 'Z').toUpperCase();
  return Date.parse(`${m[1]}T${m[2]}${frac}${zone}`);
}

/** Validates a CreateSnapshotRequest (`{ name? }`, no other fields; the body itself is optional). */
export function validateSnapshotCreate(body) {
  if (body === undefined) return {};
  if (!isObj(body)) throw new ValidationError([issue(['body'], 'Input should be a valid dictionary or object to extract fields from', 'model_attributes_type', body)]);
  const errs = [];
  for (const k of Object.keys(body)) {
    if (k !== 'name') errs.push(issue(['body', k], 'Extra inputs are not permitted', 'extra_forbidden', body[k]));
  }
  if (body.name != null) {
    if (typeof body.name !== 'string') errs.push(issue(['body', 'name'], 'Input should be a valid string', 'string_type', body.name));
    else if (body.name.length === 0) errs.push({ ...issue(['body', 'name'], 'String should have at least 1 character', 'string_too_short', body.name), ctx: { min_length: 1 } });
  }
  if (errs.length) throw new ValidationError(errs);
  return body.name == null ? {} : { name: body.name };
}

/** resourceLimits keys the local server enforces (the disk key is Kubernetes' name, which upstream's Kubernetes
 * runtime passes through to the pod; its Docker runtime has no disk bound). */
export const DISK_LIMIT_KEY = 'ephemeral-storage';
const LIMIT_KEYS = ['cpu', 'memory', 'pids', DISK_LIMIT_KEY, 'gpu'];
/** Smallest disk bound: the ext4 image needs room for its own metadata. */
export const MIN_DISK_BYTES = 8 * 2 ** 20;
/**
 * Largest disk bound: the sparse image's own metadata takes real room as it grows (16 MB at 1Ti, 220 MB and seconds
 * of mkfs at 15Ti, per sandbox), and an ext4 host cannot hold a file of 16Ti at all (EFBIG).
 */
export const MAX_DISK_BYTES = 2 ** 40;
/** Smallest memory bound: execd (Node) is OOM-killed before it listens below about 24Mi. */
export const MIN_MEMORY_BYTES = 32 * 2 ** 20;
/** Smallest pids bound (pids counts threads): execd does not start with fewer than about 8; 16 leaves room for a command. */
export const MIN_PIDS = 16;

/**
 * resourceLimits → { cpu (cores), memory (bytes), pids, disk (bytes) }, each undefined when not asked for. Malformed
 * values and keys the local server cannot honour are 400 SANDBOX::INVALID_PARAMETER naming the key (upstream's code
 * for a resourceLimits value its runtime cannot use); any key with the value "0" asks for nothing and is accepted.
 */
export function parseResourceLimits(limits) {
  const out = { cpu: undefined, memory: undefined, pids: undefined, disk: undefined };
  const bad = (key, why) => new ApiError(400, 'SANDBOX::INVALID_PARAMETER', `resourceLimits.${key}: ${why}`);
  for (const [key, raw] of Object.entries(limits ?? {})) {
    const value = raw.trim();
    if (!LIMIT_KEYS.includes(key)) {
      if (value === '0') continue;
      throw bad(key, `unknown resource ${JSON.stringify(key)}: the local server enforces ${LIMIT_KEYS.filter((k) => k !== 'gpu').join(', ')} (any other key only with the value "0")`);
    }
    if (key === 'gpu') {
      if (value === '0') continue;
      throw bad(key, 'the local server has no GPUs (only "0" is accepted)');
    }
    if (key === 'cpu') {
      const cores = parseCpu(value);
      if (!(cores > 0)) throw bad(key, `${JSON.stringify(raw)} is not a CPU quantity greater than 0 (e.g. "1", "2.5", "500m")`);
      if (cores < 0.01) throw bad(key, `${JSON.stringify(raw)} is below the smallest CPU quota, "10m"`);
      out.cpu = cores;
    } else if (key === 'pids') {
      if (!/^\d+$/.test(value) || Number(value) > 4194304) throw bad(key, `${JSON.stringify(raw)} is not a whole number of processes ${MIN_PIDS}..4194304`);
      if (Number(value) < MIN_PIDS) throw bad(key, `${JSON.stringify(raw)} is below the smallest pids bound, ${MIN_PIDS} (the sandbox's execd, about 11 threads, does not start with fewer)`);
      out.pids = Number(value);
    } else {
      const bytes = parseBytes(value);
      const example = '(e.g. "512Mi", "2Gi", "1G", "1000000")';
      if (!(bytes > 0)) throw bad(key, `${JSON.stringify(raw)} is not a byte quantity greater than 0 ${example}; note "m" is milli in Kubernetes quantities, use "Mi" or "M"`);
      if (key === 'memory') {
        if (bytes < MIN_MEMORY_BYTES) throw bad(key, `${JSON.stringify(raw)} is below the smallest memory bound, "32Mi" (the sandbox's execd does not start in less)`);
        out.memory = bytes;
      } else {
        if (bytes < MIN_DISK_BYTES) throw bad(key, `${JSON.stringify(raw)} is below the smallest disk bound, "8Mi"`);
        if (bytes > MAX_DISK_BYTES) throw bad(key, `${JSON.stringify(raw)} is above the largest disk bound, "1Ti"`);
        out.disk = bytes;
      }
    }
  }
  return out;
}
