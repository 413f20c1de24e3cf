// The static osb-execd (the prebuilt one: musl, no interpreter, no NEEDED) in a root file system made of nothing but
// Debian's busybox-static and osb-execd itself, under bubblewrap (user namespace as uid 1000, every namespace new):
// no glibc, no ld.so, no Node, no bash. What works there: ping, commands (upstream's execd runs `bash -c` and falls
// back to `sh -c` without bash: busybox's ash here), `~` resolved from the root's own /etc/passwd (no NSS), owner names
// in files info from its /etc/passwd and /etc/group, uploads, info, downloads and POST /directories. What does not:
// the PTY API runs `bash` (as upstream's pty_session.go, which has no fallback), so a session's start fails with
// the error frame this test pins down.
// The same root plus Debian's bash-static as /bin/bash (a static bash: still no library in the root): the PTY API in
// pipe mode (stdin, stdout, stderr apart, exit code) and in PTY mode.
// Skipped (with the reason) when no static osb-execd is built (npm run prebuild), busybox-static or bash-static is
// missing (scripts/setup.sh installs both).
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import WebSocket from 'ws';
import { execdBinary } from '../lib/dev-server/execd-binary.js';
import { findBwrap } from '../lib/dev-server/runner.js';
import { parseEvents } from './helpers/raw.js';
import { waitFor } from './helpers/poll.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const arch = `linux-${process.arch}`;

/** True when file is a 64-bit little-endian ELF with no PT_INTERP program header (static), false otherwise. */
function isStaticElf(file) {
  let b;
  try {
    b = fs.readFileSync(file);
  } catch {
    return false;
  }
  if (b.length < 64 || b.readUInt32BE(0) !== 0x7f454c46 || b[4] !== 2 || b[5] !== 1) return false;
  const phoff = Number(b.readBigUInt64LE(32));
  const phentsize = b.readUInt16LE(54);
  const phnum = b.readUInt16LE(56);
  for (let i = 0; i < phnum; i++) {
    const at = phoff + i * phentsize;
    if (at + 4 > b.length) return false;
    if (b.readUInt32LE(at) === 3) return false; // PT_INTERP
  }
  return true;
}

/** The static osb-execd to test: the one the server would run if static, else the prebuild's; null when none. */
function staticExecd() {
  const candidates = [execdBinary(), path.join(ROOT, 'build', 'prebuild', arch, 'osb-execd'), path.join(ROOT, 'prebuilds', arch, 'osb-execd')];
  return candidates.find((f) => f && isStaticElf(f)) ?? null;
}

function http1(sock, method, p, { body, headers = {} } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request({ socketPath: sock, path: p, method, headers: { ...headers, ...(body ? { 'Content-Length': body.length } : {}) }, agent: false }, (res) => {
      const bufs = [];
      res.on('data', (d) => bufs.push(d));
      res.on('end', () => {
        clearTimeout(timer);
        const buf = Buffer.concat(bufs);
        let json;
        try {
          json = JSON.parse(buf.toString('utf8'));
        } catch { /* not JSON */ }
        resolve({ status: res.statusCode, headers: res.headers, buf, text: buf.toString('utf8'), json });
      });
    });
    const timer = setTimeout(() => req.destroy(new Error(`${method} ${p}: no answer within 15 s`)), 15000);
    req.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    req.end(body);
  });
}

