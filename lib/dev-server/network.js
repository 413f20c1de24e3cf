// Network of a sandbox given network (networkPolicy defaultAction 'allow', or none: the server's
// defaultNetworkPolicy, 'allow' like upstream unless started with 'deny'): the sandbox keeps its own network
// namespace (bwrap --unshare-net, like every sandbox) and gets user-mode networking from slirp4netns, a per-sandbox
// attachment (runner.js) that connects to the outside from the host on the sandbox's behalf. Host loopback services,
// the lifecycle API and other sandboxes' relays (all on 127.0.0.1) stay out of reach; see docs/dev-server-security.md.
// Without slirp4netns such a create is a 400, unless the server runs with insecure: true (host network, warned).
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ApiError } from './validate.js';
import { findExecutable } from './runner.js';
import { EgressResolver } from './egress.js';

const READY_TIMEOUT_MS = 10000;
const EXIT_TIMEOUT_MS = 5000;
const MTU = 65520;
/** slirp4netns's built-in DNS forwarder (network address + 3): it forwards to the host's first nameserver. */
const SANDBOX_NAMESERVER = '10.0.2.3';
/** slirp4netns's gateway: the host's loopback, unless --disable-host-loopback. */
const HOST_LOOPBACK = '10.0.2.2';

/**
 * What this machine offers sandboxes given network: { slirp4netns: path or null, problem: text or null }. The
 * server's user must be able to open /dev/net/tun (slirp4netns makes the sandbox's tap0 with it).
 */
export function probeNetwork() {
  const slirp4netns = findExecutable('slirp4netns');
  if (!slirp4netns) return { slirp4netns: null, problem: 'slirp4netns is not on PATH (Debian: apt-get install slirp4netns)' };
  try {
    fs.accessSync('/dev/net/tun', fs.constants.R_OK | fs.constants.W_OK);
  } catch (err) {
    return { slirp4netns: null, problem: `slirp4netns cannot make a tap device: /dev/net/tun is not usable by this user (${err.code})` };
  }
  const nft = findExecutable('nft');
  if (!nft) return { slirp4netns: null, problem: 'nft is not on PATH: the sandbox\'s firewall (host and cloud metadata addresses closed) cannot be set (Debian: apt-get install nftables)' };
  const nsenter = findExecutable('nsenter');
  if (!nsenter) return { slirp4netns: null, problem: 'nsenter is not on PATH: the sandbox\'s firewall cannot be set (Debian: apt-get install util-linux)' };
  const python = findExecutable('python3');
  return { slirp4netns, nft, nsenter, helper: python ? new NftHelper(python) : null, problem: null };
}

/**
 * Always closed to a sandbox's network, whatever its policy allows (docs/dev-server-security.md): link-local (which
 * holds the clouds' instance metadata service, 169.254.169.254) and the clouds' other metadata addresses.
 */
export const ALWAYS_CLOSED_V4 = ['169.254.0.0/16', '100.100.100.200'];
export const ALWAYS_CLOSED_V6 = ['fe80::/10', 'fd00:ec2::254'];

/** This machine's own addresses on every interface (not loopback: inside, 127.0.0.1 is the sandbox's own), read now. */
export function hostAddresses() {
  const v4 = new Set();
  const v6 = new Set();
  for (const i of Object.values(os.networkInterfaces()).flat()) {
    if (i.internal) continue;
    if (i.family === 'IPv4') v4.add(i.address);
    else v6.add(i.address.replace(/%.*$/, ''));
  }
  return { v4: [...v4], v6: [...v6] };
}

/**
 * The nft ruleset closing the host's addresses and ALWAYS_CLOSED_* to everything the sandbox sends (a TCP connect is
 * refused: ECONNREFUSED; anything else gets ICMP unreachable). One table, made by the server in the sandbox's network
 * namespace before anything runs there; the sandbox has no capability to change it.
 */
