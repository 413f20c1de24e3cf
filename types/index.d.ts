// Type declarations of mastra-opensandbox: OpenSandboxSandbox (a Mastra workspace sandbox backed by OpenSandbox),
// its options, the raw OpenSandbox handle, and the typed errors.
import type {
  MastraSandbox,
  SandboxError,
  CommandResult,
  ExecuteCommandOptions,
  ProviderStatus,
  SandboxInfo,
  SandboxStartOptions,
  SandboxStartResult,
  SandboxStartHook,
  SandboxLifecycleHook,
  SandboxFileInput,
  WriteFilesOptions,
  SandboxNetworking,
  SandboxCloneOptions,
  MountResult,
  WorkspaceFilesystem,
  MastraFilesystem,
  MastraFilesystemOptions,
  FileContent,
  FileStat,
  FileEntry,
  ReadOptions,
  WriteOptions,
  ListOptions,
  RemoveOptions,
  CopyOptions,
  WalkEntry,
  WalkOptions,
  FilesystemGrepOptions,
  FilesystemGrepResult,
  FilesystemInfo,
} from '@mastra/core/workspace';
import type { SandboxProvider, FilesystemProvider } from '@mastra/core/editor';

/** Per-call instructions override: a fixed string ('' suppresses) or a function of the default text. */
export type OpenSandboxInstructions =
  | string
  | ((opts: { defaultInstructions: string; requestContext?: unknown }) => string);

/** An OpenSandbox volume, passed through to `POST /sandboxes` (exactly one backend). */
export interface OpenSandboxVolume {
  name: string;
  mountPath: string;
  readOnly?: boolean;
  subPath?: string;
  host?: { path: string };
  pvc?: {
    claimName: string;
    createIfNotExists?: boolean;
    deleteOnSandboxTermination?: boolean;
    storageClass?: string | null;
    storage?: string;
    accessModes?: string[];
  };
  ossfs?: Record<string, unknown>;
}

export interface OpenSandboxNetworkPolicy {
  defaultAction?: 'allow' | 'deny';
  egress?: Array<{ action: 'allow' | 'deny'; target: string }>;
  [key: string]: unknown;
}

