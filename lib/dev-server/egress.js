// Egress rules of a sandbox's networkPolicy, enforced as upstream's egress sidecar enforces them (components/egress):
// names go through a resolver of the server's (one per sandbox, UDP and TCP on the host's loopback, which the
// sandbox's firewall lets it reach through slirp4netns's 10.0.2.2 and only there); a name that the rules allow is
// forwarded to the upstream resolver and the IPv4 addresses of its answer join the sandbox's nft set `resolved4` for
// the answer's TTL (at least MIN_TTL_S); a denied name answers NXDOMAIN. The sandbox connects only to addresses in
// that set, to IP/CIDR targets its rules allow, or anywhere when defaultAction is 'allow' (network.js policyRuleset).
import crypto from 'node:crypto';
import dgram from 'node:dgram';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';

const MIN_TTL_S = 10;
const UPSTREAM_TIMEOUT_MS = 5000;
const MAX_TCP_CONNECTIONS = 16;
/** Upstream's sidecar: its /policy API on this port, behind this header when it has a token. */
export const EGRESS_PORT = 18080;
export const EGRESS_AUTH_HEADER = 'OPENSANDBOX-EGRESS-AUTH';
const MAX_POLICY_BODY = 1 << 20;
const MAX_RULES = 4096;

/**
 * The policy as upstream's sidecar reads it (pkg/policy ParsePolicy): defaultAction lowercased, omitted = 'deny';
 * each rule { action, target, kind: 'domain' | 'ip' | 'cidr' } in order. Input already validated (validate.js).
 */
export function normalizePolicy(np) {
  const defaultAction = String(np?.defaultAction ?? '').trim().toLowerCase() || 'deny';
  const egress = (np?.egress ?? []).map((r) => {
    const target = r.target.trim();
    return { action: String(r.action ?? '').trim().toLowerCase() || 'deny', target, kind: targetKind(target) };
  });
  return { defaultAction, egress };
}

/** 'ip' (a literal IPv4/IPv6 address), 'cidr' (address/prefix), else 'domain'. */
export function targetKind(target) {
  if (net.isIP(target)) return 'ip';
  const m = /^([^/]+)\/(\d{1,3})$/.exec(target);
  if (m && net.isIP(m[1]) && Number(m[2]) <= (net.isIPv4(m[1]) ? 32 : 128)) return 'cidr';
  return 'domain';
}

/**
 * A policy body of upstream's /policy API (POST: { defaultAction, egress }; PATCH: the rules alone) checked as its
 * sidecar does (pkg/policy normalizePolicy): throws an Error with its message when a rule is malformed.
 */
function checkRules(rules) {
  if (!Array.isArray(rules)) throw new Error('egress must be a list of rules');
  if (rules.length > MAX_RULES) throw new Error(`at most ${MAX_RULES} egress rules`);
  for (const r of rules) {
    if (r === null || typeof r !== 'object' || Array.isArray(r)) throw new Error('an egress rule must be an object');
    const action = String(r.action ?? '').trim().toLowerCase() || 'deny';
    if (action !== 'allow' && action !== 'deny') throw new Error(`unsupported action ${JSON.stringify(r.action)}`);
    if (typeof r.target !== 'string' || !r.target.trim()) throw new Error('egress target cannot be empty');
  }
}

/** Upstream's modeFromPolicy. */
function modeOf(p) {
  if (!p.egress.length) return p.defaultAction === 'allow' ? 'allow_all' : 'deny_all';
  return 'enforcing';
}

/** Upstream's match: exact name, or `*.suffix` matching names below suffix (not suffix itself); case-insensitive. */
function matches(pattern, name) {
  const p = pattern.toLowerCase();
  if (p === name) return true;
  return p.startsWith('*.') && name.endsWith(p.slice(1)) && name !== p.slice(2);
}

/** 'allow' or 'deny' for a queried name: the first domain rule matching it, else defaultAction. */
export function evaluate(policy, qname) {
  const name = qname.toLowerCase().replace(/\.$/, '');
  for (const r of policy.egress) if (r.kind === 'domain' && matches(r.target, name)) return r.action;
  return policy.defaultAction;
}

/** The first nameserver of the host's /etc/resolv.conf (the default upstream), or null. */
export function hostNameserver() {
  try {
    const m = /^\s*nameserver\s+(\S+)/m.exec(fs.readFileSync('/etc/resolv.conf', 'utf8'));
    return m && net.isIP(m[1]) ? m[1] : null;
  } catch {
    return null;
  }
}

