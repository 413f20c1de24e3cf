// Test images for the image store (test/images-store.test.js): tars built by hand (hostile ones included), wrapped
// into OCI image layouts; a busybox image from busybox-static.
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';

function octal(n, len) { return n.toString(8).padStart(len - 1, '0') + '\0'; }

/** A tar of entries { name, type: 'file'|'dir'|'symlink'|'hardlink'|'char'|'fifo', data, mode, linkname, devmajor, devminor }. */
export function makeTar(entries) {
  const out = [];
  for (const e of entries) {
    const data = e.type === 'file' || !e.type ? Buffer.from(e.data ?? '') : Buffer.alloc(0);
    const pax = [];
    if (Buffer.byteLength(e.name) > 99) pax.push(`path=${e.name}`);
    if (e.linkname && Buffer.byteLength(e.linkname) > 99) pax.push(`linkpath=${e.linkname}`);
    if (pax.length) {
      const body = Buffer.from(pax.map((kv) => { let len = kv.length + 3; len += String(len + String(len).length).length; const s = `${len} ${kv}\n`; return `${Buffer.byteLength(s)} ${kv}\n`; }).join(''));
      out.push(header({ name: 'PaxHeader', size: body.length, typeflag: 'x', mode: 0o644 }), pad(body));
    }
    const typeflag = { file: '0', dir: '5', symlink: '2', hardlink: '1', char: '3', block: '4', fifo: '6' }[e.type ?? 'file'];
    out.push(header({ name: e.name.slice(0, 99), size: data.length, typeflag, mode: e.mode ?? (e.type === 'dir' ? 0o755 : 0o644), linkname: (e.linkname ?? '').slice(0, 99), devmajor: e.devmajor, devminor: e.devminor }));
    if (data.length) out.push(pad(data));
  }
  out.push(Buffer.alloc(1024));
  return Buffer.concat(out);
}
function pad(b) { const r = b.length % 512; return r ? Buffer.concat([b, Buffer.alloc(512 - r)]) : b; }
function header({ name, size, typeflag, mode, linkname = '', devmajor = 0, devminor = 0 }) {
  const h = Buffer.alloc(512);
  h.write(name, 0, 100);
  h.write(octal(mode, 8), 100); h.write(octal(0, 8), 108); h.write(octal(0, 8), 116);
  h.write(octal(size, 12), 124); h.write(octal(1700000000, 12), 136);
  h.write('        ', 148); h.write(typeflag, 156); h.write(linkname, 157, 100);
  h.write('ustar\0', 257); h.write('00', 263);
  h.write(octal(devmajor, 8), 329); h.write(octal(devminor, 8), 337);
  let sum = 0; for (const b of h) sum += b;
  h.write(octal(sum, 7) + ' ', 148);
  return h;
}

const sha = (b) => crypto.createHash('sha256').update(b).digest('hex');

/**
 * Writes an OCI image layout at `dir` with one image tagged `tag`: layers = [{ tar (Buffer), compression:
 * 'gzip'|'zstd'|'none' }], config fields { Env, Cmd, WorkingDir }. Returns { digest (manifest), layers: [digest] }.
 */
