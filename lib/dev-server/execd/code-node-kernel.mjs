// JavaScript kernel of the local execd's code interpreter: one long-lived Node process per code context.
// Cells run in one persistent `vm` context (REPL-like: the completion value of the cell is its result,
// a returned Promise is awaited). Same pipe protocol as code-python-kernel.py (see code-kernel.js):
// JSON-line requests/replies on fd 3, user output on fds 1/2 followed by the cell's marker.
// SIGINT interrupts a running cell (synchronous code via vm's breakOnSigint, a pending Promise by rejection).
import net from 'node:net';
import vm from 'node:vm';
import util from 'node:util';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const KERNEL_FILE = fileURLToPath(import.meta.url);
const control = new net.Socket({ fd: 3, readable: true, writable: true });

const sandbox = {
  console, process, Buffer, URL, URLSearchParams, TextEncoder, TextDecoder, AbortController, AbortSignal,
  setTimeout, clearTimeout, setInterval, clearInterval, setImmediate, clearImmediate, queueMicrotask,
  structuredClone, fetch, atob, btoa, performance,
  require: createRequire(path.join(process.cwd(), 'cell.js')),
};
const context = vm.createContext(sandbox);
sandbox.global = vm.runInContext('globalThis', context);

let cellNumber = 0;
let interruptWait = null; // rejects the awaited Promise of the running cell on SIGINT
process.on('SIGINT', () => interruptWait?.(new InterruptError()));

// execd gone (killed outside a sandbox): do not outlive it.
const parent = process.ppid;
setInterval(() => { if (process.ppid !== parent) process.exit(1); }, 1000).unref();

class InterruptError extends Error {
  constructor() {
    super('Script execution interrupted.');
    this.name = 'KeyboardInterrupt';
  }
}

function send(msg) {
  control.write(JSON.stringify(msg) + '\n');
}

function formatError(err) {
  if (err instanceof Error || (err && typeof err === 'object' && 'stack' in err)) {
    const interrupted = err.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED' || err.name === 'KeyboardInterrupt';
    const stack = String(err.stack ?? `${err.name}: ${err.message}`).split('\n')
      .filter((l) => !l.includes(KERNEL_FILE) && !/\(node:/.test(l) && !/^\s+at node:/.test(l));
    return {
      type: 'error',
      ename: interrupted ? 'KeyboardInterrupt' : String(err.name ?? 'Error'),
      evalue: String(err.message ?? ''),
      traceback: stack,
    };
  }
  return { type: 'error', ename: 'Error', evalue: util.inspect(err), traceback: [`Uncaught ${util.inspect(err)}`] };
}

async function execute(code) {
  cellNumber += 1;
  const script = new vm.Script(code, { filename: `<cell-${cellNumber}>` });
  let value = script.runInContext(context, { breakOnSigint: true, displayErrors: false });
  if (value && typeof value.then === 'function') {
    value = await new Promise((resolve, reject) => {
      interruptWait = reject;
      value.then(resolve, reject);
    }).finally(() => { interruptWait = null; });
  }
  if (value === undefined) return [];
  sandbox._ = value;
  return [{ type: 'result', data: { 'text/plain': util.inspect(value) } }];
}

function writeMarker(stream, marker) {
  return new Promise((resolve) => stream.write(marker, () => resolve()));
}

async function handle(request) {
  let replies;
  try {
    replies = await execute(request.code);
  } catch (err) {
    replies = [formatError(err)];
  }
  await writeMarker(process.stdout, request.marker);
  await writeMarker(process.stderr, request.marker);
  for (const r of replies) send(r);
  send({ type: 'done' });
}

// Requests are handled one at a time, in order.
let pending = '';
let chain = Promise.resolve();
control.setEncoding('utf8');
control.on('data', (chunk) => {
  pending += chunk;
  let nl;
  while ((nl = pending.indexOf('\n')) >= 0) {
    const line = pending.slice(0, nl);
    pending = pending.slice(nl + 1);
    if (line.trim()) chain = chain.then(() => handle(JSON.parse(line)));
  }
});
control.on('end', () => process.exit(0));
control.on('error', () => process.exit(1));
process.on('uncaughtException', (err) => {
  // An error thrown later by a timer or callback of an earlier cell: report on stderr, keep the kernel alive.
  process.stderr.write(`Uncaught ${util.inspect(err)}\n`);
});
process.on('unhandledRejection', (err) => {
  process.stderr.write(`Unhandled rejection ${util.inspect(err)}\n`);
});
send({ type: 'ready' });
