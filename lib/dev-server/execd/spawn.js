// How execd starts processes: spawn(file, args, options) returns a ChildProcess-like object (the parts execd uses:
// pid, stdin/stdout/stderr, stdio[], kill(), exitCode/signalCode, events 'spawn', 'exit', 'close', 'error') started
// by the native addon (src/core/spawn.c: clone(CLONE_VM|CLONE_VFORK), exits through pidfds) instead of libuv's
// fork, which copies execd's page tables (several ms per process). The addon is the file the server chose
// (--native-addon, runner.js), loaded at the first spawn. node:child_process.spawn (same object shape and events) is
// used when no addon was named or it does not load, when the kernel has no pidfd_open (Linux < 5.3), and for
// options the native path does not take (uid/gid, stdio entries other than 'pipe', 'ignore' or a net.Socket).
import { spawn as nodeSpawn } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { createRequire } from 'node:module';
import net from 'node:net';
import os from 'node:os';
import util from 'node:util';

const STDIO_NULL = -1;
const STDIO_PAIR = -2;
/** The spawn errors Node reports through an 'error' event (anything else throws, like child_process.spawn). */
const ASYNC_ERRORS = new Set(['EACCES', 'EAGAIN', 'EMFILE', 'ENFILE', 'ENOENT']);

const SIGNAL_NAMES = new Map();
for (const [name, n] of Object.entries(os.constants.signals)) if (!SIGNAL_NAMES.has(n)) SIGNAL_NAMES.set(n, name);

let addonPath = null;
let native; // undefined: not tried yet; null: not available (fallbackReason says why); else the addon
let fallbackReason = 'no native addon named (--native-addon)';
const children = new Map(); // pid -> NativeChild, until its exit

/** Names the addon file to load at the first spawn (execd's --native-addon). */
export function useNativeAddon(file) {
  addonPath = file || null;
  native = undefined;
  if (!addonPath) fallbackReason = 'no native addon named (--native-addon)';
}

/** { native: boolean, reason?: string }: which path spawn() takes (after the first spawn; for tests and logs). */
export function spawnPath() {
  return native ? { native: true } : { native: false, reason: fallbackReason };
}

function disable(reason) {
  native = null;
  fallbackReason = reason;
  process.stderr.write(`execd: processes start through node:child_process: ${reason}\n`);
}

function addon() {
  if (native !== undefined) return native;
  if (!addonPath) return (native = null);
  try {
    const b = createRequire(import.meta.url)(addonPath);
    if (typeof b.spawn !== 'function') disable(`${addonPath} has no spawn()`);
    else native = b;
  } catch (err) {
    disable(`cannot load ${addonPath}: ${err.message}`);
  }
  return native;
}

function onExit(pid, code, signo) {
  const c = children.get(pid);
  if (!c) return;
  children.delete(pid);
  c._exited(signo ? null : code, signo ? SIGNAL_NAMES.get(signo) ?? `SIG${signo}` : null);
}

/** The native stdio spec of options.stdio, or null when the native path cannot honour it. */
function stdioSpec(stdio) {
  const list = stdio === undefined ? ['pipe', 'pipe', 'pipe'] : typeof stdio === 'string' ? [stdio, stdio, stdio] : stdio;
  if (!Array.isArray(list) || list.length > 8) return null;
  const spec = [];
  for (const [i, s] of list.entries()) {
    if (s === 'pipe' || ((s === undefined || s === null) && i < 3)) spec.push(STDIO_PAIR); // Node: 'ignore' from 3 on
    else if (s === 'ignore') spec.push(STDIO_NULL);
    else if (s instanceof net.Socket && Number.isInteger(s._handle?.fd) && s._handle.fd >= 0) spec.push(s._handle.fd);
    else return null;
  }
  return spec;
}

