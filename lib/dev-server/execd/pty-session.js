// One interactive session of execd's PTY API (local OpenSandbox-compatible server): the bash process (one "run"
// per start; a session is started again when a client connects after the previous run exited, as the real
// execd does), its 1 MiB replay buffer and the currently attached WebSocket client (`holder`).
//   PTY mode:  bash on a real pseudo-terminal through pty-helper.py (Debian's python3), 80x24 initially.
//   pipe mode: bash with plain pipes; stderr kept apart; stdin cannot be closed (as upstream).
// Both run bash in its own session/process group, with execd's environment (TERM=xterm in PTY mode, as execd).
// A run reports `processExit` as soon as the process is gone and `exit` once its output is fully drained
// (pipes at EOF; bounded by DRAIN_MS when a background process keeps them open).
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ReplayBuffer } from './pty-replay.js';
import { spawn } from './spawn.js';

const HELPER = path.join(path.dirname(fileURLToPath(import.meta.url)), 'pty-helper.py');
const PYTHON = fs.existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';
const DRAIN_MS = 2000;
export const SIGNALS = new Set(['SIGINT', 'SIGTERM', 'SIGKILL', 'SIGQUIT', 'SIGHUP']);

export class PtySession {
  constructor({ id, cwd, command }) {
    this.id = id;
    this.cwd = cwd;
    this.command = command;
    this.replay = new ReplayBuffer();
    this.run = null;     // the latest run
    this.runs = [];      // every run, so DELETE can also kill what a finished run left in its process group
    this.holder = null;  // attached client: null | { pending: true } | PtyConnection
    this.closed = false;
  }

  get running() {
    return this.run !== null && this.run.pid !== 0;
  }

  get isPty() {
    return this.run?.isPty ?? false;
  }

  bashArgs() {
    return ['--norc', '--noprofile', ...(this.command ? ['-c', this.command] : [])];
  }

  /** Starts a new run; resolves once the process runs, rejects with an Error when it cannot start. */
  start(pipeMode) {
    if (this.closed) return Promise.reject(new Error('pty session is closing'));
    this.runs = this.runs.filter((r) => !r.finished());
    const run = new Run(this, !pipeMode);
    this.run = run;
    this.runs.push(run);
    return run.started;
  }

  output(run, stream, chunk) {
    this.replay.write(chunk);
    const h = this.holder;
    if (h && !h.pending) h.onOutput(stream, chunk);
  }

  runEvent(run, what, code) {
    const h = this.holder;
    if (h && !h.pending) h.onRunEvent(run, what, code);
  }

  writeStdin(data, cb) {
    // A run that is still starting accepts stdin (the pipe buffers it), like a started one.
    if (!this.run || this.run.exitCode !== null) {
      queueMicrotask(() => cb(new Error('session not running')));
      return;
    }
    this.run.writeStdin(data, cb);
  }

  resize(cols, rows) {
    this.run?.resize(cols, rows);
  }

  signal(name) {
    const pid = this.run?.pid;
    if (!pid || !SIGNALS.has(name)) return;
    try {
      process.kill(-pid, name);
    } catch {
      // group already gone
    }
  }

  /** Pauses/resumes reading the process output (backpressure from a slow client). */
  setPaused(paused) {
    for (const run of this.runs) run.setPaused(paused);
  }

  /** DELETE /pty/{id} and execd shutdown: SIGKILL the process group and close the pipes. */
  kill() {
    this.closed = true;
    for (const run of this.runs) run.kill();
    this.runs = [];
  }
}

