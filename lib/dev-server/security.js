// Security helpers of the local OpenSandbox-compatible server (threat model: docs/dev-server-security.md):
// per-sandbox access tokens and their checks, refusal of browser-originated requests, the libseccomp filter, the
// unprivileged host identity of sandboxes, and the probe that refuses to run sandboxes the machine cannot confine.
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { deadInstances } from './proctree.js';

const HERE = path.dirname(fileURLToPath(import.meta.url));

/** Endpoint header carrying a sandbox's own access token (the name of upstream's `secureAccess` header). */
export const SECURE_ACCESS_HEADER = 'OpenSandbox-Secure-Access';
/** One answer for an unknown sandbox and for a missing or wrong token: ids cannot be probed. */
export const SANDBOX_UNAUTHORIZED = { code: 'SANDBOX::UNAUTHORIZED', message: `Missing or invalid ${SECURE_ACCESS_HEADER} header for this sandbox.` };
/** First host uid of sandboxes, and their gid, when the server runs as root (root inside a sandbox maps to its uid). */
export const DEFAULT_SANDBOX_UID = 1_000_000_000;

export function newToken() {
  return crypto.randomBytes(32).toString('base64url');
}

/** Constant-time string comparison (false for anything but two equal strings). */
export function safeEqual(a, b) {
  if (typeof a !== 'string' || typeof b !== 'string') return false;
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && crypto.timingSafeEqual(x, y);
}

/**
 * Why a request looks browser-originated (a page in the user's browser driving the server), or null. Browsers send
 * `Origin` on cross-origin requests and WebSocket handshakes and `Sec-Fetch-Site` on every request; clients of this
 * server (the C core, the SDKs, curl) send neither. `sameHostOrigin`: an Origin naming the request's own Host is
 * accepted (WebSocket client libraries send one; on execd the sandbox token is what protects).
 */
export function browserOrigin(headers, { sameHostOrigin = false } = {}) {
  const origin = headers.origin;
  if (origin !== undefined) {
    const host = String(headers.host ?? '');
    const same = sameHostOrigin && host !== '' && [host, `http://${host}`, `ws://${host}`].includes(String(origin));
    if (!same) return `Origin ${JSON.stringify(String(origin))}`;
  }
  const site = headers['sec-fetch-site'];
  if (site !== undefined && site !== 'none') return `Sec-Fetch-Site ${JSON.stringify(String(site))}`;
  return null;
}

/**
 * Checks a request's headers (lowercase names) against a sandbox's token. Returns null when allowed, else
 * { status, body } to answer.
 */
export function checkExecdAccess(headers, sandboxToken) {
  const why = browserOrigin(headers, { sameHostOrigin: true });
  if (why) return { status: 403, body: { code: 'GENERAL::FORBIDDEN', message: `browser-originated requests are refused (${why})` } };
  if (!sandboxToken || !safeEqual(headers[SECURE_ACCESS_HEADER.toLowerCase()], sandboxToken)) return { status: 401, body: SANDBOX_UNAUTHORIZED };
  return null;
}

export function httpAnswer(status, body) {
  const text = JSON.stringify(body);
  return `HTTP/1.1 ${status} ${http.STATUS_CODES[status] ?? 'Error'}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n${text}`;
}

/**
 * Parses the head of the first HTTP request of a connection: null while incomplete, else { headers } (lowercase
 * names, first value wins) and target (the request path), or { error } for a head that is not HTTP.
 */
export function parseRequestHead(buf) {
  const end = buf.indexOf('\r\n\r\n');
  if (end < 0) return null;
  const lines = buf.subarray(0, end).toString('latin1').split('\r\n');
  if (!/^[A-Z]+ \S+ HTTP\/1\.[01]$/.test(lines[0])) return { error: 'not an HTTP/1.x request' };
  const target = lines[0].split(' ')[1];
  const headers = {};
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(':');
    if (colon <= 0) return { error: 'malformed header line' };
    const name = line.slice(0, colon).trim().toLowerCase();
    if (!(name in headers)) headers[name] = line.slice(colon + 1).trim();
  }
  return { headers, target };
}

