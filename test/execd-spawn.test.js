// execd's spawn (lib/dev-server/execd/spawn.js): processes started by the native addon (clone(CLONE_VM|CLONE_VFORK),
// exits through pidfds) behave as node:child_process.spawn's for what execd uses — the same events in the same
// order, exit codes, signals, stdout/stderr bytes, spawn errors, process groups; the fallbacks; and a sandbox's
// execd started with the server's addon runs its commands through it.
import assert from 'node:assert/strict';
import { ChildProcess, execFile, spawn as nodeSpawn } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { Sandbox, ConnectionConfig } from '@alibaba-group/opensandbox';
import { addonFile } from '../lib/dev-server/addon-file.js';
import { execdBinary } from '../lib/dev-server/execd-binary.js';
import { spawn, spawnPath, useNativeAddon } from '../lib/dev-server/execd/spawn.js';
import { OutputSockets } from '../lib/dev-server/execd/out-socket.js';
import { startServer } from '../lib/dev-server/index.js';
import { waitFor } from './helpers/poll.js';
import { request } from './helpers/raw.js';

const ADDON = addonFile();
const stats = () => createRequire(import.meta.url)(ADDON).stats();

/**
 * Runs one process through spawnFn and records what a caller observes: the events in order (with their
 * arguments), stdout/stderr bytes, exitCode/signalCode, and the error's own properties. Resolves at 'close'.
 */
function observe(spawnFn, file, args, opts, { stdin, onSpawned } = {}) {
  return new Promise((resolve, reject) => {
    const events = [];
    const out = [];
    const err = [];
    let child;
    try {
      child = spawnFn(file, args, opts);
    } catch (e) {
      resolve({ thrown: { message: e.message, code: e.code, errno: e.errno, syscall: e.syscall } });
      return;
    }
    const timer = setTimeout(() => reject(new Error(`no close: ${JSON.stringify(events)}`)), 20000);
    const rec = { events, child, hasPid: child.pid !== undefined };
    child.on('spawn', () => events.push(['spawn']));
    child.on('exit', (c, s) => events.push(['exit', c, s]));
    child.on('error', (e) => {
      events.push(['error']);
      rec.error = { message: e.message, code: e.code, errno: e.errno, syscall: e.syscall, path: e.path, spawnargs: e.spawnargs };
    });
    child.stdout?.on('data', (b) => out.push(b));
    child.stderr?.on('data', (b) => err.push(b));
    child.stdout?.on('end', () => events.push(['stdout end']));
    child.on('close', (c, s) => {
      clearTimeout(timer);
      events.push(['close', c, s]);
      Object.assign(rec, { stdout: Buffer.concat(out).toString('latin1'), stderr: Buffer.concat(err).toString('latin1'),
        exitCode: child.exitCode, signalCode: child.signalCode, stdio: child.stdio.map((s) => s === null ? null : 'stream') });
      resolve(rec);
    });
    if (stdin !== undefined) child.stdin.end(stdin);
    onSpawned?.(child);
  });
}

/**
 * The observation of both paths without the child objects. 'stdout end' is left out of `events` (its order against
 * 'exit' is a race in both: the EOF and the exit travel separately) and kept in `ordered`.
 */
async function both(file, args, opts, extra) {
  const native = await observe(spawn, file, args, opts, extra);
  const node = await observe(nodeSpawn, file, args, opts, extra);
  const strip = ({ child, events, ...r }) => ({ ...r, events: events?.filter((e) => e[0] !== 'stdout end'), ordered: events });
  const n = strip(native);
  const o = strip(node);
  assert.deepEqual({ ...n, ordered: 0 }, { ...o, ordered: 0 });
  return { native: n, node: o, nativeChild: native.child };
}