export function guardRuleset(host = hostAddresses(), egress = null) {
  const rules = [];
  const close = (fam, list) => {
    if (!list.length) return;
    const set = `{ ${list.join(', ')} }`;
    rules.push(`    ${fam} daddr ${set} meta l4proto tcp reject with tcp reset`, `    ${fam} daddr ${set} reject`);
  };
  const head = ['    oifname "lo" accept'];
  const nat = [];
  let chains = null;
  if (egress) {
    const { ports } = egress;
    // the resolver (egress.js) on the host's loopback through slirp4netns's 10.0.2.2: its two ports only; DNS to
    // slirp4netns's forwarder goes there, DNS (and DNS over TLS) to anything else is refused
    nat.push(`    ip daddr ${SANDBOX_NAMESERVER} udp dport 53 dnat ip to ${HOST_LOOPBACK}:${ports.udp}`,
      `    ip daddr ${SANDBOX_NAMESERVER} tcp dport 53 dnat ip to ${HOST_LOOPBACK}:${ports.tcp}`);
    head.push(`    ip daddr ${HOST_LOOPBACK} udp dport ${ports.udp} accept`, `    ip daddr ${HOST_LOOPBACK} tcp dport ${ports.tcp} accept`);
    close('ip', [HOST_LOOPBACK]);
    head.push(...rules.splice(0));
    head.push('    udp dport 53 reject', '    tcp dport { 53, 853 } reject with tcp reset');
    // the policy's part, in two chains that a change of the rules replaces (policyUpdate): `opened` (before the
    // closed addresses: allow rules naming them) and `policy` (after: the rules, the resolved names, defaultAction)
    chains = policyChains(egress.policy, host);
    head.push('    jump opened');
  }
  close('ip', ALWAYS_CLOSED_V4);
  close('ip', host.v4.filter((a) => !a.startsWith('169.254.') && a !== '100.100.100.200'));
  close('ip6', ALWAYS_CLOSED_V6);
  close('ip6', host.v6.filter((a) => !/^fe[89ab]/i.test(a) && a !== 'fd00:ec2::254'));
  const out = ['table inet osb_guard {'];
  if (egress) {
    out.push('  set resolved4 { type ipv4_addr; flags timeout; }',
      '  chain nat_output {', '    type nat hook output priority -100; policy accept;', ...nat, '  }',
      '  chain opened {', ...chains.opened.map((r) => `    ${r}`), '  }',
      '  chain rules {', ...chains.policy.map((r) => `    ${r}`), '  }');
  }
  out.push('  chain output {', '    type filter hook output priority 0; policy accept;', ...head, ...rules,
    ...(egress ? ['    jump rules'] : []), '  }', '}', '');
  return out.join('\n');
}

/**
 * The rules of a policy's two chains: opened (allow IP/CIDR rules naming an always-closed address: inside one of the
 * closed ranges, or one of the host's addresses) and rules (the other IP/CIDR rules in order — upstream's sidecar:
 * static nft sets —, then the addresses allowed names resolved to, then defaultAction).
 */
function policyChains(policy, host) {
  const verdict = (action) => (action === 'allow' ? ['accept'] : ['meta l4proto tcp reject with tcp reset', 'reject']);
  const opened = [];
  const rest = [];
  for (const r of policy.egress.filter((x) => x.kind !== 'domain')) {
    const fam = r.target.includes(':') ? 'ip6' : 'ip';
    const lines = verdict(r.action).map((v) => `${fam} daddr ${r.target} ${v}`);
    if (r.action === 'allow' && namesClosed(r.target, host)) opened.push(...lines);
    else rest.push(...lines);
  }
  rest.push('ip daddr @resolved4 accept', ...verdict(policy.defaultAction));
  return { opened, policy: rest };
}

/** The batch replacing a running sandbox's policy chains (one nft transaction: no moment without rules). */
export function policyUpdate(policy, host = hostAddresses()) {
  const { opened, policy: rest } = policyChains(policy, host);
  return ['flush chain inet osb_guard opened', 'flush chain inet osb_guard rules',
    ...opened.map((r) => `add rule inet osb_guard opened ${r}`), ...rest.map((r) => `add rule inet osb_guard rules ${r}`), ''].join('\n');
}

const ip4 = (a) => a.split('.').reduce((n, x) => n * 256 + Number(x), 0);
/** True when an IPv4 target (address or CIDR) lies inside `range` (CIDR or address). */
function within4(target, range) {
  const [ta, tl = '32'] = target.split('/');
  const [ra, rl = '32'] = range.split('/');
  if (!net.isIPv4(ta) || !net.isIPv4(ra) || Number(tl) < Number(rl)) return false;
  const size = 2 ** (32 - Number(rl));
  return Math.floor(ip4(ta) / size) === Math.floor(ip4(ra) / size);
}
/** True when a rule's IP/CIDR target names an always-closed address: inside a closed range, or a host address. */
function namesClosed(target, host) {
  if (target.includes(':')) {
    const t = target.toLowerCase();
    return ALWAYS_CLOSED_V6.includes(t) || host.v6.includes(t) || (/^fe[89ab]/.test(t) && !t.endsWith('/0'));
  }
  return [...ALWAYS_CLOSED_V4, ...host.v4].some((r) => within4(target, r));
}

const HELPER = fileURLToPath(new URL('./nft-helper.py', import.meta.url));