/** The BPF program of the sandbox seccomp filter, built by libseccomp (python3-seccomp). Throws naming what is missing. */
export function seccompProgram() {
  const python = ['/usr/bin/python3', '/bin/python3'].find((p) => fs.existsSync(p));
  if (!python) throw new Error('the seccomp filter needs /usr/bin/python3 with python3-seccomp (Debian: apt-get install python3-seccomp)');
  try {
    const bpf = execFileSync(python, [path.join(HERE, 'seccomp-filter.py')], { stdio: ['ignore', 'pipe', 'pipe'], timeout: 20000 });
    if (bpf.length === 0 || bpf.length % 8 !== 0) throw new Error(`unexpected filter size ${bpf.length}`);
    return bpf;
  } catch (err) {
    const text = String(err.stderr ?? '').trim() || err.message;
    if (/No module named 'seccomp'/.test(text)) throw new Error('the seccomp filter needs libseccomp for Python (Debian: apt-get install python3-seccomp)');
    throw new Error(`building the seccomp filter failed: ${text}`);
  }
}

/** How many uids one server instance claims (each sandbox takes one of them). */
export const UID_BLOCK = 65536;
/** The largest sandbox uid: Node's spawn() takes int32 uids. */
export const MAX_SANDBOX_UID = 2 ** 31 - 1;
/** Machine-wide claims of uid blocks, one directory `<server pid>-<block index, hex>` each (root servers only). */
const UID_CLAIMS = '/run/mastra-opensandbox/uids';

/** Every uid (real, effective, saved, filesystem) of a process on this machine. */
function uidsInUse() {
  const uids = new Set();
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const m = /^Uid:\t(.*)$/m.exec(fs.readFileSync(`/proc/${name}/status`, 'utf8'));
      for (const u of m[1].split('\t')) uids.add(Number(u));
    } catch { /* exited meanwhile */ }
  }
  return uids;
}

/**
 * The host identities of a root-started server's sandboxes: each sandbox its own uid, from a block of UID_BLOCK
 * uids that this server claims at start (a random block of the range from `base` to MAX_SANDBOX_UID, claimed by a directory in
 * UID_CLAIMS that no live server holds, and in which no process on the machine runs); all sandboxes share gid
 * `base` (the sandbox group: named volumes and the ACLs on shared host directories are the group's). A uid is
 * handed out again only after every other uid of the block was (first in, first out), and only once its sandbox's
 * processes are gone. Claims of servers that died are removed by the next server's start.
 */
export class SandboxIdentities {
  constructor(base, { claims = UID_CLAIMS } = {}) {
    this.gid = base;
    this.claims = claims;
    fs.mkdirSync(claims, { recursive: true, mode: 0o755 });
    for (const name of deadInstances(claims)) fs.rmSync(path.join(claims, name), { recursive: true, force: true });
    const taken = new Set(fs.readdirSync(claims).map((n) => /^\d+-([0-9a-f]+)$/.exec(n)?.[1]).filter(Boolean).map((h) => parseInt(h, 16)));
    const running = [...uidsInUse()];
    const blocks = Math.floor((MAX_SANDBOX_UID - base + 1) / UID_BLOCK);
    for (let attempt = 0; attempt < 64 && !this.claim; attempt++) {
      const k = crypto.randomInt(blocks);
      const first = base + k * UID_BLOCK;
      if (taken.has(k) || running.some((u) => u >= first && u < first + UID_BLOCK)) continue;
      const claim = path.join(claims, `${process.pid}-${k.toString(16).padStart(8, '0')}`);
      fs.mkdirSync(claim);
      Object.assign(this, { claim, first, next: first });
    }
    if (!this.claim) throw new Error(`no free block of ${UID_BLOCK} sandbox uids from sandboxUid ${base} (claims in ${claims})`);
    this.free = [];
  }

  /** A uid nobody else has, for bwrap's probe (the first of the block; the probe has exited before any sandbox). */
  probe() {
    return { uid: this.first, gid: this.gid };
  }