function multipart(parts) {
  const boundary = 'bbboundary41c';
  const chunks = [];
  for (const p of parts) {
    chunks.push(Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="${p.name}"; filename="${p.filename}"\r\n`
      + 'Content-Type: application/octet-stream\r\n\r\n'), Buffer.from(p.data), Buffer.from('\r\n'));
  }
  chunks.push(Buffer.from(`--${boundary}--\r\n`));
  return { body: Buffer.concat(chunks), headers: { 'Content-Type': `multipart/form-data; boundary=${boundary}` } };
}

/**
 * A root of busybox (every applet a link to it), osb-execd in /sbin, /etc/passwd and /etc/group, and with bash the
 * static bash as /bin/bash; osb-execd started in it under bwrap. Returns { root, sock, stop() } or null (skip).
 */
async function bootRoot(ctx, { bash = false } = {}) {
  const execd = staticExecd();
  if (!execd) {
    console.log(`      (skipped: no static osb-execd in build/prebuild/${arch} or prebuilds/${arch}: npm run prebuild makes it)`);
    ctx.skip();
  }
  const busybox = ['/bin/busybox', '/usr/bin/busybox'].find((f) => isStaticElf(f));
  const bashStatic = ['/bin/bash-static', '/usr/bin/bash-static'].find((f) => isStaticElf(f));
  if (!busybox || (bash && !bashStatic)) {
    console.log(`      (skipped: no static ${busybox ? 'bash' : 'busybox'}: apt-get install ${busybox ? 'bash' : 'busybox'}-static, as scripts/setup.sh does)`);
    ctx.skip();
  }
  const bwrap = findBwrap();
  if (!bwrap) throw new Error('bubblewrap (bwrap) is not on PATH');
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'osb-busybox-'));
  const root = path.join(work, 'root');
  for (const d of ['bin', 'sbin', 'etc', 'home/bb', 'workspace', 'tmp', 'run/execd', 'proc', 'dev']) fs.mkdirSync(path.join(root, d), { recursive: true });
  const install = (from, to) => {
    fs.copyFileSync(from, path.join(root, to));
    fs.chmodSync(path.join(root, to), 0o755);
  };
  install(busybox, 'bin/busybox');
  const applets = spawnSync(busybox, ['--list'], { encoding: 'utf8' }).stdout.split('\n').filter((a) => a && a !== 'busybox');
  for (const a of applets) fs.symlinkSync('busybox', path.join(root, 'bin', a));
  if (bash) install(bashStatic, 'bin/bash');
  install(execd, 'sbin/osb-execd');
  fs.writeFileSync(path.join(root, 'etc', 'passwd'), 'root:x:0:0:root:/root:/bin/sh\nbb:x:1000:1000:busybox user:/home/bb:/bin/sh\n');
  fs.writeFileSync(path.join(root, 'etc', 'group'), 'root:x:0:\nbbgroup:x:1000:\nstaff:x:50:\n');
  // nothing else: no /lib, no /usr, no ld.so, no node (and no bash unless asked)
  assert.equal(fs.existsSync(path.join(root, 'bin', 'bash')), bash);
  const sock = path.join(root, 'run', 'execd', 'execd.sock');
  const child = spawn(bwrap, ['--unshare-all', '--die-with-parent', '--new-session', '--uid', '1000', '--gid', '1000',
    '--bind', root, '/', '--proc', '/proc', '--dev', '/dev', '--clearenv', '--setenv', 'PATH', '/bin:/sbin', '--chdir', '/',
    '--', '/sbin/osb-execd', '--socket', '/run/execd/execd.sock', '--workspace', '/workspace', '--command-tail-ms', '0'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let stderr = '';
  child.stdout.on('data', (d) => { out += d; });
  child.stderr.on('data', (d) => { stderr += d; });
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      await new Promise((r) => (child.exitCode !== null || child.signalCode !== null ? r() : child.once('exit', r)));
    }
    fs.rmSync(work, { recursive: true, force: true });
  };
  try {
    await waitFor(() => out.includes('execd ready\n') || child.exitCode !== null, { timeoutMs: 15000, message: 'execd ready' });
    assert.equal(out, 'execd ready\n', `osb-execd did not start in the busybox root: ${stderr}`);
  } catch (err) {
    await stop();
    throw err;
  }
  return { root, sock, stop };
}

/** A PTY session's run: frames until the close; sends `input` (stdin frames) once connected. */
function ptyRun(sock, id, query, input = []) {
  const frames = [];
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`ws+unix://${sock}:/pty/${id}/ws?${query}`);
    const timer = setTimeout(() => {
      ws.terminate();
      reject(new Error(`no close within 10 s: ${JSON.stringify(frames)}`));
    }, 10000);
    ws.on('message', (m, binary) => {
      if (binary) {
        frames.push({ kind: m[0], text: m.subarray(1).toString('utf8') });
        return;
      }
      const f = JSON.parse(m.toString('utf8'));
      frames.push(f);
      if (f.type === 'connected') for (const x of input) ws.send(x);
    });
    ws.on('close', (code, reason) => {
      clearTimeout(timer);
      resolve({ frames, close: { code, reason: reason.toString() } });
    });
    ws.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
  });
}