describe('execd spawn without fork (native addon)', function () {
  this.timeout(60000);
  before(function () {
    assert.ok(ADDON, 'the addon is built');
    useNativeAddon(ADDON);
  });
  after(() => useNativeAddon(null));

  it('exit code, stdin to stdout, stderr bytes: as node:child_process', async () => {
    const script = 'cat; printf "\\000\\377\\n" >&2; exit 3';
    const { native, node, nativeChild } = await both('sh', ['-c', script], { stdio: ['pipe', 'pipe', 'pipe'], detached: true },
      { stdin: 'in\nput' });
    assert.equal(spawnPath().native, true);
    assert.ok(!(nativeChild instanceof ChildProcess), 'the native path was taken');
    assert.equal(native.stdout, 'in\nput');
    assert.equal(native.stderr, '\x00\xff\n');
    assert.deepEqual(native.events.at(-1), ['close', 3, null]);
    assert.equal(native.events[0][0], 'spawn');
  });

  it('death by a signal: exit (null, SIGTERM), close after it', async () => {
    const { native, node } = await both('sh', ['-c', 'kill -TERM $$'], { stdio: ['ignore', 'pipe', 'pipe'] });
    assert.deepEqual(native.events, [['spawn'], ['exit', null, 'SIGTERM'], ['close', null, 'SIGTERM']]);
  });

  it("'close' waits for a grandchild holding stdout, after 'exit'", async () => {
    const { native, node } = await both('sh', ['-c', '(sleep 0.3; echo late) & echo early'], { stdio: ['ignore', 'pipe', 'pipe'] });
    assert.equal(native.stdout, 'early\nlate\n');
    for (const r of [native, node]) assert.deepEqual(r.ordered, [['spawn'], ['exit', 0, null], ['stdout end'], ['close', 0, null]]);
  });

  it('a missing program: asynchronous ENOENT error, then close (-2, null), no pid', async () => {
    const { native, node } = await both('osb-no-such-program', ['a', 'b'], { stdio: ['pipe', 'pipe', 'pipe'] });
    assert.equal(native.hasPid, false);
    assert.deepEqual(native.error, { message: 'spawn osb-no-such-program ENOENT', code: 'ENOENT', errno: -2,
      syscall: 'spawn osb-no-such-program', path: 'osb-no-such-program', spawnargs: ['a', 'b'] });
    assert.deepEqual(native.events, [['error'], ['close', -2, null]]);
  });

  it('a missing cwd is ENOENT like a missing program; a file as cwd throws ENOTDIR', async () => {
    const missing = await both('sh', ['-c', 'true'], { cwd: '/nonexistent-osb-dir', stdio: ['ignore', 'pipe', 'pipe'] });
    assert.equal(missing.native.error.code, 'ENOENT');
    const file = await both('sh', ['-c', 'true'], { cwd: '/etc/passwd', stdio: 'pipe' });
    assert.deepEqual(file.native.thrown, { message: 'spawn ENOTDIR', code: 'ENOTDIR', errno: -20, syscall: 'spawn' });
  });

  it('env, cwd, PATH lookup in the given env; only 0, 1, 2 open in the child', async () => {
    // not compared with Node: libuv passes on every descriptor of the parent without close-on-exec (mocha has one)
    const env = { PATH: '/nonexistent:/usr/bin:/bin', A: 'x y', B: undefined };
    const native = await observe(spawn, 'sh', ['-c', 'echo "$PWD|$A|${B-unset}"; ls /proc/self/fd'],
      { cwd: '/proc', env, stdio: ['ignore', 'pipe', 'ignore'] });
    assert.ok(!(native.child instanceof ChildProcess));
    assert.equal(native.stdout, '/proc|x y|unset\n0\n1\n2\n3\n'); // 3: ls's own directory
    assert.deepEqual(native.stdio, [null, 'stream', null]);
  });

  it('detached: its own session and process group; killing the group ends the grandchildren too', async () => {
    let pid;
    let said = '';
    const rec = observe(spawn, 'sh', ['-c', 'sleep 30 & echo "$(cut -d" " -f5,6 /proc/$$/stat) $!"; wait'],
      { detached: true, stdio: ['ignore', 'pipe', 'pipe'] }, { onSpawned: (c) => {
        pid = c.pid;
        c.stdout.on('data', (b) => { said += b; });
      } });
    await waitFor(() => said.endsWith('\n'), { message: 'the group and the sleeper reported' });
    const sleeper = said.trim().split(' ')[2];
    process.kill(-pid, 'SIGKILL');
    const r = await rec;
    assert.equal(r.stdout, `${pid} ${pid} ${sleeper}\n`);
    assert.ok(!(r.child instanceof ChildProcess));
    assert.deepEqual(r.events.filter((e) => e[0] !== 'stdout end'), [['spawn'], ['exit', null, 'SIGKILL'], ['close', null, 'SIGKILL']]);
    await waitFor(() => {
      try {
        process.kill(Number(sleeper), 0);
        return false;
      } catch (e) { return e.code === 'ESRCH'; }
    }, { message: 'the grandchild is gone' });
  });

  it('kill(): signals the child once, false after the exit', async () => {
    const child = spawn('sleep', ['30'], { stdio: 'ignore' });
    const exited = new Promise((r) => child.on('exit', (c, s) => r([c, s])));
    await new Promise((r) => child.on('spawn', r));
    assert.equal(child.kill('SIGINT'), true);
    assert.deepEqual(await exited, [null, 'SIGINT']);
    assert.equal(child.killed, true);
    assert.equal(child.kill(), false);
    const other = spawn('sleep', ['30'], { stdio: 'ignore' });
    const gone = new Promise((r) => other.on('exit', r));
    assert.throws(() => other.kill('SIGNOPE'), { code: 'ERR_UNKNOWN_SIGNAL' });
    assert.equal(other.kill('SIGKILL'), true);
    await gone;
  });

  it("background stdio: ['ignore', socket, socket] writes into the caller's socket", async () => {
    const sockets = new OutputSockets();
    try {
      const read = async (spawnFn) => {
        const { reader, writer } = await sockets.pair();
        const chunks = [];
        reader.on('data', (b) => chunks.push(b));
        const ended = new Promise((r) => reader.on('end', r));
        const child = spawnFn('sh', ['-c', 'echo out; echo err >&2; exit 4'], { stdio: ['ignore', writer, writer], detached: true });
        writer.destroy();
        const exit = await new Promise((r) => child.on('exit', (c, s) => r([c, s])));
        await ended;
        reader.destroy();
        return { exit, out: Buffer.concat(chunks).toString(), stdio: child.stdio, child };
      };
      const n = await read(spawn);
      const o = await read(nodeSpawn);
      assert.ok(!(n.child instanceof ChildProcess));
      assert.deepEqual({ ...n, child: 0 }, { ...o, child: 0 });
      assert.deepEqual(n.exit, [4, null]);
      assert.equal(n.out, 'out\nerr\n');
      assert.deepEqual(n.stdio, [null, null, null]);
    } finally {
      sockets.close();
    }
  });

  it('five pipes (the PTY helper): extra descriptors are readable and writable', async () => {
    const child = spawn('sh', ['-c', 'read l <&3; echo "got $l" >&4'], { stdio: ['pipe', 'pipe', 'pipe', 'pipe', 'pipe'] });
    assert.ok(!(child instanceof ChildProcess));
    const got = [];
    child.stdio[4].on('data', (b) => got.push(b));
    child.stdio[3].write('resize 80 24\n');
    const close = await new Promise((r) => child.on('close', (c, s) => r([c, s])));
    assert.deepEqual(close, [0, null]);
    assert.equal(Buffer.concat(got).toString(), 'got resize 80 24\n');
  });

  it('no child left behind: every exit delivered', async () => {
    await waitFor(() => stats().spawnedChildren === 0, { message: 'spawnedChildren back to 0' });
  });

  it('uid/gid go to node:child_process (same object shape)', async () => {
    const child = spawn('sh', ['-c', 'id -u'], { uid: process.getuid(), gid: process.getgid(), stdio: ['ignore', 'pipe', 'ignore'] });
    assert.ok(child instanceof ChildProcess);
    const out = [];
    child.stdout.on('data', (b) => out.push(b));
    await new Promise((r) => child.on('close', r));
    assert.equal(Buffer.concat(out).toString(), `${process.getuid()}\n`);
  });

  it('a kernel without pidfd_open (seccomp answers ENOSYS): the addon refuses, node:child_process takes over', async () => {
    // /usr/bin/python3 with python3-seccomp (what the server's own filter is built with) loads the filter and execs node
    const load = 'import errno, os, sys, seccomp\n' +
      'f = seccomp.SyscallFilter(seccomp.ALLOW)\n' +
      "f.add_rule(seccomp.ERRNO(errno.ENOSYS), 'pidfd_open')\n" +
      'f.load()\n' +
      'os.execv(sys.argv[1], sys.argv[1:])\n';
    const script = `import { spawn, spawnPath, useNativeAddon } from ${JSON.stringify(new URL('../lib/dev-server/execd/spawn.js', import.meta.url).href)};
      useNativeAddon(${JSON.stringify(ADDON)});
      const c = spawn('sh', ['-c', 'echo hi'], { stdio: ['ignore', 'pipe', 'pipe'] });
      c.stdout.on('data', (b) => process.stdout.write(b));
      c.on('close', (code) => console.log(code, c.constructor.name, JSON.stringify(spawnPath())));`;
    const { stdout, stderr } = await new Promise((resolve, reject) => {
      execFile('/usr/bin/python3', ['-c', load, process.execPath, '--input-type=module', '-e', script], { timeout: 30000 },
        (err, out, errOut) => (err ? reject(new Error(`${err.message}\n${errOut}`)) : resolve({ stdout: out, stderr: errOut })));
    });
    const why = 'pidfd_open is not available (Function not implemented): spawning without fork needs Linux >= 5.3';
    assert.equal(stdout, `hi\n0 ChildProcess ${JSON.stringify({ native: false, reason: why })}\n`);
    assert.equal(stderr, `execd: processes start through node:child_process: ${why}\n`);
  });

  it('an addon that does not load: node:child_process, with the reason', async () => {
    useNativeAddon('/nonexistent-osb/mastra_opensandbox.node');
    try {
      const r = await observe(spawn, 'sh', ['-c', 'echo hi'], { stdio: ['ignore', 'pipe', 'pipe'] });
      assert.ok(r.child instanceof ChildProcess);
      assert.equal(r.stdout, 'hi\n');
      assert.equal(spawnPath().native, false);
      assert.match(spawnPath().reason, /^cannot load \/nonexistent-osb\/mastra_opensandbox\.node: /);
    } finally {
      useNativeAddon(ADDON);
    }
  });
});

