// `POST /code` without `context.language`: execd runs the code as a foreground shell command, with the
// event semantics of `/command` (bash -c in its own process group, output line-split per stream, exit status
// as `execution_complete` or an `error` CommandExecError whose evalue is the exit code).
import { randomBytes } from 'node:crypto';
import { LineSplitter } from './lines.js';
import { spawn } from './spawn.js';

const TERM_GRACE_MS = 3000;
const PIPE_DRAIN_MS = 200;

/**
 * Starts `bash -c code`. emit(event) gets {type:'stdout'|'stderr', text} and, last, the final event.
 * Returns { id, done: Promise<void>, interrupt(): Promise<void>, kill(), pauseOutput(), resumeOutput() }; while the
 * output is paused (a client not reading) the process blocks on its writes and the pipe-drain wait after its exit
 * does not run down.
 */
export function runShell(code, cwd, env, emit) {
  const id = randomBytes(16).toString('hex');
  const started = Date.now();
  let child;
  let startError = null;
  try {
    child = spawn('bash', ['-c', code], { cwd, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (err) {
    startError = err;
  }
  let exited = false;
  let paused = false;
  let afterResume = null;
  let splitters = [];
  const group = (sig) => {
    try {
      process.kill(-child.pid, sig);
    } catch { /* gone */ }
  };
  const done = new Promise((resolve) => {
    let finished = false;
    const fail = (text) => {
      if (finished) return;
      finished = true;
      emit({ type: 'error', error: { ename: 'CommandExecError', evalue: text, traceback: [text] } });
      resolve();
    };
    if (startError) return fail(startError.message);
    const out = new LineSplitter((text) => emit({ type: 'stdout', text }));
    const err = new LineSplitter((text) => emit({ type: 'stderr', text }));
    splitters = [out, err];
    child.stdout.on('data', (c) => out.push(c));
    child.stderr.on('data', (c) => err.push(c));
    child.once('error', (e) => { exited = true; fail(e.message); });
    // The exit status ends the command; its pipes get a short while to drain (a background grandchild
    // may hold them open forever).
    child.once('exit', (code, signal) => {
      exited = true;
      let timer;
      const stopReading = () => {
        if (paused) afterResume = () => { timer = setTimeout(stopReading, PIPE_DRAIN_MS); };
        else finish(code, signal);
      };
      timer = setTimeout(stopReading, PIPE_DRAIN_MS);
      child.once('close', () => { clearTimeout(timer); finish(code, signal); });
    });
    const finish = (code, signal) => {
      if (finished) return;
      finished = true;
      child.stdout.destroy();
      child.stderr.destroy();
      out.flush();
      err.flush();
      if (code === 0) {
        emit({ type: 'execution_complete', execution_time: Math.max(1, Date.now() - started) });
      } else {
        const evalue = signal ? '-1' : String(code);
        const trace = signal ? `signal: ${signal === 'SIGKILL' ? 'killed' : signal === 'SIGTERM' ? 'terminated' : signal}` : `exit status ${code}`;
        emit({ type: 'error', error: { ename: 'CommandExecError', evalue, traceback: [trace] } });
      }
      resolve();
    };
  });
  return {
    id,
    done,
    get running() {
      return !exited && !startError;
    },
    /** SIGTERM to the group, SIGKILL after 3 s; resolves when the command has ended. */
    async interrupt() {
      if (!this.running) return;
      group('SIGTERM');
      const killer = setTimeout(() => group('SIGKILL'), TERM_GRACE_MS);
      await done;
      clearTimeout(killer);
    },
    kill() {
      if (this.running) group('SIGKILL');
    },
    pauseOutput() {
      if (!child) return;
      paused = true;
      child.stdout.pause();
      child.stderr.pause();
    },
    resumeOutput() {
      if (!child) return;
      paused = false;
      for (const sp of splitters) sp.resume();
      if (paused) return; // what the splitters held filled the client's buffer again
      child.stdout.resume();
      child.stderr.resume();
      const f = afterResume;
      afterResume = null;
      f?.();
    },
  };
}