export interface OpenSandboxSandboxOptions {
  /** Logical id; the same id reattaches to the same remote sandbox (label `mastra.ai/sandbox-id`). Default: generated. */
  id?: string;
  /** Lifecycle server: `host[:port][/path]` or a full http(s) URL. Default: env OPEN_SANDBOX_DOMAIN, then `127.0.0.1:8080`. */
  domain?: string;
  /** Sent as OPEN-SANDBOX-API-KEY to the lifecycle server only. Default: env OPEN_SANDBOX_API_KEY. */
  apiKey?: string;
  /** Scheme for the lifecycle server and execd. Default 'http' (or the scheme of a URL `domain`). */
  protocol?: 'http' | 'https';
  /** Reattach to this remote sandbox instead of finding/creating one by logical id. */
  sandboxId?: string;
  /** Container image. Default 'ubuntu:22.04'. */
  image?: string | { uri: string; auth?: { username: string; password: string } };
  /** Default ['tail', '-f', '/dev/null']. */
  entrypoint?: string[];
  /** Time to live in seconds (>= 60); null = no expiry. Default 600. */
  timeoutSeconds?: number | null;
  /** Resource limits. Default { cpu: '1', memory: '2Gi' }. */
  resources?: Record<string, string>;
  /** Environment overlay merged into every command (per-command env wins; undefined values are dropped). */
  env?: Record<string, string | undefined>;
  /** Extra metadata labels on the remote sandbox (Kubernetes label syntax). */
  metadata?: Record<string, string>;
  volumes?: OpenSandboxVolume[];
  networkPolicy?: OpenSandboxNetworkPolicy;
  /** Reach execd through the lifecycle server's proxy. Default false. */
  useServerProxy?: boolean;
  /** Sent as X-EXECD-ACCESS-TOKEN to execd when set. */
  execdAccessToken?: string;
  /** https/wss: PEM CA bundle that the lifecycle server and execd are verified with (processes, uploads and the
   * code interpreter too). Default: SSL_CERT_FILE / SSL_CERT_DIR, else the system bundle found at run time. */
  caFile?: string;
  /** Deadline of each lifecycle/execd request (not of command runs). Default 30000. */
  requestTimeoutMs?: number;
  /** Deadline for execd to answer /ping once the sandbox runs. Default 30000. */
  readyTimeoutMs?: number;
  /** Deadline of a create request (the server answers once the image is pulled and the container runs) and of the
   * server's own transitions waited through (Pending/Allocated -> Running, Pausing -> Paused, Resuming -> Running).
   * Default 180000. */
  createTimeoutMs?: number;
  /** executeCommand: newest bytes of stdout/stderr kept per stream in the result (older bytes are dropped and
   * counted in stdoutDroppedBytes/stderrDroppedBytes; onStdout/onStderr still get every byte). Per call:
   * options.maxRetainedBytes. Infinity = unbounded. Default 16 MiB. */
  maxRetainedBytes?: number;
  instructions?: OpenSandboxInstructions;
  onStart?: SandboxStartHook;
  onStop?: SandboxLifecycleHook;
  onDestroy?: SandboxLifecycleHook;
  /** Default cwd of commands (created on start). Default '/workspace'. */
  workingDirectory?: string;
  /**
   * Idle expiry in minutes (fractions allowed): the sandbox expires this long after the last activity. While
   * commands or background processes run, the expiry is renewed ahead of time on the server's clock. Needs an
   * expiring sandbox (timeoutSeconds not null). Default: unset (only timeoutSeconds applies).
   */
  idleTimeoutMinutes?: number;
  /**
   * Checkpoint that `snapshot()` captures into and that a start finding no live sandbox boots from. Default: the
   * caller-given `id` (none when the id is generated); `null` = no checkpoints.
   */
  checkpointName?: string | null;
  /** Boot-only fallback checkpoint used when `checkpointName` has none yet; `snapshot()` never writes it. */
  seedCheckpointName?: string;
  /** Create the sandbox from this snapshot instead of `image` (not both). Checkpoints still come first. */
  snapshotId?: string;
  /** Ready checkpoints of a name kept after each `snapshot()`. Default 3. */
  keepCheckpoints?: number;
  /** Deadline of one `snapshot()` capture (and of a template's snapshot). Default 300000. */
  snapshotTimeoutMs?: number;
  /**
   * Start from this template (built by the first start that needs it). Its image replaces `image` (not both); its
   * plain envs are the default `env`, its last setWorkdir the default `workingDirectory`.
   */
  template?: OpenSandboxTemplate | OpenSandboxTemplateDefinition;
}

/** What a created sandbox was restored from (`start()` result). */
export type OpenSandboxRestoredFrom =
  | { kind: 'checkpoint' | 'seed'; name: string; snapshotId: string }
  | { kind: 'snapshot'; snapshotId: string }
  | { kind: 'template'; templateId: string; snapshotId: string };

/** `start()` result: Mastra's outcome, plus where a created sandbox was restored from. */
export interface OpenSandboxStartResult extends SandboxStartResult {
  restoredFrom?: OpenSandboxRestoredFrom;
  /** This start built the template (it waited for the build). */
  templateBuilt?: boolean;
  /**
   * The template was being built elsewhere: the sandbox came from the newest ready template of the same family
   * (restoredFrom names it) or, without one, from the template's base image (none of its steps ran).
   */
  templatePending?: boolean;
}

/** A template step as stored (ephemeral envs keep only their names). */
export type OpenSandboxTemplateStep =
  | { type: 'run'; command: string }
  | { type: 'workdir'; path: string }
  | { type: 'env'; envs: Record<string, string> }
  | { type: 'env'; ephemeral: true; keys: string[] }
  | { type: 'apt' | 'pip'; packages: string[] }
  | { type: 'npm'; packages: string[]; global?: boolean };

/** The stored form of a template (`template.toJSON()`): never an ephemeral value. */
export interface OpenSandboxTemplateDefinition {
  image?: string;
  family?: string;
  steps: OpenSandboxTemplateStep[];
}

