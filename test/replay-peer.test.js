// The client (native addon: C event parser, HTTP engine, code interpreter) on the real execd's bytes: a replay peer
// (helpers/replay-peer.js) answers with the responses recorded from the real execd v1.0.19 (golden transcripts) —
// chunk boundaries, chunk timing, the 1 s tail, `Connection: close`, bare error objects, `execution_complete` before the
// results of a /code cell — and each result is compared with what the recorded events say.
import assert from 'node:assert/strict';
import { Execd } from '../lib/native.js';
import { CodeInterpreter } from '../lib/code-interpreter.js';
import { loadTranscripts } from './helpers/transcripts.js';
import { replayPeer, chunkBytes } from './helpers/replay-peer.js';

const transcripts = loadTranscripts();
const exchangesOf = (prefix) => transcripts.find((t) => t.file.startsWith(prefix)).exchanges;

/** The events of a recorded stream (chunks are whole events; the last may be a bare object without "\n\n"). */
function recordedEvents(ex) {
  return ex.response.chunks.map((c) => JSON.parse(chunkBytes(c).toString('utf8')));
}

/** What Execd.run resolves with for a recorded /command stream, derived from its events. */
function expectedRun(ex) {
  const ev = recordedEvents(ex);
  const text = (type) => ev.filter((e) => e.type === type).map((e) => (e.text === '\n' ? '\n' : `${e.text}\n`)).join('');
  const last = ev.filter((e) => e.type === 'execution_complete' || e.type === 'error').at(-1);
  return {
    commandId: ev[0].text,
    stdout: text('stdout'),
    stderr: text('stderr'),
    final: last.type === 'error' ? { evalue: last.error.evalue, errorText: last.error.traceback.join('\n') } : { exitCode: 0 },
  };
}

function checkRun(r, ex) {
  const want = expectedRun(ex);
  assert.equal(r.commandId, want.commandId, ex.label);
  assert.equal(r.stdout, want.stdout, ex.label);
  assert.equal(r.stderr, want.stderr, ex.label);
  if (want.final.exitCode === 0) {
    assert.equal(r.exitCode, 0, ex.label);
  } else {
    assert.equal(r.errorText, want.final.errorText, ex.label);
    if (/^-?\d+$/.test(want.final.evalue)) assert.equal(r.exitCode, Number(want.final.evalue), ex.label);
  }
}

/** Foreground /command streams read to their end in the recording (no concurrency, no early close). */
const isPlainRun = (ex) => ex.request.method === 'POST' && ex.request.path === '/command' && ex.response.status === 200
  && ex.response.end_ms !== null && !ex.concurrent_with && !ex.connection && !JSON.parse(ex.request.body).background;

describe('the client on the real execd\'s recorded bytes (replay peer)', function () {
  this.timeout(60000);

  it('Execd.run: every recorded foreground /command stream gives the recorded output, exit code and error text', async () => {
    const runs = ['02-', '03-', '04-', '06-'].flatMap((f) => exchangesOf(f).filter(isPlainRun));
    assert.ok(runs.length >= 25, `${runs.length} runs`);
    // side by side: one peer and one client per recorded stream, each answered with its own timing
    await Promise.all(runs.map(async (ex) => {
      const peer = await replayPeer([ex]);
      try {
        const r = await new Execd({ baseUrl: peer.url }).run({ command: JSON.parse(ex.request.body).command }).result;
        checkRun(r, ex);
        assert.deepEqual(peer.errors, []);
      } finally {
        await peer.close();
      }
    }));
  });

  it('Execd.run after a `Connection: close` answer and on a keep-alive connection: three runs in a row', async () => {
    const ex = exchangesOf('02-');
    const seq = [ex.find((e) => /^Connection: close/.test(e.label)), ...ex.filter((e) => e.connection && e.request.path === '/command')];
    assert.equal(seq.length, 3);
    const peer = await replayPeer(seq);
    try {
      const client = new Execd({ baseUrl: peer.url });
      for (const e of seq) checkRun(await client.run({ command: JSON.parse(e.request.body).command }).result, e);
      assert.deepEqual(peer.errors, []);
      assert.equal(peer.left, 0);
    } finally {
      await peer.close();
    }
  });

  it('Execd.run: the recorded 400 answers reach the caller with status, code and message', async () => {
    const bad = exchangesOf('03-').filter((e) => e.response.status === 400 && e.request.body && /"command":"echo hi"/.test(e.request.body));
    assert.ok(bad.length >= 2);
    for (const ex of bad) {
      const peer = await replayPeer([ex]);
      try {
        const body = JSON.parse(ex.request.body);
        const err = await new Execd({ baseUrl: peer.url }).run({ command: body.command, cwd: body.cwd }).result.then(
          () => assert.fail(`${ex.label}: resolved`), (e) => e);
        const rec = JSON.parse(ex.response.chunks[0].data);
        assert.deepEqual([err.kind, err.status, err.code], ['api', 400, rec.code], ex.label);
        assert.ok(err.message.includes(rec.message), `${ex.label}: ${err.message}`);
      } finally {
        await peer.close();
      }
    }
  });

  it('CodeInterpreter.run: cells whose execution_complete comes before their output and results (Jupyter-backed execd)', async () => {
    const cells = exchangesOf('10-').filter((e) => e.request.method === 'POST' && e.request.path === '/code' && e.response.status === 200
      && !/interrupt|busy|sleep|without context\.language/.test(e.label));
    assert.ok(cells.length >= 4, `${cells.length} cells`);
    for (const ex of cells) {
      const ev = recordedEvents(ex);
      const types = ev.map((e) => e.type);
      const body = JSON.parse(ex.request.body);
      const peer = await replayPeer([ex]);
      try {
        const ci = new CodeInterpreter({ baseUrl: peer.url });
        const r = await ci.run({ code: body.code, language: body.context.language, contextId: body.context.id }).result;
        assert.ok(types.indexOf('execution_complete') < types.length - 1 || !types.some((t) => ['result', 'stdout', 'error'].includes(t)), ex.label);
        const text = (type) => ev.filter((e) => e.type === type).map((e) => e.text).join('');
        assert.equal(r.stdout, text('stdout'), ex.label);
        assert.equal(r.stderr, text('stderr'), ex.label);
        assert.deepEqual(r.results, ev.filter((e) => e.type === 'result').map((e) => e.results), ex.label);
        const err = ev.find((e) => e.type === 'error');
        if (err) assert.deepEqual([r.error.ename, r.error.evalue], [err.error.ename, err.error.evalue], ex.label);
        else assert.equal(r.error, null, ex.label);
        assert.deepEqual(peer.errors, []);
      } finally {
        await peer.close();
      }
    }
  });
});
