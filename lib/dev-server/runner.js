// Sandbox runner of the local OpenSandbox-compatible server: starts one execd per sandbox, isolated with bubblewrap
// (own user/PID/IPC/UTS/network namespaces, network only through slirp4netns when allowed (network.js), host system
// read-only, per-sandbox /workspace /tmp /root; root inside is an unprivileged host uid with no capabilities under a
// seccomp filter, see docs/dev-server-security.md), or as a plain child process with isolation 'none'; pauses (SIGSTOP
// the tree), resumes (SIGCONT) and kills it.
import { spawn, execFileSync } from 'node:child_process';
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { checkExecdBinary, execdBinary } from './execd-binary.js';
import { descendants, signal, signalTree } from './proctree.js';
import { ensureTraversable, grantAccess, modeAllows } from './security.js';

const HERE = path.dirname(fileURLToPath(import.meta.url));
// the code interpreter's kernels (programs of their own languages, started by execd; the javascript one runs on node)
const CODE_KERNELS = path.join(HERE, 'execd');
const READY_TIMEOUT_MS = 15000;
const EXIT_TIMEOUT_MS = 5000;
const SOCKET_DIR_IN_SANDBOX = '/run/execd';
const SOCKET_NAME = 'execd.sock';
// where an image sandbox's execd is (upstream's Docker runtime copies its execd to /opt/opensandbox/)
const IMAGE_EXECD = '/opt/opensandbox/execd';
const SYSTEM_DIRS = ['/usr', '/bin', '/sbin', '/lib', '/lib64', '/lib32', '/libx32', '/etc'];

/**
 * The environment of an image sandbox's execd, as upstream's Docker runtime makes a container's: the image's Env
 * ("K=V" strings), HOME /root and the hostname unless the image sets them, then the create's env (which wins).
 */