describe("a sandbox's execd spawns through the server's addon", function () {
  this.timeout(60000);
  let server;
  let sbx;
  before(async () => {
    server = await startServer({ commandTailMs: 50 });
    sbx = await Sandbox.create({ connectionConfig: new ConnectionConfig({ domain: server.domain }), image: 'python:3.11' });
  });
  after(async () => {
    await sbx?.kill().catch(() => {});
    await sbx?.close();
    await server?.close();
  });

  it('the Node execd gets --native-addon (the file under the read-only package)', async () => {
    // commands, PTY sessions and code contexts (kernels and shell runs) are the C execd's (src/execd/commands.c,
    // pty.c, code.c): no route left to the Node execd starts a process through spawn.js (bash sessions use
    // node:child_process), so what is checked is what the C execd hands it: the addon's file, read-only. A bash
    // session is the Node execd's: the C execd starts it on that first request.
    const ep = await request(`${server.baseUrl}/v1/sandboxes/${sbx.id}/endpoints/44772`);
    assert.equal(ep.status, 200, ep.text);
    const execd = `http://${ep.json.endpoint}`;
    const session = await request(`${execd}/session`, { method: 'POST', body: {} });
    assert.equal(session.status, 200, session.text);
    try {
      // the Node execd: the process whose command line carries --handoff
      const find = 'for p in /proc/[0-9]*; do tr "\\0" "\\n" < $p/cmdline 2>/dev/null | grep -qx -- --handoff && { echo ${p#/proc/}; break; }; done';
      const ex = await sbx.commands.run(`n=$(${find}); tr "\\0" "\\n" < /proc/$n/cmdline | grep -A1 -x -- --native-addon | tail -1; ` +
        'test -w "$(tr "\\0" "\\n" < /proc/$n/cmdline | grep -A1 -x -- --native-addon | tail -1)" && echo writable || echo read-only');
      const lines = ex.logs.stdout.map((m) => m.text);
      assert.equal(lines[0], ADDON);
      assert.equal(lines[1], 'read-only');
    } finally {
      await request(`${execd}/session/${session.json.session_id}`, { method: 'DELETE' }).catch(() => {});
    }
  });
});

