// The Registry HTTP API v2 (OCI distribution) client of the image store: manifests with the Accept headers of every
// manifest type, blobs with redirects, the Bearer (token endpoint, scope=repository:<name>:pull, basic credentials when
// given) and Basic challenges. HTTPS with the system's CA store; plain HTTP only for loopback registries and
// `insecureRegistries`. Errors name the registry and its status/reason, never the password.
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import tls from 'node:tls';
import { ImagePullError, registryEndpoint } from './reference.js';
import { MANIFEST_ACCEPT, sha256, verifyBytes } from './sources.js';

const MAX_MANIFEST = 4 << 20;
let systemCa = null; // { file: the SSL_CERT_FILE it was read with, list }
/**
 * The certificate authorities a registry's HTTPS certificate must chain to: Node's bundled roots, the operating
 * system's store and NODE_EXTRA_CA_CERTS (Node >= 22.15), and the system's bundle file — $SSL_CERT_FILE when set (as
 * OpenSSL, curl and Go's crypto/x509 honour it), else the first of Debian's, Red Hat's and Alpine's locations.
 */
function caList() {
  const file = process.env.SSL_CERT_FILE || null;
  if (systemCa?.file === file) return systemCa.list;
  const list = [...tls.rootCertificates];
  for (const which of ['system', 'extra']) {
    try { if (typeof tls.getCACertificates === 'function') list.push(...tls.getCACertificates(which)); } catch {}
  }
  for (const f of file ? [file] : ['/etc/ssl/certs/ca-certificates.crt', '/etc/pki/tls/certs/ca-bundle.crt', '/etc/ssl/cert.pem']) {
    try { list.push(fs.readFileSync(f, 'utf8')); break; } catch {}
  }
  systemCa = { file, list };
  return list;
}

/** Why a request got no answer, for an error message: Node's message, its code when the message lacks it, and a hint. */
function transportReason(e, scheme) {
  // a plain-HTTP registry answers a TLS hello with bytes that are no TLS record (OpenSSL's long message says so)
  if (scheme === 'https' && /wrong version number/.test(e.message ?? '')) {
    return 'no TLS answer (wrong version number): if the registry speaks plain HTTP, list it in insecureRegistries';
  }
  let why = String(e.message || e.code).split('\n')[0];
  if (e.code && !why.includes(e.code)) why += ` (${e.code})`;
  return why;
}

function isLoopback(host) {
  const h = host.replace(/:\d+$/, '').replace(/^\[|\]$/g, '');
  return h === 'localhost' || h === '::1' || /^127\.\d+\.\d+\.\d+$/.test(h);
}

function parseChallenge(header) {
  if (!header) return null;
  const m = /^\s*(\w+)\s*(.*)$/s.exec(header);
  if (!m) return null;
  const params = {};
  for (const p of m[2].matchAll(/(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^,\s]*))/g)) params[p[1].toLowerCase()] = p[2] ?? p[3];
  return { scheme: m[1].toLowerCase(), params };
}

function reasonOf(status, body) {
  let text = '';
  try {
    const j = JSON.parse(body);
    if (Array.isArray(j.errors) && j.errors.length) text = j.errors.map((e) => `${e.code ?? ''}${e.message ? ': ' + e.message : ''}`).join('; ');
    else if (j.details || j.message) text = String(j.details ?? j.message);
  } catch { text = body.replace(/\s+/g, ' ').trim().slice(0, 200); }
  return { status: `${status} ${http.STATUS_CODES[status] ?? ''}`.trim(), detail: text.slice(0, 300) };
}

export class RegistrySource {
  constructor(ref, { auth, insecureRegistries = [], log = () => {} } = {}) {
    this.ref = ref;
    this.host = registryEndpoint(ref.registry);
    this.name = `registry ${ref.registry}`;
    this.scheme = isLoopback(this.host) || insecureRegistries.includes(ref.registry) || insecureRegistries.includes(this.host) ? 'http' : 'https';
    this.auth = auth && (auth.username || auth.password) ? { username: String(auth.username ?? ''), password: String(auth.password ?? '') } : null;
    this.authorization = null;
    this.log = log;
    this.agent = this.scheme === 'https' ? new https.Agent({ keepAlive: true, ca: caList(), maxSockets: 8 }) : new http.Agent({ keepAlive: true, maxSockets: 8 });
  }

  /** what: a text, or { status, detail } (an HTTP answer): `pulling <ref>: <status> from registry <host>: <detail>`. */
  fail(what, e, via = '') {
    const msg = typeof what === 'string' ? `${what} from ${this.name}` : `${what.status} from ${this.name}${via}${what.detail ? `: ${what.detail}` : ''}`;
    return new ImagePullError(`pulling ${this.ref.key}: ${msg}`, e ? { cause: e } : undefined);
  }

  /** One request (no auth handling): resolves to the response (body unread). */
  request(url, headers, method = 'GET') {
    const u = new URL(url);
    const mod = u.protocol === 'https:' ? https : http;
    const opts = { method, headers: { 'User-Agent': 'mastra-opensandbox-dev-server', ...headers }, timeout: 60000 };
    if (u.host === this.host && u.protocol === `${this.scheme}:`) opts.agent = this.agent;
    else if (u.protocol === 'https:') opts.ca = caList();
    return new Promise((resolve, reject) => {
      const req = mod.request(u, opts, resolve);
      req.on('timeout', () => req.destroy(new Error('timed out')));
      req.on('error', reject);
      req.end();
    });
  }