/** A template builder: steps on a base image, hashed (without ephemeral values) into `templateId`. */
export declare class OpenSandboxTemplate {
  /** Shell command (bash) in the current working directory with the envs set so far. */
  runCmd(command: string): this;
  /** Working directory of later steps (created) and of sandboxes started from the template. */
  setWorkdir(path: string): this;
  /** Envs of later steps; `{ ephemeral: true }`: build-only, values never hashed or stored. */
  setEnvs(envs: Record<string, string>, options?: { ephemeral?: boolean }): this;
  /** Needs the image's apt (fails on the local server, whose host system is read-only). */
  aptInstall(packages: string | string[]): this;
  /** Needs the image's pip into its site-packages (fails on the local server). */
  pipInstall(packages: string | string[]): this;
  /** `npm install` in the working directory, or `-g` (needs the image's npm prefix; fails on the local server). */
  npmInstall(packages: string | string[], options?: { global?: boolean }): this;
  /** Default 'default'. While this template builds, starts use the newest ready template of the family. */
  withFamily(family: string): this;
  readonly image: string;
  readonly family: string;
  readonly steps: OpenSandboxTemplateStep[];
  /** 16 hex chars of sha256 over image, family and steps. */
  readonly templateId: string;
  /** `mastra.template.<family>.<templateId>`: the name of its snapshot. */
  readonly snapshotName: string;
  toJSON(): Required<OpenSandboxTemplateDefinition>;
  /**
   * Builds it (unless already built) without provisioning a sandbox for you; `options` are OpenSandboxSandbox
   * connection options. A failed step rejects with OpenSandboxTemplateBuildError.
   */
  build(options?: Partial<OpenSandboxSandboxOptions>): Promise<{ templateId: string; snapshotId: string; built: boolean }>;
}

/** `Template({ image? })` (default image 'ubuntu:22.04'); `Template.fromJSON(definition)` reads a stored one. */
export declare const Template: {
  (options?: { image?: string }): OpenSandboxTemplate;
  fromJSON(definition: OpenSandboxTemplateDefinition | OpenSandboxTemplate): OpenSandboxTemplate;
};
export declare const TEMPLATE_PREFIX: 'mastra.template.';
/** Metadata label of a template's builder sandbox (value: the template id). */
export declare const TEMPLATE_BUILD_LABEL: 'mastra.ai/template-build';
export declare const CHECKPOINT_PREFIX: 'mastra.checkpoint.';
export declare const DEFAULT_KEEP_CHECKPOINTS: 3;

/** A sandbox object as the lifecycle server returns it. */
export interface OpenSandboxRemoteSandbox {
  id: string;
  status: { state: string; reason?: string; message?: string; lastTransitionAt?: string };
  metadata?: Record<string, string>;
  expiresAt?: string;
  createdAt?: string;
  entrypoint?: string[];
  image?: { uri: string };
  [key: string]: unknown;
}

/** A snapshot as the lifecycle server returns it (`GET /snapshots/{id}`). */
export interface OpenSandboxSnapshot {
  id: string;
  /** The sandbox it was captured from (which may be gone). */
  sandboxId: string;
  name?: string;
  /** state: 'Creating' | 'Ready' | 'Failed' | 'Deleting' (new states may appear). */
  status: { state: string; reason?: string; message?: string; lastTransitionAt?: string };
  createdAt: string;
}

export interface OpenSandboxSnapshotPage {
  items: OpenSandboxSnapshot[];
  pagination: { page: number; pageSize: number; totalItems: number; totalPages: number; hasNextPage: boolean };
}