export function writeOciLayout(dir, { tag = 'latest', layers, config = {}, index = true }) {
  fs.mkdirSync(path.join(dir, 'blobs', 'sha256'), { recursive: true });
  const put = (buf) => { const h = sha(buf); fs.writeFileSync(path.join(dir, 'blobs', 'sha256', h), buf); return { digest: `sha256:${h}`, size: buf.length }; };
  const descs = [];
  const diffIds = [];
  for (const l of layers) {
    diffIds.push(`sha256:${sha(l.tar)}`);
    const c = l.compression ?? 'gzip';
    const body = c === 'gzip' ? zlib.gzipSync(l.tar, { level: 1 }) : c === 'zstd' ? zlib.zstdCompressSync(l.tar) : l.tar;
    const mt = { gzip: 'application/vnd.oci.image.layer.v1.tar+gzip', zstd: 'application/vnd.oci.image.layer.v1.tar+zstd', none: 'application/vnd.oci.image.layer.v1.tar' }[c];
    descs.push({ mediaType: mt, ...put(body) });
  }
  const cfg = Buffer.from(JSON.stringify({ architecture: 'amd64', os: 'linux', config, rootfs: { type: 'layers', diff_ids: diffIds } }));
  const manifest = Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: 'application/vnd.oci.image.manifest.v1+json', config: { mediaType: 'application/vnd.oci.image.config.v1+json', ...put(cfg) }, layers: descs }));
  const md = put(manifest);
  let top = { mediaType: 'application/vnd.oci.image.manifest.v1+json', ...md };
  if (index) {
    const arch = { x64: 'amd64', arm64: 'arm64' }[process.arch] ?? process.arch;
    const idx = Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: 'application/vnd.oci.image.index.v1+json', manifests: [
      { mediaType: 'application/vnd.oci.image.manifest.v1+json', digest: `sha256:${'0'.repeat(64)}`, size: 10, platform: { os: 'linux', architecture: 'mips64' } },
      { ...top, platform: { os: 'linux', architecture: arch } }] }));
    top = { mediaType: 'application/vnd.oci.image.index.v1+json', ...put(idx) };
  }
  fs.writeFileSync(path.join(dir, 'oci-layout'), '{"imageLayoutVersion":"1.0.0"}');
  let indexJson = { schemaVersion: 2, manifests: [] };
  try { indexJson = JSON.parse(fs.readFileSync(path.join(dir, 'index.json'), 'utf8')); } catch {}
  indexJson.manifests = indexJson.manifests.filter((d) => d.annotations?.['org.opencontainers.image.ref.name'] !== tag);
  indexJson.manifests.push({ ...top, annotations: { 'org.opencontainers.image.ref.name': tag } });
  fs.writeFileSync(path.join(dir, 'index.json'), JSON.stringify(indexJson));
  return { digest: top.digest, manifest: md.digest, layers: descs.map((d) => d.digest) };
}

/** The layer of a busybox root: /bin/busybox (busybox-static), sh/ls/cat links, /marker. */
export function busyboxTar() {
  const bb = fs.readFileSync('/bin/busybox');
  return makeTar([
    { name: 'bin/', type: 'dir' }, { name: 'bin/busybox', data: bb, mode: 0o755 },
    { name: 'bin/sh', type: 'symlink', linkname: 'busybox' }, { name: 'bin/ls', type: 'symlink', linkname: 'busybox' },
    { name: 'bin/cat', type: 'symlink', linkname: 'busybox' }, { name: 'etc/', type: 'dir' },
    { name: 'etc/os-release', data: 'NAME=busybox-test\n' }, { name: 'marker', data: 'busybox-image\n' },
  ]);
}

// ---- a real registry: Debian's docker-registry (the CNCF distribution server) on loopback ----
import { spawn, execFileSync } from 'node:child_process';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import os from 'node:os';