  /** The identity { uid, gid } of a new sandbox; throws when every uid of the block is in use. */
  allocate() {
    if (this.next < this.first + UID_BLOCK) return { uid: this.next++, gid: this.gid };
    if (this.free.length) return { uid: this.free.shift(), gid: this.gid };
    throw new Error(`all ${UID_BLOCK} sandbox uids of this server are in use`);
  }

  /** Gives a sandbox's uid back once its processes are gone (once per identity: a second call does nothing). */
  release(identity) {
    if (identity.released) return;
    identity.released = true;
    this.free.push(identity.uid);
  }

  /** Removes this server's claim. */
  close() {
    fs.rmSync(this.claim, { recursive: true, force: true });
  }
}

/** The sandboxes' identities: SandboxIdentities from `base` when the server runs as root, else null (the server's own). */
export function sandboxIdentities(base) {
  if (process.getuid?.() !== 0) return null;
  return new SandboxIdentities(base);
}

/** The ACL entry naming `who`: a sandbox identity { uid, gid } by the sandboxes' shared group, { uid } by its user. */
const aclWho = (who) => (who.gid !== undefined ? `g:${who.gid}` : `u:${who.uid}`);
const describeWho = (who) => (who.gid !== undefined ? `the sandbox group (gid ${who.gid})` : `uid ${who.uid}`);

/** True when the mode bits of `st` give `who` ({ uid, gid } or either) every permission bit of `need` (0..7). */
export function modeAllows(st, who, need) {
  const bits = st.uid === who.uid ? st.mode >> 6 : st.gid === who.gid ? st.mode >> 3 : st.mode;
  return (bits & need) === need;
}

const traversable = new Set();
/**
 * bwrap runs as the sandbox user (root-started server) and must reach every directory it bind-mounts: gives `who`
 * (a sandbox identity { uid, gid }: the sandbox group; { uid }: that user) search (x) permission, by a POSIX ACL entry, on each ancestor of `dir`
 * it cannot search through its mode. For paths no sandbox can change (the data directory, node, the package); host
 * volumes go through their descriptors (volumes.js). Code in a sandbox never sees these host directories.
 */
export function ensureTraversable(dir, who) {
  const chain = [];
  for (let d = path.dirname(dir); ; d = path.dirname(d)) {
    chain.push(d);
    if (d === '/') break;
  }
  for (const d of chain.reverse()) {
    const key = `${aclWho(who)}:${d}`;
    if (traversable.has(key)) continue;
    if (!modeAllows(fs.statSync(d), who, 0o1)) setfacl(['-m', `${aclWho(who)}:x`], who, { path: d });
    traversable.add(key);
  }
}

/**
 * Runs setfacl `args` on `target`: { path } (a path no sandbox can change) or { fd, path } (an open descriptor, O_PATH
 * is enough: setfacl acts on /proc/self/fd/3 of its own, the object that descriptor holds, never on `path`, which
 * only names it in errors). Throws with setfacl's message.
 */
export function setfacl(args, who, target) {
  const stdio = ['ignore', 'ignore', 'pipe'];
  if (target.fd !== undefined) stdio.push(target.fd);
  try {
    execFileSync('setfacl', [...args, target.fd !== undefined ? '/proc/self/fd/3' : target.path], { stdio, timeout: 10000 });
  } catch (err) {
    const why = err.code === 'ENOENT' ? 'setfacl is not installed (Debian: apt-get install acl)' : String(err.stderr ?? err.message).trim();
    throw new Error(`cannot give ${describeWho(who)} access to ${target.path}: ${why}`);
  }
}

/**
 * Grants `who` access to a directory it may not reach through its mode (root-started server only): a POSIX ACL entry
 * on the directory plus, for `write`, default entries so that what sandboxes create stays usable by the directory's
 * owner and by `who`. `target` as for setfacl(); `owner`: the directory's owner uid.
 */
export function grantAccess(target, who, write, owner) {
  const entries = [`${aclWho(who)}:${write ? 'rwx' : 'r-x'}`];
  if (write) entries.push(`d:${aclWho(who)}:rwx`, `d:u:${owner}:rwx`);
  setfacl(['-m', entries.join(',')], who, target);
}
