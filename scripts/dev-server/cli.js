#!/usr/bin/env node
// Command line of the local OpenSandbox-compatible server:
//   npm run dev-server -- --port 8080 --api-key KEY --allowed-host-path /data --isolation none
// Prints the domain, serves until SIGINT/SIGTERM, then deletes every sandbox and exits.
import { parseArgs } from 'node:util';
import { startServer } from './index.js';

const USAGE = `usage: dev-server [--port N] [--host H] [--api-key KEY] [--allowed-host-path DIR]... [--isolation bwrap|none]
                  [--data-dir DIR] [--execd-access-token TOK] [--execd-endpoint direct|proxy] [--endpoint-headers]
                  [--max-sandbox-timeout-seconds N] [--max-snapshot-bytes N] [--command-tail-ms N] [--pty-exit-race] [--signal-forwarding] [--pty-close-linger] [--quiet]
  The API key may also come from OPENSANDBOX_SERVER_API_KEY.`;

let args;
try {
  args = parseArgs({
    options: {
      port: { type: 'string', default: '8080' },
      host: { type: 'string', default: '127.0.0.1' },
      'api-key': { type: 'string' },
      'allowed-host-path': { type: 'string', multiple: true, default: [] },
      isolation: { type: 'string', default: 'bwrap' },
      'data-dir': { type: 'string' },
      'execd-access-token': { type: 'string' },
      'execd-endpoint': { type: 'string', default: 'direct' },
      'endpoint-headers': { type: 'boolean', default: false },
      'max-sandbox-timeout-seconds': { type: 'string' },
      'max-snapshot-bytes': { type: 'string' },
      'command-tail-ms': { type: 'string', default: '1000' },
      'pty-exit-race': { type: 'boolean', default: false },
      'signal-forwarding': { type: 'boolean', default: false },
      'pty-close-linger': { type: 'boolean', default: false },
      quiet: { type: 'boolean', default: false },
      help: { type: 'boolean', default: false },
    },
  }).values;
} catch (err) {
  console.error(`${err.message}\n${USAGE}`);
  process.exit(2);
}
if (args.help) {
  console.log(USAGE);
  process.exit(0);
}

function int(name, value) {
  if (value === undefined) return undefined;
  if (!/^\d+$/.test(value)) {
    console.error(`--${name} must be a non-negative integer, got ${JSON.stringify(value)}`);
    process.exit(2);
  }
  return Number(value);
}

let server;
try {
  server = await startServer({
    port: int('port', args.port),
    host: args.host,
    apiKey: args['api-key'] ?? process.env.OPENSANDBOX_SERVER_API_KEY,
    allowedHostPaths: args['allowed-host-path'],
    isolation: args.isolation,
    dataDir: args['data-dir'],
    execdAccessToken: args['execd-access-token'],
    execdEndpoint: args['execd-endpoint'],
    endpointHeaders: args['endpoint-headers'],
    maxSandboxTimeoutSeconds: int('max-sandbox-timeout-seconds', args['max-sandbox-timeout-seconds']),
    maxSnapshotBytes: int('max-snapshot-bytes', args['max-snapshot-bytes']),
    commandTailMs: int('command-tail-ms', args['command-tail-ms']),
    ptyExitRace: args['pty-exit-race'],
    signalForwarding: args['signal-forwarding'],
    ptyCloseLinger: args['pty-close-linger'],
    log: args.quiet ? false : (line) => console.log(`${new Date().toISOString()} ${line}`),
  });
} catch (err) {
  console.error(`dev-server: ${err.message}`);
  process.exit(1);
}
console.log(server.domain);

let stopping = false;
async function stop(sig) {
  if (stopping) return;
  stopping = true;
  console.log(`dev-server: ${sig}, deleting sandboxes`);
  await server.close();
  process.exit(0);
}
process.on('SIGINT', () => stop('SIGINT'));
process.on('SIGTERM', () => stop('SIGTERM'));
