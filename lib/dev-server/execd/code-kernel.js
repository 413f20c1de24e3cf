// One code-interpreter kernel of the local execd: a long-lived child process (python3, node or an
// interactive bash) in its own process group, and the pipe protocol execd speaks with it.
//
// Protocol: fd 3 of the kernel is a socketpair carrying JSON lines. Kernel -> execd: {"type":"ready"} once,
// then per cell {"type":"result","data":{mime: value}}*, {"type":"error",ename,evalue,traceback}?, and
// {"type":"done"[,"exit":N]}. execd -> kernel (python, javascript): {"code","marker"} lines on fd 3; bash
// reads two shell lines per cell on stdin instead. User output is the kernel's real stdout/stderr; after a
// cell the kernel writes the cell's random marker to both, so a cell ends only when `done` has arrived AND
// both markers have been read: every byte of output is forwarded before the final event.
// Interrupt = SIGINT to the kernel's process group (children included).
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import { StringDecoder } from 'node:string_decoder';
import { fileURLToPath } from 'node:url';
import { spawn } from './spawn.js';

const here = (name) => fileURLToPath(new URL(name, import.meta.url));
const READY_TIMEOUT_MS = 20_000;
const INTERRUPT_GRACE_MS = 5_000;

function pythonBinary() {
  // Debian's interpreter (it has python3-matplotlib), not whatever python3 comes first on PATH.
  return fs.existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';
}

const LANGUAGES = {
  python: () => ({
    file: pythonBinary(),
    args: ['-u', here('code-python-kernel.py')],
    env: { PYTHONUNBUFFERED: '1', PYTHONIOENCODING: 'utf-8', MPLBACKEND: 'Agg' },
  }),
  javascript: () => ({ file: process.execPath, args: [here('code-node-kernel.js')], env: {} }),
  bash: () => ({
    file: 'bash',
    args: ['--norc', '--noprofile', '--noediting', '-i', '+m'],
    env: { PS1: '', PS2: '', PS0: '' },
    bootstrap: `source ${shellQuote(here('code-bash-kernel.sh'))}\n`,
  }),
};

export const SUPPORTED_LANGUAGES = Object.keys(LANGUAGES);

