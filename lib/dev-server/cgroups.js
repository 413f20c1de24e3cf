// Per-sandbox cgroups of the local server: resourceLimits cpu / memory / pids (and the server-wide pids cap) are
// enforced by putting each sandbox's first process (and so every later one) into a cgroup of its own before it runs
// anything (runner.js attachments). Detected once at server start, in this order:
//   1. option cgroupParent: a delegated cgroup v2 directory (memory and pids in its cgroup.controllers, writable);
//   2. root on a cgroup v2 host whose root offers memory and pids: /sys/fs/cgroup/mastra-opensandbox;
//   3. root with the cgroup v1 memory and pids hierarchies mounted (cpu when mounted): <mount>/mastra-opensandbox;
//   4. otherwise none (the server then refuses limits at create, or warns that they are not enforced).
// Layout: <base>/<server instance: pid-random>/<sandbox id>, so concurrent servers never touch each other's cgroups;
// instance dirs of dead servers are swept at start; close() removes the instance's.
import fs from 'node:fs';
import path from 'node:path';
import { deadInstances, instanceName } from './proctree.js';

const TOP = 'mastra-opensandbox';
const CPU_PERIOD_US = 100000;
/** rmdir of a cgroup answers EBUSY while its last processes exit: retried this long. */
const RMDIR_WAIT_MS = 3000;
/** The controllers used, in the order they are enabled and described; memory and pids are required, cpu optional. */
const CONTROLLERS = ['memory', 'pids', 'cpu'];
const REQUIRED = ['memory', 'pids'];