const newPty = async (sock, body) => {
  const p = await http1(sock, 'POST', '/pty', { body: Buffer.from(JSON.stringify(body)), headers: { 'Content-Type': 'application/json' } });
  assert.equal(p.status, 201, p.text);
  return p.json.session_id;
};

describe('the static osb-execd in a root of busybox-static alone', function () {
  this.timeout(60000);
  let box;
  let sock;
  let root;
  const cmd = async (body) => {
    const r = await http1(sock, 'POST', '/command', { body: Buffer.from(JSON.stringify(body)), headers: { 'Content-Type': 'application/json' } });
    assert.equal(r.status, 200, r.text);
    return parseEvents(r.text);
  };
  const stdout = (events) => events.filter((e) => e.type === 'stdout').map((e) => e.text);

  before(async function () {
    box = await bootRoot(this);
    ({ sock, root } = box);
  });
  after(async () => {
    await box?.stop();
  });

  it('ping', async () => {
    const r = await http1(sock, 'GET', '/ping');
    assert.equal(r.status, 200);
  });

  it('commands run with busybox sh (no bash: `sh -c`, as upstream), as uid 1000, with their exit codes', async () => {
    const ev = await cmd({ command: 'echo "$0"; id -u; test -e /lib || echo no-lib; readlink /bin/sh; echo "${BASH_VERSION:-no bash}"' });
    assert.deepEqual(stdout(ev), ['sh', '1000', 'no-lib', 'busybox', 'no bash']);
    assert.equal(ev.at(-1).type, 'execution_complete');
    const failed = await cmd({ command: 'echo out; echo err >&2; exit 3' });
    assert.deepEqual(stdout(failed), ['out']);
    assert.deepEqual(failed.filter((e) => e.type === 'stderr').map((e) => e.text), ['err']);
    const e = failed.find((x) => x.type === 'error');
    assert.equal(e?.error?.evalue, '3', JSON.stringify(failed));
  });

  it('`~` is the home of the sandbox uid in the root\'s own /etc/passwd (no $HOME, no NSS)', async () => {
    const ev = await cmd({ command: 'pwd; echo "${HOME:-unset}"', cwd: '~' });
    assert.deepEqual(stdout(ev), ['/home/bb', 'unset']);
  });

  it('a background command, its status and its logs', async () => {
    const ev = await cmd({ command: 'echo bg-out; exit 0', background: true });
    const id = ev.find((e) => e.type === 'init')?.text;
    assert.ok(id, JSON.stringify(ev));
    let status;
    await waitFor(async () => {
      status = (await http1(sock, 'GET', `/command/status/${id}`)).json;
      return status && status.running === false;
    }, { timeoutMs: 10000, message: 'background command done' });
    assert.equal(status.exit_code, 0, JSON.stringify(status));
    const logs = await http1(sock, 'GET', `/command/${id}/logs?cursor=0`);
    assert.equal(logs.status, 200);
    assert.equal(logs.text, 'bg-out\n');
  });

  it('files: POST /directories, upload, info (owner names from the root\'s files), download', async () => {
    const d = await http1(sock, 'POST', '/directories', { body: Buffer.from(JSON.stringify({ '/workspace/d/e': { mode: 750 } })), headers: { 'Content-Type': 'application/json' } });
    assert.equal(d.status, 200, d.text);
    assert.equal((fs.statSync(path.join(root, 'workspace', 'd', 'e')).mode & 0o777), 0o750);
    const data = Buffer.from('hello from busybox\n\u00e9\x00\xff');
    const up = multipart([
      { name: 'metadata', filename: 'metadata', data: JSON.stringify({ path: '/workspace/d/e/f.bin', mode: 640, group: 'bbgroup' }) },
      { name: 'file', filename: 'f.bin', data },
    ]);
    const u = await http1(sock, 'POST', '/files/upload', up);
    assert.equal(u.status, 200, u.text);
    assert.deepEqual(fs.readFileSync(path.join(root, 'workspace', 'd', 'e', 'f.bin')), data);
    const info = await http1(sock, 'GET', `/files/info?path=${encodeURIComponent('/workspace/d/e/f.bin')}`);
    assert.equal(info.status, 200, info.text);
    const fi = info.json['/workspace/d/e/f.bin'];
    assert.deepEqual([fi.path, fi.size, fi.owner, fi.group, fi.mode], ['/workspace/d/e/f.bin', data.length, 'bb', 'bbgroup', 640]);
    const dir = (await http1(sock, 'GET', `/files/info?path=${encodeURIComponent('/workspace/d')}`)).json['/workspace/d'];
    assert.deepEqual([dir.owner, dir.group], ['bb', 'bbgroup']);
    const dl = await http1(sock, 'GET', `/files/download?path=${encodeURIComponent('/workspace/d/e/f.bin')}`);
    assert.equal(dl.status, 200);
    assert.deepEqual(dl.buf, data);
    const ls = await cmd({ command: 'ls -ln /workspace/d/e' });
    assert.match(stdout(ls).join('\n'), /-rw-r-----\s+1 1000\s+1000 .* f\.bin/);
  });

  it('the PTY API: a session is made, but its run needs bash (upstream runs `bash` with no fallback): the start fails', async () => {
    const id = await newPty(sock, {});
    const { frames, close } = await ptyRun(sock, id, 'pty=0');
    assert.deepEqual([frames, close], [[{ type: 'error', error: 'spawn bash ENOENT', code: 'START_FAILED' }], { code: 1011, reason: 'start failed' }]);
    const s = await http1(sock, 'GET', `/pty/${id}`);
    assert.equal(s.json.running, false, s.text);
  });
});