/** 'ip', 'ip:port' or '[ipv6]:port' -> { host, port }, or null when it is none of these. */
export function parseUpstream(text) {
  if (!text) return null;
  if (net.isIP(text)) return { host: text, port: 53 };
  const m = /^(?:\[([^\]]+)\]|([^:]+)):(\d{1,5})$/.exec(text);
  const host = m && (m[1] ?? m[2]);
  if (!host || !net.isIP(host) || Number(m[3]) < 1 || Number(m[3]) > 65535) return null;
  return { host, port: Number(m[3]) };
}

/** Skips a (possibly compressed) name at off of msg; the offset after it, or -1 when malformed. */
function skipName(msg, off) {
  for (let n = 0; n < 128; n++) {
    if (off >= msg.length) return -1;
    const len = msg[off];
    if (len === 0) return off + 1;
    if ((len & 0xc0) === 0xc0) return off + 2 <= msg.length ? off + 2 : -1;
    if (len & 0xc0) return -1;
    off += 1 + len;
  }
  return -1;
}

/**
 * A query's question: { qname (dotted, as sent), end (offset after the question) } or null when the message is not
 * one plain query with one uncompressed question.
 */
export function parseQuery(msg) {
  if (msg.length < 12 || msg.length > 4096) return null;
  if (msg[2] & 0x80) return null; // a response
  if (msg.readUInt16BE(4) !== 1) return null;
  const labels = [];
  let off = 12;
  let total = 0;
  for (;;) {
    if (off >= msg.length) return null;
    const len = msg[off];
    if (len === 0) break;
    if (len & 0xc0) return null;
    if (off + 1 + len > msg.length) return null;
    total += len + 1;
    if (total > 255) return null;
    labels.push(msg.subarray(off + 1, off + 1 + len).toString('latin1'));
    off += 1 + len;
  }
  off += 1;
  if (off + 4 > msg.length) return null;
  return { qname: labels.join('.'), end: off + 4 };
}

/** The answer to a query (msg) with rcode and no records: the header and its question. */
export function refusal(msg, end, rcode) {
  const out = Buffer.from(msg.subarray(0, end));
  out[2] = 0x80 | (msg[2] & 0x79); // QR, the query's opcode and RD
  out[3] = 0x80 | rcode; // RA
  out.writeUInt16BE(1, 4);
  out.writeUInt32BE(0, 6);
  out.writeUInt16BE(0, 10);
  return out;
}

/** The IPv4 A records of a response's answer section: [{ address, ttl }] ([] when malformed). */
export function answerAddresses(msg) {
  if (msg.length < 12) return [];
  const qd = msg.readUInt16BE(4);
  const an = msg.readUInt16BE(6);
  let off = 12;
  for (let i = 0; i < qd; i++) {
    off = skipName(msg, off);
    if (off < 0 || off + 4 > msg.length) return [];
    off += 4;
  }
  const out = [];
  for (let i = 0; i < an; i++) {
    off = skipName(msg, off);
    if (off < 0 || off + 10 > msg.length) return out;
    const type = msg.readUInt16BE(off);
    const cls = msg.readUInt16BE(off + 2);
    const ttl = msg.readUInt32BE(off + 4);
    const rdlen = msg.readUInt16BE(off + 8);
    off += 10;
    if (off + rdlen > msg.length) return out;
    if (type === 1 && cls === 1 && rdlen === 4) out.push({ address: [...msg.subarray(off, off + 4)].join('.'), ttl });
    off += rdlen;
  }
  return out;
}

/**
 * One sandbox's resolver. listen() binds its UDP socket and TCP server on 127.0.0.1 (ports: { udp, tcp }); once the
 * sandbox's firewall is in place, `allowAddresses` (async, [{ address, ttl }]) adds answered addresses to its nft set
 * and must finish before the answer goes back (the sandbox connects right after). close() stops both.
 */
export class EgressResolver {
  constructor({ policy, upstream }) {
    this.policy = policy;
    const up = parseUpstream(upstream);
    this.upstream = up?.host ?? null;
    this.upstreamPort = up?.port ?? 53;
    this.sockets = new Set();
    this.allowAddresses = null;
    this.udp = null;
    this.tcp = null;
    this.ports = null;
  }

  /**
   * Replaces the policy (one at a time): the sandbox's firewall first (applyPolicy, set by network.js), then the
   * resolver's answers.
   */
  setPolicy(policy) {
    const run = async () => {
      await this.applyPolicy(policy);
      this.policy = policy;
    };
    const next = (this.changing ?? Promise.resolve()).then(run, run);
    this.changing = next.catch(() => {});
    return next;
  }