export function imageEnv(config, defaults, createEnv) {
  const env = { PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', HOME: '/root', ...defaults };
  for (const kv of config.Env ?? []) {
    const i = kv.indexOf('=');
    if (i > 0) env[kv.slice(0, i)] = kv.slice(i + 1);
  }
  return { ...env, ...createEnv };
}

/** osb-execd --image-root's options (src/execd/rootfs.h) for `image` ({ layers bottom first, owner }) and dirs. */
function imageRootArgs(dirs, image, identity) {
  const a = ['--image-root', '--rootfs', dirs.rootfs, '--upper', dirs.upper, '--work', dirs.work];
  if (identity) a.push('--idmap', `${image.owner.uid}:${image.owner.gid}:${identity.uid}:${identity.gid}`);
  for (const l of image.layers) a.push('--layer', l);
  return a;
}

const STDERR_REASON_CHARS = 600;

function alive(pid) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

/**
 * The path of executable `name` on PATH (then in `extraDirs`), or null. The one PATH look-up of the server: bwrap,
 * slirp4netns, mkfs.ext4 / mount / umount.
 */
export function findExecutable(name, extraDirs = []) {
  for (const dir of [...(process.env.PATH ?? '').split(':'), ...extraDirs]) {
    if (!dir) continue;
    const p = path.join(dir, name);
    try {
      fs.accessSync(p, fs.constants.X_OK);
      return p;
    } catch { /* keep looking */ }
  }
  return null;
}

/** A `bwrap` executable on PATH, or null. */
export function findBwrap() {
  return findExecutable('bwrap');
}

/**
 * The C execd (src/execd/, osb-execd) every sandbox runs, resolved (execd-binary.js). startServer checked it
 * (checkExecdBinary); one gone since then throws naming the path.
 */
function execdProgram() {
  const file = execdBinary();
  try {
    if (file) return fs.realpathSync(file);
  } catch { /* gone: below */ }
  return checkExecdBinary(); // throws naming the path
}

/**
 * What of the host the sandbox needs read-only besides the system directories: node's directory (the javascript
 * kernel runs on it, and commands find `node` there), the code interpreter's kernel programs (`execd/`: nothing else of
 * the package — the server's own code stays out of the sandbox) and the C execd binary (`execdFile`, bound as that one
 * file when it is outside them).
 */
function runtimeDirs() {
  const nodeDir = path.dirname(fs.realpathSync(process.execPath));
  const kernelsDir = fs.realpathSync(CODE_KERNELS);
  return { nodeDir, kernelsDir, execdFile: execdProgram() };
}

/**
 * What a volume's mountPath (normalized) would collide with, or null: a path the sandbox itself is made of (`/`, /proc,
 * /dev, execd's socket directory, the read-only system, node and package directories) — the volume would hide it, or
 * bubblewrap would have to make its mount point inside a read-only host directory, and the sandbox would not start.
 */
export function mountPathConflict(dest) {
  const { nodeDir, kernelsDir, execdFile } = runtimeDirs();
  const overlap = (a, b) => a === b || a.startsWith(b === '/' ? '/' : `${b}/`) || b.startsWith(a === '/' ? '/' : `${a}/`);
  if (dest === '/') return '/';
  return ['/proc', '/dev', SOCKET_DIR_IN_SANDBOX, ...SYSTEM_DIRS, nodeDir, kernelsDir, execdFile].find((d) => d && overlap(dest, d)) ?? null;
}

/** "<sandbox gid>:<dir>" of node's and the package's directories the sandbox group was given read access to. */
const readable = new Set();

/** A sandbox's hostname: the first 12 hex digits of its id. */
const hostnameOf = (id) => id.replace(/-/g, '').slice(0, 12);

function underSystemDir(p) {
  return SYSTEM_DIRS.some((d) => p === d || p.startsWith(d + '/'));
}

/** d is parent or below it (both absolute, normalised). */
const within = (d, parent) => d === parent || d.startsWith(parent + '/');

/**
 * One sandbox's processes. `spec` = { id, dir, env, binds: [{ fd, dest, readOnly }] (volumes.js: open O_PATH
 * descriptors, owned by the caller), hostNetwork, resolvConf,
 * joinableUserns, attachments }. hostNetwork: share the host's network namespace (only the insecure fallback without slirp4netns);
 * resolvConf ({ dest, text } or null): a read-only file mounted over the sandbox's resolv.conf; joinableUserns: no
 * nested user namespace (--disable-userns), so that slirp4netns started by a non-root server can join (network.js).
 * attachments (isolation bwrap): objects with `enter({ pid })` (async; called with bwrap's pid before bwrap makes
 * the sandbox's namespaces: the cgroup, so that the sandbox's cgroup namespace is rooted at its own cgroup) or
 * `attach({ pid, netns })` (async; called once bubblewrap has made the sandbox's namespaces and before anything runs
 * in it: `pid` is the host pid of its first process, `netns` the path of its network namespace: the network); a throw
 * fails the start; optionally `ready()` (async; once execd listens, before the create answers and so before any
 * command runs) and `release()` (async; called after its processes are gone).
 * spec.identity ({ uid, gid }) is the host user bwrap runs as (a root-started server: the sandbox's own uid, the
 * sandbox group), else null. The runner options (isolation, hardening: { seccompPath, identities } or null,
 * execdToken, commandTailMs, ptyExitRace, signalForwarding, ptyCloseLinger, bwrap, dataDir, log) come from the server.
 */
export class SandboxProcess {
  constructor(spec, options) {
    this.spec = spec;
    this.options = options;
    this.dir = spec.dir;
    this.dirs = {
      workspace: path.join(spec.dir, 'workspace'),
      tmp: path.join(spec.dir, 'tmp'),
      home: path.join(spec.dir, 'home'),
      run: path.join(spec.dir, 'run'),
      // an image sandbox (spec.image): the overlay's writable layer, its work dir and where the overlay is mounted
      ...(spec.image ? { upper: path.join(spec.dir, 'upper'), work: path.join(spec.dir, 'work'), rootfs: path.join(spec.dir, 'rootfs') } : {}),
    };
    this.runDirFd = null;
    this.sandboxPid = null; // promise of the sandbox's host pid (bwrap's --info-fd) while bwrap runs
    this.sandboxStart = null; // that process's start time, once known
    this.gated = false; // bwrap waits behind its gate (enter())
    this.attachments = spec.attachments ?? [];
    this.attached = []; // the attachments whose attach() was called: kill() releases them
    this.child = null;
    this.exited = null;
    this.paused = false;
    // the last start()'s [phase, ms] in order, logged with the create: dirs (the sandbox's directories), spawn (the
    // spawn and the cgroup entered behind the gate, unless prepare() did that earlier, then bwrap's options), bwrap (until
    // it reports the sandbox's pid: namespaces made), network (slirp4netns), execd (bwrap's mounts, then execd
    // until it listens), ready (the attachments' ready())
    this.phases = [];
    this.launching = null; // prepare()'s launch(), until start() takes it
    this.stderrTail = ''; // the last 4000 characters execd (or bwrap) wrote to stderr
  }

  /**
   * Where this process reaches execd's socket: through an open descriptor of the run dir
   * (/proc/self/fd/N/execd.sock, under 40 bytes) because the real path grows with the data dir and a Unix socket
   * path has at most 107 bytes. Open from start() until kill().
   */
  get socketPath() {
    return this.runDirFd === null ? path.join(this.dirs.run, SOCKET_NAME) : `/proc/self/fd/${this.runDirFd}/${SOCKET_NAME}`;
  }

  /**
   * The descriptors bwrap gets (fds[i] becomes fd 3 + i in bwrap): the seccomp program, opened here (`owned`: the
   * caller closes them once bwrap is spawned), then the volumes' descriptors. The two pipes after them are bwrap's
   * --info-fd (it writes the sandbox's pid there) and --block-fd (the sandbox waits on it until the attachments are in
   * place), then the --args pipe; bwrap closes all three, and every --bind-fd descriptor, before execd starts.
   */
  bwrapFds() {
    const hardening = this.options.hardening;
    const owned = hardening ? [fs.openSync(hardening.seccompPath, fs.constants.O_RDONLY | fs.constants.O_CLOEXEC)] : [];
    return { fds: [...owned, ...this.spec.binds.map((b) => b.fd)], owned };
  }

  /**
   * bwrap's options for this sandbox, referring to `fds` (bwrapFds()), which bwrap reads from a pipe (--args, written
   * by start(); argv has `--` and the command: argv, visible inside as /proc/1/cmdline, then names no host directory
   * nor the sandbox's id). Needs the sandbox's directories (made by start()).
   */
  bwrapOptions(fds, execdFile) {
    const { nodeDir, kernelsDir } = runtimeDirs();
    const hardening = this.options.hardening;
    let next = 0; // fds are taken in bwrapFds()'s order
    const passFd = (fd) => {
      if (fds[next] !== fd) throw new Error('bwrap descriptors out of order');
      return String(3 + next++);
    };
    // a cgroup namespace: the sandbox sees its own cgroup (entered before bwrap makes the namespaces) as "/"
    const a = ['--die-with-parent', '--unshare-pid', '--unshare-ipc', '--unshare-uts', '--unshare-cgroup-try'];
    if (hardening) {
      // root inside is the unprivileged host uid bwrap runs as; no capabilities, no further user namespaces,
      // the libseccomp filter (bwrap also sets no_new_privs)
      // (an image's User: that uid and gid inside instead of root)
      const user = this.spec.image?.user ?? { uid: 0, gid: 0 };
      a.push('--unshare-user', '--uid', String(user.uid), '--gid', String(user.gid), ...(this.spec.joinableUserns ? [] : ['--disable-userns']), '--cap-drop', 'ALL', '--seccomp', passFd(fds[0]));
    }
    if (!this.spec.hostNetwork) a.push('--unshare-net');
    a.push('--hostname', hostnameOf(this.spec.id));
    if (this.spec.image) return this.imageOptions(a, passFd, fds);
    for (const d of SYSTEM_DIRS) {
      let st;
      try {
        st = fs.lstatSync(d);
      } catch {
        continue;
      }
      if (st.isSymbolicLink()) a.push('--symlink', fs.readlinkSync(d), d);
      else if (st.isDirectory()) a.push('--ro-bind', d, d);
    }
    a.push('--proc', '/proc', '--dev', '/dev');
    // bwrap bind mounts are nosuid and nodev; bwrap (as the sandbox uid) must be able to reach each source
    const identity = this.spec.identity;
    const bind = (src, dest, ro = false) => {
      if (identity) ensureTraversable(src, identity);
      a.push(ro ? '--ro-bind' : '--bind', src, dest);
    };
    if (this.spec.resolvConf) bind(path.join(this.dir, 'resolv.conf'), this.spec.resolvConf.dest, true);
    bind(this.dirs.workspace, '/workspace');
    bind(this.dirs.tmp, '/tmp');
    bind(this.dirs.home, '/root');
    bind(this.dirs.run, SOCKET_DIR_IN_SANDBOX);
    // node and the kernels after the sandbox's own /tmp, /root, /workspace: a checkout under /tmp (as CI clones
    // often are) would otherwise be hidden by the sandbox's private /tmp and execd could not start its kernels
    for (const d of new Set([nodeDir, kernelsDir])) {
      if (!d || underSystemDir(d)) continue;
      if (identity && !readable.has(`${identity.gid}:${d}`)) {
        // the sandbox uid runs node and the kernels from here: it must be able to read them (e.g. a checkout in a 0700 temp dir)
        const st = fs.statSync(d);
        if (!modeAllows(st, identity, 0o5)) grantAccess({ path: d }, identity, false, st.uid);
        readable.add(`${identity.gid}:${d}`);
      }
      bind(d, d, true);
    }
    // the C execd: inside what was just exposed (the package's build), else that one file, read-only
    const within = (d, parent) => d === parent || d.startsWith(parent + '/');
    if (execdFile && ![nodeDir, kernelsDir, ...SYSTEM_DIRS].some((d) => d && within(execdFile, d))) {
      if (identity && !modeAllows(fs.statSync(execdFile), identity, 0o5)) grantAccess({ path: execdFile }, identity, false);
      bind(execdFile, execdFile, true);
    }
    // a data dir inside what we just exposed (e.g. in the project checkout) must not show other sandboxes' files
    const dataDir = this.options.dataDir && fs.realpathSync(this.options.dataDir);
    if (dataDir && [nodeDir, kernelsDir, ...SYSTEM_DIRS].filter(Boolean).some((d) => within(dataDir, d))) a.push('--tmpfs', dataDir);
    // volumes: their open descriptors (bwrap checks that what it mounted is the descriptor's object)
    for (const b of this.spec.binds) a.push(b.readOnly ? '--ro-bind-fd' : '--bind-fd', passFd(b.fd), b.dest);
    // the environment goes through bwrap's own (spawn's env), not --setenv: argv is visible to every process
    // execd runs in / like in a container: a relative command cwd resolves against it (src/execd/commands.c)
    a.push('--remount-ro', '/', '--chdir', '/');
    a.push('--info-fd', String(3 + fds.length), '--block-fd', String(4 + fds.length));
    return a;
  }

  /**
   * The rest of bwrap's options for a sandbox on a container image: its root is the overlay osb-execd --image-root
   * mounted at dirs.rootfs (src/execd/rootfs.c), writable (the sandbox's own layer); nothing of the host but /proc,
   * /dev, execd's socket directory, the static execd at /opt/opensandbox/execd, resolv.conf and the volumes.
   */
  imageOptions(a, passFd, fds) {
    // bwrap (as the sandbox uid) must reach each source
    const identity = this.spec.identity;
    if (identity) {
      for (const p of [this.dirs.rootfs, this.dirs.run, ...(this.spec.resolvConf ? [path.join(this.dir, 'resolv.conf')] : [])]) ensureTraversable(p, identity);
      ensureTraversable(this.execdFile, identity);
      if (!modeAllows(fs.statSync(this.execdFile), identity, 0o5)) grantAccess({ path: this.execdFile }, identity, false);
    }
    a.push('--bind', this.dirs.rootfs, '/', '--proc', '/proc', '--dev', '/dev');
    if (this.spec.resolvConf) a.push('--ro-bind', path.join(this.dir, 'resolv.conf'), this.spec.resolvConf.dest);
    a.push('--bind', this.dirs.run, SOCKET_DIR_IN_SANDBOX, '--ro-bind', this.execdFile, IMAGE_EXECD);
    for (const b of this.spec.binds) a.push(b.readOnly ? '--ro-bind-fd' : '--bind-fd', passFd(b.fd), b.dest);
    a.push('--chdir', '/', '--info-fd', String(3 + fds.length), '--block-fd', String(4 + fds.length));
    return a;
  }

  /**
   * With attachments to enter (the cgroup) under bwrap: spawns bwrap behind its gate and enters them now, so that this
   * (moving a process into a cgroup waits for the kernel: 4-14 ms measured) overlaps what the caller still does before
   * start() (the sandbox's disk). Nothing of the sandbox runs before start() opens the gate: the gate is sh waiting
   * for a line, bwrap has not started. Otherwise (isolation 'none', nothing to enter) start() does it all. A failure
   * kills what was started (kill()) and rejects; start() rejects with it too.
   */
  prepare() {
    if (this.options.isolation === 'none' || !this.attachments.some((x) => x.enter)) return Promise.resolve();
    this.launching ??= this.launch();
    return this.launching;
  }

  /**
   * Spawns execd (under bwrap: behind its gate when there are attachments to enter, which are then entered; bwrap
   * reads its options from a pipe that start() writes). Resolves { child, infoFd, fds } once entered.
   */
  async launch() {
    this.exited = null; // a start after kill() (an emulated Kubernetes resume) is a new process tree
    this.paused = false;
    this.stderrTail = '';
    const identity = this.spec.identity;
    const { nodeDir, execdFile } = runtimeDirs();
    this.execdFile = execdFile;
    const isolated = this.options.isolation !== 'none';
    const image = isolated ? this.spec.image ?? null : null;
    const workspace = image ? image.config.WorkingDir || '/' : isolated ? '/workspace' : this.dirs.workspace;
    // without isolation execd binds relative to its working directory (the sandbox's workspace, a sibling of run)
    const socket = isolated ? `${SOCKET_DIR_IN_SANDBOX}/${SOCKET_NAME}` : `../${path.basename(this.dirs.run)}/${SOCKET_NAME}`;
    const execdArgs = ['--socket', socket, '--workspace', workspace, '--command-tail-ms', String(this.options.commandTailMs)];
    // the server-wide execd token (execd answers it like a real execd started with --access-token) goes through a
    // pipe, never the environment or argv: fd 3 for isolation 'none', after bwrap's own fds (seccomp, volumes, info, block, args)
    const bw = isolated ? this.bwrapFds() : null;
    const tokenFd = !this.options.execdToken ? null : isolated ? 6 + bw.fds.length : 3;
    if (tokenFd !== null) execdArgs.push('--access-token-fd', String(tokenFd));
    if (this.options.ptyExitRace) execdArgs.push('--pty-exit-race');
    if (this.options.signalForwarding) execdArgs.push('--signal-forwarding');
    if (this.options.ptyCloseLinger) execdArgs.push('--pty-close-linger');
    // execd answers every route itself; node is only the javascript code kernel's (started when a context asks for it)
    const execdArgv = image ? [IMAGE_EXECD, ...execdArgs] : [execdFile, ...execdArgs, '--node', process.execPath, '--code-kernels', CODE_KERNELS];
    const env = image ? imageEnv(image.config, { HOSTNAME: hostnameOf(this.spec.id), ...(image.user ? { HOME: image.user.home } : {}) }, this.spec.env) : {
      PATH: `${nodeDir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`,
      HOME: isolated ? '/root' : this.dirs.home,
      TMPDIR: isolated ? '/tmp' : this.dirs.tmp,
      LANG: 'C.UTF-8',
      HOSTNAME: hostnameOf(this.spec.id),
      ...this.spec.env,
    };
    let child;
    let infoFd = null;
    // attachments to enter before bwrap makes the namespaces: bwrap is started behind a gate (sh waiting for a line
    // on its stdin, then exec'ing bwrap in place), entered, then let through
    const entering = isolated ? this.attachments.filter((x) => x.enter) : [];
    if (isolated) {
      const { fds, owned } = bw;
      infoFd = 3 + fds.length;
      let argv = [this.options.bwrap, '--args', String(infoFd + 2), '--', ...execdArgv];
      // an image sandbox: osb-execd --image-root mounts its overlay root first, then execs bwrap (as the sandbox uid:
      // a root server runs it as root, it drops)
      if (image) argv = [execdFile, ...imageRootArgs(this.dirs, image, identity), '--', ...argv];
      const asSandboxUid = identity && !image;
      const [file, fileArgs] = entering.length ? ['/bin/sh', ['-c', 'read -r _ && unset PWD OLDPWD && exec "$@"', 'sh', ...argv]] : [argv[0], argv.slice(1)];
      try {
        child = spawn(file, fileArgs, {
          stdio: [entering.length ? 'pipe' : 'ignore', 'pipe', 'pipe', ...fds, 'pipe', 'pipe', 'pipe', ...(tokenFd === null ? [] : ['pipe'])],
          env, ...(asSandboxUid ? { uid: identity.uid, gid: identity.gid } : {}),
        });
      } finally {
        for (const fd of owned) fs.closeSync(fd);
      }
      child.stdio[infoFd + 2].on('error', () => {});
    } else {
      child = spawn(execdArgv[0], execdArgv.slice(1), { stdio: ['ignore', 'pipe', 'pipe', ...(tokenFd === null ? [] : ['pipe'])], env, cwd: this.dirs.workspace });
    }
    if (tokenFd !== null) child.stdio[tokenFd].end(this.options.execdToken);
    this.child = child;
    live.add(this);
    installExitHook();
    this.exitPromise = new Promise((resolve) => {
      child.on('exit', (code, sig) => {
        this.exited = { code, signal: sig };
        live.delete(this);
        resolve();
      });
      child.on('error', (err) => {
        this.exited = { error: err };
        live.delete(this);
        resolve();
      });
    });
    child.stderr.on('data', (b) => {
      this.stderrTail = (this.stderrTail + b.toString()).slice(-4000);
      this.options.log?.(`[sandbox ${this.spec.id}] ${b.toString().trimEnd()}`);
    });
    if (infoFd !== null) {
      this.sandboxPid = readSandboxPid(child.stdio[infoFd]).then((pid) => {
        this.sandboxStart = pid === null ? null : startTime(pid); // with the pid, what identifies the process
        return pid;
      });
    }
    try {
      await this.enter(entering, child);
    } catch (err) {
      await this.kill();
      throw err;
    }
    return { child, infoFd, fds: bw?.fds ?? [] };
  }

  /**
   * ": <the end of what execd (or bwrap) wrote to stderr>" for an error message, or "": the end, where a program says
   * why it stopped (answered messages are cut after their first 1,024 characters).
   */
  stderrReason() {
    const t = this.stderrTail.trim();
    if (!t) return '';
    return `: ${t.length > STDERR_REASON_CHARS ? `…${t.slice(-STDERR_REASON_CHARS)}` : t}`;
  }

  /** Starts execd and resolves once it listens on its socket (rejects with its stderr after a deadline). */
  async start() {
    this.phases = [];
    let last = performance.now();
    const phase = (name) => {
      const now = performance.now();
      this.phases.push([name, now - last]);
      last = now;
    };
    const prepared = this.launching;
    this.launching = null;
    prepared?.catch(() => {}); // a failed prepare() rejects start() below, once the directories are made
    fs.mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    const identity = this.spec.identity;
    if (identity) fs.chownSync(this.dir, identity.uid, identity.gid); // 0700: only the sandbox uid (and root)
    for (const d of Object.values(this.dirs)) {
      fs.mkdirSync(d, { recursive: true, mode: 0o755 });
      if (identity) fs.chownSync(d, identity.uid, identity.gid);
    }
    if (this.spec.resolvConf) fs.writeFileSync(path.join(this.dir, 'resolv.conf'), this.spec.resolvConf.text, { mode: 0o644 });
    if (this.runDirFd === null) this.runDirFd = fs.openSync(this.dirs.run, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY);
    phase('dirs');
    const { child, infoFd, fds } = await (prepared ?? this.launch());
    try {
      if (infoFd !== null) child.stdio[infoFd + 2].end(Buffer.from(this.bwrapOptions(fds, this.execdFile).map((x) => `${x}\0`).join('')));
    } catch (err) {
      await this.kill(); // bwrap never ran: its gate (or bwrap waiting for its options) goes
      throw err;
    }
    phase('spawn');
    if (this.gated) this.openGate(child);
    const released = infoFd === null ? Promise.resolve() : this.attach(child.stdio[infoFd + 1], phase);
    await released.then(() => new Promise((resolve, reject) => {
      let out = '';
      const timer = setTimeout(() => fail(new Error(`execd did not start within ${READY_TIMEOUT_MS} ms`)), READY_TIMEOUT_MS);
      const fail = (err) => {
        clearTimeout(timer);
        reject(Object.assign(new Error(`${err.message}${this.stderrReason()}`), { told: true }));
      };
      child.stdout.on('data', (b) => {
        if (out === null) return; // ready already; keep draining
        out += b.toString();
        if (out.includes('execd ready')) {
          out = null;
          clearTimeout(timer);
          phase('execd');
          Promise.all(this.attached.map((a) => a.ready?.())).then(() => {
            phase('ready');
            resolve();
          }, (err) => fail(err));
        }
      });
      this.exitPromise.then(() => stderrDrained(child)).then(() => {
        // after its stderr ended: the exit event can come before the last of what it wrote (bwrap's reason)
        if (out !== null) fail(new Error(`execd exited before it was ready (${JSON.stringify(this.exited.error?.message ?? this.exited)})`));
      });
    })).catch(async (err) => {
      await this.kill();
      await stderrDrained(child); // the reason bwrap or execd wrote before it exited
      if (!err.told) err.message += this.stderrReason();
      throw err;
    });
  }

  /** Runs `entering` attachments' enter() on the gated bwrap process (its gate stays closed: openGate()). */
  async enter(entering, child) {
    if (!entering.length) return;
    this.gated = true; // until the gate opens, bwrap has not run: kill() has no sandbox pid to wait for
    for (const a of entering) {
      this.attached.push(a);
      await a.enter({ pid: child.pid });
    }
  }

  /** Lets the gated process exec bwrap, which then reads its options (written before). */
  openGate(child) {
    child.stdin.on('error', () => {});
    child.stdin.end('go\n');
    this.gated = false;
  }

  /**
   * Once bwrap reported the sandbox's pid, runs the other attachments' attach(), then lets the sandbox go on by
   * writing to its block fd. Rejects when bwrap fails first (or reports nothing within READY_TIMEOUT_MS) or an
   * attachment throws.
   */
  async attach(block, phase) {
    const pid = await this.sandboxPid;
    if (pid === null) throw new Error('bubblewrap could not create the sandbox');
    phase('bwrap');
    const attaching = this.attachments.filter((x) => !x.enter);
    for (const a of attaching) {
      this.attached.push(a);
      await a.attach({ pid, netns: `/proc/${pid}/ns/net` });
    }
    if (attaching.length) phase('network');
    block.on('error', () => {});
    block.end('1');
  }

  /** Pids of the sandbox: for bwrap every descendant of the bwrap process (its pid-namespace init and below). */
  pids() {
    return this.child?.pid && !this.exited ? descendants(this.child.pid) : [];
  }

  pause() {
    if (!this.child || this.exited) return;
    signalTree(this.child.pid, 'SIGSTOP');
    if (this.options.isolation === 'none') signal(this.child.pid, 'SIGSTOP');
    this.paused = true;
  }

  resume() {
    if (!this.child || this.exited) return;
    if (this.options.isolation === 'none') signal(this.child.pid, 'SIGCONT');
    signalTree(this.child.pid, 'SIGCONT');
    this.paused = false;
  }

  /** True when `pid` is still the sandbox's first process (the same start time): never signal a pid the system reused. */
  isOurs(pid) {
    return this.sandboxStart != null && startTime(pid) === this.sandboxStart;
  }

  /** Kills every process of the sandbox and waits (bounded) for it to be gone. Does not remove the dirs. */
  async kill() {
    if (this.child?.pid && !this.exited) {
      // a sandbox still starting: its first process may be cloned but not yet a descendant we can see, and bwrap's
      // --die-with-parent does not reach a child killed before it armed it; so wait (bounded) for bwrap's report
      const sandboxPid = this.gated ? null : await this.sandboxPid;
      const all = descendants(this.child.pid);
      if (sandboxPid && !all.includes(sandboxPid) && this.isOurs(sandboxPid)) all.push(sandboxPid);
      // SIGKILL works on stopped processes too; with bwrap the first descendant is the pid-namespace init,
      // whose death takes the whole namespace with it.
      signal(this.child.pid, 'SIGKILL');
      for (const p of all) signal(p, 'SIGKILL');
      const deadline = Date.now() + EXIT_TIMEOUT_MS;
      await Promise.race([this.exitPromise, new Promise((r) => setTimeout(r, EXIT_TIMEOUT_MS).unref())]);
      // then until every process of the tree is gone (or only a zombie waiting for its reaper)
      while (Date.now() < deadline && all.some(alive)) await new Promise((r) => setTimeout(r, 10));
    }
    this.launching = null;
    if (this.runDirFd !== null) {
      fs.closeSync(this.runDirFd);
      this.runDirFd = null;
    }
    for (const a of this.attached) {
      try {
        await a.release();
      } catch (err) {
        this.options.log?.(`[sandbox ${this.spec.id}] ${err.message}`);
      }
    }
    this.attached = [];
  }

  removeDirs() {
    removeTree(this.dir);
  }
}

/**
 * `rm -rf` of p that also removes what its owner cannot list: overlayfs's work/work (mode 000), a directory a sandbox
 * made mode 000 (a non-root server has no override). On EACCES every directory under p is given mode 0700 first
 * (lstat: no symlink is followed); only for trees nothing runs in any more (a killed sandbox's, a snapshot's data).
 */
export function removeTree(p) {
  try {
    fs.rmSync(p, { recursive: true, force: true });
    return;
  } catch (err) {
    if (err.code !== 'EACCES' && err.code !== 'EPERM') throw err;
  }
  const open = (d) => {
    let st;
    try {
      st = fs.lstatSync(d);
    } catch {
      return;
    }
    if (!st.isDirectory()) return;
    fs.chmodSync(d, 0o700);
    for (const name of fs.readdirSync(d)) open(path.join(d, name));
  };
  open(p);
  fs.rmSync(p, { recursive: true, force: true });
}

/**
 * Resolves once the child's stderr ended (everything it wrote was read), or after ms: a descendant that inherited
 * the pipe may keep it open after the child itself exited.
 */
function stderrDrained(child, ms = 500) {
  const err = child.stderr;
  if (!err || err.readableEnded || err.destroyed) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    const done = () => {
      clearTimeout(timer);
      resolve();
    };
    err.once('end', done);
    err.once('close', done);
  });
}

