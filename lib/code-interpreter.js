// Code interpreter of mastra-opensandbox: `CodeInterpreter` (the native client of execd's /code API: stateful
// contexts, cells streamed and bounded in C) and `createCodeInterpreterTools(sandbox, options)` (Mastra tools that
// run code in per-language default contexts or explicit ones, stream output through the tool writer, give the
// model a compact result and the application the full one through `onResult`).
import { createTool } from '@mastra/core/tools';
import { SandboxNotReadyError } from '@mastra/core/workspace';
import { z } from 'zod';
import { binding } from './native.js';
import { assertExactPath, resolveCwd } from './files.js';
import { OpenSandboxCancelledError, OpenSandboxError, OpenSandboxNotFoundError, OpenSandboxOptionError, fromNative } from './errors.js';

const EXECD_CONNECTION = Symbol.for('mastra-opensandbox.execdConnection');
const RECOVER = Symbol.for('mastra-opensandbox.recover');

/** Every language execd's code interpreter knows (the server decides which kernels really exist). */
export const CODE_LANGUAGES = Object.freeze(['python', 'bash', 'java', 'javascript', 'typescript', 'go', 'sql']);
/** Languages offered by the tools unless `languages` says otherwise (the ones every code-interpreter image has). */
export const DEFAULT_CODE_LANGUAGES = Object.freeze(['python', 'javascript', 'bash']);
/** Tool ids (keys of the object returned by createCodeInterpreterTools). */
export const CODE_INTERPRETER_TOOLS = Object.freeze({
  RUN_CODE: 'run_code',
  CREATE_CONTEXT: 'create_code_context',
  LIST_CONTEXTS: 'list_code_contexts',
  DELETE_CONTEXT: 'delete_code_context',
});

/** The code context does not exist (execd: 404 on /code/contexts/{id}, 500 "context not found" on POST /code). */
export class OpenSandboxContextNotFoundError extends OpenSandboxNotFoundError {
  constructor(contextId, cause) {
    super(`code context ${contextId} not found: ${cause.serverMessage ?? cause.message}`, {
      status: cause.status,
      code: 'CONTEXT_NOT_FOUND',
      requestId: cause.requestId,
      serverMessage: cause.serverMessage,
      operation: cause.operation,
    });
    this.name = 'OpenSandboxContextNotFoundError';
    this.contextId = contextId;
    this.cause = cause;
  }
}

const option = (name, message) => new OpenSandboxOptionError(name, message);

function ms(v, name, def) {
  if (v === undefined || v === null) return def;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) throw option(name, 'must be a number >= 0');
  return Math.floor(v);
}

function bytes(v, name, def) {
  if (v === undefined || v === null) return def;
  if (v === -1) return -1;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) throw option(name, 'must be a number >= 0, or -1 for unbounded');
  return Math.floor(v);
}

function nonEmpty(v, name) {
  if (typeof v !== 'string' || v === '') throw option(name, 'must be a non-empty string');
  return v;
}

function headerPairs(headers) {
  if (headers === undefined || headers === null) return [];
  if (typeof headers !== 'object' || Array.isArray(headers)) throw option('headers', 'must be an object of strings');
  const out = [];
  for (const [k, v] of Object.entries(headers)) {
    if (typeof v !== 'string') throw option(`headers.${k}`, 'must be a string');
    out.push(k, v);
  }
  return out;
}

function parseJson(text, what) {
  if (text === '') return undefined;
  try {
    return JSON.parse(text);
  } catch {
    throw new OpenSandboxError(`${what}: the server answered with malformed JSON`, 'PROTOCOL', { kind: 'protocol', operation: what });
  }
}

/**
 * Native client of execd's code interpreter for one execd endpoint. Methods reject with this package's typed
 * errors; an unknown context id rejects with OpenSandboxContextNotFoundError.
 */
export class CodeInterpreter {
  #n;
  #secrets;