  /** The sidecar's /policy API (GET, POST/PUT, PATCH, DELETE) and /healthz, as upstream's policy_server.go answers them. */
  async servePolicy(req, res) {
    const send = (status, body) => {
      const text = typeof body === 'string' ? `${body}\n` : `${JSON.stringify(body)}\n`;
      res.writeHead(status, { 'Content-Type': typeof body === 'string' ? 'text/plain; charset=utf-8' : 'application/json', 'Content-Length': Buffer.byteLength(text) });
      res.end(text);
    };
    const url = new URL(req.url, 'http://x');
    if (url.pathname === '/healthz') return send(200, 'ok');
    if (url.pathname !== '/policy') return send(404, '404 page not found');
    const given = req.headers[EGRESS_AUTH_HEADER.toLowerCase()];
    if (typeof given !== 'string' || given.length !== this.token.length || !crypto.timingSafeEqual(Buffer.from(given), Buffer.from(this.token))) {
      return send(401, 'unauthorized');
    }
    const chunks = [];
    let size = 0;
    for await (const c of req) {
      size += c.length;
      if (size <= MAX_POLICY_BODY) chunks.push(c);
    }
    const raw = Buffer.concat(chunks).toString('utf8').trim();
    const status = (p, extra = {}) => ({ status: 'ok', mode: modeOf(p), enforcementMode: 'dns+nft', ...extra });
    const commit = async (p, extra) => {
      try {
        await this.setPolicy(p);
      } catch (err) {
        return send(500, `failed to apply nftables policy: ${err.message}`);
      }
      return send(200, status(p, extra));
    };
    const view = (p) => ({ egress: p.egress.map((r) => ({ action: r.action, target: r.target })), defaultAction: p.defaultAction });
    switch (req.method) {
      case 'GET':
        return send(200, status(this.policy, { policy: view(this.policy) }));
      case 'POST':
      case 'PUT': {
        if (raw === '' || raw === 'null' || raw === '{}') return commit(normalizePolicy({ defaultAction: 'deny' }), raw === '' ? { reason: 'policy reset to default deny-all', enforcementMode: undefined } : {});
        let body;
        try {
          body = JSON.parse(raw);
          if (body === null || typeof body !== 'object' || Array.isArray(body)) throw new Error('a policy must be an object');
          checkRules(body.egress ?? []);
          const d = String(body.defaultAction ?? '').trim().toLowerCase();
          if (d && d !== 'allow' && d !== 'deny') throw new Error(`unsupported defaultAction ${JSON.stringify(body.defaultAction)}`);
        } catch (err) {
          return send(400, `invalid policy: ${err.message}`);
        }
        return commit(normalizePolicy(body));
      }
      case 'PATCH': {
        if (raw === '') return send(400, 'empty body');
        let rules;
        try {
          rules = JSON.parse(raw);
          checkRules(rules);
        } catch (err) {
          return send(400, `invalid patch rules: ${err.message}`);
        }
        if (!rules.length) return send(400, 'invalid patch rules: empty array');
        // upstream's mergeEgressRules: the new rules first, then the old ones whose target none of them names
        const seen = new Set();
        const merged = [];
        for (const r of [...normalizePolicy({ egress: rules }).egress, ...this.policy.egress]) {
          const key = r.target.toLowerCase();
          if (seen.has(key)) continue;
          seen.add(key);
          merged.push(r);
        }
        if (merged.length > MAX_RULES) return send(400, `invalid merged policy: at most ${MAX_RULES} egress rules`);
        return commit({ defaultAction: this.policy.defaultAction, egress: merged });
      }
      case 'DELETE': {
        if (raw === '') return send(400, 'empty body');
        let targets;
        try {
          targets = JSON.parse(raw);
          if (!Array.isArray(targets) || targets.some((t) => typeof t !== 'string')) throw new Error('a list of targets expected');
        } catch (err) {
          return send(400, `invalid delete targets: ${err.message}`);
        }
        if (!targets.length) return send(400, 'invalid delete targets: empty array');
        const drop = new Set(targets.map((t) => t.trim().toLowerCase()).filter(Boolean));
        const kept = this.policy.egress.filter((r) => !drop.has(r.target.toLowerCase()));
        if (kept.length === this.policy.egress.length) return send(200, status(this.policy, { reason: 'no matching targets found' }));
        return commit({ defaultAction: this.policy.defaultAction, egress: kept });
      }
      default:
        res.setHeader('Allow', 'GET, POST, PUT, PATCH, DELETE');
        return send(405, 'method not allowed');
    }
  }