export function shellQuote(s) {
  return `'${String(s).replace(/'/g, `'\\''`)}'`;
}

/** Keeps the output of one stream, cuts it at the cell marker, decodes UTF-8 across chunk boundaries. */
class OutputDemux {
  constructor(emit) {
    this.emit = emit;
    this.reset(null);
  }
  reset(marker) {
    this.marker = marker ? Buffer.from(marker) : null;
    this.pending = Buffer.alloc(0);
    this.decoder = new StringDecoder('utf8');
    this.done = false;
  }
  feed(chunk) {
    if (!this.marker || this.done) return; // output outside a cell belongs to nobody
    const buf = this.pending.length ? Buffer.concat([this.pending, chunk]) : chunk;
    const at = buf.indexOf(this.marker);
    if (at >= 0) {
      this.out(buf.subarray(0, at));
      const rest = this.decoder.end();
      if (rest) this.emit(rest);
      this.pending = Buffer.alloc(0);
      this.done = true;
      return;
    }
    const keep = this.partialMarkerLength(buf);
    this.out(buf.subarray(0, buf.length - keep));
    this.pending = Buffer.from(buf.subarray(buf.length - keep));
  }
  /** Forwards what is held back (the kernel died before writing its marker). */
  flush() {
    if (!this.marker || this.done) return;
    this.out(this.pending);
    const rest = this.decoder.end();
    if (rest) this.emit(rest);
    this.done = true;
  }
  /** Length of the longest suffix of buf that is a prefix of the marker. */
  partialMarkerLength(buf) {
    for (let n = Math.min(this.marker.length - 1, buf.length); n > 0; n--) {
      if (buf.subarray(buf.length - n).equals(this.marker.subarray(0, n))) return n;
    }
    return 0;
  }
  out(bytes) {
    if (!bytes.length) return;
    const text = this.decoder.write(bytes);
    if (text) this.emit(text);
  }
}

export class Kernel {
  /** Starts the kernel; resolves once it reported ready, rejects (and kills it) otherwise. */
  static async start(language, cwd, baseEnv = process.env) {
    const spec = LANGUAGES[language]();
    const kernel = new Kernel(language, spec, cwd, baseEnv);
    await kernel.ready;
    return kernel;
  }

  constructor(language, spec, cwd, baseEnv) {
    this.language = language;
    this.cell = null;
    this.exited = false;
    this.controlBuf = '';
    this.child = spawn(spec.file, spec.args, {
      cwd,
      env: { ...baseEnv, ...spec.env },
      stdio: [spec.bootstrap ? 'pipe' : 'ignore', 'pipe', 'pipe', 'pipe'],
      detached: true,
    });
    this.control = this.child.stdio[3];
    this.stdout = new OutputDemux((t) => this.cell?.sink.stdout(t));
    this.stderr = new OutputDemux((t) => this.cell?.sink.stderr(t));
    this.child.stdout.on('data', (c) => { this.stdout.feed(c); this.maybeFinish(); });
    this.child.stderr.on('data', (c) => { this.stderr.feed(c); this.maybeFinish(); });
    this.child.stdin?.on('error', () => {});
    this.control.on('error', () => {});
    this.control.setEncoding('utf8');
    this.control.on('data', (chunk) => this.onControl(chunk));

    this.ready = new Promise((resolve, reject) => {
      this.onReady = resolve;
      const timer = setTimeout(() => {
        this.kill();
        reject(new Error(`${language} kernel did not start within ${READY_TIMEOUT_MS} ms`));
      }, READY_TIMEOUT_MS);
      this.child.once('error', (err) => {
        clearTimeout(timer);
        this.exited = true;
        reject(new Error(`cannot start the ${language} kernel: ${err.message}`));
      });
      this.child.once('exit', (code, signal) => {
        clearTimeout(timer);
        reject(new Error(`${language} kernel exited during start-up (${signal ?? `code ${code}`})`));
      });
      this.readyTimer = timer;
    });
    this.ready.catch(() => {});
    this.child.on('exit', (code, signal) => this.onExit(code, signal));
    if (spec.bootstrap) this.child.stdin.write(spec.bootstrap);
  }

  pauseOutput() {
    this.child.stdout.pause();
    this.child.stderr.pause();
  }

  resumeOutput() {
    this.child.stdout.resume();
    this.child.stderr.resume();
  }

  get busy() {
    return this.cell !== null;
  }

  onControl(chunk) {
    this.controlBuf += chunk;
    let nl;
    while ((nl = this.controlBuf.indexOf('\n')) >= 0) {
      const line = this.controlBuf.slice(0, nl);
      this.controlBuf = this.controlBuf.slice(nl + 1);
      let msg;
      try {
        msg = JSON.parse(line);
      } catch {
        continue;
      }
      if (msg.type === 'ready') {
        clearTimeout(this.readyTimer);
        this.onReady();
      } else if (this.cell) {
        if (msg.type === 'done') {
          this.cell.done = msg;
          this.maybeFinish();
        } else {
          this.cell.replies.push(msg);
        }
      }
    }
  }

  /**
   * Runs one cell. sink = { stdout(text), stderr(text) } gets the output as it arrives. Resolves with
   * { replies: [result|error messages], exit?: number, interrupted: boolean, died?: string }.
   */
  run(code, sink) {
    if (this.cell) throw new Error('session is busy');
    const marker = `\x1eOSB-CELL-${randomBytes(12).toString('hex')}\x1e`;
    return new Promise((resolve) => {
      this.cell = { sink, replies: [], done: null, resolve, interrupted: false, graceTimer: null };
      this.stdout.reset(marker);
      this.stderr.reset(marker);
      if (this.exited) return this.finish('the kernel is not running');
      if (this.language === 'bash') {
        this.child.stdin.write(`__osb_run ${shellQuote(code)}\n__osb_done ${shellQuote(marker)}\n`);
      } else {
        this.control.write(JSON.stringify({ code, marker }) + '\n');
      }
    });
  }

  maybeFinish() {
    if (this.cell?.done && this.stdout.done && this.stderr.done) this.finish(null);
  }

  finish(died) {
    const cell = this.cell;
    if (!cell) return;
    clearTimeout(cell.graceTimer);
    if (died) {
      this.stdout.flush();
      this.stderr.flush();
    }
    this.cell = null;
    this.stdout.reset(null);
    this.stderr.reset(null);
    cell.resolve({ replies: cell.replies, exit: cell.done?.exit, interrupted: cell.interrupted, died });
  }

  /** SIGINT to the kernel's process group; a cell that ignores it for 5 s gets its kernel killed. */
  interrupt() {
    if (this.exited) return;
    signalGroup(this.child.pid, 'SIGINT');
    const cell = this.cell;
    if (cell && !cell.graceTimer) {
      cell.interrupted = true;
      cell.graceTimer = setTimeout(() => {
        if (this.cell === cell) this.kill();
      }, INTERRUPT_GRACE_MS);
    }
  }

  onExit(code, signal) {
    this.exited = true;
    signalGroup(this.child.pid, 'SIGKILL'); // leftovers of the kernel's process group
    if (!this.cell) return;
    // Forward what the pipes still hold (bounded wait: a leftover could keep them open), then end the cell.
    const how = signal ? `signal ${signal}` : `code ${code}`;
    const end = () => this.finish(`the ${this.language} kernel exited (${how}); its state is lost`);
    const ended = (s) => s.readableEnded || s.destroyed ? Promise.resolve() : new Promise((r) => s.once('close', r));
    const timer = setTimeout(end, 500);
    Promise.all([ended(this.child.stdout), ended(this.child.stderr)]).then(() => { clearTimeout(timer); end(); });
  }

  /** SIGKILL to the kernel's whole process group. */
  kill() {
    signalGroup(this.child.pid, 'SIGKILL');
  }
}

function signalGroup(pid, sig) {
  try {
    process.kill(-pid, sig);
  } catch {
    // already gone
  }
}
