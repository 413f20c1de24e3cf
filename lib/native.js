// The native API (docs/ARCHITECTURE.md): loads the addon — $MASTRA_OPENSANDBOX_ADDON when set, else the prebuilt
// prebuilds/linux-<arch>/mastra_opensandbox.node that the npm package carries, else a source build in
// build/Release — with a clear message when none loads, and adapts JS values to the thin binding (objects -> JSON
// text / string pairs, JSON text -> objects). Failures are Errors with own properties kind, status, code, message,
// requestId, attempts.
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { addonCandidates } from './dev-server/addon-file.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(import.meta.url);

function load() {
  const { explicit, files } = addonCandidates();
  const failures = [];
  for (const file of files) {
    if (!explicit && !fs.existsSync(file)) continue;
    try {
      return require(file);
    } catch (err) {
      failures.push({ file, err }); // e.g. a prebuilt binary on a musl or too old glibc: try the source build
    }
  }
  const why = failures.length ? failures.map((f) => `${f.file}: ${f.err.message}`).join('; ')
    : `no prebuilt binary for ${process.platform}-${process.arch} and no source build (${files.join(', ')})`;
  const e = new Error(
    `mastra-opensandbox: cannot load the native addon (${why}).\n` +
      `Build it from source with \`node ${path.join(root, 'scripts', 'build.js')}\`; it needs a C toolchain, ` +
      'python3, pkg-config and the C libraries libcurl, libcjson and libwebsockets with their headers (Debian/Ubuntu: ' +
      'apt-get install build-essential python3 pkg-config libcurl4-openssl-dev libcjson-dev libwebsockets-dev).',
  );
  e.code = 'NATIVE_ADDON_MISSING';
  e.cause = failures[0]?.err;
  throw e;
}

/** The loaded addon, for the other lib/ modules that wrap its classes (process table, upload, code interpreter). */
export const binding = load();

function typeError(message) {
  const e = new TypeError(message);
  e.kind = 'invalid';
  return e;
}

function optionsObject(opts, what) {
  if (opts === undefined) return {};
  if (opts === null || typeof opts !== 'object' || Array.isArray(opts)) throw typeError(`${what} must be an object`);
  return opts;
}

function optionalMs(v, name, def) {
  if (v === undefined || v === null) return def;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) throw typeError(`${name} must be a number >= 0`);
  return Math.floor(v);
}

function optionalString(v, name) {
  if (v === undefined || v === null) return null;
  if (typeof v !== 'string') throw typeError(`${name} must be a string`);
  return v;
}

function stringPairs(obj, name, { allowNull = false } = {}) {
  if (obj === undefined || obj === null) return [];
  if (typeof obj !== 'object' || Array.isArray(obj)) throw typeError(`${name} must be an object of strings`);
  const out = [];
  for (const [k, v] of Object.entries(obj)) {
    if (typeof v !== 'string' && !(allowNull && v === null)) throw typeError(`${name}.${k} must be a string`);
    out.push(k, v ?? '');
  }
  return out;
}

const parse = (text) => (text === undefined ? undefined : JSON.parse(text));