  async listen() {
    this.token = crypto.randomBytes(24).toString('base64url');
    this.http = http.createServer((req, res) => {
      this.servePolicy(req, res).catch(() => res.destroy());
    });
    await new Promise((resolve, reject) => {
      this.http.once('error', reject);
      this.http.listen(0, '127.0.0.1', resolve);
    });
    this.policyPort = this.http.address().port;
    this.udp = dgram.createSocket('udp4');
    this.udp.on('error', () => {});
    this.udp.on('message', (msg, rinfo) => {
      this.answer(msg).then((out) => { if (out) this.udp?.send(out, rinfo.port, rinfo.address); }, () => {});
    });
    await new Promise((resolve, reject) => {
      this.udp.once('error', reject);
      this.udp.bind(0, '127.0.0.1', resolve);
    });
    this.tcp = net.createServer((s) => this.serveTcp(s));
    this.tcp.maxConnections = MAX_TCP_CONNECTIONS;
    await new Promise((resolve, reject) => {
      this.tcp.once('error', reject);
      this.tcp.listen(0, '127.0.0.1', resolve);
    });
    this.ports = { udp: this.udp.address().port, tcp: this.tcp.address().port };
    return this.ports;
  }

  /** DNS over TCP (length-prefixed messages), one connection at a time per socket, closed when idle 10 s. */
  serveTcp(s) {
    this.sockets.add(s);
    s.once('close', () => this.sockets.delete(s));
    let buf = Buffer.alloc(0);
    let busy = false;
    s.setTimeout(10000, () => s.destroy());
    s.on('error', () => {});
    const pump = () => {
      if (busy || buf.length < 2) return;
      const len = buf.readUInt16BE(0);
      if (buf.length < 2 + len) return;
      const msg = buf.subarray(2, 2 + len);
      buf = buf.subarray(2 + len);
      busy = true;
      this.answer(msg).then((out) => {
        busy = false;
        if (!out) return s.destroy();
        const head = Buffer.alloc(2);
        head.writeUInt16BE(out.length);
        s.write(Buffer.concat([head, out]));
        pump();
      }, () => s.destroy());
    };
    s.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      if (buf.length > 65537) return s.destroy();
      pump();
    });
  }

  /** The answer to one query message: NXDOMAIN for a denied name, else upstream's answer once its addresses are allowed. */
  async answer(msg) {
    const q = parseQuery(msg);
    if (!q) return msg.length >= 12 ? refusal(msg.subarray(0, 12), 12, 1) : null; // FORMERR
    if (evaluate(this.policy, q.qname) !== 'allow') return refusal(msg, q.end, 3); // NXDOMAIN, as upstream's sidecar
    let resp;
    try {
      resp = await this.forward(msg);
    } catch {
      return refusal(msg, q.end, 2); // SERVFAIL
    }
    const addrs = answerAddresses(resp);
    if (addrs.length) {
      try {
        await this.allowAddresses(addrs.map((a) => ({ address: a.address, ttl: Math.max(a.ttl, MIN_TTL_S) })));
      } catch {
        return refusal(msg, q.end, 2);
      }
    }
    return resp;
  }

  /** Sends msg to the upstream resolver over UDP; resolves its response (same id) or rejects after UPSTREAM_TIMEOUT_MS. */
  forward(msg) {
    if (!this.upstream) return Promise.reject(new Error('no upstream resolver'));
    const sock = dgram.createSocket(net.isIPv6(this.upstream) ? 'udp6' : 'udp4');
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('upstream timeout')), UPSTREAM_TIMEOUT_MS);
      sock.on('error', (err) => { clearTimeout(timer); reject(err); });
      sock.on('message', (resp, rinfo) => {
        // only the upstream's answer to this query (another local user cannot slip in an answer from elsewhere)
        if (rinfo.address !== this.upstream || rinfo.port !== this.upstreamPort) return;
        if (resp.length < 12 || resp.readUInt16BE(0) !== msg.readUInt16BE(0)) return;
        clearTimeout(timer);
        resolve(resp);
      });
      sock.send(msg, this.upstreamPort, this.upstream);
    }).finally(() => sock.close());
  }

  async close() {
    const udp = this.udp;
    const tcp = this.tcp;
    const web = this.http;
    this.udp = null;
    this.tcp = null;
    this.http = null;
    if (web) {
      web.closeAllConnections();
      await new Promise((r) => web.close(r));
    }
    udp?.close();
    for (const s of this.sockets) s.destroy();
    if (tcp) await new Promise((r) => tcp.close(r));
  }
}