/** The start time of process `pid` (clock ticks after boot, /proc/<pid>/stat field 22), or null when it is gone. */
function startTime(pid) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return null;
  }
}

/** The sandbox's host pid from bwrap's --info-fd JSON, or null (bwrap failed first, or nothing within the deadline). */
function readSandboxPid(info) {
  return new Promise((resolve) => {
    let buf = '';
    const timer = setTimeout(() => resolve(null), READY_TIMEOUT_MS);
    info.on('data', (b) => { buf += b.toString(); });
    info.on('error', () => {});
    info.on('close', () => {
      clearTimeout(timer);
      try {
        const pid = JSON.parse(buf)['child-pid'];
        resolve(Number.isInteger(pid) ? pid : null);
      } catch {
        resolve(null); // bwrap failed before it made the sandbox: its stderr says why
      }
    });
  });
}

const live = new Set();
let exitHookInstalled = false;
/** Last resort when the server process exits without close(): kill every sandbox still running (bwrap sandboxes
 * also die with their parent through --die-with-parent, even on SIGKILL; isolation 'none' has only this). */
function installExitHook() {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.once('exit', () => {
    for (const p of live) {
      if (!p.child?.pid || p.exited) continue;
      for (const pid of [p.child.pid, ...descendants(p.child.pid)]) signal(pid, 'SIGKILL');
    }
  });
}