describe('the static osb-execd in a root of busybox-static and a static bash', function () {
  this.timeout(60000);
  let box;
  before(async function () {
    box = await bootRoot(this, { bash: true });
  });
  after(async () => {
    await box?.stop();
  });

  it('the PTY API in pipe mode: stdin in, stdout and stderr apart, the exit code', async () => {
    const id = await newPty(box.sock, { command: 'read -r line; echo "got $line"; echo "to-err" >&2; exit 4' });
    const { frames, close } = await ptyRun(box.sock, id, 'pty=0', [Buffer.concat([Buffer.from([0]), Buffer.from('hello\n')])]);
    assert.deepEqual(frames.filter((f) => f.type === 'connected'), [{ type: 'connected', session_id: id, mode: 'pipe' }]);
    assert.equal(frames.filter((f) => f.kind === 1).map((f) => f.text).join(''), 'got hello\n');
    assert.equal(frames.filter((f) => f.kind === 2).map((f) => f.text).join(''), 'to-err\n');
    assert.deepEqual(frames.at(-1), { type: 'exit', exit_code: 4 });
    assert.deepEqual(close, { code: 1000, reason: 'process exited' });
  });

  it('the PTY API in PTY mode: a terminal (tty, 80x24) with bash as the session leader', async () => {
    const id = await newPty(box.sock, { command: 'tty; stty size; echo "$BASH_VERSION" | cut -d. -f1' });
    const { frames, close } = await ptyRun(box.sock, id, 'pty=1');
    assert.deepEqual(frames.filter((f) => f.type === 'connected'), [{ type: 'connected', session_id: id, mode: 'pty' }]);
    const text = frames.filter((f) => f.kind === 1).map((f) => f.text).join('');
    assert.match(text, /^\/dev\/pts\/\d+\r\n24 80\r\n5\r\n$/);
    assert.deepEqual(frames.at(-1), { type: 'exit', exit_code: 0 });
    assert.deepEqual(close, { code: 1000, reason: 'process exited' });
  });
});
