// execd commands of the local server through the official client (foreground, background, status, logs with
// byte cursors, interrupts, timeouts) plus raw requests for the error statuses the client hides.
import assert from 'node:assert/strict';
import http from 'node:http';
import { Sandbox, ConnectionConfig } from '@alibaba-group/opensandbox';
import { startServer } from '../lib/dev-server/index.js';
import { waitFor } from './helpers/poll.js';
import { request, endpointHeadersFor } from './helpers/raw.js';

// `ps -eo args` without procps: one line per process, argv joined by spaces
const PS = 'for p in /proc/[0-9]*; do [ -r $p/cmdline ] && tr "\\0" " " < $p/cmdline && echo; done';

describe('dev-server execd commands', function () {
  this.timeout(60000);
  let server;
  let sbx;
  let execd; // http://127.0.0.1:<port>

  before(async () => {
    server = await startServer({ commandTailMs: 50 }); // short tail: the client waits for EOF
    sbx = await Sandbox.create({ connectionConfig: new ConnectionConfig({ domain: server.domain }), image: 'python:3.11' });
    execd = await sbx.getEndpointUrl(44772);
    await request(`${server.baseUrl}/v1/sandboxes/${sbx.id}/endpoints/44772`); // its headers: the sandbox token
  });
  after(async () => {
    await sbx?.kill().catch(() => {});
    await sbx?.close();
    await server?.close();
  });

  const raw = (p, opts = {}) => request(`${execd}${p}`, { ...opts, headers: { 'Content-Type': 'application/json', ...opts.headers } });
  const status = async (id) => (await raw(`/command/status/${id}`)).json;

  it('foreground: stdout and stderr lines, exit code 0, env and cwd', async () => {
    const ex = await sbx.commands.run('echo "$GREETING"; pwd; echo err >&2; printf partial', { workingDirectory: '/tmp', envs: { GREETING: 'hello there' } });
    assert.deepEqual(ex.logs.stdout.map((m) => m.text), ['hello there', '/tmp', 'partial']);
    assert.deepEqual(ex.logs.stderr.map((m) => m.text), ['err']);
    assert.equal(ex.exitCode, 0);
    assert.equal(ex.error, undefined);
    assert.ok(ex.complete.executionTimeMs >= 0);
  });

  it('defaults the working directory to /workspace and files persist there across commands', async () => {
    await sbx.commands.run('echo kept > note.txt');
    const ex = await sbx.commands.run('pwd; cat /workspace/note.txt');
    assert.deepEqual(ex.logs.stdout.map((m) => m.text), ['/workspace', 'kept']);
  });

  it('non-zero exit: error event with the exit code as a string', async () => {
    const ex = await sbx.commands.run('echo a; exit 3');
    assert.equal(ex.exitCode, 3);
    assert.equal(ex.error.name, 'CommandExecError');
    assert.equal(ex.error.value, '3');
    assert.deepEqual(ex.error.traceback, ['exit status 3']);
  });

  it('splits on \\n, \\r and \\r\\n; blank lines arrive as "\\n"', async () => {
    const ex = await sbx.commands.run('printf "a\\r\\nb\\n\\n\\nc\\rd"');
    assert.deepEqual(ex.logs.stdout.map((m) => m.text), ['a', 'b', '\n', '\n', 'c', 'd']);
  });

  it('timeout kills the whole process group with signal: killed', async () => {
    const t0 = Date.now();
    const ex = await sbx.commands.run('sleep 30 & sleep 30; echo never', { timeoutSeconds: 1 });
    assert.equal(ex.error.value, '-1');
    assert.deepEqual(ex.error.traceback, ['signal: killed']);
    assert.ok(Date.now() - t0 < 25000, 'timeout did not stop the command');
    const ps = await sbx.commands.run(`(${PS}) | grep -c "^sleep 30" || true`);
    assert.equal(ps.logs.stdout[0].text, '0');
  });

  it('cwd like upstream: relative to the execd process cwd (/), $VAR and a leading ~ expanded', async () => {
    const pwd = async (body) => {
      const r = await raw('/command', { method: 'POST', body: { command: 'pwd', ...body } });
      assert.equal(r.status, 200, r.text);
      return r.text.match(/"type":"stdout","text":"([^"]*)"/)[1];
    };
    const home = (await sbx.commands.run('echo "$HOME"')).logs.stdout[0].text;
    assert.equal(await pwd({ cwd: 'tmp' }), '/tmp');
    assert.equal(await pwd({ cwd: '$HOME' }), home);
    assert.equal(await pwd({ cwd: '~' }), home);
    assert.equal(await pwd({ cwd: '${HOME}/../tmp' }), '/tmp');
    // validation sees execd's environment only; the run expands with the request's envs over it
    const undef = await raw('/command', { method: 'POST', body: { command: 'pwd', cwd: '/$OSB_NO_SUCH_VAR' } });
    assert.equal(undef.status, 400);
    assert.deepEqual(undef.json, {
      code: 'INVALID_REQUEST_BODY',
      message: 'invalid request, validation error cannot resolve working directory "/$OSB_NO_SUCH_VAR": path references undefined environment variables: OSB_NO_SUCH_VAR',
    });
  });

  it('a missing working directory is a 400 before any stream', async () => {
    const r = await raw('/command', { method: 'POST', body: { command: 'true', cwd: '/no/such/dir' } });
    assert.equal(r.status, 400);
    assert.deepEqual(r.json, {
      code: 'INVALID_REQUEST_BODY',
      message: 'invalid request, validation error working directory does not exist: /no/such/dir: stat /no/such/dir: no such file or directory',
    });
    const empty = await raw('/command', { method: 'POST', body: { command: '' } });
    assert.equal(empty.status, 400);
    assert.equal(empty.json.code, 'INVALID_REQUEST_BODY');
    const gidOnly = await raw('/command', { method: 'POST', body: { command: 'true', gid: 100 } });
    assert.equal(gidOnly.status, 400);
    const malformed = await raw('/command', { method: 'POST', body: '{"command":' });
    assert.equal(malformed.status, 400);
    assert.equal(malformed.json.code, 'INVALID_REQUEST_BODY');
  });

  it('uid/gid cannot switch the user: root in the sandbox is one unprivileged host uid without capabilities', async () => {
    const ex = await sbx.commands.run('id -u; id -g', { uid: 65534, gid: 65534 });
    assert.deepEqual(ex.logs.stdout.map((m) => m.text), []);
    assert.match(ex.error?.value ?? '', /EPERM|EINVAL|not permitted|Invalid argument/, JSON.stringify(ex.error));
    assert.deepEqual((await sbx.commands.run('id -u')).logs.stdout.map((m) => m.text), ['0']);
  });

  it('background: returns at once; status, combined log and byte cursors', async () => {
    const script = 'for i in 1 2 3; do echo line$i; echo eline$i >&2; done; sleep 0.2; exit 4';
    const ex = await sbx.commands.run(script, { background: true });
    const id = ex.id;
    assert.match(id, /^[0-9a-f]{32}$/);
    const st = await waitFor(async () => {
      const s = await sbx.commands.getCommandStatus(id);
      return s.running === false && s;
    }, { message: 'background command finishes' });
    assert.equal(st.exitCode, 4);
    assert.equal(st.error, 'exit status 4');
    assert.equal(st.content, script);
    assert.ok(st.finishedAt >= st.startedAt);
    const all = await sbx.commands.getBackgroundCommandLogs(id);
    assert.equal(all.content, 'line1\neline1\nline2\neline2\nline3\neline3\n');
    assert.equal(all.cursor, 39);
    const mid = await sbx.commands.getBackgroundCommandLogs(id, 15); // inside "line2\n"
    assert.equal(mid.content, 'ne2\neline2\nline3\neline3\n');
    assert.equal(mid.cursor, 39);
    const end = await sbx.commands.getBackgroundCommandLogs(id, 39);
    assert.equal(end.content, '');
    assert.equal(end.cursor, 39);
  });

  it('background status while running has no exit code; logs grow', async () => {
    const ex = await sbx.commands.run('echo first; sleep 30', { background: true });
    const s = await status(ex.id);
    assert.equal(s.running, true);
    assert.equal('exit_code' in s, false);
    assert.equal('finished_at' in s, false);
    assert.match(s.started_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$/);
    await waitFor(async () => (await sbx.commands.getBackgroundCommandLogs(ex.id)).content === 'first\n', { message: 'first line logged' });
    await sbx.commands.interrupt(ex.id);
    const after = await status(ex.id);
    assert.equal(after.running, false);
    assert.equal(after.exit_code, -1);
    assert.equal(after.error, 'signal: terminated');
  });

  it('interrupt of a foreground command ends its stream with signal: terminated', async () => {
    let id;
    const run = sbx.commands.run('echo started; sleep 30', {}, { onInit: (i) => { id = i.id; } });
    await waitFor(() => id, { message: 'init received' });
    await waitFor(async () => (await status(id)).running, { message: 'running' });
    await sbx.commands.interrupt(id);
    const ex = await run;
    assert.deepEqual(ex.logs.stdout.map((m) => m.text), ['started']);
    assert.equal(ex.error.value, '-1');
    assert.deepEqual(ex.error.traceback, ['signal: terminated']);
  });

  it('DELETE /command: finished -> 500 not running; unknown -> 500 no such session', async () => {
    const ex = await sbx.commands.run('true', { background: true });
    await waitFor(async () => (await status(ex.id)).running === false, { message: 'finished' });
    const done = await raw(`/command?id=${ex.id}`, { method: 'DELETE' });
    assert.equal(done.status, 500);
    assert.match(done.json.message, /is not running/);
    const unknown = await raw('/command?id=0123456789abcdef0123456789abcdef', { method: 'DELETE' });
    assert.equal(unknown.status, 500);
    assert.match(unknown.json.message, /no such session/);
  });

  it('status of an unknown id is 404; logs of unknown or foreground ids are 400', async () => {
    const s = await raw('/command/status/nope');
    assert.equal(s.status, 404);
    assert.deepEqual(s.json, { code: 'INVALID_REQUEST_BODY', message: 'command not found: nope' });
    const l = await raw('/command/nope/logs');
    assert.equal(l.status, 400);
    let fg;
    await sbx.commands.run('true', {}, { onInit: (i) => { fg = i.id; } });
    assert.equal((await status(fg)).exit_code, 0);
    const fl = await raw(`/command/${fg}/logs`);
    assert.equal(fl.status, 400);
  });

  it('closing the stream does not stop a foreground command', async () => {
    // raw request: read until the init event, then drop the connection
    const id = await new Promise((resolve, reject) => {
      const req = http.request(`${execd}/command`, { method: 'POST', agent: false, headers: endpointHeadersFor(execd) }, (res) => {
        let text = '';
        res.on('data', (d) => {
          text += d;
          const m = /"type":"init","text":"([0-9a-f]{32})"/.exec(text);
          if (m) {
            req.destroy();
            resolve(m[1]);
          }
        });
        res.on('error', () => {});
      });
      req.on('error', (e) => { if (e.code !== 'ECONNRESET') reject(e); });
      req.setTimeout(10000, () => req.destroy(new Error('no init event within 10 s')));
      req.end(JSON.stringify({ command: 'sleep 0.5; echo done > /tmp/after-close' }));
    });
    assert.equal((await status(id)).running, true);
    const st = await waitFor(async () => {
      const s = await status(id);
      return s.running === false && s;
    }, { message: 'command finishes after the client left' });
    assert.equal(st.exit_code, 0);
    assert.equal((await sbx.commands.run('cat /tmp/after-close')).logs.stdout[0].text, 'done');
  });

  it('bash sessions keep exported variables and the directory across runs', async () => {
    const sid = await sbx.commands.createSession({ workingDirectory: '/tmp/sess' });
    const first = await sbx.commands.runInSession(sid, 'export X=42; cd /tmp; echo to-stderr >&2');
    assert.deepEqual(first.logs.stdout.map((m) => m.text), ['to-stderr']); // merged into stdout
    assert.equal(first.exitCode, 0);
    const second = await sbx.commands.runInSession(sid, 'echo $X; pwd; exit 5');
    assert.deepEqual(second.logs.stdout.map((m) => m.text), ['42', '/tmp']);
    assert.equal(second.exitCode, 5);
    await sbx.commands.deleteSession(sid);
    const gone = await raw(`/session/${sid}`, { method: 'DELETE' });
    assert.equal(gone.status, 404);
    assert.equal(gone.json.code, 'CONTEXT_NOT_FOUND');
  });

  it('session failures inside the stream are bare {code,message} objects (busy, timeout)', async () => {
    const sid = (await raw('/session', { method: 'POST' })).json.session_id;
    const slow = raw(`/session/${sid}/run`, { method: 'POST', body: { command: 'sleep 1; echo slow-done' } });
    await waitFor(async () => {
      const ps = await sbx.commands.run(PS);
      return ps.logs.stdout.some((m) => m.text === 'sleep 1 ');
    }, { message: 'first run started' });
    const busy = await raw(`/session/${sid}/run`, { method: 'POST', body: { command: 'true' } });
    const lines = busy.text.trimEnd().split('\n\n').map((l) => JSON.parse(l));
    assert.deepEqual(lines.map((e) => e.type), ['init', 'ping', undefined]);
    assert.deepEqual(lines[2], { code: 'RUNTIME_ERROR', message: 'error running in session: session is busy' });
    assert.ok((await slow).text.includes('"text":"slow-done"'));
    const timed = await raw(`/session/${sid}/run`, { method: 'POST', body: { command: 'sleep 5', timeout: 300 } });
    assert.deepEqual(JSON.parse(timed.text.trimEnd().split('\n\n').at(-1)), { code: 'RUNTIME_ERROR', message: 'error running in session. timeout after 300ms' }); // Go's Duration text
    const unknown = await raw('/session/nope/run', { method: 'POST', body: { command: 'true' } });
    assert.equal(unknown.status, 500);
  });

  it('metrics: the official client reads them; /metrics/watch streams JSON lines', async () => {
    const m = await sbx.getMetrics();
    assert.equal(m.cpuCount, (await import('node:os')).availableParallelism());
    assert.ok(m.cpuUsedPercentage >= 0 && m.cpuUsedPercentage <= 100);
    assert.ok(m.memoryTotalMiB > 0 && m.memoryUsedMiB > 0 && m.memoryUsedMiB <= m.memoryTotalMiB);
    const line = await new Promise((resolve, reject) => {
      const req = http.get(`${execd}/metrics/watch`, { agent: false, headers: endpointHeadersFor(execd) }, (res) => {
        let text = '';
        res.on('data', (d) => {
          text += d;
          if (text.includes('\n')) {
            req.destroy();
            resolve(text);
          }
        });
      });
      req.on('error', (e) => { if (e.code !== 'ECONNRESET') reject(e); });
      req.setTimeout(10000, () => req.destroy(new Error('no metrics line within 10 s')));
    });
    assert.match(line, /^\{"cpu_count":\d+,"cpu_used_pct":[\d.]+,"mem_total_mib":[\d.]+,"mem_used_mib":[\d.]+,"timestamp":\d+\}\n$/);
  });

  it('runs 200 concurrent commands', async () => {
    const runs = Array.from({ length: 200 }, (_, i) => raw('/command', { method: 'POST', body: { command: `echo ${i}` }, timeoutMs: 45000 }));
    const results = await Promise.all(runs);
    results.forEach((r, i) => {
      assert.equal(r.status, 200);
      assert.ok(r.text.includes(`{"type":"stdout","text":"${i}"`), `output of command ${i}`);
      assert.ok(r.text.includes('"type":"execution_complete"'), `completion of command ${i}`);
    });
  });

  it('a command leaving a child that holds stdout still completes', async () => {
    const ex = await sbx.commands.run('sleep 20 & echo parent-done');
    assert.deepEqual(ex.logs.stdout.map((m) => m.text), ['parent-done']);
    assert.equal(ex.exitCode, 0);
    await sbx.commands.run(`for p in /proc/[0-9]*; do [ "$(tr '\\0' ' ' < $p/cmdline 2>/dev/null)" = 'sleep 20 ' ] && kill \${p#/proc/}; done; true`);
  });
});