  /** @param {{ baseUrl: string, headers?: Record<string,string>, requestTimeoutMs?: number, idleTimeoutMs?: number, caFile?: string }} opts */
  constructor(opts) {
    if (opts === null || typeof opts !== 'object') throw option('options', 'must be an object');
    nonEmpty(opts.baseUrl, 'baseUrl');
    const pairs = headerPairs(opts.headers);
    this.#secrets = pairs.filter((_, i) => i % 2 === 1);
    if (opts.caFile !== undefined && opts.caFile !== null) nonEmpty(opts.caFile, 'caFile');
    try {
      this.#n = new binding.CodeInterpreter(opts.baseUrl, pairs, ms(opts.requestTimeoutMs, 'requestTimeoutMs', 30000),
        ms(opts.idleTimeoutMs, 'idleTimeoutMs', 10000), opts.caFile ?? null);
    } catch (e) {
      throw option('baseUrl/headers/caFile', e.message); // never contains a header value
    }
  }

  #map(e, operation, contextId) {
    const mapped = fromNative(e, { operation, secrets: this.#secrets });
    const notFound = mapped.kind === 'api' && (mapped.status === 404 || (mapped.status === 500 && /context not found/i.test(mapped.serverMessage ?? '')));
    return contextId && notFound ? new OpenSandboxContextNotFoundError(contextId, mapped) : mapped;
  }

  async #call(operation, contextId, fn) {
    let text;
    try {
      text = await fn();
    } catch (e) {
      throw this.#map(e, operation, contextId);
    }
    return parseJson(text, operation);
  }

  /** POST /code/context -> { id, language }. timeoutMs: this request's deadline (default: requestTimeoutMs). */
  createContext({ language, cwd, timeoutMs } = {}) {
    nonEmpty(language, 'language');
    if (cwd !== undefined && cwd !== null) nonEmpty(cwd, 'cwd');
    const t = ms(timeoutMs, 'timeoutMs', 0);
    return this.#call(`create ${language} code context`, undefined, () => this.#n.createContext(language, cwd ?? null, t));
  }

  /** GET /code/contexts[?language=] -> [{ id, language }] */
  listContexts(language) {
    if (language !== undefined && language !== null) nonEmpty(language, 'language');
    return this.#call('list code contexts', undefined, () => this.#n.listContexts(language ?? null));
  }

  /** GET /code/contexts/{id} -> { id, language } */
  getContext(id) {
    nonEmpty(id, 'contextId');
    return this.#call(`get code context ${id}`, id, () => this.#n.getContext(id));
  }

  /** DELETE /code/contexts/{id} */
  async deleteContext(id) {
    nonEmpty(id, 'contextId');
    await this.#call(`delete code context ${id}`, id, () => this.#n.deleteContext(id));
  }

  /** DELETE /code/contexts?language= : every context of a language */
  async deleteContexts(language) {
    nonEmpty(language, 'language');
    await this.#call(`delete ${language} code contexts`, undefined, () => this.#n.deleteContexts(language));
  }

  /** DELETE /code?id= : interrupts the cell running in a context (nothing happens when it is idle). */
  async interrupt(id) {
    nonEmpty(id, 'contextId');
    await this.#call(`interrupt code context ${id}`, id, () => this.#n.interrupt(id));
  }

  /**
   * Runs a cell. Returns `{ result, interrupt }`: `result` resolves at the END OF THE STREAM with a CodeRunResult;
   * `interrupt()` sends DELETE /code?id=<context> (the result then has interrupted: true). onOutput({ stdout?,
   * stderr? }) gets the kept output in batches while the cell runs. Without contextId the server's default
   * context of the language is used.
   */
  run({ code, language, contextId, timeoutMs, maxOutputBytes, maxResultBytes, maxEventBytes } = {}, onOutput) {
    nonEmpty(code, 'code');
    nonEmpty(language, 'language');
    if (contextId !== undefined && contextId !== null) nonEmpty(contextId, 'contextId');
    if (onOutput !== undefined && onOutput !== null && typeof onOutput !== 'function') throw option('onOutput', 'must be a function');
    const eventBound = ms(maxEventBytes, 'maxEventBytes', 0);
    if (eventBound !== 0 && eventBound < 1024) throw option('maxEventBytes', 'must be >= 1024');
    const h = this.#n.run(code, language, contextId ?? null, ms(timeoutMs, 'timeoutMs', 0),
      bytes(maxOutputBytes, 'maxOutputBytes', 1048576), bytes(maxResultBytes, 'maxResultBytes', 8388608), onOutput ?? undefined, eventBound);
    const operation = `run ${language} code${contextId ? ` in context ${contextId}` : ''}`;
    const result = h.result.then((r) => toRunResult(r, language), (e) => {
      throw this.#map(e, operation, contextId);
    });
    return {
      result,
      interrupt: () => this.#n.interruptRun(h.handle).catch((e) => {
        throw this.#map(e, `interrupt ${operation}`, contextId);
      }),
    };
  }
}

