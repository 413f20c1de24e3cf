// Type declarations of the code interpreter: CodeInterpreter (native client of execd's /code API) and
// createCodeInterpreterTools (Mastra tools over it).
import type { Tool } from '@mastra/core/tools';
import type { OpenSandboxNotFoundError, OpenSandboxSandbox } from './index.js';

/** Every language execd's code interpreter knows. */
export type CodeLanguage = 'python' | 'bash' | 'java' | 'javascript' | 'typescript' | 'go' | 'sql';
export declare const CODE_LANGUAGES: readonly CodeLanguage[];
/** python, javascript, bash: what the tools offer unless `languages` says otherwise. */
export declare const DEFAULT_CODE_LANGUAGES: readonly CodeLanguage[];

export interface CodeContext {
  id: string;
  language: string;
  cwd?: string;
}

export interface CodeInterpreterOptions {
  /** execd base URL (`http(s)://host:port[/prefix]`). */
  baseUrl: string;
  /** Endpoint headers (+ X-EXECD-ACCESS-TOKEN). Never the lifecycle API key. */
  headers?: Record<string, string>;
  /** Deadline of plain requests (contexts, interrupt). Default 30000. */
  requestTimeoutMs?: number;
  /** Cell stream watchdog: fail when nothing (not even execd's 3 s ping) arrives for this long. Default 10000. */
  idleTimeoutMs?: number;
  /** https: a PEM CA bundle to trust (e.g. a private CA). Default: curl's bundle. */
  caFile?: string;
}

export interface CodeRunOptions {
  code: string;
  language: string;
  /** Without it, the server's default context of the language. */
  contextId?: string;
  /** Cell timeout: the kernel is interrupted and the result has timedOut: true. 0/undefined = none. */
  timeoutMs?: number;
  /** Bytes kept per stream (stdout, stderr): the first N (cut on a character boundary). Default 1 MiB; -1 = unbounded. */
  maxOutputBytes?: number;
  /** Bytes of result MIME bundles kept (JSON text). Default 8 MiB; -1 = unbounded. */
  maxResultBytes?: number;
  /** Bytes of one stream event parsed whole (>= 1024). Default 16 MiB. A larger stdout/stderr event keeps the start
   * of its text (the rest counted in the dropped bytes); a larger result bundle is counted in resultsDropped. */
  maxEventBytes?: number;
}

/** A result MIME bundle as execd sends it: `text` is text/plain; images are base64 (`image/png`, …). */
export type CodeResultBundle = { text?: string } & Record<string, unknown>;

export interface CodeRunError {
  ename: string;
  evalue: string;
  traceback: string[];
}

export interface CodeRunResult {
  contextId: string;
  language: string;
  executionCount: number | null;
  executionTimeMs: number;
  /** No error, not timed out, not interrupted. */
  success: boolean;
  stdout: string;
  stderr: string;
  /** Output was cut: by maxOutputBytes / maxEventBytes (the dropped bytes say how much), or by Jupyter (outputRateLimited). */
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
  stdoutDroppedBytes: number;
  stderrDroppedBytes: number;
  /** stderr has Jupyter's "IOPub data/message rate exceeded" notice: its server dropped stream output over its IOPub
   * rate limit before execd saw it (how much is not known). */
  outputRateLimited: boolean;
  results: CodeResultBundle[];
  resultsTruncated: boolean;
  resultsDropped: number;
  error: CodeRunError | null;
  /** Last `status` event text ("error"), or null. */
  status: string | null;
  /** An execution_complete event arrived (not the end: the stream's end is). */
  completed: boolean;
  timedOut: boolean;
  interrupted: boolean;
  /** We closed the stream ourselves because the server did not end it within 10 s of an interrupt. */
  streamCut: boolean;
}

export interface CodeRun {
  /** Resolves at the end of the stream. */
  result: Promise<CodeRunResult>;
  /** DELETE /code?id=<context>; resolves once execd answered (or at once when the run is over). */
  interrupt(): Promise<void>;
}

export declare class CodeInterpreter {
  constructor(opts: CodeInterpreterOptions);
  createContext(opts: { language: string; cwd?: string; timeoutMs?: number }): Promise<CodeContext>;
  listContexts(language?: string): Promise<CodeContext[]>;
  getContext(id: string): Promise<CodeContext>;
  deleteContext(id: string): Promise<void>;
  deleteContexts(language: string): Promise<void>;
  interrupt(id: string): Promise<void>;
  run(opts: CodeRunOptions, onOutput?: (batch: { stdout?: string; stderr?: string }) => void): CodeRun;
}