  async readBody(res, max) {
    const chunks = [];
    let n = 0;
    for await (const c of res) {
      n += c.length;
      if (n > max) { res.destroy(); throw this.fail(`a response larger than ${max} bytes`); }
      chunks.push(c);
    }
    return Buffer.concat(chunks);
  }

  async authenticate(res) {
    const body = (await this.readBody(res, 65536).catch(() => Buffer.alloc(0))).toString('utf8');
    const ch = parseChallenge(res.headers['www-authenticate']);
    if (this.triedAuth || !ch) throw this.fail(reasonOf(res.statusCode, body));
    this.triedAuth = true;
    if (ch.scheme === 'basic') {
      if (!this.auth) throw this.fail({ status: reasonOf(res.statusCode, body).status, detail: 'the registry asks for credentials (image.auth) and none were given' });
      this.authorization = `Basic ${Buffer.from(`${this.auth.username}:${this.auth.password}`).toString('base64')}`;
      return;
    }
    if (ch.scheme !== 'bearer' || !ch.params.realm) throw this.fail(`an unsupported authentication challenge (${ch.scheme})`);
    let realm;
    try { realm = new URL(ch.params.realm); } catch { throw this.fail('a bad token realm'); }
    if (realm.protocol !== 'https:' && !(realm.protocol === 'http:' && (isLoopback(realm.host) || this.scheme === 'http'))) {
      throw this.fail(`a token realm over plain HTTP (${realm.host})`);
    }
    if (ch.params.service) realm.searchParams.set('service', ch.params.service);
    realm.searchParams.set('scope', `repository:${this.ref.repository}:pull`);
    const headers = {};
    if (this.auth) headers.Authorization = `Basic ${Buffer.from(`${this.auth.username}:${this.auth.password}`).toString('base64')}`;
    let tres;
    try { tres = await this.request(realm.href, headers); } catch (e) { throw this.fail(`the token service ${realm.host}: ${e.message}`, e); }
    const tbody = (await this.readBody(tres, 1 << 20)).toString('utf8');
    if (tres.statusCode !== 200) throw this.fail(reasonOf(tres.statusCode, tbody), null, ` (its token service ${realm.host})`);
    let token;
    try { const j = JSON.parse(tbody); token = j.token ?? j.access_token; } catch {}
    if (typeof token !== 'string' || !token) throw this.fail(`no token from its token service ${realm.host}`);
    this.authorization = `Bearer ${token}`;
  }

  /** GET `path` of the registry with auth and redirects; resolves to a 200 response. */
  async get(apiPath, accept) {
    for (let attempt = 0; attempt < 3; attempt++) {
      let url = `${this.scheme}://${this.host}${apiPath}`;
      for (let hops = 0; ; hops++) {
        const headers = {};
        if (accept) headers.Accept = accept;
        const sameHost = new URL(url).host === this.host;
        if (sameHost && this.authorization) headers.Authorization = this.authorization;
        let res;
        try { res = await this.request(url, headers); } catch (e) { throw this.fail(transportReason(e, this.scheme), e); }
        if ([301, 302, 303, 307, 308].includes(res.statusCode) && res.headers.location && hops < 5) {
          res.resume();
          url = new URL(res.headers.location, url).href;
          continue;
        }
        if (res.statusCode === 401 && sameHost) { await this.authenticate(res); break; }
        if (res.statusCode !== 200) {
          const body = (await this.readBody(res, 65536).catch(() => Buffer.alloc(0))).toString('utf8');
          throw this.fail(reasonOf(res.statusCode, body));
        }
        return res;
      }
    }
    throw this.fail('authentication failed');
  }

  async top() {
    const r = this.ref;
    const res = await this.get(`/v2/${r.repository}/manifests/${r.digest ?? r.tag}`, MANIFEST_ACCEPT);
    const bytes = await this.readBody(res, MAX_MANIFEST);
    const digest = sha256(bytes);
    if (r.digest && digest !== r.digest) throw this.fail(`a manifest whose digest is ${digest}, not ${r.digest}`);
    return { bytes, digest, mediaType: String(res.headers['content-type'] ?? '').split(';')[0] || undefined };
  }

  /** A manifest (kind 'manifest': the manifests endpoint) or the config (a blob), checked against desc. */
  async manifest(desc, kind = 'manifest') {
    const isManifest = kind === 'manifest';
    const res = await this.get(`/v2/${this.ref.repository}/${isManifest ? 'manifests' : 'blobs'}/${desc.digest}`, isManifest ? MANIFEST_ACCEPT : undefined);
    return verifyBytes(await this.readBody(res, MAX_MANIFEST), desc, `${isManifest ? 'manifest' : 'config'} from ${this.name}`);
  }

  async blob(desc) {
    return this.get(`/v2/${this.ref.repository}/blobs/${desc.digest}`);
  }

  async close() { this.agent.destroy(); }
}