/** The raw OpenSandbox handle of a started sandbox (`sandbox.opensandbox`). */
export interface OpenSandboxHandle {
  readonly sandboxId: string | undefined;
  /** `${protocol}://${endpoint}` of execd (path prefix kept). */
  readonly execdUrl: string | undefined;
  /** Names (not values) of the extra headers the endpoint requires on every execd request. */
  readonly endpointHeaders: string[];
  /** The native lifecycle client (all sandboxes of this server). */
  readonly lifecycle: unknown;
  /** The native execd client of this sandbox (undefined while stopped). */
  readonly execd: unknown;
  get(): Promise<OpenSandboxRemoteSandbox>;
  pause(): Promise<void>;
  resume(): Promise<void>;
  /** New absolute expiry: a Date, an RFC 3339 string, or seconds from now. */
  renew(at: Date | string | number): Promise<{ expiresAt: string }>;
  endpoint(port: number, useServerProxy?: boolean): Promise<{ endpoint: string; headers?: Record<string, string> }>;
  patchMetadata(patch: Record<string, string | null>): Promise<OpenSandboxRemoteSandbox>;
  /** The egress sidecar's current policy (its /policy API on the sandbox's port 18080; a sandbox created with egress rules). */
  getEgressPolicy(): Promise<{ egress: Array<{ action: 'allow' | 'deny'; target: string }>; defaultAction: 'allow' | 'deny' }>;
  /** Puts these rules first (rules with the same target are replaced), as upstream's SDK. */
  patchEgressRules(rules: Array<{ action: 'allow' | 'deny'; target: string }>): Promise<void>;
  /** Removes the rules with these targets. */
  deleteEgressRules(targets: string[]): Promise<void>;
  /**
   * Snapshot of this sandbox (it must be started). Resolves the accepted snapshot (state 'Creating'), or with
   * `wait: true` the Ready one (OpenSandboxSnapshotError when it fails; timeoutMs default 300000).
   */
  createSnapshot(options?: { name?: string; wait?: boolean; timeoutMs?: number; abortSignal?: AbortSignal }): Promise<OpenSandboxSnapshot>;
  /** Polls a snapshot until Ready (OpenSandboxSnapshotError when Failed, OpenSandboxTimeoutError after timeoutMs). */
  waitForSnapshot(snapshotId: string, options?: { timeoutMs?: number; abortSignal?: AbortSignal }): Promise<OpenSandboxSnapshot>;
  getSnapshot(snapshotId: string): Promise<OpenSandboxSnapshot>;
  /** One page of every snapshot on the server (snapshots outlive sandboxes); filter by source sandbox and states. */
  listSnapshots(query?: { sandboxId?: string; states?: string[]; page?: number; pageSize?: number }): Promise<OpenSandboxSnapshotPage>;
  /** 404 (OpenSandboxNotFoundError) when it does not exist; 409 while it is still Creating. */
  deleteSnapshot(snapshotId: string): Promise<void>;
}

export declare class OpenSandboxSandbox extends MastraSandbox {
  readonly id: string;
  readonly name: 'OpenSandboxSandbox';
  readonly provider: 'opensandbox';
  status: ProviderStatus;
  constructor(options?: OpenSandboxSandboxOptions);
  start(options?: SandboxStartOptions): Promise<OpenSandboxStartResult>;
  stop(): Promise<void>;
  /** Always true: snapshot() persists OpenSandbox snapshots that later starts boot from. */
  readonly supportsCheckpoints: boolean;
  /**
   * Captures the sandbox into the checkpoint named by `checkpointName` and waits until it is ready; no-op without a
   * checkpoint name. Concurrent calls never interleave; a failed capture (OpenSandboxSnapshotError) keeps the
   * previous checkpoint.
   */
  snapshot(options?: { abortSignal?: AbortSignal; timeoutMs?: number }): Promise<void>;
  destroy(): Promise<void>;
  executeCommand(command: string, args?: string[], options?: ExecuteCommandOptions): Promise<CommandResult>;
  /** `pause` is present when the last stop() left the sandbox running: the server could not pause it (`supported`
   * false: it cannot pause at all; `code`, `reason`: its answer). */
  getInfo(): Promise<SandboxInfo & { pause?: { paused: false; supported: boolean; code: string; reason?: string } }>;
  getInstructions(opts?: { requestContext?: unknown }): string;
  readonly opensandbox: OpenSandboxHandle;
  /** Port URLs through the endpoints API: `getPortUrl(port)` -> `http(s)://…` or null when it cannot be exposed. */
  readonly networking: SandboxNetworking;
  /** Writes files in one execd upload (relative paths against the working directory, parents created, mode default 0o644). */
  writeFiles(files: SandboxFileInput[], options?: WriteFilesOptions): Promise<void>;
  /**
   * Workspace mounts known at start become OpenSandbox host volumes at creation (read-only honoured); for those
   * this reports the outcome. Mounting while the sandbox runs fails: volumes are fixed at creation.
   */
  mount(filesystem: WorkspaceFilesystem, mountPath: string): Promise<MountResult>;
  /** Forgets the mount; the volume stays in the running sandbox until it is destroyed. */
  unmount(mountPath: string): Promise<void>;
  /** An unstarted sibling with the same configuration and a new logical id (unless `id` is given). */
  clone(overrides?: SandboxCloneOptions & Partial<OpenSandboxSandboxOptions>): OpenSandboxSandbox;
  /** Background processes (execd PTY sessions): see docs/processes.md. */
  readonly processes: import('./process-manager.js').OpenSandboxProcessManager;
}