/**
 * nft-helper.py, one per server: loads rulesets into sandboxes' network namespaces through libnftables, a few
 * milliseconds each where nsenter + nft take tens (a create waits for its firewall). `ready` resolves false when it
 * cannot run (no python3 or libnftables): loadRuleset then spawns nsenter + nft. It ends with the server (close(), or
 * its stdin's end when the server dies); it never keeps the server's process alive.
 */
export class NftHelper {
  constructor(python) {
    this.pending = new Map();
    this.next = 1;
    this.child = spawn(python, ['-I', '-S', HELPER], { stdio: ['pipe', 'pipe', 'ignore'] });
    this.child.unref();
    for (const st of [this.child.stdin, this.child.stdout]) st.unref?.();
    this.child.stdin.on('error', () => {});
    let buf = '';
    let onReady;
    this.ready = new Promise((resolve) => { onReady = resolve; });
    const fail = (why) => {
      onReady(false);
      for (const done of this.pending.values()) done(why);
      this.pending.clear();
      this.dead = why;
    };
    this.child.once('error', (err) => fail(err.message));
    this.child.once('exit', () => fail('the nft helper exited'));
    this.child.stdout.on('data', (d) => {
      buf += d;
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        let m;
        try {
          m = JSON.parse(line);
        } catch {
          continue;
        }
        if (m.ready) onReady(true);
        else if (m.id == null) onReady(false);
        else {
          const done = this.pending.get(m.id);
          this.pending.delete(m.id);
          done?.(m.ok ? null : String(m.error));
        }
      }
    });
  }

  #ask(msg) {
    if (this.dead) return Promise.resolve(this.dead);
    const id = this.next++;
    return new Promise((resolve) => {
      this.pending.set(id, resolve);
      this.child.stdin.write(`${JSON.stringify({ id, ...msg })}\n`);
    });
  }

  /**
   * Opens the network namespace of `pid` (and its user namespace when `user`) once: resolves { handle } or
   * { error }. Loads through the handle reach that namespace even once the pid is reused.
   */
  async open(pid, user) {
    const id = this.next;
    const error = await this.#ask({ open: pid, user });
    return error ? { error } : { handle: id };
  }

  /** Loads `rules` into the namespace opened as `handle`: null or the error text. */
  load(handle, rules) {
    return this.#ask({ handle, rules });
  }

  release(handle) {
    return this.#ask({ release: handle });
  }

  close() {
    this.child.stdin.end();
    if (this.child.exitCode === null) this.child.kill('SIGKILL');
  }
}

/** A batch adding addresses to a sandbox's resolved4 set with their TTLs (an address already there gets its new TTL). */
export function resolvedElements(addrs) {
  const lines = [];
  for (const { address, ttl } of addrs) {
    lines.push(`add element inet osb_guard resolved4 { ${address} }`, `delete element inet osb_guard resolved4 { ${address} }`,
      `add element inet osb_guard resolved4 { ${address} timeout ${ttl}s }`);
  }
  return lines.join('\n') + '\n';
}

/**
 * Loads `ruleset` into the network namespace of the sandbox whose first process is `pid` (nft through nsenter; a
 * server that is not root enters the sandbox's user namespace, which owns that network namespace). Rejects with nft's
 * message when it cannot.
 */
export async function loadRuleset(tools, pid, ruleset, handle = null) {
  const { nft, nsenter, helper } = tools ?? {};
  if (helper && handle !== null) {
    const err = await helper.load(handle, ruleset);
    if (err) throw new Error(`the sandbox's firewall could not be set (nft): ${err}`);
    return;
  }
  if (!nft || !nsenter) throw new Error('the sandbox\'s firewall could not be set: nft or nsenter missing');
  const ns = process.getuid() === 0 ? [`--net=/proc/${pid}/ns/net`] : [`--user=/proc/${pid}/ns/user`, `--net=/proc/${pid}/ns/net`, '--preserve-credentials'];
  return new Promise((resolve, reject) => {
    const child = spawn(nsenter, [...ns, '--', nft, '-f', '-'], { stdio: ['pipe', 'ignore', 'pipe'] });
    let err = '';
    child.stderr.on('data', (b) => { err = (err + b).slice(-2000); });
    child.stdin.on('error', () => {});
    child.once('error', (e) => reject(new Error(`the sandbox's firewall could not be set: ${e.message}`)));
    child.once('exit', (code, sig) => (code === 0 ? resolve() : reject(new Error(`the sandbox's firewall could not be set (nft: ${sig ?? `exit code ${code}`}): ${err.trim()}`))));
    child.stdin.end(ruleset);
  });
}