/** Lifecycle client of the OpenSandbox sandboxes API. */
export class Lifecycle {
  #n;
  #onServerDate;
  /**
   * opts.onServerDate(date, sentAt, receivedAt), optional: called for every answer carrying an HTTP Date header
   * (success or API error) with the header text and the local instants (ms) the request was sent and answered.
   */
  constructor(opts) {
    const o = optionsObject(opts, 'Lifecycle options');
    if (typeof o.baseUrl !== 'string') throw typeError('baseUrl must be a string');
    if (o.apiKey !== undefined && o.apiKey !== null && typeof o.apiKey !== 'string') throw typeError('apiKey must be a string');
    this.#n = new binding.Lifecycle(o.baseUrl, o.apiKey ?? null, optionalMs(o.requestTimeoutMs, 'requestTimeoutMs', 30000),
      optionalString(o.caFile, 'caFile'));
    if (o.onServerDate !== undefined && typeof o.onServerDate !== 'function') throw typeError('onServerDate must be a function');
    this.#onServerDate = o.onServerDate;
  }
  /** Runs one native call; resolves the response body text (undefined when none), reports its Date header. */
  async #call(start) {
    const sentAt = Date.now();
    let r;
    try {
      r = await start();
    } catch (e) {
      this.#date(e?.serverDate, sentAt);
      throw e;
    }
    this.#date(r.date, sentAt);
    return r.body;
  }
  #date(date, sentAt) {
    if (date !== undefined && this.#onServerDate) this.#onServerDate(date, sentAt, Date.now());
  }
  async create(request) {
    if (request === null || typeof request !== 'object') throw typeError('create request must be an object');
    return parse(await this.#call(() => this.#n.create(JSON.stringify(request))));
  }
  async get(id) {
    return parse(await this.#call(() => this.#n.get(id)));
  }
  async list({ metadata, states, page, pageSize } = {}) {
    if (states !== undefined && !Array.isArray(states)) throw typeError('states must be an array of strings');
    return parse(await this.#call(() => this.#n.list(stringPairs(metadata, 'metadata'), states ?? [], page ?? 0, pageSize ?? 0)));
  }
  async delete(id) {
    await this.#call(() => this.#n.delete(id));
  }
  async pause(id) {
    await this.#call(() => this.#n.pause(id));
  }
  async resume(id) {
    await this.#call(() => this.#n.resume(id));
  }
  async renew(id, expiresAt) {
    const at = expiresAt instanceof Date ? expiresAt.toISOString() : expiresAt;
    return parse(await this.#call(() => this.#n.renew(id, at)));
  }
  async endpoint(id, port, useServerProxy = false) {
    const ep = parse(await this.#call(() => this.#n.endpoint(id, port, Boolean(useServerProxy))));
    return { endpoint: ep.endpoint, headers: ep.headers && typeof ep.headers === 'object' ? ep.headers : {} };
  }
  async patchMetadata(id, patch) {
    stringPairs(patch, 'metadata patch', { allowNull: true });
    return parse(await this.#call(() => this.#n.patchMetadata(id, JSON.stringify(patch))));
  }
  async createSnapshot(sandboxId, { name } = {}) {
    return parse(await this.#call(() => this.#n.createSnapshot(sandboxId, optionalString(name, 'name'))));
  }
  async getSnapshot(id) {
    return parse(await this.#call(() => this.#n.getSnapshot(id)));
  }
  async listSnapshots({ sandboxId, states, page, pageSize } = {}) {
    if (states !== undefined && !Array.isArray(states)) throw typeError('states must be an array of strings');
    return parse(await this.#call(() => this.#n.listSnapshots(optionalString(sandboxId, 'sandboxId'), states ?? [], page ?? 0, pageSize ?? 0)));
  }
  async deleteSnapshot(id) {
    await this.#call(() => this.#n.deleteSnapshot(id));
  }
}

/** execd client for one resolved endpoint. */
export class Execd {
  #n;
  constructor(opts) {
    const o = optionsObject(opts, 'Execd options');
    if (typeof o.baseUrl !== 'string') throw typeError('baseUrl must be a string');
    this.#n = new binding.Execd(
      o.baseUrl,
      stringPairs(o.headers, 'headers'),
      optionalMs(o.requestTimeoutMs, 'requestTimeoutMs', 30000),
      optionalMs(o.idleTimeoutMs, 'idleTimeoutMs', 10000),
      optionalString(o.caFile, 'caFile'),
    );
  }
  waitReady(timeoutMs = 30000) {
    return this.#n.waitReady(optionalMs(timeoutMs, 'timeoutMs', 30000));
  }
  /**
   * Runs a foreground command. Returns { result: Promise, cancel(): Promise<void> }.
   * onOutput({ stdout?, stderr? }) is called on the JS thread with batches of output, in order.
   */
  run(opts, onOutput) {
    const o = optionsObject(opts, 'run options');
    if (typeof o.command !== 'string' || o.command.length === 0) throw typeError('command must be a non-empty string');
    if (o.cwd !== undefined && o.cwd !== null && typeof o.cwd !== 'string') throw typeError('cwd must be a string');
    if (onOutput !== undefined && onOutput !== null && typeof onOutput !== 'function') throw typeError('onOutput must be a function');
    let max = o.maxRetainedBytes ?? 1048576;
    if (typeof max !== 'number' || !Number.isFinite(max) || (max < 0 && max !== -1)) {
      throw typeError('maxRetainedBytes must be a number >= 0, or -1 for unbounded');
    }
    const high = o.outputHighWaterBytes ?? 0;
    if (typeof high !== 'number' || !Number.isFinite(high) || high < 0) throw typeError('outputHighWaterBytes must be a number >= 0');
    const h = this.#n.run(o.command, o.cwd ?? null, stringPairs(o.envs, 'envs'),
      optionalMs(o.timeoutMs, 'timeoutMs', 0), Math.floor(max), onOutput ?? undefined, Math.floor(high));
    return { result: h.result, cancel: () => h.cancel() };
  }
}

/** { requestsInFlight, requestsStarted, sockets, engineThreads, operations, pendingPromises, pausedStreams } of this addon instance. */
export function stats() {
  return binding.stats();
}

export function versions() {
  return binding.versions();
}
