// Types of lib/process-manager.js: background processes of an OpenSandbox sandbox (sandbox.processes).
import type { CommandResult, ProcessInfo, SpawnProcessOptions } from '@mastra/core/workspace';
import type { OpenSandboxError } from './index.js';
import { ProcessHandle, SandboxProcessManager } from '@mastra/core/workspace';

/** Default retention per stream (newest bytes kept): 1 MiB. */
export declare const DEFAULT_MAX_RETAINED_BYTES: number;
/** Exit code of a process whose exit status cannot be known (session gone, taken over, shutdown): -1. */
export declare const UNKNOWN_EXIT_CODE: -1;

/** Where execd is: its base URL and the endpoint headers (including X-EXECD-ACCESS-TOKEN when used). */
export interface OpenSandboxExecdConnection {
  baseUrl: string;
  headers?: Record<string, string>;
  requestTimeoutMs?: number;
  /** https/wss: PEM CA bundle to verify execd with (default: SSL_CERT_FILE / SSL_CERT_DIR, else the system bundle). */
  caFile?: string;
}

/** The result of wait(): Mastra's CommandResult, plus errorText when no exit status could be known. */
export interface OpenSandboxProcessResult extends CommandResult {
  errorText?: string;
  /** With errorText: the typed error (code PROCESS_CONNECTION_LOST, PROCESS_GONE, PROCESS_TAKEN_OVER, SHUTDOWN, …). */
  error?: OpenSandboxError;
}

export declare class OpenSandboxProcessHandle extends ProcessHandle {
  /** "<execd PTY session id>.<nonce>": stable across client restarts (processes.get(pid) reattaches). */
  readonly pid: string;
  /** undefined while running; 124 timed out, 137 killed, -1 unknown (see errorText). */
  readonly exitCode: number | undefined;
  /** Why no exit status is known (session gone, taken over, shutdown), else null. */
  readonly errorText: string | null;
  /** The typed error when no exit status is known, else null. */
  readonly error: OpenSandboxError | null;
  wait(options?: {
    onStdout?: (data: string) => void;
    onStderr?: (data: string) => void;
    abortSignal?: AbortSignal;
  }): Promise<OpenSandboxProcessResult>;
  /** SIGKILLs the remote process group; true once execd confirmed it, false when it had already exited. */
  kill(): Promise<boolean>;
  /** Writes to the process's stdin (UTF-8 for strings); rejects after exit. */
  sendStdin(data: string | Buffer): Promise<void>;
  /** Ends stdin after every byte sent before (the wrapper closes the command's stdin pipe); no-op after exit. */
  closeStdin(): Promise<void>;
}

export interface OpenSandboxProcessManagerOptions {
  env?: Record<string, string | undefined>;
  /** The execd endpoint; OpenSandboxSandbox passes its own. */
  connection?: () => OpenSandboxExecdConnection | undefined;
  /** How long an ended process waits for a client to collect its exit status before its session ends (default 600). */
  ackWaitSeconds?: number;
  /** Runs spawn/get through the sandbox's dead-sandbox recovery; OpenSandboxSandbox passes its own. */
  recover?: <T>(attempt: () => Promise<T>, options: { anyTransport?: boolean }) => Promise<T>;
}

export declare class OpenSandboxProcessManager extends SandboxProcessManager {
  constructor(options?: OpenSandboxProcessManagerOptions);
  spawn(command: string, options?: SpawnProcessOptions): Promise<OpenSandboxProcessHandle>;
  list(): Promise<ProcessInfo[]>;
  /** A tracked process, or a handle reattached by pid (e.g. after a restart); undefined for an unknown pid. */
  get(pid: string): Promise<OpenSandboxProcessHandle | undefined>;
  kill(pid: string): Promise<boolean>;
  /** Kills every tracked process still running (the sandbox's stop() and destroy() call it). */
  killAll(): Promise<void>;
}
