// execd PTY WebSocket API of the local OpenSandbox-compatible server, driven with the `ws` client against the execd
// endpoint of a bubblewrap sandbox of startServer(): pipe and PTY mode, stdin, stderr separation, exit frame and
// close code, replay with `since`, 409 / takeover, re-run after exit, signals, DELETE, and the exit-race switch.
import assert from 'node:assert/strict';
import WebSocket from 'ws';
import { Sandbox, ConnectionConfig } from '@alibaba-group/opensandbox';
import { startServer } from '../lib/dev-server/index.js';
import { waitFor } from './helpers/poll.js';
import { request, endpointHeadersFor } from './helpers/raw.js';
import { WireWebSocket } from './helpers/wire.js';

const STDIN = 0x00;

/** A recording WebSocket client: frames in order as {kind:'text', json} | {kind, offset?, bytes}. */
function connect(url) {
  const ws = new WebSocket(url, { headers: endpointHeadersFor(url.replace(/^ws/, 'http')) });
  const c = { ws, frames: [], closed: null, rejected: null };
  c.opened = new Promise((resolve, reject) => {
    ws.once('open', resolve);
    ws.once('error', reject);
    ws.once('unexpected-response', (req, res) => {
      let body = '';
      res.on('data', (d) => { body += d; });
      res.on('end', () => {
        c.rejected = { status: res.statusCode, json: JSON.parse(body) };
        reject(Object.assign(new Error(`HTTP ${res.statusCode}`), c.rejected));
      });
    });
  });
  c.opened.catch(() => {});
  c.whenClosed = new Promise((resolve) => ws.once('close', (code, reason) => {
    c.closed = { code, reason: reason.toString() };
    resolve(c.closed);
  }));
  ws.on('message', (d, isBinary) => {
    if (!isBinary) c.frames.push({ kind: 'text', json: JSON.parse(d.toString()) });
    else if (d[0] === 0x03) c.frames.push({ kind: 'replay', offset: Number(d.readBigUInt64BE(1)), bytes: d.subarray(9) });
    else c.frames.push({ kind: d[0] === 0x01 ? 'stdout' : d[0] === 0x02 ? 'stderr' : `0x${d[0].toString(16)}`, bytes: d.subarray(1) });
  });
  c.text = (kind = 'stdout') => Buffer.concat(c.frames.filter((f) => f.kind === kind).map((f) => f.bytes)).toString('utf8');
  c.json = (type) => c.frames.filter((f) => f.kind === 'text' && f.json.type === type).map((f) => f.json);
  c.stdin = (s) => ws.send(Buffer.concat([Buffer.from([STDIN]), Buffer.from(s)]));
  c.until = (pred, message) => waitFor(() => pred(c), { timeoutMs: 10000, message });
  // whenClosed with a deadline: a connection the server never closes fails with what it received
  c.ended = (ms = 15000) => {
    let timer;
    const late = new Promise((resolve, reject) => {
      timer = setTimeout(() => reject(new Error(`not closed within ${ms} ms; frames: ${JSON.stringify(c.frames.map((f) => f.json ?? f.kind))}`)), ms);
    });
    return Promise.race([c.whenClosed, late]).finally(() => clearTimeout(timer));
  };
  c.close = () => {
    ws.close();
    return c.ended();
  };
  return c;
}

