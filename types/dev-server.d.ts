// Type declarations of the local OpenSandbox-compatible server (`mastra-opensandbox/dev-server`);
// docs/dev-server.md describes every option.

export interface DevServerOptions {
  /** TCP port of the lifecycle API; 0 (default) picks a free one. */
  port?: number;
  /** Bind address, also the host part of `domain`. Default '127.0.0.1'. */
  host?: string;
  /** When set, every lifecycle request needs OPEN-SANDBOX-API-KEY (401 MISSING_API_KEY / INVALID_API_KEY). */
  apiKey?: string;
  /** Absolute host directories under which `host` volumes may be mounted; empty (default) rejects every host volume. */
  allowedHostPaths?: string[];
  /** 'bwrap' (default): bubblewrap-isolated sandboxes; 'none': plain child processes. */
  isolation?: 'bwrap' | 'none';
  /**
   * Where sandbox directories, named volumes and snapshots live. Default: a fresh temporary directory, removed by
   * close(). With a dataDir given, close() removes only the sandboxes: snapshots survive a restart on it.
   */
  dataDir?: string;
  /**
   * When set, execd requests need X-EXECD-ACCESS-TOKEN. Independently, every execd endpoint carries the sandbox's
   * own token as the endpoint header OpenSandbox-Secure-Access, which every execd request must send back.
   */
  execdAccessToken?: string;
  /** 'direct' (default): execd endpoint `127.0.0.1:<port>`; 'proxy': `127.0.0.1:<port>/proxy/44772` (a path prefix). */
  execdEndpoint?: 'direct' | 'proxy';
  /** Endpoints carry an `OpenSandbox-Ingress-To` header that every execd request must send back. Default false. */
  endpointHeaders?: boolean;
  /** Larger sandbox `timeout`s are rejected (400 SANDBOX::INVALID_TIMEOUT). */
  maxSandboxTimeoutSeconds?: number;
  /**
   * Total bytes the snapshots' data may occupy on disk; a capture that would exceed it ends Failed (reason
   * snapshot_runtime_failed). Default: no limit.
   */
  maxSnapshotBytes?: number;
  /** Bytes the unpacked layers of images may occupy; images no sandbox uses are evicted least recently used first. Default: no limit. */
  maxImageBytes?: number;
  /** Registries (`host[:port]`) pulled from over plain HTTP besides loopback ones, as Docker's daemon names them. */
  insecureRegistries?: string[];
  /** How long execd keeps a /command stream open after its final event. Default 1000 (like the real execd). */
  commandTailMs?: number;
  /** Reproduce the PTY API's exit race. Default false. */
  ptyExitRace?: boolean;
  /** Relay signals to the foreground command like upstream execd, SIGPIPE of writes to closed /command streams included. Default false. */
  signalForwarding?: boolean;
  /** Like the real execd, answer a PTY client's close frame but never close the TCP connection. Default false. */
  ptyCloseLinger?: boolean;
  /** A line logger, true (stderr) or false (default: silent). Never receives API keys or tokens. */
  log?: ((line: string) => void) | boolean;
  /**
   * Run sandboxes even where the confinement (user namespace, no capabilities, seccomp) cannot be created; warns on
   * every start. Default false: startServer() rejects, saying what is missing. Also: without slirp4netns, sandboxes
   * given network (networkPolicy defaultAction 'allow') share the host's network namespace (warned at every start)
   * instead of being refused with 400. See docs/dev-server-security.md.
   */
  insecure?: boolean;
  /**
   * When the server runs as root: the first host uid of sandboxes and their shared gid. Each sandbox runs as a host
   * uid of its own (root inside maps to it), from a block of 65536 uids the server claims (up to 2147483647).
   * Default 1000000000.
   */
  sandboxUid?: number;
  /**
   * A delegated cgroup v2 directory (memory and pids in its cgroup.controllers, writable) under which sandbox cgroups
   * are made, so a server that is not root enforces resourceLimits cpu/memory/pids. startServer() rejects an unusable
   * one. Default: as root, /sys/fs/cgroup (v2) or the cgroup v1 hierarchies.
   */
  cgroupParent?: string;
  /** pids.max of a sandbox that asks for no `pids`, and the largest `pids` a create may ask for; 0: no cap. Default 4096. */
  maxPids?: number;
  /**
   * Memory bound of a sandbox without resourceLimits.memory (a quantity like '2Gi', or bytes; >= 64Mi; 0: none). Needs
   * cgroups (root or cgroupParent). Default '2Gi' (the client's default resources.memory).
   */
  defaultMemory?: string | number;
  /** Disk bound of a sandbox without resourceLimits['ephemeral-storage'] (a quantity like '10Gi', or bytes; >= 8Mi); root only. Default '10Gi'. */
  diskLimit?: string | number;
  /**
   * Accept resourceLimits the server cannot enforce (no cgroups, no disk bound) instead of answering 400
   * SANDBOX::RESOURCE_LIMITS_NOT_ENFORCEABLE; warns on every start. `insecure` implies it. Default false.
   */
  unenforcedLimits?: boolean;
  /**
   * Answer like that upstream runtime (docs/dev-server.md, "Emulating an upstream deployment"): its
   * lastTransitionAt, pause answers and states, slow synchronous creates, error codes and bodies. Default: the local
   * server's own behaviour.
   */
  emulate?: 'docker' | 'kubernetes';
  /** Emulated upstream server version 'X.Y.Z' (e.g. no Snapshots API before '0.1.13'). Default '0.1.14'. */
  serverVersion?: string;
  /** With emulate 'kubernetes': upstream's `[kubernetes].workload_provider`. Default 'batchsandbox'. */
  workloadProvider?: 'batchsandbox' | 'agent-sandbox';
  /**
   * What a create without networkPolicy gets: 'allow' (default; network through slirp4netns, as upstream gives full
   * network) or 'deny' (none). Without slirp4netns, 'allow' gives no network and the server warns at start.
   */
  defaultNetworkPolicy?: 'allow' | 'deny';
  /**
   * Where the resolver of a sandbox with egress rules forwards the names they allow: an IP address with an optional
   * port ('10.0.0.2', '127.0.0.1:5353'). Default: the first nameserver of /etc/resolv.conf.
   */
  dnsUpstream?: string;
  /** Durations of the emulation in milliseconds (defaults per runtime, see docs/dev-server.md); tests shorten them. */
  emulateDelays?: { create?: number; ready?: number; endpoint?: number; pause?: number; resume?: number; snapshot?: number };
}

export interface DevServer {
  /** `host:port`, usable as the `domain` option of OpenSandboxSandbox. */
  readonly domain: string;
  /** `http://host:port`. */
  readonly baseUrl: string;
  readonly port: number;
  /** Stops the server and deletes every sandbox it runs (idempotent). */
  close(): Promise<void>;
}

export declare function startServer(options?: DevServerOptions): Promise<DevServer>;
