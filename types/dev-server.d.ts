// Type declarations of the local OpenSandbox-compatible server (`mastra-opensandbox/dev-server`).

export interface DevServerOptions {
  /** TCP port; 0 picks a free one. */
  port?: number;
  /** Bind address. Default '127.0.0.1'. */
  host?: string;
  /** When set, every lifecycle request must carry it as OPEN-SANDBOX-API-KEY (else 401). */
  apiKey?: string;
  /** Host path prefixes allowed for `host` volumes; empty rejects every host mount. */
  allowedHostPaths?: string[];
  /** How sandboxes are isolated: bubblewrap, or plain child processes. */
  isolation?: 'bwrap' | 'none';
  /** Where sandbox directories live. Default: a fresh temporary directory. */
  dataDir?: string;
  /** When set, execd requires it as X-EXECD-ACCESS-TOKEN. */
  execdAccessToken?: string;
  /** Shape of the execd endpoint the server hands out ('proxy' adds a path prefix). */
  execdEndpoint?: string;
  /** When true, endpoints carry extra routing headers that execd requests must send back. */
  endpointHeaders?: boolean;
  /** Upper bound for a sandbox's `timeout`. */
  maxSandboxTimeoutSeconds?: number;
  /** How long execd keeps a /command stream open after the final event (real execd: 1000). */
  commandTailMs?: number;
  /** Reproduce execd's PTY exit race (output of a fast-exiting process sometimes missing). */
  ptyExitRace?: boolean;
  /** Log function (or false for silence). */
  log?: ((line: string) => void) | boolean;
}

export interface DevServer {
  /** `host:port`, usable as the `domain` option. */
  domain: string;
  /** `http://host:port`. */
  baseUrl: string;
  port: number;
  /** Stops the server and deletes every sandbox it runs. */
  close(): Promise<void>;
}

export declare function startServer(options?: DevServerOptions): Promise<DevServer>;