const shellQuote = (s) => (/^[A-Za-z0-9_\-.,:/=@%+]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`);

/** Runs the sandbox's entrypoint as a background command of its execd (like a container's main process). */
export function startEntrypoint(socketPath, argv, token) {
  return new Promise((resolve) => {
    const body = JSON.stringify({ command: argv.map(shellQuote).join(' '), background: true });
    const headers = { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) };
    if (token) headers['X-EXECD-ACCESS-TOKEN'] = token;
    const req = http.request({ socketPath, path: '/command', method: 'POST', headers, agent: false, timeout: 10000 }, (res) => {
      res.resume();
      res.on('end', resolve);
      res.on('error', resolve);
    });
    req.on('error', resolve);
    req.on('timeout', () => req.destroy());
    req.end(body);
  });
}

/**
 * Why this bwrap cannot mount volumes race-free, or null: it needs --bind-fd/--ro-bind-fd (bubblewrap 0.10.0, and
 * Debian 12's 0.8.0-2+deb12u1), which mounts an open descriptor's object and checks that it did (volumes.js).
 */
export function bindFdProblem(bwrap) {
  let help;
  try {
    help = execFileSync(bwrap, ['--help'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 10000 });
  } catch (err) {
    help = String(err.stdout ?? '');
  }
  if (/^\s*--bind-fd\b/m.test(help) && /^\s*--ro-bind-fd\b/m.test(help)) return null;
  return `${bwrap} has no --bind-fd (bubblewrap 0.10.0 or Debian 12's 0.8.0-2+deb12u1 has it), which volumes need`;
}

/**
 * Checks once that bwrap can create a sandbox here, with the hardening when given (user namespace as a sandbox
 * uid, no capabilities, the seccomp filter); returns an error text or null.
 */
export function probeBwrap(bwrap, hardening = null) {
  const args = ['--unshare-pid', '--unshare-net'];
  let fd = null;
  if (hardening) {
    fd = fs.openSync(hardening.seccompPath, 'r');
    args.push('--unshare-user', '--uid', '0', '--gid', '0', '--disable-userns', '--cap-drop', 'ALL', '--seccomp', '3');
  }
  args.push('--ro-bind', '/', '/', '--proc', '/proc', '--dev', '/dev', '--', 'true');
  try {
    execFileSync(bwrap, args, { stdio: ['ignore', 'pipe', 'pipe', ...(fd === null ? [] : [fd])], timeout: 10000, ...(hardening?.identities?.probe() ?? {}) });
    return null;
  } catch (err) {
    return String(err.stderr ?? err.message).trim() || String(err.message);
  } finally {
    if (fd !== null) fs.closeSync(fd);
  }
}
