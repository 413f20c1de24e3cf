// Language servers for Workspace({ lsp }) inside the sandbox (lib/lsp.js; docs/integration.md).
import type { CustomLSPServer } from '@mastra/core/workspace';

/** The Node program run as `node -e '<this>' -- <server argv…>`: passes stdin/stdout through, except that the first
 * message's `initialize` processId becomes the wrapper's own pid inside the sandbox. Contains no single quote. */
export declare const PARENT_WRAPPER: string;

/** `<node> -e '<PARENT_WRAPPER>' -- <command>`, a command line for the sandbox's shell. */
export declare function withSandboxParent(command: string, node?: string): string;

export interface OpenSandboxLspServersOptions {
  /** typescript-language-server command inside the sandbox (started with --stdio under the wrapper); false: none. Default 'typescript-language-server'. */
  typescript?: string | false;
  /** typescript's lib/tsserver.js inside the sandbox; default: the server finds typescript itself. */
  tsserverPath?: string;
  /** pylsp command inside the sandbox (no wrapper); false: none. Default 'pylsp'. */
  python?: string | false;
  /** the Node the wrapper runs on, inside the sandbox. Default 'node'. */
  node?: string;
}

/** Mastra `lsp.servers` definitions (ids 'typescript' and 'python', replacing the built-in ones) that run inside the sandbox. */
export declare function openSandboxLspServers(options?: OpenSandboxLspServersOptions): Record<string, CustomLSPServer>;