/** Mounts of this process: [{ mountPoint, fstype, source, superOpts: [] }] from /proc/self/mountinfo. */
export function mounts() {
  const unescape = (s) => s.replace(/\\([0-7]{3})/g, (_, o) => String.fromCharCode(parseInt(o, 8)));
  return fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n').filter(Boolean).map((line) => {
    const [left, right] = line.split(' - ');
    const f = left.split(' ');
    const [fstype, source, superOpts = ''] = right.split(' ');
    return { mountPoint: unescape(f[4]), fstype, source: unescape(source), superOpts: superOpts.split(',') };
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Removes a cgroup directory and its child cgroups (deepest first), retrying EBUSY until the deadline. */
async function removeCgroup(dir, deadline = Date.now() + RMDIR_WAIT_MS) {
  let entries;
  try {
    entries = fs.readdirSync(dir, { withFileTypes: true });
  } catch (err) {
    if (err.code === 'ENOENT') return;
    throw err;
  }
  for (const e of entries) if (e.isDirectory()) await removeCgroup(path.join(dir, e.name), deadline);
  for (;;) {
    try {
      fs.rmdirSync(dir);
      return;
    } catch (err) {
      if (err.code === 'ENOENT') return;
      if (err.code !== 'EBUSY' || Date.now() >= deadline) throw new Error(`cannot remove cgroup ${dir}: ${err.message}`);
      await sleep(10);
    }
  }
}

function controllersOf(dir) {
  try {
    return fs.readFileSync(path.join(dir, 'cgroup.controllers'), 'utf8').trim().split(/\s+/).filter(Boolean);
  } catch {
    return [];
  }
}

/** mkdir that survives another server removing the (shared, empty) top directory at the same moment. */
function makeDir(dir, prepareParent) {
  for (let attempt = 0; ; attempt++) {
    try {
      fs.mkdirSync(path.dirname(dir), { recursive: true });
      prepareParent?.();
      fs.mkdirSync(dir);
      return;
    } catch (err) {
      if (err.code !== 'ENOENT' || attempt >= 5) throw err;
    }
  }
}

/**
 * The cgroups of one server instance. `version` 1: `roots` maps each controller (memory, pids, cpu when mounted) to
 * its hierarchy's mastra-opensandbox directory; version 2: `base` is the directory holding instance dirs (with
 * memory, pids (and cpu) enabled in its subtree_control), `removeBase` whether close() may remove it when empty.
 */
export class Cgroups {
  constructor({ version, roots, base, removeBase, controllers, log }) {
    this.version = version;
    this.roots = roots;
    this.base = base;
    this.removeBase = removeBase;
    this.controllers = new Set(controllers);
    this.log = log;
    this.instance = instanceName();
    this.sweep();
    for (const dir of this.instanceDirs()) {
      makeDir(dir, () => this.version === 2 && this.enable(path.dirname(dir)));
      if (this.version === 2) this.enable(dir);
    }
  }

  /** What is used, for logs: e.g. "cgroup v1 (memory, pids, cpu) under /sys/fs/cgroup/<controller>/mastra-opensandbox". */
  describe() {
    const where = this.version === 2 ? this.base : path.join(path.dirname(path.dirname(this.roots.memory)), '<controller>', TOP);
    return `cgroup v${this.version} (${[...this.controllers].join(', ')}) under ${where}`;
  }

  /** The directories that hold instance dirs: one per v1 hierarchy, the base for v2. */
  bases() {
    return this.version === 2 ? [this.base] : Object.values(this.roots);
  }

  instanceDirs() {
    return this.bases().map((b) => path.join(b, this.instance));
  }

  enable(dir) {
    const want = CONTROLLERS.filter((c) => this.controllers.has(c)).map((c) => `+${c}`).join(' ');
    fs.writeFileSync(path.join(dir, 'cgroup.subtree_control'), want);
  }

  /** Removes the instance dirs of servers that are gone (their sandboxes died with them: --die-with-parent). */
  sweep() {
    for (const base of this.bases()) {
      for (const name of deadInstances(base)) removeCgroup(path.join(base, name)).catch((err) => this.log?.(`stale ${err.message}`));
    }
  }

  /**
   * The attachment (runner.js) of one sandbox: enter() makes its cgroup(s), writes the limits ({ cpu cores, memory
   * bytes, pids }; pids is always given: the request's or the server's cap, or null for none) and moves bwrap in
   * before it makes the sandbox's namespaces (so every process of the sandbox is in it, and the sandbox's cgroup
   * namespace is rooted there: /proc/self/cgroup inside shows "/", not this server's instance nor the sandbox id);
   * ready() sets the cpu quota; release() removes them once its processes are gone.
   */
  sandbox(id, limits) {
    const dirs = this.version === 2 ? { all: path.join(this.base, this.instance, id) }
      : Object.fromEntries(Object.entries(this.roots).map(([c, root]) => [c, path.join(root, this.instance, id)]));
    const file = (controller, name) => path.join(this.version === 2 ? dirs.all : dirs[controller], name);
    const write = (controller, name, value) => fs.writeFileSync(file(controller, name), String(value));
    return {
      dirs: Object.values(dirs),
      file,
      enter: async ({ pid }) => {
        for (const d of Object.values(dirs)) fs.mkdirSync(d);
        const v2 = this.version === 2;
        if (limits.memory !== undefined) {
          write('memory', v2 ? 'memory.max' : 'memory.limit_in_bytes', limits.memory);
          // swap must not widen the bound: v1 memory+swap = the same bytes, v2 no swap at all
          const swap = v2 ? 'memory.swap.max' : 'memory.memsw.limit_in_bytes';
          if (fs.existsSync(file('memory', swap))) write('memory', swap, v2 ? 0 : limits.memory);
        }
        if (limits.pids != null) write('pids', 'pids.max', limits.pids);
        // off the event loop: moving a process waits for the kernel (an RCU grace period, 4-14 ms measured), which
        // the create spends on its disk meanwhile (runner.js prepare)
        for (const d of Object.values(dirs)) await fs.promises.writeFile(path.join(d, 'cgroup.procs'), String(pid));
      },
      // the cpu quota once execd is ready, before any command can run: execd (Node) spends ~100 ms of CPU on several
      // threads starting, which a quota of one core or less throttles by 50-350 ms; memory and pids bind from the start
      ready: async () => {
        if (limits.cpu === undefined) return;
        const quota = Math.max(1000, Math.round(limits.cpu * CPU_PERIOD_US));
        if (this.version === 2) write('cpu', 'cpu.max', `${quota} ${CPU_PERIOD_US}`);
        else {
          write('cpu', 'cpu.cfs_period_us', CPU_PERIOD_US);
          write('cpu', 'cpu.cfs_quota_us', quota);
        }
      },
      release: async () => {
        for (const d of Object.values(dirs)) await removeCgroup(d);
      },
    };
  }

  /** Removes this instance's cgroups (sandboxes already gone), and the shared top directory when it is empty. */
  async close() {
    for (const dir of this.instanceDirs()) await removeCgroup(dir);
    if (!this.removeBase) return;
    for (const base of this.bases()) {
      try {
        fs.rmdirSync(base);
      } catch { /* another server's instance is in it */ }
    }
  }
}

/**
 * Finds what this machine offers (see the top of this file). Returns { cgroups } or { cgroups: null, why } (why: what
 * is missing, for the server's messages); throws when `cgroupParent` is given but unusable.
 */
export function detectCgroups({ cgroupParent, log } = {}) {
  if (cgroupParent !== undefined) {
    const fail = (why) => new Error(`cgroupParent ${cgroupParent}: ${why}`);
    if (!path.isAbsolute(cgroupParent)) throw fail('must be an absolute path (a cgroup v2 directory)');
    if (!fs.existsSync(path.join(cgroupParent, 'cgroup.subtree_control'))) throw fail('is not a cgroup v2 directory (no cgroup.subtree_control)');
    const have = controllersOf(cgroupParent);
    const missing = REQUIRED.filter((c) => !have.includes(c));
    if (missing.length) throw fail(`the controllers ${missing.join(', ')} are not delegated to it (its cgroup.controllers: "${have.join(' ')}")`);
    try {
      fs.accessSync(cgroupParent, fs.constants.W_OK);
      fs.accessSync(path.join(cgroupParent, 'cgroup.subtree_control'), fs.constants.W_OK);
    } catch (err) {
      throw fail(`not writable by this process (${err.code})`);
    }
    const controllers = CONTROLLERS.filter((c) => have.includes(c));
    try {
      return { cgroups: new Cgroups({ version: 2, base: cgroupParent, removeBase: false, controllers, log }) };
    } catch (err) {
      if (err.code === 'EBUSY') throw fail('holds processes itself (cgroup v2 puts processes only in leaves): give a child directory of it');
      throw fail(err.message);
    }
  }
  if (process.getuid?.() !== 0) return { cgroups: null, why: 'the server does not run as root and no cgroupParent (a delegated cgroup v2 directory) was given' };
  const all = mounts();
  try {
    const v2 = all.find((m) => m.fstype === 'cgroup2');
    const v2Controllers = v2 ? controllersOf(v2.mountPoint) : [];
    if (v2 && REQUIRED.every((c) => v2Controllers.includes(c))) {
      const base = path.join(v2.mountPoint, TOP);
      const controllers = CONTROLLERS.filter((c) => v2Controllers.includes(c));
      const subtree = fs.readFileSync(path.join(v2.mountPoint, 'cgroup.subtree_control'), 'utf8').trim().split(/\s+/);
      const off = controllers.filter((c) => !subtree.includes(c));
      if (off.length) return { cgroups: null, why: `cgroup v2 at ${v2.mountPoint} does not enable ${off.join(', ')} for its children (cgroup.subtree_control)` };
      return { cgroups: new Cgroups({ version: 2, base, removeBase: true, controllers, log }) };
    }
    const roots = {};
    for (const c of CONTROLLERS) {
      const m = all.find((x) => x.fstype === 'cgroup' && x.superOpts.includes(c));
      if (m) roots[c] = path.join(m.mountPoint, TOP);
    }
    if (roots.memory && roots.pids) return { cgroups: new Cgroups({ version: 1, roots, removeBase: true, controllers: Object.keys(roots), log }) };
    return { cgroups: null, why: v2 ? `neither cgroup v2 (${v2.mountPoint} offers "${v2Controllers.join(' ')}") nor the cgroup v1 memory and pids hierarchies offer memory and pids` : 'no cgroup memory and pids controllers are mounted' };
  } catch (err) {
    return { cgroups: null, why: `cgroups cannot be created here (${err.message})` };
  }
}