/**
 * Where the sandbox's /etc/resolv.conf really is: /etc/resolv.conf, or where its symlinks lead (resolved by name:
 * bwrap mounts over the final file, creating it in the sandbox when it is outside the mounted host dirs, e.g.
 * /run/systemd/resolve/stub-resolv.conf). null when the host has none or it dangles.
 */
function resolvConfPath() {
  let p = '/etc/resolv.conf';
  for (let hops = 0; hops < 40; hops++) {
    let st;
    try {
      st = fs.lstatSync(p);
    } catch {
      return null;
    }
    if (!st.isSymbolicLink()) return p;
    p = path.resolve(path.dirname(p), fs.readlinkSync(p));
  }
  return null;
}

/**
 * The sandbox's resolv.conf: the host's search/domain/options lines, one nameserver, slirp4netns's forwarder (always:
 * a host nameserver on loopback, e.g. systemd-resolved's 127.0.0.53, would be the sandbox's own loopback inside).
 * { dest, text } or null (host without a resolv.conf).
 */
function sandboxResolvConf() {
  const dest = resolvConfPath();
  if (!dest) return null;
  let host = '';
  try {
    host = fs.readFileSync(dest, 'utf8');
  } catch { /* unreadable: nameserver only */ }
  const kept = host.split('\n').filter((l) => /^\s*(search|domain|options)\s/.test(l));
  return { dest, text: [...kept, `nameserver ${SANDBOX_NAMESERVER}`, ''].join('\n') };
}

/**
 * Resolves once bwrap brought up the loopback of the network namespace of `pid` (its 127.0.0.1 is in the namespace's
 * routing table): bwrap does that after it reported the pid, and slirp4netns --configure brings `lo` up too, so
 * starting it earlier races bwrap (which then dies with "loopback: Failed RTM_NEWADDR"). Rejects after READY_TIMEOUT_MS.
 */
async function loopbackUp(pid) {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (let wait = 1; ; wait = Math.min(wait * 2, 20)) {
    let table = '';
    try {
      table = fs.readFileSync(`/proc/${pid}/net/fib_trie`, 'utf8');
    } catch (err) {
      throw new Error(`the sandbox's network namespace is gone (${err.code})`);
    }
    if (/\b127\.0\.0\.1\b/.test(table)) return;
    if (Date.now() > deadline) throw new Error(`the sandbox's loopback did not come up within ${READY_TIMEOUT_MS} ms`);
    await new Promise((resolve) => setTimeout(resolve, wait));
  }
}

/**
 * slirp4netns for one sandbox, as a runner attachment: started once bwrap made the sandbox's network namespace, ready
 * before anything runs in it, killed after the sandbox is gone. It runs as the server's user (root keeps only
 * CAP_NET_BIND_SERVICE under --enable-sandbox), in an empty mount namespace with /etc and /run, under its seccomp
 * filter. As root it needs no user namespace (--netns-type=path: none is joined); a server that is not root has it
 * join the sandbox's user namespace, which owns the network namespace (and maps uid 0, which slirp4netns's sandbox
 * needs): such a sandbox is not nested in a second user namespace (see joinableUserns). --exit-fd: it also exits when
 * the server dies, however it dies.
 */
export class SlirpNetwork {
  constructor(slirp4netns, tools, resolver = null) {
    this.slirp4netns = slirp4netns;
    this.tools = tools; // { nft, nsenter }: the firewall (guardRuleset), loaded while slirp4netns starts
    this.resolver = resolver; // egress rules: the sandbox's EgressResolver (egress.js), or null
    this.nsHandle = null; // the nft helper's handle of the sandbox's namespaces (NftHelper.open)
    this.child = null;
    this.exited = null;
  }

