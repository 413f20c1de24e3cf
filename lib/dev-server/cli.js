#!/usr/bin/env node
// Command line of the local OpenSandbox-compatible server:
//   npm run dev-server -- --port 8080 --api-key-file FILE --allowed-host-path /data --isolation none
// Prints the domain, serves until SIGINT/SIGTERM, then deletes every sandbox and exits. Without an API key it makes
// a random one, writes it to a 0600 file and prints how to use it (--no-api-key: an open server, any local user and
// program can drive it). Secrets come from the environment or a file rather than argv (visible in `ps`).
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { startServer } from './index.js';

const USAGE = `usage: dev-server [--port N] [--host H] [--api-key-file FILE | --no-api-key] [--allowed-host-path DIR]...
                  [--isolation bwrap|none] [--insecure] [--data-dir DIR] [--execd-access-token-file FILE]
                  [--execd-endpoint direct|proxy] [--endpoint-headers] [--max-sandbox-timeout-seconds N]
                  [--max-snapshot-bytes N] [--max-image-bytes N] [--insecure-registry HOST[:PORT]]... [--command-tail-ms N] [--pty-exit-race] [--signal-forwarding]
                  [--pty-close-linger] [--cgroup-parent DIR] [--max-pids N] [--disk-limit Q] [--default-memory Q]
                  [--unenforced-limits] [--emulate docker|kubernetes] [--server-version X.Y.Z]
                  [--workload-provider batchsandbox|agent-sandbox] [--emulate-delay NAME=MS]...
                  [--default-network-policy allow|deny] [--dns-upstream IP[:PORT]] [--images host|run]
                  [--quiet]
  The API key comes from OPENSANDBOX_SERVER_API_KEY or --api-key-file (or --api-key KEY, visible in ps); without
  one a random key is generated and written to a file only you can read. The execd access token comes from
  OPENSANDBOX_EXECD_ACCESS_TOKEN or --execd-access-token-file (or --execd-access-token TOK).
  --insecure runs sandboxes without user namespace, capability drop and seccomp when the machine cannot give them,
  and gives sandboxes that ask for network the host's network when slirp4netns is missing (otherwise: 400).
  resourceLimits cpu/memory/pids need cgroups (root, or --cgroup-parent: a delegated cgroup v2 directory) and
  ephemeral-storage needs root; otherwise creates asking for them get 400, unless --unenforced-limits.
  A sandbox created without networkPolicy gets network through slirp4netns (as upstream: full network, but never this
  machine's addresses nor the clouds' metadata service); --default-network-policy deny gives such sandboxes none.
  Egress rules (networkPolicy.egress) are enforced through a resolver of the server's, which forwards allowed names
  to --dns-upstream (default: the first nameserver of /etc/resolv.conf).
  --emulate and --server-version answer like that upstream deployment (docs/dev-server.md); --emulate-delay sets one
  of its durations (create, ready, endpoint, pause, resume, snapshot) in milliseconds.
  --images run: a create's image is pulled (progress in the log) and the sandbox runs on its layers; host (default):
  every sandbox runs the host's root, read-only, whatever the image (the clients' default ubuntu:22.04 would otherwise
  be pulled from Docker Hub).`;