/** Metadata key that stores the encoded logical id. */
export declare const LOGICAL_ID_LABEL: 'mastra.ai/sandbox-id';
/** `<16 hex of sha256(id)>-<readable part>`, at most 63 chars of the Kubernetes label charset. */
export declare function encodeLogicalId(id: string): string;

export type OpenSandboxErrorKind = 'option' | 'api' | 'stream' | 'transport' | 'timeout' | 'protocol' | 'cancelled' | 'snapshot' | 'template' | 'unsupported' | 'internal';

export declare class OpenSandboxError extends SandboxError {
  readonly kind?: OpenSandboxErrorKind;
  readonly operation?: string;
  constructor(message: string, code: string, details?: Record<string, unknown>);
}
export declare class OpenSandboxOptionError extends OpenSandboxError {
  readonly option: string;
  constructor(option: string, message: string);
}
export declare class OpenSandboxApiError extends OpenSandboxError {
  /** HTTP status (0 for errors inside a stream). */
  readonly status: number;
  /** The server's message. */
  readonly serverMessage?: string;
  /** X-Request-ID of the response, when present. */
  readonly requestId?: string;
}
export declare class OpenSandboxNotFoundError extends OpenSandboxApiError {}
/** Our sandbox disappeared (deleted or expired); the handle was reset and the next call provisions a new one. */
export declare class OpenSandboxSandboxGoneError extends OpenSandboxNotFoundError {
  readonly sandboxId: string;
}
export declare class OpenSandboxStreamError extends OpenSandboxApiError {}
export declare class OpenSandboxTransportError extends OpenSandboxError {
  readonly attempts: number;
}
export declare class OpenSandboxTimeoutError extends OpenSandboxError {
  readonly timeoutMs?: number;
}
export declare class OpenSandboxProtocolError extends OpenSandboxError {}
export declare class OpenSandboxCancelledError extends OpenSandboxError {}
/** The server lacks an API the call needs (e.g. the Snapshots API before server 0.1.13); code UNSUPPORTED_BY_SERVER. */
export declare class OpenSandboxUnsupportedError extends OpenSandboxError {
  /** What is missing, e.g. 'snapshots'. */
  readonly feature: string;
  /** The first upstream server version that has it, e.g. '0.1.13'. */
  readonly requiredServerVersion: string;
}
/** A template build step failed: which step, its exit code and output. */
export declare class OpenSandboxTemplateBuildError extends OpenSandboxError {
  readonly templateId: string;
  /** 1-based index of the step. */
  readonly step: number;
  readonly description: string;
  readonly exitCode?: number;
  readonly stdout?: string;
  readonly stderr?: string;
}
/** A snapshot capture failed on the server (state 'Failed'). */
export declare class OpenSandboxSnapshotError extends OpenSandboxError {
  readonly snapshotId?: string;
  readonly state?: string;
  /** The snapshot's status.reason (e.g. 'snapshot_runtime_failed'). */
  readonly reason?: string;
  /** The snapshot's status.message. */
  readonly serverMessage?: string;
}

