// POST /directories answered by the C execd (src/execd/dirs.c) in a real sandbox of the local server: the answers
// byte for byte (status, content type, body), the directories made with their modes, and nothing of ours started for
// any of it.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer } from '../lib/dev-server/index.js';
import { execdBinary } from '../lib/dev-server/execd-binary.js';
import { descendants } from '../lib/dev-server/proctree.js';
import { request } from './helpers/raw.js';

const TOKEN = 'dirs-token';
const JSON_TYPE = 'application/json; charset=utf-8';
const err = (code, message) => JSON.stringify({ code, message });

function cmdline(pid) {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
  } catch {
    return [];
  }
}

describe('the C execd: POST /directories natively', function () {
  this.timeout(60000);
  let server;
  let work;
  let execd; // (path, opts) -> raw response from the sandbox's execd
  let execdPid;
  const ours = () => descendants(execdPid).filter((pid) => cmdline(pid).some((a) => a.includes('lib/dev-server')));

  before(async function () {
    if (!execdBinary()) throw new Error('no osb-execd binary: build it first (node scripts/build.js)');
    work = fs.mkdtempSync(path.join(os.tmpdir(), 'osb-dirs-'));
    server = await startServer({ dataDir: path.join(work, 'data'), execdAccessToken: TOKEN });
    const api = (p, opts = {}) => request(`${server.baseUrl}${p}`, { ...opts, headers: { 'Content-Type': 'application/json' } });
    const r = await api('/v1/sandboxes', { method: 'POST', body: { image: { uri: 'x' }, entrypoint: ['tail', '-f', '/dev/null'], resourceLimits: {} } });
    assert.equal(r.status, 202, r.text);
    const ep = (await api(`/v1/sandboxes/${r.json.id}/endpoints/44772`)).json;
    const headers = { ...(ep.headers ?? {}), 'X-EXECD-ACCESS-TOKEN': TOKEN };
    execd = (p, opts = {}) => request(`http://127.0.0.1:${ep.endpoint.split(':').at(-1)}${p}`, { ...opts, headers: { ...headers, ...opts.headers } });
    const name = path.basename(execdBinary());
    const found = descendants(process.pid).filter((pid) => path.basename(cmdline(pid)[0] ?? '') === name);
    assert.equal(found.length, 1, 'exactly one C execd in this process tree');
    execdPid = found[0];
  });
  after(async () => {
    await server?.close();
    if (work) fs.rmSync(work, { recursive: true, force: true });
  });

  const post = (body) => execd('/directories', { method: 'POST', body: typeof body === 'string' ? Buffer.from(body) : body, headers: { 'Content-Type': 'application/json' } });
  const expectAnswer = async (body, status, text) => {
    const r = await post(body);
    assert.deepEqual([r.status, r.text], [status, text], `answer to ${JSON.stringify(body)}`);
    if (text) assert.equal(r.headers['content-type'], JSON_TYPE);
    else assert.equal(r.headers['content-length'], '0');
  };

  it('makes the directories (mkdir -p, the mode on the last one when new) and answers errors byte for byte, nothing else started', async () => {
    await expectAnswer({ '/tmp/xd/a/b': { mode: 700 }, '/tmp/xd/d': {} }, 200, '');
    await expectAnswer({ '/tmp/xd/a/b': { mode: 755 } }, 200, ''); // exists: keeps its mode
    await expectAnswer('', 400, err('INVALID_REQUEST_BODY', 'error parsing request, MAYBE invalid body format. EOF'));
    await expectAnswer('{"/tmp/xd/e":', 400, err('INVALID_REQUEST_BODY', 'error parsing request, MAYBE invalid body format. unexpected EOF'));
    await expectAnswer([1], 400, err('INVALID_REQUEST_BODY', 'error parsing request, MAYBE invalid body format. expected a JSON object keyed by path'));
    await expectAnswer({ '/tmp/xd/f': 1 }, 400, err('INVALID_REQUEST_BODY', 'error parsing request, MAYBE invalid body format. the value for "/tmp/xd/f" must be an object'));
    await expectAnswer({ '/tmp/xd/m': { mode: 'x<' } }, 400,
      '{"code":"INVALID_REQUEST_BODY","message":"invalid mode \\"x\\u003c\\" for /tmp/xd/m: give the octal digits as a decimal integer, e.g. 644"}');
    await expectAnswer({ '/tmp/xd/m': { mode: 7.5 } }, 400, err('INVALID_REQUEST_BODY', 'invalid mode 7.5 for /tmp/xd/m: give the octal digits as a decimal integer, e.g. 644'));
    await expectAnswer({ '/tmp/xd/g': {}, '$NOPE_XD_B/${NOPE_XD_A}': {} }, 400, err('INVALID_REQUEST_BODY', 'path references undefined environment variables: NOPE_XD_A,NOPE_XD_B'));
    await expectAnswer({ '/proc/nope/a': { mode: 755 } }, 404, err('FILE_NOT_FOUND', 'file not found. mkdir /proc/nope: no such file or directory'));
    await expectAnswer({ '/etc/hostname/x': {} }, 500, err('RUNTIME_ERROR', 'error accessing file: mkdir /etc/hostname: not a directory'));
    assert.deepEqual(ours(), [], 'nothing of ours started for POST /directories');

    // what was made
    const info = await execd(`/files/info?${['/tmp/xd/a', '/tmp/xd/a/b', '/tmp/xd/d', '/tmp/xd/g'].map((p) => `path=${encodeURIComponent(p)}`).join('&')}`);
    assert.equal(info.status, 200, info.text);
    assert.deepEqual(Object.values(info.json).map((f) => [f.path, f.type, f.mode]),
      [['/tmp/xd/a', 'directory', 755], ['/tmp/xd/a/b', 'directory', 700], ['/tmp/xd/d', 'directory', 755], ['/tmp/xd/g', 'directory', 755]]);
  });
});
