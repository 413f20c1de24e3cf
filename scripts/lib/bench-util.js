// What the benchmarks (scripts/bench*.js) share: quantiles, a profiler of one operation (wall, JS-thread busy time,
// process CPU, peak RSS), the local server's CLI in a child process (with its API key, which every client — ours and
// the official one — must send), the resident memory of one sandbox's process tree, and the figures each bench hands
// to scripts/bench-all.js for its summary table (one JSON line per figure in the file named by $BENCH_SUMMARY).
import fs from 'node:fs';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import { descendants } from '../../lib/dev-server/proctree.js';

export const now = () => performance.now();

/** A bench's size option `name`: the value given on the command line, else its `smoke` size under --smoke, else `full`. */
export const sizeOf = (args) => (name, full, smoke) => Number(args[name] ?? (args.smoke ? smoke : full));

/** { n, median, p95 } of a list of samples. */
export function quantiles(samples) {
  const s = [...samples].sort((a, b) => a - b);
  const at = (q) => s[Math.min(s.length - 1, Math.ceil(q * s.length) - 1)];
  return { n: s.length, median: at(0.5), p95: at(0.95) };
}

/**
 * CPU ms (user + system) spent so far by the process tree under pid: each live process's own time plus what its
 * reaped children spent (/proc/<pid>/stat utime, stime, cutime, cstime; clock ticks of 10 ms). A process that exits
 * moves its time to its parent's reaped share, so the difference of two readings is what the tree spent between them.
 */
export function treeCpuMs(pid) {
  let ticks = 0;
  for (const p of [pid, ...descendants(pid)]) {
    let stat;
    try {
      stat = fs.readFileSync(`/proc/${p}/stat`, 'utf8');
    } catch {
      continue; // gone meanwhile: its time is in its parent's reaped share
    }
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    ticks += Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14]);
  }
  return ticks * 10;
}

/**
 * Runs fn and measures it: { value, wall, js (event-loop active ms), cpu (all threads, ms), rssStart, rss (peak, MiB),
 * serverCpu (ms the process tree of `server` — startChildServer's: the server, execd, the sandbox's processes —
 * spent meanwhile; undefined without server) }.
 */
export async function profile(fn, server = null) {
  const rssStart = process.memoryUsage.rss();
  let peak = rssStart;
  const sampler = setInterval(() => { peak = Math.max(peak, process.memoryUsage.rss()); }, 20);
  const elu0 = performance.eventLoopUtilization();
  const cpu0 = process.cpuUsage();
  const server0 = server ? treeCpuMs(server.pid) : 0;
  const t0 = now();
  try {
    const value = await fn();
    const wall = now() - t0;
    const elu = performance.eventLoopUtilization(elu0);
    const cpu = process.cpuUsage(cpu0);
    peak = Math.max(peak, process.memoryUsage.rss());
    const serverCpu = server ? treeCpuMs(server.pid) - server0 : undefined;
    return { value, wall, js: elu.active, cpu: (cpu.user + cpu.system) / 1000, serverCpu, rssStart: rssStart / 2 ** 20, rss: peak / 2 ** 20 };
  } finally {
    clearInterval(sampler);
  }
}

/**
 * The local server's CLI in a child process (so that the JS-thread and RSS figures are the client's alone), with a
 * fresh API key: { domain, apiKey, pid, close() }.
 */
export async function startChildServer() {
  const cli = fileURLToPath(new URL('../../lib/dev-server/cli.js', import.meta.url));
  const apiKey = randomBytes(24).toString('hex');
  const child = spawn(process.execPath, [cli, '--port', '0', '--quiet'], {
    stdio: ['ignore', 'pipe', 'inherit'],
    env: { ...process.env, OPENSANDBOX_SERVER_API_KEY: apiKey },
  });
  let out = '';
  const domain = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the dev server did not start within 30 s: ${out}`)), 30000);
    child.stdout.on('data', (d) => {
      out += d;
      const line = out.split('\n').find((l) => /^\S+:\d+$/.test(l.trim()));
      if (line) {
        clearTimeout(timer);
        resolve(line.trim());
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`the dev server exited (${code}): ${out}`));
    });
  });
  return {
    domain,
    apiKey,
    pid: child.pid,
    close: () => new Promise((resolve) => {
      if (child.exitCode !== null) return resolve();
      child.once('exit', resolve);
      child.kill('SIGTERM');
    }),
  };
}

/** The official client connected to a sandbox, or null when it is not installed. */
export async function officialSandbox(domain, apiKey, sandboxId) {
  let mod;
  try {
    mod = await import('@alibaba-group/opensandbox');
  } catch {
    return null;
  }
  process.env.OPENSANDBOX_DISABLE_METRICS = '1';
  return mod.Sandbox.connect({ sandboxId, connectionConfig: { domain, protocol: 'http', apiKey, disableMetrics: true } });
}

const pageKb = 4;
function rssKb(pid) {
  try {
    return Number(fs.readFileSync(`/proc/${pid}/statm`, 'utf8').split(' ')[1]) * pageKb;
  } catch {
    return 0; // gone meanwhile
  }
}

/**
 * Resident memory (MiB, summed RSS: shared pages count once per process) of the processes of one sandbox of a server
 * running in this process: bubblewrap's tree whose hostname is the sandbox id's (lib/dev-server/runner.js), bwrap
 * itself left out. { mb, processes: [{ pid, comm, mb }] }, or null when no such tree is found.
 */
export function sandboxRss(sandboxId) {
  const host = sandboxId.replace(/-/g, '').slice(0, 12);
  for (const pid of descendants(process.pid)) {
    let argv;
    try {
      argv = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    } catch {
      continue;
    }
    if (!argv[0].endsWith('bwrap')) continue;
    // bwrap reads its options (--hostname) from a pipe: its environment names the sandbox (HOSTNAME, runner.js)
    let env = [];
    try {
      env = fs.readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
    } catch {
      continue;
    }
    if (!env.includes(`HOSTNAME=${host}`)) continue;
    const processes = descendants(pid).map((p) => {
      let comm = '?';
      try {
        comm = fs.readFileSync(`/proc/${p}/comm`, 'utf8').trim();
      } catch { /* gone */ }
      return { pid: p, comm, mb: rssKb(p) / 1024 };
    });
    return { mb: processes.reduce((n, p) => n + p.mb, 0), processes };
  }
  return null;
}

/**
 * One figure for the summary table of scripts/bench-all.js (a no-op when the bench runs alone): what, the measured
 * value, its unit, the target (`<= x` or `>= x`) and a note.
 */
export function reportFigure(figure, value, unit, target, note = '') {
  const file = process.env.BENCH_SUMMARY;
  if (!file || value === undefined || value === null || Number.isNaN(value)) return;
  fs.appendFileSync(file, `${JSON.stringify({ figure, value, unit, target, note })}\n`);
}