export * from './code-interpreter.js';
export * from './process-manager.js';
export * from './lsp.js';

/** Options of OpenSandboxFilesystem (see docs/filesystem.md). */
export interface OpenSandboxFilesystemOwnOptions extends MastraFilesystemOptions {
  /** Default: the sandbox's workingDirectory ('/workspace'). Absolute, without '$'. */
  basePath?: string;
  /** Default true: paths outside basePath (absolute, '..', symlinks) throw PermissionError. */
  contained?: boolean;
  readOnly?: boolean;
  /** Default 1 GiB: larger reads fail instead of filling memory. */
  maxReadBytes?: number;
  instructions?: string | ((opts: { defaultInstructions: string; requestContext?: unknown }) => string);
}
/** Either share an OpenSandboxSandbox, or give its options (the same logical id attaches to the same remote sandbox). */
export type OpenSandboxFilesystemOptions =
  | (OpenSandboxFilesystemOwnOptions & { sandbox: OpenSandboxSandbox })
  | (OpenSandboxFilesystemOwnOptions & OpenSandboxSandboxOptions & { sandbox?: undefined });

/** A Mastra filesystem whose files live in an OpenSandbox sandbox (execd's files API, I/O in C). */
export declare class OpenSandboxFilesystem extends MastraFilesystem {
  readonly id: string;
  readonly name: 'OpenSandboxFilesystem';
  readonly provider: 'opensandbox';
  readonly readOnly?: boolean;
  status: ProviderStatus;
  constructor(options?: OpenSandboxFilesystemOptions);
  get basePath(): string;
  get contained(): boolean;
  /** The sandbox whose files these are (given, or made from the options). */
  get sandbox(): OpenSandboxSandbox;
  init(): Promise<void>;
  /** Deletes the remote sandbox only when the sandbox made from the options created it (not given, not attached). */
  destroy(): Promise<void>;
  /** metadata: the stored config of openSandboxFilesystemProvider (no secrets). */
  getInfo(): Promise<FilesystemInfo<OpenSandboxFilesystemStoredConfig & Record<string, unknown>>>;
  getInstructions(opts?: { requestContext?: unknown }): string;
  resolveAbsolutePath(path: string): string | undefined;
  readFile(path: string, options?: ReadOptions): Promise<string | Buffer>;
  writeFile(path: string, content: FileContent, options?: WriteOptions): Promise<void>;
  appendFile(path: string, content: FileContent): Promise<void>;
  deleteFile(path: string, options?: RemoveOptions): Promise<void>;
  copyFile(src: string, dest: string, options?: CopyOptions): Promise<void>;
  moveFile(src: string, dest: string, options?: CopyOptions): Promise<void>;
  mkdir(path: string, options?: { recursive?: boolean }): Promise<void>;
  rmdir(path: string, options?: RemoveOptions): Promise<void>;
  readdir(path: string, options?: ListOptions): Promise<FileEntry[]>;
  walk(path: string, options?: WalkOptions): Promise<WalkEntry[]>;
  grep(options: FilesystemGrepOptions): Promise<FilesystemGrepResult[]>;
  exists(path: string): Promise<boolean>;
  stat(path: string): Promise<FileStat>;
  realpath(path: string): Promise<string>;
}

/** Metadata label holding a hash of the workspace mounts a sandbox was created with. */
export declare const MOUNTS_LABEL: 'mastra.ai/mounts';