async function freePort() {
  const s = net.createServer();
  await new Promise((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address();
  await new Promise((r) => s.close(r));
  return port;
}

const b64url = (b) => Buffer.from(b).toString('base64url');

/** This machine's first IPv4 address that is not loopback, or null. */
export function nonLoopbackAddress() {
  return Object.values(os.networkInterfaces()).flat().find((i) => !i.internal && i.family === 'IPv4')?.address ?? null;
}

/**
 * A certificate authority made for one test and a server certificate it signed for IP `address`, in dir: ca.pem,
 * server.pem, server.key.
 */
function makeServerCertificate(dir, address) {
  const ssl = (args) => execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  ssl(['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${dir}/ca.key`, '-out', `${dir}/ca.pem`, '-days', '2', '-subj', '/CN=test registry CA',
    '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign']);
  ssl(['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${dir}/server.key`, '-out', `${dir}/server.pem`, '-days', '2', '-subj', `/CN=${address}`,
    '-CA', `${dir}/ca.pem`, '-CAkey', `${dir}/ca.key`, '-addext', `subjectAltName=IP:${address}`, '-addext', 'basicConstraints=CA:FALSE']);
}

/**
 * Starts docker-registry with auth 'none', 'htpasswd' (user/password) or 'token' (a token service served here, JWTs
 * signed with a key whose certificate the registry trusts), listening on `address` (127.0.0.1 by default), over HTTPS
 * with `tls` (a certificate for `address` from a CA made here: `ca` is its PEM file). Resolves to { host, port, user,
 * password, ca, stop() }.
 */
export async function startRegistry({ auth = 'none', user = 'tester', password = 's3cret-pass', address = '127.0.0.1', tls = false } = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'test-registry-'));
  const port = await freePort();
  if (tls) makeServerCertificate(dir, address);
  const tlsYaml = tls ? `  tls:\n    certificate: ${dir}/server.pem\n    key: ${dir}/server.key\n` : '';
  let tokenServer = null;
  let authYaml = '';
  if (auth === 'htpasswd') {
    fs.writeFileSync(path.join(dir, 'htpasswd'), execFileSync('htpasswd', ['-Bbn', user, password]));
    authYaml = `auth:\n  htpasswd:\n    realm: test-registry\n    path: ${dir}/htpasswd\n`;
  } else if (auth === 'token') {
    execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${dir}/key.pem`, '-out', `${dir}/cert.pem`, '-days', '2', '-subj', '/CN=test-token-issuer'], { stdio: 'ignore' });
    const key = crypto.createPrivateKey(fs.readFileSync(`${dir}/key.pem`));
    const der = new crypto.X509Certificate(fs.readFileSync(`${dir}/cert.pem`)).raw;
    tokenServer = http.createServer((req, res) => {
      const u = new URL(req.url, 'http://x');
      const basic = /^Basic (.+)$/.exec(req.headers.authorization ?? '');
      const [u1, p1] = basic ? Buffer.from(basic[1], 'base64').toString().split(/:(.*)/s) : [];
      if (u1 !== user || p1 !== password) { res.writeHead(401, { 'content-type': 'application/json' }); return res.end('{"details":"bad credentials"}'); }
      const access = u.searchParams.getAll('scope').map((s) => { const [type, name, actions] = s.split(':'); return { type, name, actions: actions.split(',') }; });
      const now = Math.floor(Date.now() / 1000);
      const head = b64url(JSON.stringify({ alg: 'RS256', typ: 'JWT', x5c: [der.toString('base64')] }));
      const claims = b64url(JSON.stringify({ iss: 'test-issuer', sub: user, aud: u.searchParams.get('service'), exp: now + 600, nbf: now - 10, iat: now, jti: crypto.randomUUID(), access }));
      const sig = b64url(crypto.sign('sha256', Buffer.from(`${head}.${claims}`), key));
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ token: `${head}.${claims}.${sig}`, expires_in: 600 }));
    });
    await new Promise((r) => tokenServer.listen(0, '127.0.0.1', r));
    authYaml = `auth:\n  token:\n    realm: http://127.0.0.1:${tokenServer.address().port}/token\n    service: test-registry\n    issuer: test-issuer\n    rootcertbundle: ${dir}/cert.pem\n`;
  }
  fs.writeFileSync(path.join(dir, 'config.yml'), `version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: ${dir}/data\nhttp:\n  addr: ${address}:${port}\n${tlsYaml}${authYaml}`);
  const proc = spawn('docker-registry', ['serve', path.join(dir, 'config.yml')], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  proc.stderr.on('data', (d) => { stderr += d; });
  const exited = new Promise((r) => proc.on('exit', r));
  const stop = async () => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
    await exited;
    if (tokenServer) await new Promise((r) => tokenServer.close(r));
    fs.rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + 15000;
  for (;;) {
    const ok = await new Promise((resolve) => {
      const req = tls ? https.get(`https://${address}:${port}/v2/`, { ca: fs.readFileSync(`${dir}/ca.pem`) }, (res) => { res.resume(); resolve(true); })
        : http.get(`http://${address}:${port}/v2/`, (res) => { res.resume(); resolve(true); });
      req.on('error', () => resolve(false));
    });
    if (ok) break;
    if (proc.exitCode !== null || Date.now() > deadline) { await stop(); throw new Error(`docker-registry did not start: ${stderr.slice(-500)}`); }
    await new Promise((r) => setTimeout(r, 50));
  }
  return { host: `${address}:${port}`, port, user, password, ca: tls ? `${dir}/ca.pem` : null, stop };
}

/** Pushes the OCI layout image `oci:<dir>:<tag>` to `docker://<host>/<repo>` with skopeo. */
export async function pushImage(layoutDir, tag, registry, repo, { creds = false } = {}) {
  const args = ['copy', '-q', '--dest-tls-verify=false', ...(creds ? ['--dest-creds', `${registry.user}:${registry.password}`] : []), `oci:${layoutDir}:${tag}`, `docker://${registry.host}/${repo}`];
  // asynchronous: the token service of a 'token' registry answers from this process
  const p = spawn('skopeo', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  p.stderr.on('data', (d) => { err += d; });
  const code = await new Promise((r) => p.on('close', r));
  if (code !== 0) throw new Error(`skopeo copy to ${registry.host}/${repo} failed: ${err.slice(-500)}`);
}

/** A tar of the host directory `dir` (its files, directories and symlinks) placed under `prefix` (no leading slash). */
export function tarOfDir(dir, prefix) {
  const entries = [];
  const walk = (abs, rel) => {
    for (const e of fs.readdirSync(abs, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
      const a = path.join(abs, e.name);
      const r = `${rel}/${e.name}`;
      if (e.isSymbolicLink()) entries.push({ name: r, type: 'symlink', linkname: fs.readlinkSync(a) });
      else if (e.isDirectory()) { entries.push({ name: `${r}/`, type: 'dir' }); walk(a, r); }
      else if (e.isFile()) entries.push({ name: r, data: fs.readFileSync(a), mode: fs.statSync(a).mode & 0o777 });
    }
  };
  entries.push({ name: `${prefix}/`, type: 'dir' });
  walk(dir, prefix);
  return makeTar(entries);
}

const CACHE = path.join(process.env.XDG_CACHE_HOME ?? os.tmpdir(), 'mastra-opensandbox-test-images');
const PYTHON_DEBS = ['python3.11-minimal', 'libpython3.11-minimal', 'libc6', 'zlib1g', 'libexpat1', 'libssl3'];

/**
 * An OCI layout (tag `py`) of a small root with Debian's python3 (python3.11-minimal and its libraries, unpacked with
 * dpkg -x from `apt-get download`ed packages) plus busybox, built once and cached under
 * $XDG_CACHE_HOME|tmpdir/mastra-opensandbox-test-images keyed by the packages' versions. Resolves to the layout's
 * directory (read it as `oci:<dir>:py`, or push it with pushImage()).
 */
export async function pythonLayout() {
  const run = (cmd, argv, opts = {}) => new Promise((resolve, reject) => {
    const p = spawn(cmd, argv, { stdio: ['ignore', 'pipe', 'pipe'], ...opts });
    let out = ''; let err = '';
    p.stdout.on('data', (d) => { out += d; }); p.stderr.on('data', (d) => { err += d; });
    p.on('close', (code) => (code === 0 ? resolve(out) : reject(new Error(`${cmd} ${argv.join(' ')}: ${err.slice(-400)}`))));
  });
  const versions = await run('apt-cache', ['policy', ...PYTHON_DEBS]);
  const key = crypto.createHash('sha256').update(versions.match(/Candidate: .*/g).join() + fs.readFileSync('/bin/busybox').length).digest('hex').slice(0, 16);
  const layout = path.join(CACHE, `python-${key}`);
  if (fs.existsSync(path.join(layout, 'index.json'))) return layout;
  fs.mkdirSync(CACHE, { recursive: true });
  const work = fs.mkdtempSync(path.join(CACHE, 'build-'));
  try {
    await run('apt-get', ['download', ...PYTHON_DEBS], { cwd: work });
    const root = path.join(work, 'root');
    fs.mkdirSync(root);
    for (const deb of fs.readdirSync(work).filter((f) => f.endsWith('.deb'))) await run('dpkg', ['-x', path.join(work, deb), root]);
    fs.symlinkSync('python3.11', path.join(root, 'usr/bin/python3'));
    fs.mkdirSync(path.join(root, 'bin'), { recursive: true });
    fs.copyFileSync('/bin/busybox', path.join(root, 'bin/busybox'));
    fs.chmodSync(path.join(root, 'bin/busybox'), 0o755);
    fs.symlinkSync('busybox', path.join(root, 'bin/sh'));
    fs.writeFileSync(path.join(root, 'marker'), 'python-image\n');
    const entries = [];
    const walk = (abs, rel) => {
      for (const e of fs.readdirSync(abs, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
        const a = path.join(abs, e.name); const r = rel ? `${rel}/${e.name}` : e.name;
        if (e.isSymbolicLink()) entries.push({ name: r, type: 'symlink', linkname: fs.readlinkSync(a) });
        else if (e.isDirectory()) { entries.push({ name: `${r}/`, type: 'dir' }); walk(a, r); }
        else if (e.isFile()) entries.push({ name: r, data: fs.readFileSync(a), mode: fs.statSync(a).mode & 0o777 });
      }
    };
    walk(root, '');
    const tmpLayout = path.join(work, 'layout');
    writeOciLayout(tmpLayout, { tag: 'py', layers: [{ tar: makeTar(entries) }], config: { Env: ['PATH=/usr/local/bin:/usr/bin:/bin', 'LANG=C.UTF-8'], Cmd: ['python3'] } });
    fs.renameSync(tmpLayout, layout);
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
  return layout;
}