function errnoError(errno, syscall, file, args) {
  const code = util.getSystemErrorName(-errno);
  const err = new Error(`${syscall} ${code}`);
  err.errno = -errno;
  err.code = code;
  err.syscall = syscall;
  if (file !== undefined) {
    err.path = file;
    err.spawnargs = args;
  }
  return err;
}

/** node:child_process.spawn's contract for the options execd uses: cwd, env, detached, stdio, uid, gid. */
export function spawn(file, args = [], options = {}) {
  const spec = options.uid == null && options.gid == null ? stdioSpec(options.stdio) : null;
  const b = spec && addon();
  if (!b) return nodeSpawn(file, args, options);
  const envObj = options.env ?? process.env;
  const env = [];
  for (const k of Object.keys(envObj)) if (envObj[k] !== undefined) env.push(`${k}=${envObj[k]}`);
  let r;
  try {
    r = b.spawn(String(file), [String(options.argv0 ?? file), ...args.map(String)], env, options.cwd ?? null, Boolean(options.detached), spec, onExit);
  } catch (err) {
    if (err.code === 'SPAWN_UNSUPPORTED') {
      disable(err.message);
      return nodeSpawn(file, args, options);
    }
    if (typeof err.errno !== 'number') throw err;
    const e = errnoError(err.errno, 'spawn', undefined, undefined);
    if (!ASYNC_ERRORS.has(e.code)) throw e;
    return new NativeChild(file, args, spec, null, errnoError(err.errno, `spawn ${file}`, file, args));
  }
  const child = new NativeChild(file, args, spec, r, null);
  children.set(r.pid, child);
  return child;
}

/** The ChildProcess-like object of a natively started process (or of one that failed to start: startError). */
class NativeChild extends EventEmitter {
  constructor(file, args, spec, started, startError) {
    super();
    this.spawnfile = file;
    this.spawnargs = [file, ...args];
    this.pid = started ? started.pid : undefined;
    this.exitCode = null;
    this.signalCode = null;
    this.killed = false;
    this._closesNeeded = 1;
    this._closesGot = 0;
    this.stdio = spec.map((s, i) => {
      if (s !== STDIO_PAIR) return null;
      // readable from 1 on, writable all (as Node's, e.g. a helper's control channel on 3)
      if (!started) return new net.Socket({ readable: i > 0, writable: true }); // never connected, as Node's
      const sock = new net.Socket({ fd: started.fds[i], readable: i > 0, writable: true });
      if (i > 0) {
        this._closesNeeded++;
        sock.on('close', () => this._maybeClose());
      }
      return sock;
    });
    [this.stdin = null, this.stdout = null, this.stderr = null] = this.stdio;
    if (startError) {
      process.nextTick(() => {
        this.exitCode = startError.errno;
        this.stdin?.destroy();
        this.emit('error', startError);
        process.nextTick(() => this._flush());
        this._maybeClose();
      });
    } else {
      process.nextTick(() => this.emit('spawn'));
    }
  }

  _exited(code, signal) {
    if (signal) this.signalCode = signal;
    else this.exitCode = code;
    this.stdin?.destroy();
    this.emit('exit', this.exitCode, this.signalCode);
    process.nextTick(() => this._flush());
    this._maybeClose();
  }

  /** Like Node: after the exit, streams nobody consumed are read to their end so that 'close' can come. */
  _flush() {
    for (const s of this.stdio) if (s && s.readable) s.resume();
  }

  _maybeClose() {
    if (++this._closesGot === this._closesNeeded) this.emit('close', this.exitCode, this.signalCode);
  }

  kill(sig = 'SIGTERM') {
    if (this.pid === undefined || this.exitCode !== null || this.signalCode !== null) return false;
    try {
      process.kill(this.pid, sig);
    } catch (err) {
      if (err.code === 'ESRCH') return false; // already gone
      if (err.code !== 'EPERM') throw err; // an unknown signal, as ChildProcess.kill
      this.emit('error', err);
      return false;
    }
    this.killed = true;
    return true;
  }
}