describe('dev-server execd PTY WebSocket API', function () {
  this.timeout(60000);
  let server;
  let sbx;
  let execd;
  const clients = [];

  async function sandboxExecd(srv) {
    const s = await Sandbox.create({ connectionConfig: new ConnectionConfig({ domain: srv.domain }), image: 'debian:12' });
    const ep = await request(`${srv.baseUrl}/v1/sandboxes/${s.id}/endpoints/44772`);
    assert.equal(ep.status, 200, ep.text);
    return { s, base: `http://${ep.json.endpoint}` };
  }
  async function session(body, base = execd) {
    const r = await request(`${base}/pty`, { method: 'POST', body: body === undefined ? '' : body });
    assert.equal(r.status, 201, r.text);
    assert.match(r.json.session_id, /^[0-9a-f-]{36}$/);
    return r.json.session_id;
  }
  function open(id, query = '', base = execd) {
    const c = connect(`${base.replace(/^http/, 'ws')}/pty/${id}/ws${query}`);
    clients.push(c);
    return c;
  }
  const status = (id, base = execd) => request(`${base}/pty/${id}`);

  before(async () => {
    server = await startServer({ commandTailMs: 0 });
    ({ s: sbx, base: execd } = await sandboxExecd(server));
  });
  afterEach(() => {
    for (const c of clients.splice(0)) c.ws.terminate();
  });
  after(async () => {
    await sbx?.kill().catch(() => {});
    await sbx?.close().catch(() => {});
    await server?.close();
  });

  it('pipe mode: stdin round trip, separate stderr, exit frame then close 1000', async () => {
    const id = await session();
    const idle = await status(id);
    assert.deepEqual(idle.json, { session_id: id, running: false, output_offset: 0 });
    const c = open(id, '?pty=0');
    await c.opened;
    await c.until((x) => x.json('connected').length === 1, 'connected frame');
    assert.deepEqual(c.frames[0], { kind: 'text', json: { type: 'connected', session_id: id, mode: 'pipe' } });
    assert.equal((await status(id)).json.running, true);

    c.stdin('echo out-$((6*7)); echo err-1 >&2\n');
    await c.until((x) => x.text('stdout') === 'out-42\n' && x.text('stderr') === 'err-1\n', 'stdout and stderr');
    c.ws.send(JSON.stringify({ type: 'stdin', data: 'echo text-stdin\n' }));
    await c.until((x) => x.text('stdout') === 'out-42\ntext-stdin\n', 'text stdin frame');
    c.ws.send(JSON.stringify({ type: 'ping' }));
    await c.until((x) => x.json('pong').length === 1, 'pong');
    c.ws.send(JSON.stringify({ type: 'bogus' }));
    await c.until((x) => x.json('error').length === 1, 'error frame');
    assert.deepEqual(c.json('error')[0], { type: 'error', code: 'INVALID_FRAME', error: 'unknown frame type "bogus"' });

    c.stdin('exit 3\n');
    assert.deepEqual(await c.ended(), { code: 1000, reason: 'process exited' });
    const last = c.frames.at(-1);
    assert.deepEqual(last, { kind: 'text', json: { type: 'exit', exit_code: 3 } });
    assert.deepEqual((await status(id)).json, { session_id: id, running: false, output_offset: 'out-42\nerr-1\ntext-stdin\n'.length });
  });

  it('PTY mode: a real terminal (tty, echo, resize), exit code', async () => {
    const id = await session({ cwd: '/workspace/ptycwd' });
    const c = open(id);
    await c.opened;
    await c.until((x) => x.json('connected').length === 1, 'connected');
    assert.equal(c.json('connected')[0].mode, 'pty');
    c.stdin('tty; pwd; echo sum-$((2+3))\n');
    await c.until((x) => /sum-5\r\n/.test(x.text()), 'command output on the terminal');
    const out = c.text();
    assert.match(out, /\/dev\/pts\/\d+\r\n/);
    assert.match(out, /\/workspace\/ptycwd\r\n/);
    assert.match(out, /tty; pwd; echo sum-\$\(\(2\+3\)\)\r\n/, 'input is echoed by the terminal');
    assert.deepEqual(c.frames.filter((f) => f.kind === 'stderr'), []);

    c.ws.send(JSON.stringify({ type: 'resize', cols: 123, rows: 45 }));
    c.stdin('stty size\n');
    await c.until((x) => /45 123\r\n/.test(x.text()), 'stty size after resize');
    c.stdin('echo started; sleep 30\n');
    // TERM=xterm: bash ends bracketed paste (ESC[?2004l + CR) before a command's output
    await c.until((x) => /[\r\n]started\r\n/.test(x.text()), 'job started');
    c.stdin('\x03');
    c.stdin('echo rc=$?\n');
    await c.until((x) => /[\r\n]rc=130\r\n/.test(x.text()), 'Ctrl-C (0x03 on stdin) interrupts the foreground job');
    c.stdin('exit 4\n');
    assert.deepEqual(await c.ended(), { code: 1000, reason: 'process exited' });
    assert.deepEqual(c.frames.at(-1).json, { type: 'exit', exit_code: 4 });
  });

  it('replays buffered output from `since` before the connected frame', async () => {
    const id = await session();
    const a = open(id, '?pty=0');
    await a.opened;
    a.stdin('echo one; echo two >&2\n');
    await a.until((x) => x.text('stdout') === 'one\n' && x.text('stderr') === 'two\n', 'live output');
    await a.close();
    const st = await status(id);
    assert.deepEqual(st.json, { session_id: id, running: true, output_offset: 8 });

    for (const [since, offset, bytes] of [[0, 0, 'one\ntwo\n'], [2, 2, 'e\ntwo\n'], [-5, 0, 'one\ntwo\n']]) {
      const b = open(id, `?pty=0&since=${since}`);
      await b.until((x) => x.json('connected').length === 1, 'connected');
      assert.equal(b.frames[0].kind, 'replay');
      assert.equal(b.frames[0].offset, offset);
      assert.equal(b.frames[0].bytes.toString(), bytes);
      assert.equal(b.frames[1].json.type, 'connected');
      await b.close();
    }
    const caughtUp = open(id, '?pty=0&since=8');
    await caughtUp.until((x) => x.json('connected').length === 1, 'connected');
    assert.equal(caughtUp.frames.length, 1, 'no replay frame when nothing was missed');
    caughtUp.stdin('echo three\n');
    await caughtUp.until((x) => x.text('stdout') === 'three\n', 'live after reconnect');
    assert.equal((await status(id)).json.running, true, 'the shell survived the reconnects');
  });

  it('streams large output completely and keeps the newest 1 MiB for replay', async () => {
    const id = await session();
    const a = open(id, '?pty=0');
    await a.opened;
    a.stdin("head -c 3000000 /dev/zero | tr '\\0' a; echo END >&2\n");
    await a.until((x) => x.text('stderr') === 'END\n', 'end marker');
    await a.until((x) => x.text('stdout').length === 3000000, 'all stdout bytes live');
    assert.ok(/^a+$/.test(a.text('stdout')));
    await a.close();
    assert.equal((await status(id)).json.output_offset, 3000004);
    const b = open(id, '?pty=0');
    await b.until((x) => x.json('connected').length === 1, 'connected');
    assert.equal(b.frames[0].kind, 'replay');
    assert.equal(b.frames[0].offset, 3000004 - 1024 * 1024);
    assert.equal(b.frames[0].bytes.length, 1024 * 1024);
    // stdout and stderr are merged in arrival order, so END sits near (not necessarily at) the end
    assert.equal(b.frames[0].bytes.toString().replace('END\n', ''), 'a'.repeat(1024 * 1024 - 4));
  });

  it('replays every byte while the replay buffer grows with the output, then the newest 1 MiB once it wraps', async () => {
    const seq = (from, to) => Array.from({ length: to - from + 1 }, (_, i) => `${from + i}\n`).join('');
    const id = await session();
    const a = open(id, '?pty=0');
    await a.opened;
    const first = seq(1, 40000); // 229 KB in many pipe chunks: the buffer grows from 4 KiB several times
    a.stdin('seq 1 40000\n');
    await a.until((x) => x.text('stdout').length === first.length, 'first output live');
    await a.close();
    for (const since of [0, 4095, 4096, 12345, first.length - 1]) {
      const b = open(id, `?pty=0&since=${since}`);
      await b.until((x) => x.json('connected').length === 1, 'connected');
      assert.equal(b.frames[0].kind, 'replay');
      assert.equal(b.frames[0].offset, since);
      assert.equal(b.frames[0].bytes.toString(), first.slice(since));
      await b.close();
    }
    const all = first + seq(40001, 200000); // 1.29 MB in all: the ring wraps
    const c = open(id, `?pty=0&since=${first.length}`);
    await c.until((x) => x.json('connected').length === 1, 'connected');
    c.stdin('seq 40001 200000\n');
    await c.until((x) => x.text('stdout').length === all.length - first.length, 'second output live');
    await c.close();
    const d = open(id, '?pty=0&since=0');
    await d.until((x) => x.json('connected').length === 1, 'connected');
    assert.equal(d.frames[0].offset, all.length - 1024 * 1024);
    assert.equal(d.frames[0].bytes.toString(), all.slice(all.length - 1024 * 1024));
  });

  it('one client at a time: 409 ALREADY_CONNECTED, takeover closes the old one with 4001', async () => {
    const id = await session();
    const a = open(id, '?pty=0');
    await a.opened;
    await a.until((x) => x.json('connected').length === 1, 'connected');

    const second = open(id, '?pty=0');
    await assert.rejects(second.opened, (e) => e.status === 409);
    assert.equal(second.rejected.json.code, 'ALREADY_CONNECTED');
    assert.equal(typeof second.rejected.json.message, 'string');

    const b = open(id, '?pty=0&takeover=1');
    await b.until((x) => x.json('connected').length === 1, 'taker connected');
    assert.deepEqual(await a.ended(), { code: 4001, reason: 'TAKEN_OVER' });
    b.stdin('echo mine\n');
    await b.until((x) => x.text('stdout') === 'mine\n', 'taker owns stdin/stdout');
    assert.equal(a.text('stdout'), '');

    const unknown = open('00000000-0000-4000-8000-000000000000');
    await assert.rejects(unknown.opened, (e) => e.status === 404);
    assert.equal(unknown.rejected.json.code, 'CONTEXT_NOT_FOUND');
    const st = await status('00000000-0000-4000-8000-000000000000');
    assert.equal(st.status, 404);
    assert.equal(st.json.code, 'CONTEXT_NOT_FOUND');
  });

  it('connecting again after the process exited runs the command again (new pid)', async () => {
    const id = await session({ command: 'echo run-$$' });
    const first = open(id, '?pty=0');
    await first.ended();
    assert.deepEqual(first.frames.map((f) => f.kind), ['text', 'stdout', 'text']);
    const pid1 = /^run-(\d+)\n$/.exec(first.text())[1];
    assert.deepEqual(first.json('exit'), [{ type: 'exit', exit_code: 0 }]);

    const again = open(id, '?pty=0');
    await again.ended();
    assert.equal(again.frames[0].kind, 'replay');
    assert.equal(again.frames[0].bytes.toString().slice(0, `run-${pid1}\n`.length), `run-${pid1}\n`);
    const all = again.frames[0].bytes.toString() + again.text();
    const pid2 = /^run-\d+\nrun-(\d+)\n$/.exec(all)?.[1];
    assert.ok(pid2 && pid2 !== pid1, `second run has a new pid: ${JSON.stringify(all)}`);
    assert.equal(again.closed.code, 1000);
  });

  it('signals reach the process group; DELETE kills it and forgets the session', async () => {
    const id = await session({ command: 'sleep 30; echo not-reached' });
    const c = open(id, '?pty=0');
    await c.until((x) => x.json('connected').length === 1, 'connected');
    c.ws.send(JSON.stringify({ type: 'signal', signal: 'SIGBOGUS' }));
    await c.until((x) => x.json('error').length === 1, 'unsupported signal error');
    assert.equal(c.json('error')[0].code, 'INVALID_FRAME');
    c.ws.send(JSON.stringify({ type: 'signal', signal: 'SIGTERM' }));
    assert.equal((await c.ended()).code, 1000);
    assert.deepEqual(c.json('exit'), [{ type: 'exit', exit_code: -1 }]);
    assert.equal(c.text(), '');

    const id2 = await session({ command: 'sleep 30' });
    const d = open(id2);
    await d.until((x) => x.json('connected').length === 1, 'connected');
    const del = await request(`${execd}/pty/${id2}`, { method: 'DELETE' });
    assert.equal(del.status, 200);
    assert.equal(del.text, '');
    assert.equal((await d.ended()).code, 1000);
    assert.deepEqual(d.json('exit'), [{ type: 'exit', exit_code: -1 }]);
    assert.equal((await status(id2)).status, 404);
  });

  it('sends every byte of a fast-exiting command before the exit frame', async () => {
    for (const query of ['?pty=0', '', '?pty=0', '']) {
      const id = await session({ command: 'echo hello-output; printf tail-no-newline' });
      const c = open(id, query);
      await c.ended();
      assert.match(c.text(), /^hello-output\r?\ntail-no-newline$/);
      assert.deepEqual(c.frames.at(-1).json, { type: 'exit', exit_code: 0 });
    }
  });

  it('reports START_FAILED when the process cannot start', async () => {
    for (const query of ['?pty=0', '']) {
      const id = await session({ cwd: '/workspace/vanishing' });
      await sbx.files.deleteDirectories(['/workspace/vanishing']);
      const c = open(id, query);
      assert.equal((await c.ended()).code, 1011);
      assert.deepEqual(c.frames.map((f) => f.json), [{ type: 'error', code: 'START_FAILED', error: 'working directory /workspace/vanishing does not exist' }]);
      assert.equal((await status(id)).json.running, false);
    }
  });

  it('does not wait forever for a background process that keeps the output open', async () => {
    const id = await session({ command: 'sleep 21 & echo bg-started' });
    const c = open(id, '?pty=0');
    await waitFor(() => c.closed, { timeoutMs: 10000, message: 'exit frame despite the background process' });
    assert.equal(c.text(), 'bg-started\n');
    assert.deepEqual(c.frames.at(-1).json, { type: 'exit', exit_code: 0 });
    assert.equal(c.closed.code, 1000);
    const running = async () => (await sbx.commands.run('pgrep -xc sleep || true')).logs.stdout.map((m) => m.text).join('');
    assert.equal(await running(), '1');
    assert.equal((await request(`${execd}/pty/${id}`, { method: 'DELETE' })).status, 200);
    await waitFor(async () => (await running()) === '0', { message: 'DELETE killed what the finished run left in its group' });
  });

  /**
   * A raw client (frames and the server's FIN visible) attaches to a running bash, sends close 1000 "bye" and
   * reports the server's answer frame and whether the server closed TCP within 1 s.
   */
  async function closeWhileRunning(base) {
    const id = await session({}, base);
    const u = new URL(base);
    const ws = new WireWebSocket(u.hostname, Number(u.port));
    const hs = await ws.open(`/pty/${id}/ws`, [['Host', u.host], ['Upgrade', 'websocket'], ['Connection', 'Upgrade'],
      ['Sec-WebSocket-Version', '13'], ['Sec-WebSocket-Key', 'x'], ...Object.entries(endpointHeadersFor(base))]);
    assert.equal(hs.status, 101);
    await ws.until((fr) => fr.some((f) => f.opcode === 1), 10000);
    ws.send(8, Buffer.concat([Buffer.from([0x03, 0xe8]), Buffer.from('bye')]));
    await ws.until((fr) => fr.some((f) => f.opcode === 8), 10000);
    await ws.until(() => false, 1000);
    const answer = ws.inFrames().find((f) => f.opcode === 8).payload;
    const fin = ws.finAt() !== null;
    ws.close();
    const st = await status(id, base);
    return { answer: [answer.readUInt16BE(0), answer.subarray(2).toString()], fin, running: st.json.running, id };
  }

  it('client close while the process runs: answered 1000 with no reason, then TCP closed; the process keeps running', async () => {
    const r = await closeWhileRunning(execd);
    assert.deepEqual(r, { answer: [1000, ''], fin: true, running: true, id: r.id });
    assert.equal((await request(`${execd}/pty/${r.id}`, { method: 'DELETE' })).status, 200);
  });

  describe('with the close-linger switch (ptyCloseLinger)', () => {
    let lingerServer;
    let linger;
    before(async () => {
      lingerServer = await startServer({ ptyCloseLinger: true });
      linger = await sandboxExecd(lingerServer);
    });
    after(async () => {
      await linger?.s.kill().catch(() => {});
      await linger?.s.close().catch(() => {});
      await lingerServer?.close();
    });

    it('like the real execd: the close is answered but the server never closes TCP; a new client can attach', async () => {
      const r = await closeWhileRunning(linger.base);
      assert.deepEqual(r, { answer: [1000, ''], fin: false, running: true, id: r.id });
      const again = open(r.id, '?since=0', linger.base);
      await again.until((x) => x.json('connected').length === 1, 'reattached');
      again.stdin('exit 5\n');
      assert.deepEqual(await again.ended(), { code: 1000, reason: 'process exited' });
    });
  });

  // Ten commands that exit at once, each must end with its exit frame and close 1000. Regression: the PTY helper
  // armed SIGCHLD after the fork, so a child that exited first was never reaped and the connection never closed
  // (seen under load, the helper spinning); and in exit-race mode an attach that found the run already drained
  // sent no exit frame.
  async function exitAtOnce(query, base) {
    for (let i = 0; i < 10; i++) {
      const id = await session({ command: 'exit 3' }, base);
      const c = open(id, query, base);
      assert.deepEqual(await c.ended(), { code: 1000, reason: 'process exited' });
      assert.deepEqual(c.json('exit'), [{ type: 'exit', exit_code: 3 }]);
    }
  }
  for (const [mode, query] of [['pipe', '?pty=0'], ['pty', '']]) {
    it(`${mode} mode: commands that exit at once all get their exit frame and close`, () => exitAtOnce(query, execd));
  }

  describe('with the exit-race switch (ptyExitRace)', () => {
    let raceServer;
    let race;
    before(async () => {
      raceServer = await startServer({ ptyExitRace: true, commandTailMs: 0 });
      race = await sandboxExecd(raceServer);
    });
    after(async () => {
      await race?.s.kill().catch(() => {});
      await race?.s.close().catch(() => {});
      await raceServer?.close();
    });

    for (const [mode, query] of [['pipe', '?pty=0'], ['pty', '']]) {
      it(`${mode} mode: commands that exit at once all get their exit frame and close`, () => exitAtOnce(query, race.base));

      it(`${mode} mode: output of the last moments is missing live but present in the replay`, async () => {
        const id = await session({ command: 'echo hello-output' }, race.base);
        const c = open(id, query, race.base);
        await c.ended();
        assert.deepEqual(c.frames.map((f) => f.kind), ['text', 'text']);
        assert.equal(c.frames[0].json.type, 'connected');
        assert.deepEqual(c.frames[1].json, { type: 'exit', exit_code: 0 });
        assert.equal(c.closed.code, 1000);
        const expected = mode === 'pipe' ? 'hello-output\n' : 'hello-output\r\n';
        const st = await waitFor(async () => {
          const r = await status(id, race.base);
          return r.json.output_offset === expected.length && r;
        }, { message: 'output_offset counts the lost bytes' });
        assert.equal(st.json.running, false);

        const again = open(id, `${query ? `${query}&` : '?'}since=0`, race.base);
        await again.ended();
        assert.equal(again.frames[0].kind, 'replay');
        assert.equal(again.frames[0].offset, 0);
        assert.equal(again.frames[0].bytes.toString().slice(0, expected.length), expected);
      });
    }
  });
});