let args;
try {
  args = parseArgs({
    options: {
      port: { type: 'string', default: '8080' },
      host: { type: 'string', default: '127.0.0.1' },
      'api-key': { type: 'string' },
      'api-key-file': { type: 'string' },
      'no-api-key': { type: 'boolean', default: false },
      'execd-access-token-file': { type: 'string' },
      insecure: { type: 'boolean', default: false },
      'allowed-host-path': { type: 'string', multiple: true, default: [] },
      isolation: { type: 'string', default: 'bwrap' },
      'data-dir': { type: 'string' },
      'execd-access-token': { type: 'string' },
      'execd-endpoint': { type: 'string', default: 'direct' },
      'endpoint-headers': { type: 'boolean', default: false },
      'max-sandbox-timeout-seconds': { type: 'string' },
      'max-snapshot-bytes': { type: 'string' },
      'max-image-bytes': { type: 'string' },
      'insecure-registry': { type: 'string', multiple: true, default: [] },
      'command-tail-ms': { type: 'string', default: '1000' },
      'pty-exit-race': { type: 'boolean', default: false },
      'signal-forwarding': { type: 'boolean', default: false },
      'pty-close-linger': { type: 'boolean', default: false },
      'cgroup-parent': { type: 'string' },
      'max-pids': { type: 'string' },
      'disk-limit': { type: 'string' },
      'default-memory': { type: 'string' },
      'unenforced-limits': { type: 'boolean', default: false },
      emulate: { type: 'string' },
      'default-network-policy': { type: 'string', default: 'allow' },
      'dns-upstream': { type: 'string' },
      images: { type: 'string', default: 'host' },
      'server-version': { type: 'string' },
      'workload-provider': { type: 'string' },
      'emulate-delay': { type: 'string', multiple: true, default: [] },
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

/** A secret from (in order) its argv value, its file, its environment variable; undefined when none. */
function secret(name, env) {
  if (args[name] !== undefined) return args[name];
  const file = args[`${name}-file`];
  if (file !== undefined) {
    try {
      const text = fs.readFileSync(file, 'utf8').trim();
      if (text) return text;
    } catch (err) {
      console.error(`--${name}-file: ${err.message}`);
      process.exit(2);
    }
    console.error(`--${name}-file: ${file} is empty`);
    process.exit(2);
  }
  return process.env[env] || undefined;
}

let apiKey = secret('api-key', 'OPENSANDBOX_SERVER_API_KEY');
if (apiKey !== undefined && args['no-api-key']) {
  console.error('--no-api-key contradicts the API key given');
  process.exit(2);
}
let keyDir = null;
if (apiKey === undefined && !args['no-api-key']) {
  apiKey = crypto.randomBytes(24).toString('base64url');
  keyDir = fs.mkdtempSync(path.join(os.tmpdir(), 'osb-key-'));
  fs.writeFileSync(path.join(keyDir, 'api-key'), `${apiKey}\n`, { mode: 0o600 });
}

/** --emulate-delay NAME=MS (repeatable) → emulateDelays, or undefined. */
function delays(list) {
  if (list.length === 0) return undefined;
  const out = {};
  for (const item of list) {
    const m = /^([a-z]+)=(\d+)$/.exec(item);
    if (!m) {
      console.error(`--emulate-delay must be NAME=MILLISECONDS (e.g. pause=2000), got ${JSON.stringify(item)}`);
      process.exit(2);
    }
    out[m[1]] = Number(m[2]);
  }
  return out;
}

let server;
try {
  server = await startServer({
    port: int('port', args.port),
    host: args.host,
    apiKey,
    insecure: args.insecure,
    allowedHostPaths: args['allowed-host-path'],
    isolation: args.isolation,
    dataDir: args['data-dir'],
    execdAccessToken: secret('execd-access-token', 'OPENSANDBOX_EXECD_ACCESS_TOKEN'),
    execdEndpoint: args['execd-endpoint'],
    endpointHeaders: args['endpoint-headers'],
    maxSandboxTimeoutSeconds: int('max-sandbox-timeout-seconds', args['max-sandbox-timeout-seconds']),
    maxSnapshotBytes: int('max-snapshot-bytes', args['max-snapshot-bytes']),
    maxImageBytes: int('max-image-bytes', args['max-image-bytes']),
    insecureRegistries: args['insecure-registry'],
    commandTailMs: int('command-tail-ms', args['command-tail-ms']),
    ptyExitRace: args['pty-exit-race'],
    signalForwarding: args['signal-forwarding'],
    ptyCloseLinger: args['pty-close-linger'],
    cgroupParent: args['cgroup-parent'],
    maxPids: int('max-pids', args['max-pids']),
    diskLimit: args['disk-limit'],
    defaultMemory: args['default-memory'],
    unenforcedLimits: args['unenforced-limits'],
    emulate: args.emulate,
    defaultNetworkPolicy: args['default-network-policy'],
    dnsUpstream: args['dns-upstream'],
    images: args.images,
    serverVersion: args['server-version'],
    workloadProvider: args['workload-provider'],
    emulateDelays: delays(args['emulate-delay']),
    log: args.quiet ? false : (line) => console.log(`${new Date().toISOString()} ${line}`),
  });
} catch (err) {
  console.error(`dev-server: ${err.message}`);
  if (keyDir) fs.rmSync(keyDir, { recursive: true, force: true });
  process.exit(1);
}
console.log(server.domain);
if (keyDir) {
  const file = path.join(keyDir, 'api-key');
  console.log(`dev-server: API key generated in ${file} (readable by you only); clients send it as OPEN-SANDBOX-API-KEY:`);
  console.log(`  export OPEN_SANDBOX_API_KEY="$(cat ${file})"   # or start with --api-key-file FILE, or --no-api-key`);
} else if (args['no-api-key']) {
  console.log('dev-server: no API key (--no-api-key): any local user or program can drive this server');
}

let stopping = false;
async function stop(sig) {
  if (stopping) return;
  stopping = true;
  console.log(`dev-server: ${sig}, deleting sandboxes`);
  await server.close();
  if (keyDir) fs.rmSync(keyDir, { recursive: true, force: true });
  process.exit(0);
}
process.on('SIGINT', () => stop('SIGINT'));
process.on('SIGTERM', () => stop('SIGTERM'));