describe('an addon outside the directories bound into sandboxes', function () {
  this.timeout(60000);
  let server;
  let sbx;
  let dir;
  const logs = [];
  const saved = process.env.MASTRA_OPENSANDBOX_ADDON;
  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'osb-addon-'));
    fs.copyFileSync(ADDON, path.join(dir, 'mastra_opensandbox.node'));
    // the C execd beside it, as a package has it (without one the server refuses to start: test/execd-binary.test.js)
    fs.copyFileSync(execdBinary(), path.join(dir, 'osb-execd'));
    fs.chmodSync(path.join(dir, 'osb-execd'), 0o755);
    process.env.MASTRA_OPENSANDBOX_ADDON = path.join(dir, 'mastra_opensandbox.node');
    server = await startServer({ commandTailMs: 50, log: (m) => logs.push(m) });
    sbx = await Sandbox.create({ connectionConfig: new ConnectionConfig({ domain: server.domain }), image: 'python:3.11' });
  });
  after(async () => {
    if (saved === undefined) delete process.env.MASTRA_OPENSANDBOX_ADDON;
    else process.env.MASTRA_OPENSANDBOX_ADDON = saved;
    await sbx?.kill().catch(() => {});
    await sbx?.close();
    await server?.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('is not named to execd (it could not read it), which forks as before; the server says so', async () => {
    const ex = await sbx.commands.run('tr "\\0" "\\n" < /proc/$PPID/cmdline | grep -c -x -- --native-addon; ' +
      'cat /proc/$PPID/task/*/comm | grep -c -x osb-reaper');
    assert.deepEqual(ex.logs.stdout.map((m) => m.text), ['0', '0']);
    assert.ok(logs.includes(`dev-server: the native addon ${path.join(fs.realpathSync(dir), 'mastra_opensandbox.node')} is outside ` +
      'the directories bound into sandboxes: execd starts processes through node:child_process (a fork of execd per process)'), logs.join('\n'));
  });
});
