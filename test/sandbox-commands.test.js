// OpenSandboxSandbox.executeCommand against the local OpenSandbox-compatible server (real execd in bubblewrap):
// output and exit codes, quoting, env overlay, cwd, timeouts, aborts, streaming, retention, concurrency.
import assert from 'node:assert/strict';
import { startServer } from '../lib/dev-server/index.js';
import { OpenSandboxSandbox, OpenSandboxApiError, OpenSandboxOptionError } from '../lib/index.js';
import { waitFor } from './helpers/poll.js';
import { stats } from '../lib/native.js';

/** Shell snippet counting live processes whose command line contains `marker` (the pattern never matches itself). */
const countProcs = marker => {
  const pattern = `[${marker[0]}]${marker.slice(1)}`;
  return `for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '${pattern}' || true`;
};

describe('OpenSandboxSandbox.executeCommand', function () {
  this.timeout(30000);
  let server;
  let sandbox;

  before(async function () {
    this.timeout(60000);
    server = await startServer({ port: 0 });
    sandbox = new OpenSandboxSandbox({
      domain: server.domain,
      env: { SANDBOX_VAR: 'from-sandbox', SHARED: 'sandbox-value' },
    });
    assert.deepEqual(await sandbox._start(), { outcome: 'created' });
  });

  after(async function () {
    this.timeout(30000);
    await sandbox?._destroy();
    await server?.close();
  });

  it('runs a command: stdout, exit 0, result shape', async () => {
    const r = await sandbox.executeCommand('echo hello');
    assert.equal(r.success, true);
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout, 'hello\n');
    assert.equal(r.stderr, '');
    assert.equal(r.command, 'echo hello');
    assert.deepEqual(r.args, []);
    assert.equal(r.timedOut, false);
    assert.equal(r.killed, false);
    assert.equal(r.stdoutTruncated, false);
    assert.equal(r.stdoutDroppedBytes, 0);
    assert.equal(typeof r.executionTimeMs, 'number');
    assert.ok(r.executionTimeMs >= 0);
  });

  it('captures stderr separately', async () => {
    const r = await sandbox.executeCommand('echo out; echo oops >&2');
    assert.equal(r.stdout, 'out\n');
    assert.equal(r.stderr, 'oops\n');
    assert.equal(r.success, true);
  });

  it('reports exact exit codes', async () => {
    for (const code of [1, 2, 42, 255]) {
      const r = await sandbox.executeCommand(`sh -c 'exit ${code}'`);
      assert.equal(r.exitCode, code);
      assert.equal(r.success, false);
      assert.equal(r.killed, false);
      assert.equal(r.timedOut, false);
    }
    const r = await sandbox.executeCommand('echo before; exit 3');
    assert.equal(r.exitCode, 3);
    assert.equal(r.stdout, 'before\n');
  });

  it('shell-quotes args like Mastra', async () => {
    const r = await sandbox.executeCommand('printf', ['%s|', 'hello world', 'test', "it's", '$HOME', '']);
    assert.equal(r.stdout, "hello world|test|it's|$HOME||\n");
    assert.equal(r.command, "printf '%s|' 'hello world' test 'it'\\''s' '$HOME' ''");
    assert.deepEqual(r.args, ['%s|', 'hello world', 'test', "it's", '$HOME', '']);
  });

  it('keeps UTF-8 output intact', async () => {
    const text = 'héllo wörld ✓ 日本語 🎉';
    const r = await sandbox.executeCommand('echo', [text]);
    assert.equal(r.stdout, `${text}\n`);
  });

  it('runs pipelines and heredocs', async () => {
    const p = await sandbox.executeCommand("printf 'b\\na\\nc\\n' | sort | tr a-z A-Z");
    assert.equal(p.stdout, 'A\nB\nC\n');
    const h = await sandbox.executeCommand("cat <<'EOF'\nline one\n$HOME stays literal\nEOF");
    assert.equal(h.stdout, 'line one\n$HOME stays literal\n');
  });

  it('returns every line of large output (seq 1 5000)', async () => {
    const r = await sandbox.executeCommand('seq 1 5000');
    const expected = Array.from({ length: 5000 }, (_, i) => `${i + 1}\n`).join('');
    assert.equal(r.stdout, expected);
  });

  it('runs in the working directory by default, honours cwd', async () => {
    assert.equal((await sandbox.executeCommand('pwd')).stdout, '/workspace\n');
    assert.equal((await sandbox.executeCommand('pwd', [], { cwd: '/tmp' })).stdout, '/tmp\n');
  });

  it('resolves a relative cwd against the working directory and refuses a cwd with "$"', async () => {
    // execd alone would run `cwd: 'tmp'` in /tmp (its own cwd is /) and expand $VAR and a leading ~
    await sandbox.executeCommand('mkdir -p tmp/sub');
    assert.equal((await sandbox.executeCommand('pwd', [], { cwd: 'tmp' })).stdout, '/workspace/tmp\n');
    assert.equal((await sandbox.executeCommand('pwd', [], { cwd: 'tmp/sub' })).stdout, '/workspace/tmp/sub\n');
    for (const cwd of ['$HOME', '/workspace/${X}']) {
      await assert.rejects(sandbox.executeCommand('pwd', [], { cwd }), err => {
        assert.ok(err instanceof OpenSandboxOptionError, String(err));
        assert.equal(err.option, 'cwd');
        assert.match(err.message, /contains "\$": execd expands environment variables in a command cwd/);
        return true;
      });
    }
  });

  it('cwd "~" and "~/x": the sandbox user\'s home, as a shell (and execd) expands it; "~x" is a plain relative name', async () => {
    const home = (await sandbox.executeCommand('echo "$HOME"')).stdout.replace(/\n$/, '');
    assert.match(home, /^\/./);
    await sandbox.executeCommand('mkdir -p ~/"h sub" "~x"');
    assert.equal((await sandbox.executeCommand('pwd', [], { cwd: '~' })).stdout, `${home}\n`);
    assert.equal((await sandbox.executeCommand('pwd', [], { cwd: '~/' })).stdout, `${home}\n`);
    assert.equal((await sandbox.executeCommand('pwd', [], { cwd: '~/h sub' })).stdout, `${home}/h sub\n`);
    assert.equal((await sandbox.executeCommand('pwd', [], { cwd: '~x' })).stdout, '/workspace/~x\n');
    // processes.spawn: the same rule (the process wrapper's shell expands it)
    const spawned = async cwd => (await (await sandbox.processes.spawn('pwd', { cwd })).wait()).stdout;
    assert.equal(await spawned('~'), `${home}\n`);
    assert.equal(await spawned('~/h sub'), `${home}/h sub\n`);
    assert.equal(await spawned('~x'), '/workspace/~x\n');
    // the home is execd's, not a HOME the call sets (execd expands a command's ~ with its own)
    assert.equal((await (await sandbox.processes.spawn('pwd', { cwd: '~', env: { HOME: '/tmp' } })).wait()).stdout, `${home}\n`);
    assert.equal((await sandbox.executeCommand('pwd', [], { cwd: '~', env: { HOME: '/tmp' } })).stdout, `${home}\n`);
  });

  it('start creates a missing workingDirectory (mode 755, spaces and all); one that cannot be made fails start naming it', async () => {
    const made = new OpenSandboxSandbox({ domain: server.domain, workingDirectory: '/workspace/a b/c' });
    try {
      await made._start();
      assert.equal((await made.executeCommand('pwd; stat -c %a .')).stdout, '/workspace/a b/c\n755\n');
    } finally {
      await made._destroy();
    }
    const bad = new OpenSandboxSandbox({ domain: server.domain, workingDirectory: '/etc/hostname/sub' });
    try {
      await assert.rejects(bad._start(), err => {
        assert.equal(err.code, 'WORKING_DIRECTORY');
        assert.match(err.message, /cannot create the working directory \/etc\/hostname\/sub: .*not a directory/);
        return true;
      });
    } finally {
      await bad._destroy().catch(() => {});
    }
  });

  it('rejects a missing cwd with the server message', async () => {
    await assert.rejects(sandbox.executeCommand('pwd', [], { cwd: '/does/not/exist' }), err => {
      assert.ok(err instanceof OpenSandboxApiError, String(err));
      assert.equal(err.status, 400);
      assert.match(err.message, /\/does\/not\/exist/);
      return true;
    });
    assert.equal(sandbox.status, 'running');
  });

  it('keeps files in /tmp and the working directory between commands', async () => {
    await sandbox.executeCommand('echo persisted > /tmp/osb-persist.txt && echo here > here.txt');
    assert.equal((await sandbox.executeCommand('cat /tmp/osb-persist.txt')).stdout, 'persisted\n');
    assert.equal((await sandbox.executeCommand('cat /workspace/here.txt')).stdout, 'here\n');
  });

  it('merges the sandbox env overlay with per-command env (command wins, undefined dropped)', async () => {
    const a = await sandbox.executeCommand('printf "%s|%s" "$SANDBOX_VAR" "$SHARED"');
    assert.equal(a.stdout, 'from-sandbox|sandbox-value\n');
    const b = await sandbox.executeCommand('printf "%s|%s|%s" "$SANDBOX_VAR" "$SHARED" "$EXTRA"', [], {
      env: { SHARED: 'command-value', EXTRA: `spaces and "quotes" and 'single' $dollar` },
    });
    assert.equal(b.stdout, `from-sandbox|command-value|spaces and "quotes" and 'single' $dollar\n`);
    const c = await sandbox.executeCommand('printenv SANDBOX_VAR', [], { env: { SANDBOX_VAR: undefined } });
    assert.equal(c.exitCode, 1);
    assert.equal(c.stdout, '');
  });

  it('setEnv changes the overlay for later commands', async () => {
    const before = sandbox.getEnv();
    try {
      sandbox.setEnv(env => ({ ...env, LATE_VAR: 'late' }));
      assert.equal((await sandbox.executeCommand('printenv LATE_VAR')).stdout, 'late\n');
      sandbox.setEnv(env => {
        delete env.LATE_VAR;
        return env;
      });
      assert.equal((await sandbox.executeCommand('printenv LATE_VAR')).exitCode, 1);
    } finally {
      sandbox.setEnv(() => before);
    }
  });

  it('runs concurrent commands with independent env', async () => {
    const results = await Promise.all(
      [1, 2, 3].map(i => sandbox.executeCommand('sleep 0.2; printenv WHO', [], { env: { WHO: `cmd-${i}` } })),
    );
    assert.deepEqual(results.map(r => r.stdout), ['cmd-1\n', 'cmd-2\n', 'cmd-3\n']);
  });

  it('streams stdout and stderr through callbacks, every byte, in order', async () => {
    const out = [];
    const err = [];
    const r = await sandbox.executeCommand('for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 0.05; done', [], {
      onStdout: d => out.push(d),
      onStderr: d => err.push(d),
    });
    assert.ok(out.length >= 1);
    assert.ok(err.length >= 1);
    assert.equal(out.join(''), 'out1\nout2\nout3\n');
    assert.equal(err.join(''), 'err1\nerr2\nerr3\n');
    assert.equal(r.stdout, out.join(''));
    assert.equal(r.stderr, err.join(''));
  });

  it('delivers output while the command is still running', async () => {
    const chunks = [];
    let sawFirstBeforeEnd = false;
    await sandbox.executeCommand(`echo first; ${'while [ ! -f /tmp/osb-release ]; do sleep 0.02; done'}; echo second`, [], {
      onStdout: d => {
        chunks.push(d);
        if (d.includes('first') && !d.includes('second')) {
          sawFirstBeforeEnd = true;
          // the command only finishes after we saw its first line: release it from a second command
          sandbox.executeCommand('touch /tmp/osb-release').catch(() => {});
        }
      },
    });
    assert.equal(sawFirstBeforeEnd, true);
    assert.equal(chunks.join(''), 'first\nsecond\n');
  });

  it('a callback that throws does not break the command', async () => {
    const r = await sandbox.executeCommand('echo a; echo b', [], {
      onStdout: () => {
        throw new Error('user callback failure');
      },
    });
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout, 'a\nb\n');
  });

  it('keeps only the newest maxRetainedBytes, callbacks still get everything', async () => {
    const full = Array.from({ length: 1000 }, (_, i) => `${i + 1}\n`).join('');
    const streamed = [];
    const r = await sandbox.executeCommand('seq 1 1000', [], { maxRetainedBytes: 100, onStdout: d => streamed.push(d) });
    assert.equal(streamed.join(''), full);
    assert.equal(r.stdout, full.slice(-100));
    assert.equal(r.stdoutTruncated, true);
    assert.equal(r.stdoutDroppedBytes, full.length - 100);
    assert.equal(r.stderrTruncated, false);
    const none = await sandbox.executeCommand('echo gone', [], { maxRetainedBytes: 0 });
    assert.equal(none.stdout, '');
    assert.equal(none.stdoutDroppedBytes, 5);
  });

  it('retention is bounded by default (16 MiB per stream, the newest kept); the sandbox option and Infinity raise it', async () => {
    const gen = '{ head -c 17825792 /dev/zero | tr "\\0" a | fold -w 4095; echo; }'; // whole lines: 4095 + 1 bytes each
    const total = Number((await sandbox.executeCommand(`${gen} | wc -c`)).stdout.trim());
    assert.ok(total > 17825792, String(total));
    let streamed = 0;
    const r = await sandbox.executeCommand(gen, [], { onStdout: (d) => { streamed += d.length; } });
    assert.equal(streamed, total);
    assert.equal(r.stdout.length, 16 * 1024 * 1024);
    assert.deepEqual({ truncated: r.stdoutTruncated, dropped: r.stdoutDroppedBytes }, { truncated: true, dropped: total - 16 * 1024 * 1024 });
    const all = await sandbox.executeCommand(gen, [], { maxRetainedBytes: Infinity });
    assert.deepEqual({ length: all.stdout.length, truncated: all.stdoutTruncated }, { length: total, truncated: false });
    const small = new OpenSandboxSandbox({ domain: server.domain, maxRetainedBytes: 10 });
    try {
      const s = await small.executeCommand('seq 1 100');
      assert.deepEqual({ stdout: s.stdout, dropped: s.stdoutDroppedBytes }, { stdout: '98\n99\n100\n', dropped: 292 - 10 });
      assert.equal((await small.getInfo()).metadata.maxRetainedBytes, 10); // part of the stored config
    } finally {
      await small._destroy();
    }
  });

  it('times out: exit 124, timedOut, killed, partial output kept, remote command stopped', async () => {
    // the timeout leaves ample time for the first line to arrive even on a loaded machine
    const r = await sandbox.executeCommand('echo before-timeout; sleep 31.337', [], { timeout: 1000 });
    assert.equal(r.exitCode, 124);
    assert.equal(r.timedOut, true);
    assert.equal(r.killed, true);
    assert.equal(r.success, false);
    assert.equal(r.stdout, 'before-timeout\n');
    await waitFor(async () => (await sandbox.executeCommand(countProcs('sleep 31.337'))).stdout === '0\n', {
      timeoutMs: 10000, message: 'timed-out command still running in the sandbox',
    });
  });

  it('times out with streaming: partial chunks were delivered', async () => {
    const chunks = [];
    const r = await sandbox.executeCommand('echo tick; sleep 30', [], { timeout: 1000, onStdout: d => chunks.push(d) });
    assert.equal(r.exitCode, 124);
    assert.equal(chunks.join(''), 'tick\n');
  });

  it('aborts from inside onStdout: killed, non-zero, partial output, remote command stopped', async () => {
    const controller = new AbortController();
    const r = await sandbox.executeCommand(
      `node -e "/* osb-abort-marker */ console.log('started'); setTimeout(() => console.log('never'), 30000)"`,
      [],
      {
        abortSignal: controller.signal,
        onStdout: d => {
          if (d.includes('started')) controller.abort();
        },
      },
    );
    assert.equal(r.success, false);
    assert.equal(r.killed, true);
    assert.equal(r.timedOut, false);
    assert.equal(r.exitCode, 130);
    assert.equal(r.stdout, 'started\n');
    await waitFor(async () => (await sandbox.executeCommand(countProcs('osb-abort-marker'))).stdout === '0\n', {
      timeoutMs: 10000, message: 'aborted command still running in the sandbox',
    });
  });

  it('a pre-aborted signal resolves failed without running the command', async () => {
    const r = await sandbox.executeCommand('touch /tmp/osb-should-not-exist', [], { abortSignal: AbortSignal.abort() });
    assert.equal(r.success, false);
    assert.equal(r.killed, true);
    assert.notEqual(r.exitCode, 0);
    assert.equal((await sandbox.executeCommand('test -e /tmp/osb-should-not-exist')).exitCode, 1);
  });

  it('leaves no request or operation in flight after commands settle', async () => {
    await sandbox.executeCommand('echo settle');
    await sandbox.executeCommand('sleep 30', [], { timeout: 200 });
    const c = new AbortController();
    await sandbox.executeCommand('echo x; sleep 30', [], { abortSignal: c.signal, onStdout: () => c.abort() });
    const s = await waitFor(() => {
      const st = stats();
      return st.requestsInFlight === 0 && st.operations === 0 && st.pendingPromises === 0 && st;
    }, { timeoutMs: 5000, message: `native work still in flight: ${JSON.stringify(stats())}` });
    assert.equal(s.requestsInFlight, 0);
  });

  it('handles many concurrent commands, each output exact', async () => {
    const n = 25;
    const results = await Promise.all(Array.from({ length: n }, (_, i) => sandbox.executeCommand(`seq ${i} ${i + 50}`)));
    results.forEach((r, i) => {
      const expected = Array.from({ length: 51 }, (_, k) => `${i + k}\n`).join('');
      assert.equal(r.stdout, expected, `command ${i}`);
    });
  });
});
