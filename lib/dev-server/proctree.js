// Process-tree helpers for the sandbox runner: find every descendant of a pid through /proc (Linux only) and
// signal them, used to pause (SIGSTOP), resume (SIGCONT) and kill a sandbox; whether a pid still exists; the names
// of server instances (cgroups.js, disk.js), from which the sweeps of leftovers read whether their server is gone.
import crypto from 'node:crypto';
import fs from 'node:fs';

/** Map pid -> parent pid for every process visible in /proc. */
function parentMap() {
  const map = new Map();
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    let stat;
    try {
      stat = fs.readFileSync(`/proc/${name}/stat`, 'utf8');
    } catch {
      continue; // exited meanwhile
    }
    // "pid (comm) state ppid …": comm may contain spaces and parentheses, so parse after the last ')'
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    map.set(Number(name), Number(fields[1]));
  }
  return map;
}

/** Every descendant pid of `root` (not root itself), parents before children. */
export function descendants(root) {
  const children = new Map();
  for (const [pid, ppid] of parentMap()) {
    if (!children.has(ppid)) children.set(ppid, []);
    children.get(ppid).push(pid);
  }
  const out = [];
  const queue = [root];
  while (queue.length) {
    const pid = queue.shift();
    for (const c of children.get(pid) ?? []) {
      out.push(c);
      queue.push(c);
    }
  }
  return out;
}

export function signal(pid, sig) {
  try {
    process.kill(pid, sig);
    return true;
  } catch {
    return false;
  }
}

/**
 * Sends `sig` to every descendant of root, rescanning until no new process shows up (a process may fork while
 * we walk the tree). For SIGSTOP this freezes the whole tree like a cgroup freezer would.
 */
export function signalTree(root, sig, maxRounds = 20) {
  const done = new Set();
  for (let round = 0; round < maxRounds; round++) {
    const fresh = descendants(root).filter((p) => !done.has(p));
    if (fresh.length === 0) break;
    for (const p of fresh) {
      signal(p, sig);
      done.add(p);
    }
  }
  return done.size;
}

/** True while a process with this pid exists (whoever owns it): a server instance's pid, in the sweeps of leftovers. */
export function processExists(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return err.code === 'EPERM';
  }
}

const INSTANCE_NAME = /^(\d+)-[0-9a-f]+$/;

/** A new name for this server instance's directories: `<pid>-<random hex>` (concurrent servers never share one). */
export function instanceName() {
  return `${process.pid}-${crypto.randomBytes(4).toString('hex')}`;
}

/** Names of the instance directories (instanceName()) in `dir` whose server process is gone; [] when dir is missing. */
export function deadInstances(dir) {
  let names;
  try {
    names = fs.readdirSync(dir);
  } catch {
    return [];
  }
  return names.filter((name) => {
    const m = INSTANCE_NAME.exec(name);
    return m && !processExists(Number(m[1]));
  });
}