/**
 * Jupyter's notice that it dropped the cell's stream output (its server's IOPub rate limits: notebook and
 * jupyter_server send it on stderr instead of the stdout/stderr messages over the limit, which never reach execd).
 */
const JUPYTER_RATE_LIMIT = /^IOPub (?:data|message) rate exceeded\./m;

function toRunResult(r, language) {
  const results = JSON.parse(r.resultsJson);
  const outputRateLimited = JUPYTER_RATE_LIMIT.test(r.stderr);
  return {
    contextId: r.contextId,
    language,
    executionCount: r.executionCount,
    executionTimeMs: r.executionTimeMs,
    success: !r.error && !r.timedOut && !r.interrupted,
    stdout: r.stdout,
    stderr: r.stderr,
    stdoutTruncated: r.stdoutDroppedBytes > 0 || outputRateLimited,
    stderrTruncated: r.stderrDroppedBytes > 0 || outputRateLimited,
    stdoutDroppedBytes: r.stdoutDroppedBytes,
    stderrDroppedBytes: r.stderrDroppedBytes,
    outputRateLimited,
    results,
    resultsTruncated: r.resultsDropped > 0,
    resultsDropped: r.resultsDropped,
    error: r.error,
    status: r.status,
    completed: r.completed,
    timedOut: r.timedOut,
    interrupted: r.interrupted,
    streamCut: r.streamCut,
  };
}

// ---------------------------------------------------------------- Mastra tools

