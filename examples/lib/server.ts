// Shared by the examples: the OpenSandbox server to use. OPEN_SANDBOX_DOMAIN (+ OPEN_SANDBOX_API_KEY) selects a
// real one; without it the package's local OpenSandbox-compatible server is started on a random loopback port.
import { startServer } from 'mastra-opensandbox/dev-server';

process.env.MASTRA_TELEMETRY_DISABLED ??= '1';

export interface ServerChoice {
  domain: string;
  close(): Promise<void>;
}

/** allowedHostPaths: host directories the local server may mount (ignored for a real server). */
export async function openSandboxServer(allowedHostPaths: string[] = []): Promise<ServerChoice> {
  const domain = process.env.OPEN_SANDBOX_DOMAIN;
  if (domain) return { domain, close: async () => {} };
  const server = await startServer({ port: 0, allowedHostPaths });
  console.log(`(local OpenSandbox-compatible server on ${server.domain}; set OPEN_SANDBOX_DOMAIN for a real one)`);
  return { domain: server.domain, close: () => server.close() };
}