class Run {
  constructor(session, isPty) {
    this.session = session;
    this.isPty = isPty;
    this.pid = 0;               // 0 once the process exited
    this.pgid = 0;              // its process group (bash runs in its own session), kept after exit
    this.exitCode = null;       // set at process exit
    this.drained = false;       // output fully read after exit
    this.paused = false;
    this.started = new Promise((resolve, reject) => {
      this.resolveStart = resolve;
      this.rejectStart = reject;
    });
    const env = isPty ? { ...process.env, TERM: 'xterm' } : process.env;
    const opts = { cwd: session.cwd, env, detached: true };
    if (isPty) {
      this.child = spawn(PYTHON, [HELPER, '80', '24', 'bash', ...session.bashArgs()],
        { ...opts, stdio: ['pipe', 'pipe', 'pipe', 'pipe', 'pipe'] });
      this.readable = [this.child.stdout];
    } else {
      this.child = spawn('bash', session.bashArgs(), { ...opts, stdio: ['pipe', 'pipe', 'pipe'] });
      this.readable = [this.child.stdout, this.child.stderr];
    }
    this.child.on('error', (err) => this.onSpawnError(err));
    for (const s of this.child.stdio) s?.on('error', () => {});
    this.child.stdout.on('data', (c) => session.output(this, 1, c));
    if (isPty) {
      this.helperErr = '';
      this.child.stderr.on('data', (c) => {
        this.helperErr = (this.helperErr + c.toString('utf8')).slice(-4096);
      });
      let status = '';
      this.child.stdio[4].on('data', (c) => {
        status += c.toString('utf8');
        let nl;
        while ((nl = status.indexOf('\n')) >= 0) {
          this.onStatus(status.slice(0, nl));
          status = status.slice(nl + 1);
        }
      });
    } else {
      this.child.stderr.on('data', (c) => session.output(this, 2, c));
      this.child.on('spawn', () => {
        this.pid = this.child.pid;
        this.pgid = this.pid;
        this.resolveStart(this);
      });
      this.child.on('exit', (code, signal) => this.onProcessExit(signal ? -1 : code));
    }
    this.child.on('close', (code) => {
      if (isPty && this.exitCode === null) {
        // the helper died without reporting (killed): the run is over
        if (this.pid === 0 && !this.startSettled) this.onSpawnError(new Error(`pty helper exited with ${code}: ${this.helperErr.trim()}`));
        else this.onProcessExit(-1);
      }
      this.onDrained();
    });
  }

  onSpawnError(error) {
    if (this.startSettled) return;
    let err = error;
    if (error?.code === 'ENOENT' && !fs.existsSync(this.session.cwd)) err = new Error(`working directory ${this.session.cwd} does not exist`);
    this.startSettled = true;
    this.pid = 0;
    this.exitCode = -1;
    this.drained = true;
    this.rejectStart(err);
  }

  onStatus(line) {
    const [what, value] = line.split(' ');
    if (what === 'pid') {
      this.pid = Number(value);
      this.pgid = this.pid;
      this.startSettled = true;
      this.resolveStart(this);
    } else if (what === 'exit') {
      this.onProcessExit(Number(value));
    }
  }

  /** Calls fn once the process is gone (now when it is). */
  onProcessGone(fn) {
    if (this.exitCode !== null) fn();
    else (this.goneListeners ??= []).push(fn);
  }

  onProcessExit(code) {
    if (this.exitCode !== null) return;
    this.startSettled = true;
    this.exitCode = code ?? -1;
    this.pid = 0;
    for (const fn of this.goneListeners?.splice(0) ?? []) fn();
    this.drainTimer = setTimeout(() => this.onDrained(), DRAIN_MS);
    this.session.runEvent(this, 'processExit', this.exitCode);
  }

  onDrained() {
    clearTimeout(this.drainTimer);
    if (this.drained || this.exitCode === null) return;
    this.drained = true;
    this.session.runEvent(this, 'exit', this.exitCode);
  }

  writeStdin(data, cb) {
    const stdin = this.child.stdin;
    if (!stdin.writable) {
      queueMicrotask(() => cb(new Error('stdin is closed')));
      return;
    }
    stdin.write(data, (err) => cb(err ?? null));
  }

  resize(cols, rows) {
    if (this.isPty && this.exitCode === null && this.child.stdio[3].writable) this.child.stdio[3].write(`resize ${cols} ${rows}\n`);
  }

  setPaused(paused) {
    if (paused === this.paused) return;
    this.paused = paused;
    for (const r of this.readable) {
      if (paused) r.pause();
      else r.resume();
    }
  }

  /** True when the run exited, its output is drained and nothing is left in its process group. */
  finished() {
    if (this.exitCode === null || !this.drained) return false;
    if (!this.pgid) return true;
    try {
      process.kill(-this.pgid, 0);
      return false;
    } catch {
      return true;
    }
  }

  /** SIGKILL to the run's process group: the shell if it still runs, and whatever it left behind. */
  kill() {
    if (this.pgid) {
      try {
        process.kill(-this.pgid, 'SIGKILL');
      } catch {
        // the group is gone
      }
    }
    this.setPaused(false);
    this.child.stdin.end();
    if (this.isPty) this.child.stdio[3].end();
  }
}
