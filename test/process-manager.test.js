// sandbox.processes (OpenSandboxProcessManager) against the local OpenSandbox-compatible server: every process
// behaviour of the Mastra contract (pid, exit codes, env, live output, callbacks, wait/kill/stdin, list/get/dismiss,
// reader/writer, abort, timeout), stdin round trips (head -1, a read loop, a python REPL), binary-safe output, and
// 10 MB through a small maxRetainedBytes.
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import v8 from 'node:v8';
import vm from 'node:vm';
import { LocalSandbox } from '@mastra/core/workspace';
import { startServer } from '../lib/dev-server/index.js';
import { OpenSandboxSandbox } from '../lib/index.js';
import { stats } from '../lib/native.js';
import { waitFor } from './helpers/poll.js';

describe('OpenSandboxProcessManager (sandbox.processes)', function () {
  this.timeout(30000);
  let server;
  let sandbox;
  let pm;
  let baseline; // native counters before this file's processes (other files may still have theirs)

  before(async function () {
    this.timeout(60000);
    server = await startServer({ port: 0 });
    sandbox = new OpenSandboxSandbox({ domain: server.domain, env: { SANDBOX_VAR: 'from-sandbox' } });
    await sandbox._start();
    pm = sandbox.processes;
    baseline = stats();
  });

  after(async function () {
    this.timeout(30000);
    await sandbox?._destroy();
    await server?.close();
  });

  it('spawns: pid is a non-empty string, exact exit code, env option and sandbox env', async () => {
    const h = await pm.spawn('echo "$A $SANDBOX_VAR"; exit 42', { env: { A: 'per process' } });
    assert.equal(typeof h.pid, 'string');
    assert.ok(h.pid.length > 0);
    const r = await h.wait();
    assert.equal(r.exitCode, 42);
    assert.equal(r.success, false);
    assert.equal(r.stdout, 'per process from-sandbox\n');
    assert.equal(r.killed, false);
    assert.equal(r.timedOut, false);
    assert.equal(h.exitCode, 42);
    const printenv = await (await pm.spawn('printenv SANDBOX_VAR')).wait();
    assert.equal(printenv.stdout, 'from-sandbox\n');
    assert.equal(printenv.exitCode, 0);
  });

  it('delivers output live, stdout and stderr apart, exitCode undefined while running', async () => {
    const out = [];
    const err = [];
    const h = await pm.spawn('echo first; echo warn >&2; read go; echo second', {
      onStdout: (d) => out.push(d),
      onStderr: (d) => err.push(d),
    });
    await waitFor(() => h.stdout === 'first\n' && h.stderr === 'warn\n', { message: `live output (got ${JSON.stringify(h.stdout)})` });
    assert.equal(h.exitCode, undefined);
    assert.deepEqual(await pm.list().then((l) => l.find((p) => p.pid === h.pid)), { pid: h.pid, command: h.command, running: true });
    await h.sendStdin('now\n');
    const r = await h.wait();
    assert.equal(r.exitCode, 0);
    assert.equal(h.exitCode, 0);
    assert.equal(out.join(''), 'first\nsecond\n');
    assert.equal(err.join(''), 'warn\n');
    assert.ok(out.length >= 2, 'at least two live chunks');
    assert.equal(r.stdout, 'first\nsecond\n');
    assert.equal(r.stderr, 'warn\n');
  });

  it('wait() is idempotent; onStdout/onStderr given to wait() get the rest', async () => {
    const h = await pm.spawn('read x; echo "out-$x"; echo "err-$x" >&2');
    const got = { out: '', err: '' };
    const w1 = h.wait({ onStdout: (d) => { got.out += d; }, onStderr: (d) => { got.err += d; } });
    await h.sendStdin('1\n');
    const r1 = await w1;
    const r2 = await h.wait();
    assert.deepEqual(r2, { ...r1, executionTimeMs: r2.executionTimeMs });
    assert.equal(r1.executionTimeMs, r2.executionTimeMs);
    assert.deepEqual(got, { out: 'out-1\n', err: 'err-1\n' });
  });

  it('kill(): true, the whole group dies (confirmed by execd), wait() fails; kill() after exit is false', async () => {
    // counts the two sleep processes only (not the shells whose command lines contain the text)
    const count = "pgrep -f '^sleep 6[01][.]5$' | wc -l";
    const h = await pm.spawn('sleep 60.5 & sleep 61.5; echo never');
    await waitFor(async () => (await (await pm.spawn(count, { stdinMode: 'ignore' })).wait()).stdout.trim() === '2',
      { message: 'both sleeps running' });
    assert.equal(await h.kill(), true);
    const r = await h.wait();
    assert.equal(r.success, false);
    assert.equal(r.killed, true);
    assert.equal(r.exitCode, 137);
    assert.equal(r.stdout, '');
    assert.equal(await h.kill(), false);
    const left = await (await pm.spawn(count)).wait();
    assert.equal(left.stdout.trim(), '0');
  });

  it('sendStdin into head -1; sendStdin after exit rejects; stdinMode ignore has no stdin', async () => {
    const h = await pm.spawn('head -1');
    await h.sendStdin('hello from stdin\nsecond line\n');
    const r = await h.wait();
    assert.equal(r.stdout, 'hello from stdin\n');
    assert.equal(r.exitCode, 0);
    await assert.rejects(h.sendStdin('late\n'), /already exited with code 0/);
    const h3 = await pm.spawn('cat; echo "cat ended"', { stdinMode: 'ignore' });
    await assert.rejects(h3.sendStdin('x\n'), /does not have stdin available/);
    await assert.rejects(h3.closeStdin(), /does not have stdin available/);
    assert.equal((await h3.wait()).stdout, 'cat ended\n'); // stdin is /dev/null: cat ends at once
  });

  it('closeStdin gives programs that read to EOF their end of input: cat | wc -c, sort', async () => {
    const wc = await pm.spawn('cat | wc -c');
    await wc.sendStdin('hello ');
    await wc.sendStdin('world\n');
    await wc.closeStdin();
    assert.deepEqual(await wc.wait().then(r => [r.exitCode, r.stdout]), [0, '12\n']);
    const sort = await pm.spawn('sort; echo sorted');
    await sort.sendStdin('pear\napple\n');
    await sort.sendStdin('fig\n');
    await sort.closeStdin();
    await sort.closeStdin(); // twice is fine
    assert.equal((await sort.wait()).stdout, 'apple\nfig\npear\nsorted\n');
    assert.equal(await sort.closeStdin(), undefined); // after exit: nothing to close
  });

  it('closeStdin: binary stdin arrives byte-exact (NUL, CR, invalid UTF-8, no final newline); sendStdin afterwards rejects', async () => {
    const bytes = Buffer.concat([Buffer.from([0, 1, 2, 255, 254, 13, 10, 0x80]), randomBytes(70000), Buffer.from('end-without-newline')]);
    const h = await pm.spawn('od -An -v -tx1 | tr -d " \\n"');
    await h.sendStdin(bytes.subarray(0, 5));
    await h.sendStdin(bytes.subarray(5)); // larger than one stdin frame
    await h.closeStdin();
    await assert.rejects(h.sendStdin('late'), /stdin was closed \(closeStdin\)/);
    const r = await h.wait();
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout, bytes.toString('hex'));
  });

  it('stdin in bulk: 5 MiB of every byte value in writes of every size, all in flight at once, arrive exactly; closeStdin right after them ends it', async () => {
    const pattern = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    const data = Buffer.concat([pattern, randomBytes(5 * 1048576), pattern]);
    const h = await pm.spawn('sha256sum; wc -c < /dev/null');
    const sizes = [1, 0, 255, 1048576, 1048577, 3, 2 * 1048576 + 7, 65536];
    const writes = [];
    let o = 0;
    for (let i = 0; o < data.length; i++) {
      const n = Math.min(sizes[i % sizes.length], data.length - o);
      writes.push(h.sendStdin(data.subarray(o, o + n)));
      o += n;
    }
    writes.push(h.closeStdin()); // no await between: writes and the end travel together
    await Promise.all(writes);
    const r = await h.wait();
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout, `${createHash('sha256').update(data).digest('hex')}  -\n0\n`);
  });

  // The wrapper's children while its command starts: builtins only, so the decoder (a process substitution) would be
  // the one child. With the sandbox's stdin holder there is none until the first write.
  const CHILDREN = 'read -r c < /proc/$$/task/$$/children; set -- $c; echo "children $#"';
  // The holder's processes in the sandbox (its session's wrapper, the holder, its own decoder, one decoder per
  // process that wrote): their command line has the holder's pid line (the pattern does not match itself).
  const HOLDER_PROCS = "n=0; for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null | grep -q 'OSB-HOLDE[R]:' && n=$((n+1)); done; echo $n";

  it('stdin through the sandbox\'s holder: no decoder until the first write, then exact bytes; closeStdin with no write is EOF at once', async () => {
    const h = await pm.spawn(`${CHILDREN}; wc -c`);
    await waitFor(() => h.stdout.startsWith('children '), { message: 'the command started' });
    assert.equal(h.stdout, 'children 0\n');
    await h.sendStdin('abc');
    await h.sendStdin(Buffer.from([0, 1, 2, 255]));
    await h.closeStdin();
    const r = await h.wait();
    assert.equal(r.stdout, 'children 0\n7\n');
    assert.equal(r.exitCode, 0);
    const e = await pm.spawn(`${CHILDREN}; wc -c`);
    await waitFor(() => e.stdout.startsWith('children '), { message: 'the command started' });
    await e.closeStdin();
    const re = await e.wait();
    assert.equal(re.stdout, 'children 0\n0\n');
    assert.equal(re.exitCode, 0);
  });

  it('a killed process leaves no decoder behind in the holder (the client tells it to forget the process)', async () => {
    const k = await pm.spawn('echo up; sleep 30');
    await waitFor(() => k.stdout === 'up\n', { message: 'the command started' });
    const count = async () => Number((await sandbox.executeCommand(HOLDER_PROCS)).stdout);
    const before = await count();
    assert.ok(before >= 2, `holder processes ${before}`);
    await k.sendStdin('x'); // the holder starts this process's decoder
    await waitFor(async () => (await count()) === before + 1, { message: 'the decoder started' });
    assert.equal(await k.kill(), true);
    await waitFor(async () => (await count()) <= before, { message: 'the decoder is gone' });
  });

  it('the holder killed: the processes it held see the end of their stdin, and a later spawn gets a new holder', async () => {
    const a = await pm.spawn(`${CHILDREN}; cat; echo "cat ended"`);
    await waitFor(() => a.stdout === 'children 0\n', { message: 'the command started' });
    await sandbox.executeCommand("for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null | grep -q 'OSB-HOLDE[R]:' && kill -9 ${p#/proc/}; done; true");
    const r = await a.wait();
    assert.equal(r.stdout, 'children 0\ncat ended\n');
    assert.equal(r.exitCode, 0);
    await waitFor(async () => {
      const b = await pm.spawn(`${CHILDREN}; wc -c`);
      await b.sendStdin('hello');
      await b.closeStdin();
      const rb = await b.wait();
      assert.match(rb.stdout, /^children [01]\n5\n$/);
      return rb.stdout === 'children 0\n5\n';
    }, { message: 'a spawn with a new holder' });
  });

  it('stdin awaited chunk by chunk (the way users write it: 1 byte, 64 KiB, 4 MiB), binary-exact, then closeStdin', async function () {
    this.timeout(60000);
    const pattern = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    for (const [size, total] of [[1, 2048], [65536, 8 * 1048576 + 100], [4 * 1048576, 12 * 1048576 + 1]]) {
      const data = Buffer.concat([pattern, randomBytes(total - 256)]);
      const h = await pm.spawn('sha256sum');
      for (let o = 0; o < data.length; o += size) await h.sendStdin(data.subarray(o, o + size));
      await h.closeStdin();
      const r = await h.wait();
      assert.deepEqual([size, r.exitCode, r.stdout, r.stderr], [size, 0, `${createHash('sha256').update(data).digest('hex')}  -\n`, '']);
    }
  });

  it("exit, exec, the command's own EXIT trap, set -e, a function's return, functions named printf, read, exit: the exact status and output, with and without stdin", async () => {
    // the command runs in the wrapper's shell (its EXIT trap prints the markers) unless it may exec or trap (a subshell)
    const cases = [
      ['echo a; exit 3; echo b', 3, 'a\n'],
      ['exec sh -c "echo viaexec; exit 4"', 4, 'viaexec\n'],
      ['trap "echo trapped" EXIT; echo body; exit 5', 5, 'body\ntrapped\n'],
      ['set -e; echo x; false; echo never', 1, 'x\n'],
      ['f() { return 6; }; echo y; f', 6, 'y\n'],
      ['cat; echo "read to EOF"', 0, 'in\nread to EOF\n'],
      ['sleep 0.2 & wait; echo waited', 0, 'waited\n'],
      ['set -eu; (exit 7)', 7, ''],
      ['set -x; echo a; exit 3', 3, 'a\n', '++ echo a\n++ exit 3\n'], // the wrapper's own end is not traced
      ['set -x; echo a', 0, 'a\n', '++ echo a\n'],
      // functions named like the builtins the wrapper's end runs replace nothing of it
      ['exit() { echo bye; }; false', 1, ''],
      ['printf() { :; }; read() { return 0; }; kill() { :; }; [() { return 1; }; :() { return 1; }; set() { :; }; echo z; sh -c "exit 8"', 8, 'z\n'],
    ];
    for (const stdinMode of ['pipe', 'ignore']) {
      const rs = await Promise.all(cases.map(async ([cmd]) => {
        const h = await pm.spawn(cmd, stdinMode === 'ignore' ? { stdinMode } : {});
        if (stdinMode !== 'ignore') {
          await h.sendStdin('in\n');
          await h.closeStdin();
        }
        return h.wait();
      }));
      rs.forEach((r, i) => {
        const [cmd, code, out, err = ''] = cases[i];
        const want = stdinMode === 'ignore' && cmd.startsWith('cat') ? 'read to EOF\n' : out;
        assert.deepEqual([cmd, stdinMode, r.exitCode, r.stdout, r.stderr], [cmd, stdinMode, code, want, err]);
      });
    }
  });

  it("env named like the wrapper's variables (p, f, n, d, l) reaches the command and leaves its stdin alone", async () => {
    const h = await pm.spawn('cat; echo "$p|$f|$n|$d|$l"', { env: { p: '/etc/hostname', f: 'F', n: 'N', d: 'D', l: 'L' } });
    await h.sendStdin('from stdin\n');
    await h.closeStdin();
    const r = await h.wait();
    assert.deepEqual([r.exitCode, r.stdout], [0, 'from stdin\n/etc/hostname|F|N|D|L\n']);
  });

  it('an LSP-style message written as header then body (two sendStdin calls) reaches cat whole, message after message', async () => {
    let out = '';
    const h = await pm.spawn('cat', { onStdout: (d) => { out += d; } });
    const messages = [];
    for (let i = 0; i < 20; i++) {
      const body = JSON.stringify({ jsonrpc: '2.0', id: i, method: 'textDocument/hover', params: { text: 'x'.repeat(i * 50) } });
      const header = `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n`;
      messages.push(header + body);
      const before = out.length;
      await Promise.all([h.sendStdin(header), h.sendStdin(body)]);
      await waitFor(() => out.length >= before + header.length + body.length, { timeoutMs: 15000, intervalMs: 1, message: `message ${i} echoed` });
    }
    assert.equal(out, messages.join(''));
    await h.closeStdin();
    assert.equal((await h.wait()).exitCode, 0);
  });

  it('stdin into a line-reading loop keeps order, including text with quotes, tabs and UTF-8', async () => {
    const h = await pm.spawn('while IFS= read -r l; do [ "$l" = quit ] && break; printf "<%s>\\n" "$l"; done');
    const lines = ['a', "it's \"quoted\"", 'tab\there', 'größe €', ''];
    for (const l of lines) await h.sendStdin(`${l}\n`);
    await h.sendStdin('quit\n');
    const r = await h.wait();
    assert.equal(r.stdout, lines.map((l) => `<${l}>\n`).join(''));
  });

  it('stdin into a REPL (python3 -i): state persists between inputs', async () => {
    const h = await pm.spawn('python3 -u -i -q');
    await h.sendStdin('x = 6\n');
    await h.sendStdin('print(x * 7)\n');
    await waitFor(() => h.stdout.includes('42\n'), { message: `REPL answer (stdout ${JSON.stringify(h.stdout)})` });
    await h.sendStdin('import sys; sys.exit(5)\n');
    const r = await h.wait();
    assert.equal(r.exitCode, 5);
    assert.equal(r.stdout, '42\n');
  });

  it('get(): while running has the output; first get after natural exit returns it, the second undefined', async () => {
    const h = await pm.spawn('echo running-output; read x; echo done');
    await waitFor(() => h.stdout === 'running-output\n');
    const g = await pm.get(h.pid);
    assert.equal(g, h);
    assert.equal(g.stdout, 'running-output\n');
    await h.sendStdin('\n');
    await h.wait();
    const first = await pm.get(h.pid);
    assert.equal(first, h);
    assert.equal(first.exitCode, 0);
    assert.equal(await pm.get(h.pid), undefined);
  });

  it("list() keeps what Mastra's LocalSandbox keeps (ended processes until get() after their exit or release()); an ended process keeps only its bounded output", async () => {
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'osb-pm-local-'));
    const local = new LocalSandbox({ workingDirectory: dir });
    await local._start();
    try {
      const shape = async (m) => {
        const hs = [];
        for (let i = 0; i < 3; i++) hs.push(await m.spawn(`echo ${i}`));
        for (const h of hs) await h.wait();
        const mine = (l) => l.filter((p) => hs.some((h) => h.pid === p.pid)).map((p) => ({ running: p.running, exitCode: p.exitCode }));
        const listed = [mine(await m.list())];
        assert.equal(await m.get(hs[0].pid), hs[0]); // read after its exit: dismissed
        listed.push(mine(await m.list()));
        m.release(hs[1].pid);
        listed.push(mine(await m.list()));
        assert.equal(await m.get(hs[1].pid), undefined);
        assert.equal((await m.get(hs[2].pid)).stdout, '2\n');
        listed.push(mine(await m.list()));
        return listed;
      };
      const ended = { running: false, exitCode: 0 };
      const expected = [[ended, ended, ended], [ended, ended], [ended], []];
      assert.deepEqual(await shape(local.processes), expected);
      assert.deepEqual(await shape(pm), expected);
    } finally {
      await local._destroy().catch(() => {});
      await fs.rm(dir, { recursive: true, force: true });
    }
    // ended processes that nobody reads stay listed (as on LocalSandbox), but each keeps only its output (at most
    // maxRetainedBytes per stream, in JS): the native process object, which keeps no copy of it, is let go
    v8.setFlagsFromString('--expose-gc');
    const gc = vm.runInNewContext('gc');
    gc();
    const before = stats().processObjects;
    const hs = [];
    for (let i = 0; i < 12; i++) hs.push(await pm.spawn('head -c 200000 /dev/zero | tr "\\0" y', { maxRetainedBytes: 100000 }));
    for (const h of hs) assert.equal((await h.wait()).exitCode, 0);
    assert.equal((await pm.list()).filter((p) => hs.some((h) => h.pid === p.pid)).length, 12);
    await waitFor(() => {
      gc();
      return stats().processObjects <= before;
    }, { message: `native process objects still held: ${stats().processObjects} > ${before}` });
    for (const h of hs) {
      assert.equal(h.stdout.length, 100000);
      assert.equal(h.stdoutDroppedBytes, 100000);
      assert.equal(await pm.kill(h.pid), false);
      await assert.rejects(h.sendStdin('x'), /already exited/);
    }
  });

  it('unknown pids: get() undefined, kill() false, never a throw', async () => {
    assert.equal(await pm.get('99999'), undefined);
    assert.equal(await pm.kill('99999'), false);
    assert.equal(await pm.get(''), undefined);
    assert.equal(await pm.get('a.b'), undefined);
    // well-formed but no such session on execd
    const ghost = `00000000-0000-4000-8000-000000000000.${'0'.repeat(32)}`;
    assert.equal(await pm.get(ghost), undefined);
    assert.equal(await pm.kill(ghost), false);
  });

  it('manager kill(pid): true, then get() is undefined; list() shows running processes with their command', async () => {
    const h = await pm.spawn('sleep 45');
    const listed = (await pm.list()).find((p) => p.pid === h.pid);
    assert.deepEqual(listed, { pid: h.pid, command: 'sleep 45', running: true });
    assert.equal(await pm.kill(h.pid), true);
    assert.equal(h.exitCode, 137);
    assert.equal(await pm.get(h.pid), undefined);
    assert.equal((await pm.list()).find((p) => p.pid === h.pid), undefined);
  });

  it('killed and timed-out processes leave nothing of their stdin in the sandbox (no FIFO: the stdin decoder is a pipe)', async () => {
    // a SIGKILLed wrapper never gets to clean up, so its stdin must not be a file (291 FIFOs were left after a long run)
    const leftovers = async () => (await sandbox.executeCommand('ls -a "${TMPDIR:-/tmp}" | grep "^\\.osb-proc-.*\\.in$" || true')).stdout;
    const killed = await pm.spawn('echo up; sleep 30');
    const timed = await pm.spawn('echo up; sleep 30', { timeout: 4000 });
    await waitFor(() => killed.stdout === 'up\n' && timed.stdout === 'up\n');
    assert.equal(await leftovers(), '');
    assert.equal(await killed.kill(), true);
    assert.equal((await timed.wait()).timedOut, true);
    assert.equal(await leftovers(), '');
  });

  it('1,000 processes leave no file of ours in /tmp (no guard file: a run started again by execd waits for a go line)', async function () {
    this.timeout(60000);
    const ls = async () => (await sandbox.executeCommand('ls -A /tmp; ls -A "${TMPDIR:-/tmp}"')).stdout;
    const before = await ls();
    const n = 1000;
    const batch = 250; // concurrent spawns per batch
    for (let b = 0; b < n; b += batch) {
      const rs = await Promise.all(Array.from({ length: batch }, async (_, i) => {
        const h = await pm.spawn(`exit ${(b + i) % 7}`, i % 10 ? { stdinMode: 'ignore' } : {});
        return (await h.wait()).exitCode;
      }));
      assert.deepEqual(rs, Array.from({ length: batch }, (_, i) => (b + i) % 7));
    }
    assert.equal(await ls(), before);
  });

  it('abortSignal at spawn: fired later kills; pre-aborted kills at once', async () => {
    const ac = new AbortController();
    const h = await pm.spawn('echo up; sleep 30', { abortSignal: ac.signal });
    await waitFor(() => h.stdout === 'up\n');
    ac.abort();
    const r = await h.wait();
    assert.equal(r.success, false);
    assert.equal(r.killed, true);
    assert.notEqual(r.exitCode, 0);
    const pre = new AbortController();
    pre.abort();
    const t0 = Date.now();
    const h2 = await pm.spawn('sleep 30', { abortSignal: pre.signal });
    const r2 = await h2.wait();
    assert.equal(r2.success, false);
    assert.equal(r2.killed, true);
    assert.ok(Date.now() - t0 < 5000);
  });

  it('abortSignal given to wait() kills the process', async () => {
    const h = await pm.spawn('echo x; sleep 30');
    const ac = new AbortController();
    const w = h.wait({ abortSignal: ac.signal, onStdout: () => ac.abort() });
    const r = await w;
    assert.equal(r.killed, true);
    assert.equal(r.success, false);
  });

  it('timeout: exit 124, timedOut, partial output kept', async () => {
    const h = await pm.spawn('echo partial; sleep 30', { timeout: 700 });
    const r = await h.wait();
    assert.equal(r.exitCode, 124);
    assert.equal(r.timedOut, true);
    assert.equal(r.killed, true);
    assert.equal(r.stdout, 'partial\n');
  });

  it('cwd: absolute, relative to the working directory, and a missing directory fails with the shell message', async () => {
    assert.equal((await (await pm.spawn('pwd', { cwd: '/tmp' })).wait()).stdout, '/tmp\n');
    await (await pm.spawn('mkdir -p sub/dir')).wait();
    assert.equal((await (await pm.spawn('pwd', { cwd: 'sub/dir' })).wait()).stdout, `${sandbox.workingDirectory}/sub/dir\n`);
    const r = await (await pm.spawn('pwd', { cwd: '/no/such/dir' })).wait();
    assert.equal(r.exitCode, 1);
    assert.equal(r.stdout, '');
    assert.match(r.stderr, /\/no\/such\/dir/);
  });

  it('reader receives stdout and ends on exit; writer feeds stdin and end() closes it', async () => {
    const h = await pm.spawn('cat -n');
    const chunks = [];
    const ended = new Promise((resolve) => {
      h.reader.on('data', (d) => chunks.push(String(d)));
      h.reader.on('end', resolve);
    });
    await new Promise((resolve, reject) => h.writer.write('one\ntwo\n', (e) => (e ? reject(e) : resolve())));
    await new Promise((resolve, reject) => h.writer.end((e) => (e ? reject(e) : resolve()))); // closeStdin: cat ends
    await ended;
    assert.equal(chunks.join(''), '     1\tone\n     2\ttwo\n');
  });

  it('stdout is binary-safe: NUL, every byte value, multi-byte characters split across chunks', async () => {
    // 0..255 once, then 200k three-byte characters (chunk boundaries fall inside characters)
    const h = await pm.spawn(`printf "$(printf '\\\\%03o' $(seq 0 255))"; python3 -c 'import sys; sys.stdout.write("€" * 200000)'`);
    const r = await h.wait();
    const bytes = Buffer.concat([Buffer.from(Array.from({ length: 256 }, (_, i) => i)), Buffer.from('€'.repeat(200000))]);
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout, bytes.toString('utf8'));
    assert.equal(r.stdout.length, 256 + 200000);
  });

  it('output that looks like the wrapper\'s markers (wrong nonce, cut short) passes through unchanged', async () => {
    const fake = '\x1fOSB-EXIT:0123456789abcdef0123456789abcdef:0\x1f|\x1fOSB-ERR:x\x1f|\x1fOSB-RUN:\x1f|\x1fOSB-E';
    const h = await pm.spawn(`printf '%s' "$FAKE"; printf '%s' "$FAKE" >&2`, { env: { FAKE: fake } });
    const r = await h.wait();
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout, fake);
    assert.equal(r.stderr, fake);
  });

  it('10 MB from one process with maxRetainedBytes 4096: callbacks get every byte, retention is bounded', async () => {
    const size = 10 * 1024 * 1024;
    let received = 0;
    let lastBytes = '';
    const h = await pm.spawn(`head -c ${size} /dev/zero | tr '\\0' 'a'; printf END`, {
      maxRetainedBytes: 4096,
      onStdout: (d) => {
        received += d.length;
        lastBytes = (lastBytes + d).slice(-3);
      },
    });
    const r = await h.wait();
    assert.equal(r.exitCode, 0);
    assert.equal(received, size + 3);
    assert.equal(lastBytes, 'END');
    assert.equal(r.stdout.length, 4096);
    assert.ok(r.stdout.endsWith('aaaEND'));
    assert.equal(r.stdoutTruncated, true);
    assert.equal(r.stdoutDroppedBytes, size + 3 - 4096);
    assert.equal(h.stdoutDroppedBytes, size + 3 - 4096);
  });

  it('concurrent processes keep their output apart', async () => {
    const hs = await Promise.all(Array.from({ length: 12 }, (_, i) => pm.spawn(`for j in 1 2 3; do echo p${i}-$j; done; exit ${i}`)));
    const rs = await Promise.all(hs.map((h) => h.wait()));
    rs.forEach((r, i) => {
      assert.equal(r.stdout, `p${i}-1\np${i}-2\np${i}-3\n`);
      assert.equal(r.exitCode, i);
    });
  });

  it('bad input: empty command and invalid env names are rejected with a clear error', async () => {
    await assert.rejects(pm.spawn(''), /non-empty/);
    await assert.rejects(pm.spawn('true', { env: { 'BAD-NAME': 'x' } }), /not a valid shell identifier/);
    await assert.rejects(pm.spawn('true', { timeout: -1 }), /timeout/);
    assert.throws(() => new pm.constructor({ ackWaitSeconds: 0 }), /ackWaitSeconds/);
    assert.throws(() => new pm.constructor({ connection: 'http://x' }), /connection must be a function/);
  });

  it('every process is cleaned up: no process, WebSocket or operation left behind', async () => {
    await waitFor(() => {
      const s = stats();
      return s.processes <= baseline.processes && s.wsConnections <= baseline.wsConnections && s.processesPaused === 0 ? s : null;
    }, { message: `table drained (stats ${JSON.stringify(stats())}, baseline ${JSON.stringify(baseline)})` });
    const s = stats();
    assert.equal(s.wsThreads, 1);
    assert.equal(s.engineThreads, 1);
  });
});