const ANSI = /\x1b\[[0-9;]*[A-Za-z]/g; // Jupyter tracebacks are coloured

function clip(text, max) {
  if (text.length <= max) return { text, clipped: false };
  return { text: `${text.slice(0, max)}\n[... ${text.length - max} more characters not shown]`, clipped: true };
}

/** The compact, model-facing view of a CodeRunResult. */
function modelView(r, { maxModelOutputChars, tracebackLines }) {
  const out = clip(r.stdout, maxModelOutputChars);
  const err = clip(r.stderr, maxModelOutputChars);
  const texts = r.results.map((b) => (typeof b.text === 'string' ? b.text : '')).filter((t) => t !== '');
  const res = clip(texts.join('\n'), maxModelOutputChars);
  const richOutputs = [...new Set(r.results.flatMap((b) => Object.keys(b).filter((k) => k !== 'text')))];
  let error = null;
  if (r.error) {
    const lines = r.error.traceback.flatMap((l) => String(l).replace(ANSI, '').split('\n')).filter((l) => l.trim() !== '');
    error = { name: r.error.ename, message: r.error.evalue.replace(ANSI, ''), traceback: lines.slice(-tracebackLines).join('\n') };
  }
  return {
    contextId: r.contextId,
    language: r.language,
    executionCount: r.executionCount,
    success: r.success,
    stdout: out.text,
    stderr: err.text,
    result: res.text,
    richOutputs,
    error,
    stdoutTruncated: r.stdoutTruncated || out.clipped,
    stderrTruncated: r.stderrTruncated || err.clipped,
    resultsTruncated: r.resultsTruncated || res.clipped,
    outputRateLimited: r.outputRateLimited,
    timedOut: r.timedOut,
    interrupted: r.interrupted,
  };
}

const APPROVAL_KEYS = ['runCode', 'createContext', 'listContexts', 'deleteContext'];

function approvalFor(requireApproval, key) {
  if (requireApproval === undefined || typeof requireApproval === 'boolean') return requireApproval ?? false;
  return requireApproval[key] ?? false;
}

function checkOptions(options) {
  if (options === null || typeof options !== 'object' || Array.isArray(options)) throw option('options', 'must be an object');
  const languages = options.languages ?? DEFAULT_CODE_LANGUAGES;
  if (!Array.isArray(languages) || languages.length === 0) throw option('languages', 'must be a non-empty array of language names');
  for (const l of languages) {
    if (!CODE_LANGUAGES.includes(l)) throw option('languages', `unknown language ${JSON.stringify(l)}; supported: ${CODE_LANGUAGES.join(', ')}`);
  }
  const defaultLanguage = options.defaultLanguage ?? languages[0];
  if (!languages.includes(defaultLanguage)) throw option('defaultLanguage', `must be one of ${languages.join(', ')}`);
  const ra = options.requireApproval;
  if (ra !== undefined && typeof ra !== 'boolean') {
    if (ra === null || typeof ra !== 'object' || Array.isArray(ra)) throw option('requireApproval', 'must be a boolean or an object of per-tool settings');
    for (const [k, v] of Object.entries(ra)) {
      if (!APPROVAL_KEYS.includes(k)) throw option(`requireApproval.${k}`, `unknown tool; expected one of ${APPROVAL_KEYS.join(', ')}`);
      if (typeof v !== 'boolean' && typeof v !== 'function') throw option(`requireApproval.${k}`, 'must be a boolean or a function');
    }
  }
  if (options.onResult !== undefined && typeof options.onResult !== 'function') throw option('onResult', 'must be a function');
  if (options.cwd !== undefined) {
    nonEmpty(options.cwd, 'cwd');
    assertExactPath(options.cwd, 'cwd');
  }
  const positive = (v, name, def) => {
    const n = ms(v, name, def);
    if (n < 1) throw option(name, 'must be >= 1');
    return n;
  };
  return {
    languages: [...languages],
    defaultLanguage,
    cwd: options.cwd,
    timeoutMs: ms(options.timeoutMs, 'timeoutMs', 60000),
    contextTimeoutMs: ms(options.contextTimeoutMs, 'contextTimeoutMs', 0),
    idleTimeoutMs: ms(options.idleTimeoutMs, 'idleTimeoutMs', 10000),
    maxOutputBytes: bytes(options.maxOutputBytes, 'maxOutputBytes', 1048576),
    maxResultBytes: bytes(options.maxResultBytes, 'maxResultBytes', 8388608),
    maxModelOutputChars: positive(options.maxModelOutputChars, 'maxModelOutputChars', 8000),
    tracebackLines: positive(options.tracebackLines, 'tracebackLines', 8),
    requireApproval: ra,
    onResult: options.onResult,
  };
}

/**
 * Mastra tools over the sandbox's code interpreter: { run_code, create_code_context, list_code_contexts,
 * delete_code_context }. See docs/code-interpreter.md for the options and schemas.
 */
export function createCodeInterpreterTools(sandbox, options = {}) {
  if (!sandbox || typeof sandbox[EXECD_CONNECTION] !== 'function' || typeof sandbox.ensureRunning !== 'function') {
    throw option('sandbox', 'must be an OpenSandboxSandbox');
  }
  const o = checkOptions(options);
  // defaults: language -> Promise<context id>; known: context id -> language; tails: context id -> the last queued
  // cell (a context runs one cell at a time: parallel tool calls wait their turn instead of failing "busy")
  const state = { key: undefined, client: undefined, defaults: new Map(), known: new Map(), tails: new Map() };

  function checkLanguage(language) {
    if (!o.languages.includes(language)) {
      throw option('language', `unsupported language ${JSON.stringify(language)}; supported: ${o.languages.join(', ')}`);
    }
    return language;
  }

  /** The client for the sandbox's current execd endpoint (a new endpoint forgets the contexts we knew). */
  async function client() {
    await sandbox.ensureRunning();
    const conn = sandbox[EXECD_CONNECTION]();
    if (!conn) throw new SandboxNotReadyError(sandbox.id);
    const key = `${conn.baseUrl}\n${JSON.stringify(conn.headers)}`;
    if (key !== state.key) {
      state.client = new CodeInterpreter({ ...conn, idleTimeoutMs: o.idleTimeoutMs });
      state.key = key;
      state.defaults.clear();
      state.known.clear();
      state.tails.clear();
    }
    return state.client;
  }

  /** cwd (the tool's input, else the cwd option): `$` refused, a relative one against the working directory, as
   * executeCommand does (execd would expand `$VAR`/`~` and resolve it against its own cwd, `/`). */
  async function createContext(c, language, cwd) {
    const dir = cwd ?? o.cwd;
    if (dir) assertExactPath(dir, 'cwd');
    const ctx = await c.createContext({ language, cwd: dir ? resolveCwd(dir, sandbox.workingDirectory) : undefined, timeoutMs: o.contextTimeoutMs });
    if (!ctx || typeof ctx.id !== 'string' || ctx.id === '') {
      throw new OpenSandboxError(`create ${language} code context: the server answered without an id`, 'PROTOCOL', { kind: 'protocol' });
    }
    state.known.set(ctx.id, language);
    return ctx.id;
  }

  /** The default context of a language: created on first use, then reused (concurrent callers share it). */
  function defaultContext(c, language) {
    let p = state.defaults.get(language);
    if (!p) {
      p = createContext(c, language);
      state.defaults.set(language, p);
      p.catch(() => state.defaults.get(language) === p && state.defaults.delete(language));
    }
    return p;
  }

  async function languageOf(c, contextId) {
    const known = state.known.get(contextId);
    if (known) return known;
    const ctx = await c.getContext(contextId);
    state.known.set(contextId, ctx.language);
    return ctx.language;
  }

  function writerFor(context) {
    const writer = context?.writer;
    const toolCallId = context?.agent?.toolCallId;
    let chain = Promise.resolve();
    const emit = (batch) => {
      if (!writer) return;
      for (const stream of ['stdout', 'stderr']) {
        if (!batch[stream]) continue;
        const chunk = { type: `data-code-${stream}`, data: { output: batch[stream], timestamp: Date.now(), toolCallId }, transient: true };
        chain = chain.then(() => writer.custom(chunk)).catch(() => {}); // a closed writer must not fail the cell
      }
    };
    return { emit, drained: () => chain };
  }

  /** Runs fn after the cells queued before it on the same context. */
  async function serialized(contextId, fn) {
    const before = state.tails.get(contextId) ?? Promise.resolve();
    const mine = before.then(fn, fn);
    const tail = mine.catch(() => {});
    state.tails.set(contextId, tail);
    try {
      return await mine;
    } finally {
      if (state.tails.get(contextId) === tail) state.tails.delete(contextId);
    }
  }

  function runOnce(c, cell, context, emit) {
    return serialized(cell.contextId, () => runNow(c, cell, context, emit));
  }

  async function runNow(c, { code, language, contextId }, context, emit) {
    if (context?.abortSignal?.aborted) throw new OpenSandboxCancelledError('run code: cancelled: aborted before the cell started', { operation: 'run code' });
    const run = c.run({ code, language, contextId, timeoutMs: o.timeoutMs, maxOutputBytes: o.maxOutputBytes, maxResultBytes: o.maxResultBytes }, emit);
    const signal = context?.abortSignal;
    const onAbort = () => run.interrupt().catch(() => {});
    signal?.addEventListener?.('abort', onAbort, { once: true });
    try {
      return await run.result;
    } finally {
      signal?.removeEventListener?.('abort', onAbort);
    }
  }

  /** Runs `attempt` through the sandbox's dead-sandbox recovery (a sandbox gone behind our back: see lib/recovery.js). */
  function recovering(attempt, options) {
    return typeof sandbox[RECOVER] === 'function' ? sandbox[RECOVER](attempt, options) : attempt();
  }

  async function runCode(input, context) {
    const asked = input.language === undefined ? undefined : checkLanguage(input.language); // before any request
    const w = writerFor(context);
    const { result, language, contextId } = await recovering(async () => {
      let language = asked;
      const c = await client();
      let contextId = input.contextId;
      const usedDefault = !contextId;
      if (contextId) language ??= checkLanguage(await languageOf(c, contextId));
      else contextId = await defaultContext(c, (language ??= o.defaultLanguage));
      try {
        return { language, contextId, result: await runOnce(c, { code: input.code, language, contextId }, context, w.emit) };
      } catch (e) {
        if (!(usedDefault && e instanceof OpenSandboxContextNotFoundError)) throw e;
        // the default context went away (deleted, kernel gone): make a new one, once
        if (state.defaults.has(language)) state.defaults.delete(language);
        contextId = await defaultContext(c, language);
        return { language, contextId, result: await runOnce(c, { code: input.code, language, contextId }, context, w.emit) };
      }
    }, { aborted: () => context?.abortSignal?.aborted });
    await w.drained();
    if (o.onResult) {
      try {
        await o.onResult({ toolCallId: context?.agent?.toolCallId, code: input.code, language, contextId, result });
      } catch {
        /* the application's callback must not change what the model sees */
      }
    }
    return modelView(result, o);
  }

  const langEnum = z.enum(o.languages);
  const errorSchema = z.object({ name: z.string(), message: z.string(), traceback: z.string() }).nullable();

  const runCodeTool = createTool({
    id: CODE_INTERPRETER_TOOLS.RUN_CODE,
    description:
      `Run code in a stateful code interpreter inside the sandbox (languages: ${o.languages.join(', ')}; default ${o.defaultLanguage}). ` +
      'Variables, functions and imports persist between calls in the same context: without contextId each language has one ' +
      'default context that is reused. The value of the last expression is returned as `result`; charts (e.g. matplotlib) ' +
      'appear in `richOutputs`. Errors come back as `error` with the exception name, message and the last traceback lines.',
    inputSchema: z.object({
      code: z.string().min(1).describe('The code to run'),
      language: langEnum.optional().describe(`Language of the code (default ${o.defaultLanguage}; with contextId, the context's language)`),
      contextId: z.string().min(1).optional().describe('Run in this context (from create_code_context) instead of the default one'),
    }),
    outputSchema: z.object({
      contextId: z.string(),
      language: z.string(),
      executionCount: z.number().nullable(),
      success: z.boolean(),
      stdout: z.string(),
      stderr: z.string(),
      result: z.string().describe('text/plain of the returned values'),
      richOutputs: z.array(z.string()).describe('other MIME types returned (e.g. image/png)'),
      error: errorSchema,
      stdoutTruncated: z.boolean(),
      stderrTruncated: z.boolean(),
      resultsTruncated: z.boolean(),
      outputRateLimited: z.boolean().describe("Jupyter dropped stream output over its IOPub rate limit (its notice is in stderr): print less"),
      timedOut: z.boolean(),
      interrupted: z.boolean(),
    }),
    requireApproval: approvalFor(o.requireApproval, 'runCode'),
    execute: runCode,
  });

  const createContextTool = createTool({
    id: CODE_INTERPRETER_TOOLS.CREATE_CONTEXT,
    description: 'Create a new, empty code interpreter context (an isolated interpreter state) and return its id for run_code.',
    inputSchema: z.object({
      language: langEnum.optional().describe(`Language of the context (default ${o.defaultLanguage})`),
      cwd: z.string().min(1).optional().describe('Working directory of the interpreter'),
    }),
    outputSchema: z.object({ contextId: z.string(), language: z.string() }),
    requireApproval: approvalFor(o.requireApproval, 'createContext'),
    execute: async (input) => {
      const language = checkLanguage(input.language ?? o.defaultLanguage);
      const contextId = await recovering(async () => createContext(await client(), language, input.cwd));
      return { contextId, language };
    },
  });

  const listContextsTool = createTool({
    id: CODE_INTERPRETER_TOOLS.LIST_CONTEXTS,
    description: 'List the code interpreter contexts of the sandbox (optionally of one language).',
    inputSchema: z.object({ language: langEnum.optional() }),
    outputSchema: z.object({
      contexts: z.array(z.object({ contextId: z.string(), language: z.string(), isDefault: z.boolean() })),
    }),
    requireApproval: approvalFor(o.requireApproval, 'listContexts'),
    execute: async (input) => {
      if (input.language !== undefined) checkLanguage(input.language);
      const list = await recovering(async () => (await client()).listContexts(input.language), { anyTransport: true });
      if (!Array.isArray(list)) throw new OpenSandboxError('list code contexts: the server did not answer a list', 'PROTOCOL', { kind: 'protocol' });
      const defaults = new Set();
      for (const p of state.defaults.values()) defaults.add(await p.catch(() => undefined));
      return {
        contexts: list.filter((x) => x && typeof x.id === 'string')
          .map((x) => ({ contextId: x.id, language: String(x.language ?? ''), isDefault: defaults.has(x.id) })),
      };
    },
  });

  const deleteContextTool = createTool({
    id: CODE_INTERPRETER_TOOLS.DELETE_CONTEXT,
    description: 'Delete a code interpreter context and everything defined in it.',
    inputSchema: z.object({ contextId: z.string().min(1) }),
    outputSchema: z.object({ contextId: z.string(), deleted: z.boolean() }),
    requireApproval: approvalFor(o.requireApproval, 'deleteContext'),
    execute: async (input) => {
      const c = await client();
      await c.deleteContext(input.contextId);
      state.known.delete(input.contextId);
      for (const [language, p] of state.defaults) {
        if ((await p.catch(() => undefined)) === input.contextId) state.defaults.delete(language);
      }
      return { contextId: input.contextId, deleted: true };
    },
  });

  return {
    [CODE_INTERPRETER_TOOLS.RUN_CODE]: runCodeTool,
    [CODE_INTERPRETER_TOOLS.CREATE_CONTEXT]: createContextTool,
    [CODE_INTERPRETER_TOOLS.LIST_CONTEXTS]: listContextsTool,
    [CODE_INTERPRETER_TOOLS.DELETE_CONTEXT]: deleteContextTool,
  };
}
