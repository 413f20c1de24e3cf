// execd files and directories API of the local OpenSandbox-compatible server: every operation through the official
// client (@alibaba-group/opensandbox `sandbox.files.*`) against a bubblewrap sandbox of startServer(), effects checked
// from inside the sandbox with commands, and raw HTTP on the sandbox's execd endpoint for what the client hides.
import assert from 'node:assert/strict';
import { Sandbox, ConnectionConfig } from '@alibaba-group/opensandbox';
import { startServer } from '../lib/dev-server/index.js';
import { request } from './helpers/raw.js';

/** Runs a shell command in the sandbox, returns its stdout text (lines joined with "\n"). */
async function sh(sbx, cmd) {
  const ex = await sbx.commands.run(cmd);
  assert.equal(ex.error, undefined, `command failed: ${cmd}: ${JSON.stringify(ex.error)}`);
  return ex.logs.stdout.map((m) => m.text).join('\n');
}

function multipart(parts) {
  const boundary = 'h2boundary7d3f';
  const chunks = [];
  for (const p of parts) {
    const fname = p.filename === undefined ? '' : `; filename="${p.filename}"`;
    chunks.push(Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="${p.name}"${fname}\r\n`
      + `Content-Type: ${p.type ?? 'application/octet-stream'}\r\n\r\n`), Buffer.from(p.data), Buffer.from('\r\n'));
  }
  chunks.push(Buffer.from(`--${boundary}--\r\n`));
  return { body: Buffer.concat(chunks), headers: { 'Content-Type': `multipart/form-data; boundary=${boundary}` } };
}

describe('dev-server execd files API', function () {
  this.timeout(60000);
  let server;
  let sbx;
  let execd;
  const raw = (p, opts) => request(`${execd}${p}`, opts);

  before(async () => {
    server = await startServer({ commandTailMs: 0 });
    sbx = await Sandbox.create({ connectionConfig: new ConnectionConfig({ domain: server.domain }), image: 'debian:12' });
    const ep = await request(`${server.baseUrl}/v1/sandboxes/${sbx.id}/endpoints/44772`);
    assert.equal(ep.status, 200, ep.text);
    execd = `http://${ep.json.endpoint}`;
  });
  after(async () => {
    await sbx?.kill().catch(() => {});
    await sbx?.close().catch(() => {});
    await server?.close();
  });

  it('writes, reads and describes files (FileInfo shape, mode digits, parents created)', async () => {
    await sbx.files.writeFiles([
      { path: '/workspace/w/a/b.txt', data: 'hello world\nline2\nline3\n', mode: 640 },
      { path: '/workspace/w/bin.dat', data: new Uint8Array([0, 1, 2, 255, 254]) },
    ]);
    assert.equal(await sbx.files.readFile('/workspace/w/a/b.txt'), 'hello world\nline2\nline3\n');
    assert.deepEqual([...await sbx.files.readBytes('/workspace/w/bin.dat')], [0, 1, 2, 255, 254]);
    assert.equal(await sh(sbx, 'stat -c "%a %U %G %s" /workspace/w/a/b.txt /workspace/w/bin.dat'), '640 root root 24\n755 root root 5');

    const info = await sbx.files.getFileInfo(['/workspace/w/a/b.txt', '/workspace/w/a']);
    const f = info['/workspace/w/a/b.txt'];
    assert.deepEqual({ ...f, modifiedAt: undefined, createdAt: undefined },
      { path: '/workspace/w/a/b.txt', type: 'file', size: 24, mode: 640, owner: 'root', group: 'root', modifiedAt: undefined, createdAt: undefined });
    assert.ok(f.modifiedAt instanceof Date && Math.abs(f.modifiedAt - Date.now()) < 60000);
    assert.equal(info['/workspace/w/a'].type, 'directory');
    assert.equal(info['/workspace/w/a'].mode, 755);

    const r = await raw('/files/info?path=/workspace/w/a/b.txt');
    const fi = r.json['/workspace/w/a/b.txt'];
    assert.deepEqual(Object.keys(fi), ['path', 'type', 'size', 'modified_at', 'created_at', 'owner', 'group', 'mode']);
    assert.match(fi.modified_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$/);
    const nanos = (await sh(sbx, 'stat -c %Y.%y /workspace/w/a/b.txt')).split(' ')[1].split('.')[1].replace(/0+$/, '');
    assert.equal(fi.modified_at.split('.')[1]?.replace('Z', '') ?? '', nanos);

    const missing = await raw('/files/info?path=/workspace/w/a/b.txt&path=/workspace/nope');
    assert.equal(missing.status, 404);
    assert.equal(missing.json.code, 'FILE_NOT_FOUND');
    await assert.rejects(sbx.files.getFileInfo(['/workspace/nope']), (e) => e.statusCode === 404 && e.error.code === 'FILE_NOT_FOUND');
  });

  it('creates, lists and removes directories', async () => {
    await sbx.files.createDirectories([{ path: '/workspace/d/x/y', mode: 700 }, { path: '/workspace/d/b' }]);
    await sbx.files.writeFiles([{ path: '/workspace/d/b/f.txt', data: 'f' }]);
    await sh(sbx, 'ln -s /workspace/d/b /workspace/d/link');
    assert.equal(await sh(sbx, 'stat -c %a /workspace/d/x/y /workspace/d/x'), '700\n755');

    const one = await sbx.files.listDirectory({ path: '/workspace/d' });
    assert.deepEqual(one.map((e) => [e.path, e.type]), [['/workspace/d/b', 'directory'], ['/workspace/d/link', 'symlink'], ['/workspace/d/x', 'directory']]);
    const deep = await sbx.files.listDirectory({ path: '/workspace/d', depth: 5 });
    assert.deepEqual(deep.map((e) => e.path), ['/workspace/d/b', '/workspace/d/b/f.txt', '/workspace/d/link', '/workspace/d/x', '/workspace/d/x/y']);
    assert.deepEqual((await raw('/directories/list?path=/workspace/d&depth=0')).json, []);
    const onFile = await raw('/directories/list?path=/workspace/d/b/f.txt');
    assert.equal(onFile.status, 400);
    assert.deepEqual(onFile.json, { code: 'INVALID_REQUEST_BODY', message: 'path is not a directory: /workspace/d/b/f.txt' });
    assert.equal((await raw('/directories/list?path=/workspace/d/link')).status, 400);
    assert.equal((await raw('/directories/list?path=/workspace/none')).status, 404);

    await sbx.files.deleteDirectories(['/workspace/d/x', '/workspace/never-existed']);
    assert.equal(await sh(sbx, 'ls /workspace/d'), 'b\nlink');
  });

  it('moves, replaces, sets permissions, searches and deletes', async () => {
    await sbx.files.writeFiles([
      { path: '/workspace/m/one.txt', data: 'hello hello\n' },
      { path: '/workspace/m/sub/two.txt', data: 'x' },
      { path: '/workspace/m/sub/three.md', data: 'y' },
    ]);
    await sbx.files.moveFiles([{ src: '/workspace/m/one.txt', dest: '/workspace/m/new/dir/one.txt' }]);
    assert.equal(await sh(sbx, 'cat /workspace/m/new/dir/one.txt; test -e /workspace/m/one.txt || echo gone'), 'hello hello\ngone');
    await sbx.files.moveFiles([{ src: '/workspace/m/sub/three.md', dest: '/tmp/m-across/three.md' }]);
    await sbx.files.moveFiles([{ src: '/tmp/m-across/three.md', dest: '/workspace/m/sub/three.md' }]);
    assert.equal(await sh(sbx, 'cat /workspace/m/sub/three.md; echo; ls /tmp/m-across | wc -l; ls /tmp | grep execd-upload | wc -l'), 'y\n0\n0');

    const counts = await sbx.files.replaceContentsDetailed([{ path: '/workspace/m/new/dir/one.txt', oldContent: 'll', newContent: 'LL' }]);
    assert.deepEqual(counts, [{ path: '/workspace/m/new/dir/one.txt', replacedCount: 2 }]);
    await sbx.files.replaceContents([{ path: '/workspace/m/new/dir/one.txt', oldContent: 'heLLo', newContent: 'bye' }]);
    assert.equal(await sbx.files.readFile('/workspace/m/new/dir/one.txt'), 'bye bye\n');

    // root in the sandbox has no capabilities: chown to another user is refused (docs/dev-server-security.md)
    await assert.rejects(sbx.files.setPermissions([{ path: '/workspace/m/sub/two.txt', mode: 604, owner: 'nobody', group: 'no-such-group' }]));
    assert.equal(await sh(sbx, 'stat -c "%a %U %G" /workspace/m/sub/two.txt'), '604 root root');

    const found = await sbx.files.search({ path: '/workspace/m', pattern: '*.txt' });
    assert.deepEqual(found.map((e) => e.path), ['/workspace/m/new/dir/one.txt', '/workspace/m/sub/two.txt']);
    assert.deepEqual((await sbx.files.search({ path: '/workspace/m' })).map((e) => e.path).sort(),
      ['/workspace/m/new/dir/one.txt', '/workspace/m/sub/three.md', '/workspace/m/sub/two.txt']);

    await sbx.files.deleteFiles(['/workspace/m/sub/two.txt', '/workspace/m/not-there']);
    assert.equal(await sh(sbx, 'ls /workspace/m/sub'), 'three.md');
  });

  it('upload quirks: metadata must be a file part, pairs must match, later pairs are written in order', async () => {
    const noName = multipart([{ name: 'metadata', type: 'application/json', data: '{"path":"/workspace/u/a.txt"}' }, { name: 'file', filename: 'a.txt', data: 'A' }]);
    const r1 = await raw('/files/upload', { method: 'POST', ...noName });
    assert.equal(r1.status, 400);
    assert.deepEqual(r1.json, { code: 'INVALID_FILE_METADATA', message: 'metadata file is missing' });

    const mismatch = multipart([
      { name: 'metadata', filename: 'metadata', data: '{"path":"/workspace/u/a.txt"}' },
      { name: 'metadata', filename: 'metadata', data: '{"path":"/workspace/u/b.txt"}' },
      { name: 'file', filename: 'a.txt', data: 'A' },
    ]);
    const r2 = await raw('/files/upload', { method: 'POST', ...mismatch });
    assert.equal(r2.status, 400);
    assert.deepEqual(r2.json, { code: 'INVALID_FILE', message: 'metadata and file count mismatch: 2 vs 1' });
    assert.equal(await sh(sbx, 'test -e /workspace/u || echo nothing-written'), 'nothing-written');

    const truncated = multipart([{ name: 'metadata', filename: 'metadata', data: '{"path":"/workspace/u/t.txt"}' }, { name: 'file', filename: 't', data: 'partial' }]);
    const cut = truncated.body.subarray(0, truncated.body.length - 30);
    const r4 = await raw('/files/upload', { method: 'POST', headers: truncated.headers, body: cut });
    assert.equal(r4.status, 400);
    // Go's multipart reader fails on it (unexpected EOF) and execd answers every such failure alike
    assert.deepEqual(r4.json, { code: 'INVALID_FILE', message: 'multipart form is empty' });
    assert.equal((await raw('/ping')).status, 200, 'execd survives a truncated form');

    const pairs = multipart([
      { name: 'metadata', filename: 'metadata', data: '{"path":"/workspace/u/a.txt","mode":600}' },
      { name: 'file', filename: 'a.txt', data: 'first' },
      { name: 'metadata', filename: 'metadata', data: '{"path":"/workspace/u/deep/b.txt"}' },
      { name: 'file', filename: 'b.txt', data: 'second' },
    ]);
    const r3 = await raw('/files/upload', { method: 'POST', ...pairs });
    assert.equal(r3.status, 200);
    assert.equal(r3.text, '');
    assert.equal(await sh(sbx, 'cat /workspace/u/a.txt; echo; cat /workspace/u/deep/b.txt; echo; stat -c %a /workspace/u/a.txt'), 'first\nsecond\n600');
  });

  it('a form over the 4 MiB in-memory budget: later parts spooled, every byte exact, no spool left (also after a cut)', async () => {
    const { createHash, randomBytes } = await import('node:crypto');
    // the first part passes the 4 MiB held in memory: it and the parts after it are spooled, then copied
    const blobs = [randomBytes(5 << 20), randomBytes(5 << 20), Buffer.from('tail!')];
    const form = multipart(blobs.flatMap((data, i) => [
      { name: 'metadata', filename: 'metadata', data: `{"path":"/workspace/spill/f${i}"}` },
      { name: 'file', filename: `f${i}`, data },
    ]));
    const r = await raw('/files/upload', { method: 'POST', ...form });
    assert.equal(r.status, 200, r.text);
    const sums = blobs.map((b, i) => `${createHash('sha256').update(b).digest('hex')}  /workspace/spill/f${i}`).join('\n');
    assert.equal(await sh(sbx, 'sha256sum /workspace/spill/f0 /workspace/spill/f1 /workspace/spill/f2'), sums);
    assert.equal(await sh(sbx, 'ls -a /tmp | grep -c execd-upload || true'), '0');

    // cut inside the second part: 400 (Go's reader: unexpected EOF), nothing written, and no spool left behind (the
    // C execd's is an unlinked file; the Node execd's was a directory, removed asynchronously: wait for it)
    const cut = form.body.subarray(0, (5 << 20) + (4 << 20));
    const r2 = await raw('/files/upload', { method: 'POST', headers: form.headers, body: cut });
    assert.equal(r2.status, 400);
    assert.deepEqual(r2.json, { code: 'INVALID_FILE', message: 'multipart form is empty' });
    let left;
    for (const deadline = Date.now() + 10000; Date.now() < deadline;) {
      left = await sh(sbx, 'ls -a /tmp | grep -c execd-upload || true');
      if (left === '0') break;
      await new Promise((res) => setTimeout(res, 50));
    }
    assert.equal(left, '0', 'the spool directory of the failed form is removed');
  });

  it('upload of more than 1,000 parts: 400 INVALID_FILE "multipart form is empty" and nothing written (Go multipart limit)', async () => {
    const form = (n, dir) => multipart(Array.from({ length: n }, (_, i) => [
      { name: 'metadata', filename: 'metadata', data: `{"path":"/workspace/${dir}/f${i}.txt"}` },
      { name: 'file', filename: `f${i}`, data: String(i) },
    ]).flat());
    const over = await raw('/files/upload', { method: 'POST', ...form(501, 'parts-over') });
    assert.equal(over.status, 400);
    assert.deepEqual(over.json, { code: 'INVALID_FILE', message: 'multipart form is empty' });
    assert.equal(await sh(sbx, 'ls /workspace/parts-over 2>/dev/null | wc -l'), '0');
    const limit = await raw('/files/upload', { method: 'POST', ...form(500, 'parts-limit') });
    assert.equal(limit.status, 200, limit.text);
    assert.equal(await sh(sbx, 'ls /workspace/parts-limit | wc -l; cat /workspace/parts-limit/f499.txt'), '500\n499');
  });

  it('download: headers, Range 206/416, line mode, 404', async () => {
    await sbx.files.writeFiles([{ path: '/workspace/dl/b.txt', data: '0123456789\nsecond\nthird' }]);
    const full = await raw('/files/download?path=/workspace/dl/b.txt');
    assert.equal(full.status, 200);
    assert.equal(full.text, '0123456789\nsecond\nthird');
    assert.equal(full.headers['content-type'], 'application/octet-stream');
    assert.equal(full.headers['content-disposition'], 'attachment; filename="b.txt"');
    assert.equal(full.headers['accept-ranges'], 'bytes');
    assert.equal(full.headers['content-length'], '23');
    assert.match(full.headers['last-modified'], /^[A-Z][a-z]{2}, \d\d [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d GMT$/);

    const part = await raw('/files/download?path=/workspace/dl/b.txt', { headers: { Range: 'bytes=2-5' } });
    assert.equal(part.status, 206);
    assert.equal(part.text, '2345');
    assert.equal(part.headers['content-range'], 'bytes 2-5/23');
    // like execd: a range answer has no Accept-Ranges / Last-Modified
    assert.equal(part.headers['accept-ranges'], undefined);
    assert.equal(part.headers['last-modified'], undefined);
    const suffix = await raw('/files/download?path=/workspace/dl/b.txt', { headers: { Range: 'bytes=-5' } });
    assert.equal(suffix.text, 'third');
    assert.equal(await sbx.files.readFile('/workspace/dl/b.txt', { range: 'bytes=11-16' }), 'second');
    const streamed = [];
    for await (const chunk of sbx.files.readBytesStream('/workspace/dl/b.txt')) streamed.push(Buffer.from(chunk));
    assert.equal(Buffer.concat(streamed).toString(), '0123456789\nsecond\nthird');

    const bad = await raw('/files/download?path=/workspace/dl/b.txt', { headers: { Range: 'bytes=100-200' } });
    assert.equal(bad.status, 416);
    assert.equal(bad.headers['content-range'], 'bytes */23');
    assert.equal(bad.headers['content-type'], 'text/plain; charset=utf-8');
    assert.equal(bad.text, 'invalid range: failed to overlap\n');

    const lines = await raw('/files/download?path=/workspace/dl/b.txt&offset=2&limit=5');
    assert.equal(lines.status, 200);
    assert.equal(lines.headers['content-type'], 'text/plain; charset=utf-8');
    assert.equal(lines.text, 'second\nthird');
    // execd joins the lines with "\n": none after the last line served
    assert.equal(await sbx.files.readFile('/workspace/dl/b.txt', { offset: 1, limit: 1 }), '0123456789');
    assert.equal((await raw('/files/download?path=/workspace/dl/b.txt&offset=2')).status, 400);

    const nf = await raw('/files/download?path=/workspace/dl/none');
    assert.equal(nf.status, 404);
    assert.equal(nf.json.code, 'FILE_NOT_FOUND');
  });

  it('raw quirks: mv onto an existing dest, missing src, delete of a directory, mode digits, search on base names', async () => {
    await sbx.files.writeFiles([{ path: '/workspace/q/a.txt', data: 'a' }, { path: '/workspace/q/b.txt', data: 'b' }, { path: '/workspace/q/dir/bx.txt', data: 'c' }]);
    const exists = await raw('/files/mv', { method: 'POST', body: [{ src: '/workspace/q/a.txt', dest: '/workspace/q/b.txt' }] });
    assert.equal(exists.status, 500);
    assert.deepEqual(exists.json, { code: 'RUNTIME_ERROR', message: 'error accessing file: destination path already exists: /workspace/q/b.txt' });
    const nosrc = await raw('/files/mv', { method: 'POST', body: [{ src: '/workspace/q/zz', dest: '/workspace/q/yy' }] });
    assert.equal(nosrc.status, 404);
    assert.equal(nosrc.json.code, 'FILE_NOT_FOUND');

    const dirDel = await raw('/files?path=/workspace/q/dir', { method: 'DELETE' });
    assert.equal(dirDel.status, 500);
    assert.deepEqual(dirDel.json, { code: 'RUNTIME_ERROR', message: 'error removing file /workspace/q/dir. path is a directory: /workspace/q/dir' });

    const perm = await raw('/files/permissions', { method: 'POST', body: { '/workspace/q/a.txt': { mode: 751 } } });
    assert.equal(perm.status, 200);
    assert.equal(await sh(sbx, 'stat -c %a /workspace/q/a.txt'), '751');
    assert.equal((await raw('/files/info?path=/workspace/q/a.txt')).json['/workspace/q/a.txt'].mode, 751);
    const badMode = await raw('/files/permissions', { method: 'POST', body: { '/workspace/q/a.txt': { mode: 789 } } });
    assert.equal(badMode.status, 400);
    assert.equal(badMode.json.code, 'INVALID_REQUEST_BODY');

    const byBase = await raw(`/files/search?path=/workspace/q&pattern=${encodeURIComponent('b*.txt')}`);
    assert.deepEqual(byBase.json.map((e) => e.path), ['/workspace/q/b.txt', '/workspace/q/dir/bx.txt']);
    const withDir = await raw(`/files/search?path=/workspace/q&pattern=${encodeURIComponent('dir/*.txt')}`);
    assert.deepEqual(withDir.json, []);
    const alt = await raw(`/files/search?path=/workspace/q&pattern=${encodeURIComponent('{a,bx}.txt')}`);
    assert.deepEqual(alt.json.map((e) => e.path), ['/workspace/q/a.txt', '/workspace/q/dir/bx.txt']);
    assert.equal((await raw('/files/search?path=/workspace/none&pattern=*')).status, 404);

    const verbose = await raw('/files/replace?verbose=true', { method: 'POST', body: { '/workspace/q/b.txt': { old: 'b', new: 'BB' } } });
    assert.deepEqual(verbose.json, { '/workspace/q/b.txt': { replacedCount: 1 } });
  });

  it('a parent directory that cannot be created is an error, not a hang (upload, mkdir, mv, PTY cwd; regression)', async () => {
    const up = multipart([{ name: 'metadata', filename: 'metadata', data: '{"path":"/proc/nope/x.txt"}' }, { name: 'file', filename: 'x', data: 'X' }]);
    const r1 = await raw('/files/upload', { method: 'POST', ...up, timeoutMs: 10000 });
    assert.equal(r1.status, 500);
    assert.equal(r1.json.code, 'RUNTIME_ERROR');
    assert.equal(r1.json.message, 'error creating target directory /proc/nope. mkdir /proc/nope: no such file or directory');
    const r2 = await raw('/directories', { method: 'POST', body: { '/proc/nope/a': { mode: 755 } }, timeoutMs: 10000 });
    assert.deepEqual([r2.status, r2.json], [404, { code: 'FILE_NOT_FOUND', message: 'file not found. mkdir /proc/nope: no such file or directory' }]);
    await sbx.files.writeFiles([{ path: '/workspace/mv-src.txt', data: 'm' }]);
    const r3 = await raw('/files/mv', { method: 'POST', body: [{ src: '/workspace/mv-src.txt', dest: '/proc/nope/b/c.txt' }], timeoutMs: 10000 });
    assert.deepEqual([r3.status, r3.json], [404, { code: 'FILE_NOT_FOUND', message: 'file not found. failed to create destination directory: mkdir /proc/nope: no such file or directory' }]);
    const r4 = await raw('/pty', { method: 'POST', body: { cwd: '/proc/nope/d' }, timeoutMs: 10000 });
    assert.equal(r4.status, 500, r4.text);
    assert.match(r4.json.message, /work directory: ENOENT: no such file or directory, mkdir '\/proc\/nope'/);
  });

  it('expands $VAR, ${VAR} and ~ in path parameters; an undefined variable is a 400', async () => {
    await sbx.files.writeFiles([{ path: '$HOME/env/x.txt', data: 'home' }]);
    assert.equal(await sh(sbx, 'cat /root/env/x.txt'), 'home');
    assert.equal(await sbx.files.readFile('~/env/x.txt'), 'home');
    const info = await raw(`/files/info?path=${encodeURIComponent('${HOME}/env/x.txt')}`);
    assert.equal(info.status, 200);
    assert.equal(info.json['${HOME}/env/x.txt'].path, '/root/env/x.txt');

    const undef = await raw(`/files/info?path=${encodeURIComponent('$H2_UNDEFINED_VAR/x')}`);
    assert.equal(undef.status, 400);
    assert.deepEqual(undef.json, { code: 'INVALID_REQUEST_BODY', message: 'path references undefined environment variables: H2_UNDEFINED_VAR' });
    const dl = await raw(`/files/download?path=${encodeURIComponent('${NOPE_A}/${NOPE_B}')}`);
    assert.equal(dl.status, 400);
    assert.equal(dl.json.message, 'path references undefined environment variables: NOPE_A,NOPE_B');
  });
});