/** The code context does not exist (404 on /code/contexts/{id}, 500 "context not found" on POST /code). */
export declare class OpenSandboxContextNotFoundError extends OpenSandboxNotFoundError {
  readonly contextId: string;
}

export declare const CODE_INTERPRETER_TOOLS: {
  readonly RUN_CODE: 'run_code';
  readonly CREATE_CONTEXT: 'create_code_context';
  readonly LIST_CONTEXTS: 'list_code_contexts';
  readonly DELETE_CONTEXT: 'delete_code_context';
};

type Approval<I> = boolean | ((input: I, ctx?: { requestContext?: Record<string, unknown> }) => boolean | Promise<boolean>);

export interface RunCodeInput {
  code: string;
  language?: string;
  contextId?: string;
}

/** What the model sees from run_code. */
export interface RunCodeOutput {
  contextId: string;
  language: string;
  executionCount: number | null;
  success: boolean;
  stdout: string;
  stderr: string;
  /** text/plain of the returned values, joined with "\n". */
  result: string;
  /** Other MIME types returned (e.g. image/png); the data goes to onResult. */
  richOutputs: string[];
  /** traceback = its last `tracebackLines` lines, ANSI colours removed. */
  error: { name: string; message: string; traceback: string } | null;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
  resultsTruncated: boolean;
  /** Jupyter dropped stream output over its IOPub rate limit (its notice is in stderr). */
  outputRateLimited: boolean;
  timedOut: boolean;
  interrupted: boolean;
}

/** Given to onResult after every run_code call: the full structured result for the application. */
export interface CodeInterpreterResultEntry {
  toolCallId: string | undefined;
  code: string;
  language: string;
  contextId: string;
  result: CodeRunResult;
}

export interface CodeInterpreterToolsOptions {
  /** Languages offered (subset of CODE_LANGUAGES). Default DEFAULT_CODE_LANGUAGES. */
  languages?: CodeLanguage[];
  /** Language when the model gives none. Default languages[0]. */
  defaultLanguage?: CodeLanguage;
  /** Working directory of contexts the tools create. Default: execd's. */
  cwd?: string;
  /** Cell timeout (interrupts the kernel). Default 60000; 0 = none. */
  timeoutMs?: number;
  /** Deadline of context creation. Default: the sandbox's requestTimeoutMs. */
  contextTimeoutMs?: number;
  /** Cell stream watchdog. Default 10000. */
  idleTimeoutMs?: number;
  /** Bytes kept per stream in C. Default 1 MiB; -1 = unbounded. */
  maxOutputBytes?: number;
  /** Bytes of result bundles kept in C. Default 8 MiB; -1 = unbounded. */
  maxResultBytes?: number;
  /** Characters of stdout / stderr / result text shown to the model. Default 8000. */
  maxModelOutputChars?: number;
  /** Traceback lines shown to the model. Default 8. */
  tracebackLines?: number;
  /** All tools, or per tool. Default false. */
  requireApproval?:
    | boolean
    | {
        runCode?: Approval<RunCodeInput>;
        createContext?: Approval<{ language?: string; cwd?: string }>;
        listContexts?: Approval<{ language?: string }>;
        deleteContext?: Approval<{ contextId: string }>;
      };
  /** Called (and awaited) after every run_code with the full result; its errors are ignored. */
  onResult?: (entry: CodeInterpreterResultEntry) => void | Promise<void>;
}

export interface CodeInterpreterTools {
  run_code: Tool<RunCodeInput, RunCodeOutput>;
  create_code_context: Tool<{ language?: string; cwd?: string }, { contextId: string; language: string }>;
  list_code_contexts: Tool<{ language?: string }, { contexts: { contextId: string; language: string; isDefault: boolean }[] }>;
  delete_code_context: Tool<{ contextId: string }, { contextId: string; deleted: boolean }>;
}

export declare function createCodeInterpreterTools(sandbox: OpenSandboxSandbox, options?: CodeInterpreterToolsOptions): CodeInterpreterTools;