/** The serializable configuration the Editor stores for an OpenSandbox sandbox (getInfo().metadata). No secrets. */
export interface OpenSandboxStoredConfig {
  /** Logical id; generated when omitted. */
  id?: string;
  /** Default '127.0.0.1:8080' (or env OPEN_SANDBOX_DOMAIN). */
  domain?: string;
  /** Default 'http'. */
  protocol?: 'http' | 'https';
  sandboxId?: string;
  /** Default 'ubuntu:22.04'. Registry credentials cannot be stored. */
  image?: string | { uri: string };
  /** Default ['tail', '-f', '/dev/null']. */
  entrypoint?: string[];
  /** Default 600; null = no expiry. */
  timeoutSeconds?: number | null;
  idleTimeoutMinutes?: number;
  /** Default { cpu: '1', memory: '2Gi' }. */
  resources?: Record<string, string>;
  env?: Record<string, string>;
  metadata?: Record<string, string>;
  volumes?: OpenSandboxVolume[];
  networkPolicy?: OpenSandboxNetworkPolicy;
  /** Default false. */
  useServerProxy?: boolean;
  /** Default 30000. */
  requestTimeoutMs?: number;
  /** Default 30000. */
  readyTimeoutMs?: number;
  /** Default 180000. */
  createTimeoutMs?: number;
  /** Default '/workspace'. */
  workingDirectory?: string;
  instructions?: string;
  /** Default: `id`. */
  checkpointName?: string | null;
  seedCheckpointName?: string;
  snapshotId?: string;
  /** Default 3. */
  keepCheckpoints?: number;
  /** Default 300000. */
  snapshotTimeoutMs?: number;
  /** Template definition; ephemeral env values are never stored. */
  template?: OpenSandboxTemplateDefinition;
}

/** JSON Schema (draft-07) of OpenSandboxStoredConfig, with defaults and descriptions. */
export declare const openSandboxConfigSchema: Readonly<Record<string, unknown>>;
/**
 * Validates a stored config: unknown fields, wrong types and stored secrets (apiKey, execdAccessToken,
 * image.auth, ossfs keys) throw OpenSandboxOptionError naming the field. Returns a copy.
 */
export declare function validateStoredConfig(config: unknown): OpenSandboxStoredConfig;
/**
 * The Mastra Editor provider (id 'opensandbox'). createSandbox validates the stored config before any network
 * call and takes OPEN_SANDBOX_API_KEY / OPEN_SANDBOX_EXECD_ACCESS_TOKEN from the environment.
 */
export declare const openSandboxProvider: SandboxProvider<OpenSandboxStoredConfig> & {
  readonly id: 'opensandbox';
  createSandbox(config: OpenSandboxStoredConfig): OpenSandboxSandbox;
};
/** The providers of this package keyed by id: `new MastraEditor({ sandboxes: sandboxProviders })`. */
export declare const sandboxProviders: { readonly opensandbox: typeof openSandboxProvider };

/** The serializable configuration the Editor stores for an OpenSandboxFilesystem (getInfo().metadata). No secrets. */
export interface OpenSandboxFilesystemStoredConfig {
  /** The sandbox whose files these are (the same logical id attaches to the same remote sandbox). */
  sandbox?: OpenSandboxStoredConfig;
  basePath?: string;
  /** Default true. */
  contained?: boolean;
  /** Default false. */
  readOnly?: boolean;
  /** Default 1 GiB. */
  maxReadBytes?: number;
  instructions?: string;
}
/** JSON Schema (draft-07) of OpenSandboxFilesystemStoredConfig. */
export declare const openSandboxFilesystemConfigSchema: Readonly<Record<string, unknown>>;
/** Validates a stored filesystem config like validateStoredConfig (fields inside `sandbox` named `sandbox.<field>`). */
export declare function validateStoredFilesystemConfig(config: unknown): OpenSandboxFilesystemStoredConfig;
/**
 * The Editor filesystem provider (id 'opensandbox'). A stored workspace with both an opensandbox sandbox and an
 * opensandbox filesystem of the same stored sandbox config hydrates into one shared OpenSandboxSandbox.
 */
export declare const openSandboxFilesystemProvider: FilesystemProvider<OpenSandboxFilesystemStoredConfig> & {
  readonly id: 'opensandbox';
  createFilesystem(config: OpenSandboxFilesystemStoredConfig): OpenSandboxFilesystem;
};
/** `new MastraEditor({ filesystems: filesystemProviders })`. */
export declare const filesystemProviders: { readonly opensandbox: typeof openSandboxFilesystemProvider };
/** Both kinds in one registry object: `new MastraEditor({ ...openSandboxProviders })`. */
export declare const openSandboxProviders: {
  readonly sandboxes: typeof sandboxProviders;
  readonly filesystems: typeof filesystemProviders;
};