  async attach({ pid, netns }) {
    // the helper opens the sandbox's namespaces once: every later load (answers, policy changes) goes there
    const helper = this.tools?.helper;
    if (helper && await helper.ready && !helper.dead) { // a helper that died: nsenter + nft from then on
      const opened = await helper.open(pid, process.getuid() !== 0);
      if (opened.error) throw new Error(`the sandbox's firewall could not be set: ${opened.error}`);
      this.nsHandle = opened.handle;
    }
    const load = (rules) => loadRuleset(this.tools, pid, rules, this.nsHandle ?? null);
    // the host's addresses are read once: the guard and every later policy update close the same set
    const host = hostAddresses();
    let egress = null;
    if (this.resolver) {
      egress = { policy: this.resolver.policy, ports: await this.resolver.listen() };
      this.resolver.allowAddresses = (addrs) => load(resolvedElements(addrs));
      this.resolver.applyPolicy = (policy) => load(policyUpdate(policy, host));
    }
    const guard = load(guardRuleset(host, egress));
    guard.catch(() => {}); // awaited below
    try {
      await loopbackUp(pid);
    } catch (err) {
      await guard.catch(() => {});
      throw err;
    }
    // with egress rules the host's loopback stays reachable through 10.0.2.2, where the firewall opens only the
    // resolver's two ports
    const args = ['--configure', `--mtu=${MTU}`, ...(this.resolver ? [] : ['--disable-host-loopback']), '--enable-sandbox', '--enable-seccomp', '--ready-fd=3', '--exit-fd=4'];
    // root: the network namespace by path, no user namespace joined; otherwise by pid: /proc/<pid>/ns/user is joined
    if (process.getuid() === 0) args.push('--netns-type=path', netns, 'tap0');
    else args.push(String(pid), 'tap0');
    const child = spawn(this.slirp4netns, args, { stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'pipe'] });
    this.child = child;
    this.exited = new Promise((resolve) => {
      child.once('exit', (code, sig) => resolve(sig ? `killed by ${sig}` : `exit code ${code}`));
      child.once('error', (err) => resolve(err.message));
    });
    let stderr = '';
    child.stderr.on('data', (b) => {
      stderr = (stderr + b.toString()).slice(-4000);
    });
    child.stdio[4].on('error', () => {}); // its exit fd: ours closes when this process ends
    const tail = () => (stderr.trim() ? `: ${stderr.trim()}` : '');
    try {
      await new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`slirp4netns did not set up the sandbox's network within ${READY_TIMEOUT_MS} ms${tail()}`)), READY_TIMEOUT_MS);
        child.stdio[3].on('error', () => {});
        child.stdio[3].on('data', (b) => {
          if (!b.includes('1')) return;
          clearTimeout(timer);
          resolve();
        });
        this.exited.then((why) => {
          clearTimeout(timer);
          reject(new Error(`slirp4netns failed (${why})${tail()}`));
        });
      });
      await guard; // fail closed: no sandbox without its firewall
    } catch (err) {
      await guard.catch(() => {});
      await this.release();
      throw err;
    }
  }

  /** Kills slirp4netns and waits (bounded) until it is gone. */
  async release() {
    await this.resolver?.close();
    if (this.nsHandle != null) {
      const handle = this.nsHandle;
      this.nsHandle = null;
      await this.tools.helper.release(handle);
    }
    const child = this.child;
    if (!child) return;
    this.child = null;
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    let timer;
    const gone = await Promise.race([
      this.exited.then(() => true),
      new Promise((resolve) => { timer = setTimeout(() => resolve(false), EXIT_TIMEOUT_MS); }),
    ]);
    clearTimeout(timer);
    for (const s of child.stdio) s?.destroy();
    if (!gone) throw new Error(`slirp4netns (pid ${child.pid}) did not exit within ${EXIT_TIMEOUT_MS} ms of SIGKILL`);
  }
}

/**
 * How a new sandbox given network gets it, from the server's probeNetwork() result and insecure flag:
 * { hostNetwork, resolvConf, attachment, joinableUserns }. joinableUserns: bwrap must leave out --disable-userns (its
 * nested user namespace maps only the server's uid, and is not the owner of the network namespace), so that
 * slirp4netns run by a non-root server can join; creating user namespaces stays refused by the seccomp filter.
 * Throws a 400 when slirp4netns cannot be used and the server is not insecure.
 */
export function sandboxNetwork({ slirp4netns, nft, nsenter, helper, problem, insecure, dnsUpstream }, policy = null) {
  if (slirp4netns) {
    // egress rules (or defaultAction deny with allow rules): the sandbox's names go through a resolver of ours
    const resolver = policy && (policy.egress.length || policy.defaultAction === 'deny') ? new EgressResolver({ policy, upstream: dnsUpstream }) : null;
    return { hostNetwork: false, resolvConf: sandboxResolvConf(), attachment: new SlirpNetwork(slirp4netns, { nft, nsenter, helper }, resolver), joinableUserns: process.getuid() !== 0 };
  }
  if (insecure && !(policy?.egress.length || policy?.defaultAction === 'deny')) return { hostNetwork: true, resolvConf: null, attachment: null, joinableUserns: false };
  throw new ApiError(400, 'SANDBOX::NETWORK_NOT_AVAILABLE',
    `This server cannot give a sandbox network without exposing the host's loopback services: ${problem}. Install it, `
    + 'create the sandbox without networkPolicy (no network), or start the server with insecure: true (--insecure) to share the host network.');
}
