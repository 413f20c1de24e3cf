// OpenSandboxFilesystem against the local server, side by side with Mastra's LocalFilesystem: the same operations
// on both give the same results and the same error classes (the documented differences are asserted as such);
// basePath confinement (`..`, symlinks out of it), `$` paths, readOnly, a shared sandbox, large files.
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { LocalFilesystem, Workspace, WorkspaceReadOnlyError, PermissionError, WORKSPACE_TOOLS, createWorkspaceTools } from '@mastra/core/workspace';
import { startServer } from '../lib/dev-server/index.js';
import { OpenSandboxSandbox, OpenSandboxFilesystem, OpenSandboxOptionError } from '../lib/index.js';
import { requiredLiterals } from '../lib/filesystem.js';
import { stats } from '../lib/native.js';

/** The outcome of a call as comparable data: { ok: value } or { err: class name }. */
async function outcome(p) {
  try {
    const v = await p;
    return { ok: v };
  } catch (e) {
    return { err: e.constructor.name };
  }
}

const plain = v => JSON.parse(JSON.stringify(v, (k, x) => (Buffer.isBuffer(x) ? x.toString('base64') : x)));
const byName = list => [...list].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));

describe('OpenSandboxFilesystem', function () {
  this.timeout(60000);
  let server;
  let sandbox;
  let osfs;
  let local;
  let hostDir;

  before(async function () {
    this.timeout(120000);
    server = await startServer({ port: 0 });
    sandbox = new OpenSandboxSandbox({ domain: server.domain });
    osfs = new OpenSandboxFilesystem({ sandbox, basePath: '/workspace/fs' });
    hostDir = await fs.realpath(await fs.mkdtemp(path.join(os.tmpdir(), 'osb-fs-')));
    local = new LocalFilesystem({ basePath: hostDir });
    await osfs.init();
    await local.init();
  });
  after(async () => {
    await sandbox?._destroy().catch(() => {});
    await server?.close();
    if (hostDir) await fs.rm(hostDir, { recursive: true, force: true });
  });

  /** Runs op(fs) on both filesystems and asserts identical outcomes; returns ours. */
  async function same(op, normalize = x => x) {
    const [a, b] = [await outcome(op(osfs)), await outcome(op(local))];
    const norm = o => (o.ok === undefined ? o : { ok: plain(normalize(o.ok)) });
    assert.deepEqual(norm(a), norm(b));
    return a;
  }

  it('reads, writes, appends and stats files like LocalFilesystem', async () => {
    await same(f => f.writeFile('a.txt', 'alpha\n'));
    await same(f => f.readFile('a.txt', { encoding: 'utf8' }));
    await same(f => f.appendFile('a.txt', Buffer.from('beta\n')));
    assert.equal((await same(f => f.readFile('a.txt'))).ok.toString(), 'alpha\nbeta\n');
    await same(f => f.writeFile('deep/er/b.bin', Buffer.from([0, 1, 2, 255])));
    await same(f => f.readFile('deep/er/b.bin'));
    await same(f => f.appendFile('new/append.txt', 'x'));
    await same(f => f.readFile('new/append.txt', { encoding: 'utf8' }));
    await same(f => f.exists('a.txt'));
    await same(f => f.exists('nope.txt'));
    await same(f => f.stat('a.txt'), s => ({ name: s.name, path: s.path, type: s.type, size: s.size }));
    await same(f => f.stat('deep'), s => ({ name: s.name, path: s.path, type: s.type }));
    await same(f => f.realpath('deep/er/../er/b.bin'));
    assert.equal((await same(f => f.readFile('missing.txt'))).err, 'FileNotFoundError');
    assert.equal((await same(f => f.readFile('deep'))).err, 'IsDirectoryError');
    assert.equal((await same(f => f.stat('missing'))).err, 'FileNotFoundError');
  });

  it('writeFile options: recursive:false, overwrite:false, expectedMtime (StaleFileError)', async () => {
    assert.equal((await same(f => f.writeFile('no/such/dir.txt', 'x', { recursive: false }))).err, 'DirectoryNotFoundError');
    // LocalFilesystem lets the raw ENOTDIR of its realpath through here; ours is Mastra's NotDirectoryError
    await assert.rejects(osfs.writeFile('a.txt/x.txt', 'x', { recursive: false }), e => e.constructor.name === 'NotDirectoryError');
    await assert.rejects(local.writeFile('a.txt/x.txt', 'x', { recursive: false }), e => e.code === 'ENOTDIR');
    await same(f => f.writeFile('once.txt', '1', { overwrite: false }));
    assert.equal((await same(f => f.writeFile('once.txt', '2', { overwrite: false }))).err, 'FileExistsError');
    const st = await osfs.stat('once.txt');
    await osfs.writeFile('once.txt', '3', { expectedMtime: st.modifiedAt });
    await assert.rejects(osfs.writeFile('once.txt', '4', { expectedMtime: new Date(st.modifiedAt.getTime() - 5000) }), e => e.constructor.name === 'StaleFileError');
    assert.equal(await osfs.readFile('once.txt', { encoding: 'utf8' }), '3');
    // a mode given by writeFiles survives an overwrite through the filesystem
    await sandbox.writeFiles([{ path: '/workspace/fs/run.sh', content: '#!/bin/sh\necho one\n', mode: 0o755 }]);
    await osfs.writeFile('run.sh', '#!/bin/sh\necho two\n');
    const r = await sandbox.executeCommand('./run.sh', [], { cwd: '/workspace/fs' });
    assert.equal(r.stdout, 'two\n');
  });

  it('delete, copy, move, mkdir, rmdir with the same errors', async () => {
    await same(f => f.writeFile('cp/src.txt', 'copy me'));
    await same(f => f.copyFile('cp/src.txt', 'cp/dst.txt'));
    await same(f => f.readFile('cp/dst.txt', { encoding: 'utf8' }));
    assert.equal((await same(f => f.copyFile('cp/src.txt', 'cp/dst.txt', { overwrite: false }))).err, 'FileExistsError');
    assert.equal((await same(f => f.copyFile('cp', 'cp2'))).err, 'IsDirectoryError');
    await same(f => f.copyFile('cp', 'cp2', { recursive: true }));
    await same(f => f.readdir('cp2'), byName);
    assert.equal((await same(f => f.copyFile('missing', 'x'))).err, 'FileNotFoundError');
    await same(f => f.moveFile('cp/dst.txt', 'mv/moved.txt'));
    await same(f => f.exists('cp/dst.txt'));
    await same(f => f.writeFile('mv/other.txt', 'o'));
    assert.equal((await same(f => f.moveFile('mv/other.txt', 'mv/moved.txt', { overwrite: false }))).err, 'FileExistsError');
    await same(f => f.moveFile('mv/other.txt', 'mv/moved.txt'));
    await same(f => f.readFile('mv/moved.txt', { encoding: 'utf8' }));
    assert.equal((await same(f => f.moveFile('missing', 'x'))).err, 'FileNotFoundError');
    await same(f => f.deleteFile('mv/moved.txt'));
    assert.equal((await same(f => f.deleteFile('mv/moved.txt'))).err, 'FileNotFoundError');
    await same(f => f.deleteFile('mv/moved.txt', { force: true }));
    assert.equal((await same(f => f.deleteFile('mv'))).err, 'IsDirectoryError');
    await same(f => f.mkdir('m1/m2'));
    await same(f => f.mkdir('m1/m2'));
    assert.equal((await same(f => f.mkdir('x1/x2', { recursive: false }))).err, 'DirectoryNotFoundError');
    assert.equal((await same(f => f.mkdir('a.txt'))).err, 'FileExistsError');
    assert.equal((await same(f => f.rmdir('m1'))).err, 'DirectoryNotEmptyError');
    assert.equal((await same(f => f.rmdir('a.txt'))).err, 'NotDirectoryError');
    assert.equal((await same(f => f.rmdir('nope'))).err, 'DirectoryNotFoundError');
    await same(f => f.rmdir('nope', { force: true }));
    await same(f => f.rmdir('m1', { recursive: true }));
    await same(f => f.exists('m1'));
  });

  it('readdir: recursive, maxDepth, extension, errors', async () => {
    await same(f => f.writeFile('ls/a.ts', 'a'));
    await same(f => f.writeFile('ls/b.js', 'bb'));
    await same(f => f.writeFile('ls/sub/c.ts', 'ccc'));
    await same(f => f.writeFile('ls/sub/deeper/d.ts', 'dddd'));
    await same(f => f.readdir('ls'), byName);
    await same(f => f.readdir('ls', { recursive: true }), byName);
    await same(f => f.readdir('ls', { recursive: true, maxDepth: 1 }), byName);
    await same(f => f.readdir('ls', { recursive: true, extension: '.ts' }), byName);
    await same(f => f.readdir('ls', { extension: ['js'] }), byName);
    assert.equal((await same(f => f.readdir('ls/a.ts'))).err, 'NotDirectoryError');
    // extension filters files only: directories (and symlinks, whatever their name) are listed as LocalFilesystem
    // lists them, so a recursive listing still shows where the matching files are
    for (const f of ['ext/a.txt', 'ext/e.md', 'ext/deep/b.txt', 'ext/m1/m2/c.md', 'ext/m1/m2/d.txt']) await same(x => x.writeFile(f, f));
    await same(x => x.mkdir('ext/empty'));
    await sandbox.executeCommand('ln -s a.txt /workspace/fs/ext/ln.md');
    await fs.symlink('a.txt', path.join(hostDir, 'ext/ln.md'));
    const txt = await same(x => x.readdir('ext', { recursive: true, extension: '.txt' }), byName);
    assert.deepEqual(byName(txt.ok).map(e => `${e.name}:${e.type}`),
      ['a.txt:file', 'deep:directory', 'deep/b.txt:file', 'empty:directory', 'ln.md:file', 'm1:directory', 'm1/m2:directory', 'm1/m2/d.txt:file']);
    await same(x => x.readdir('ext', { recursive: true, extension: ['txt', '.md'] }), byName);
    await same(x => x.readdir('ext', { recursive: true, maxDepth: 1, extension: '.md' }), byName);
    await same(x => x.readdir('ext', { extension: '.txt' }), byName);
    assert.equal((await same(f => f.readdir('nope'))).err, 'DirectoryNotFoundError');
  });

  it("grep and walk: Mastra's grep and list_files tools print the same on ours (native grep/walk), ours without them, and LocalFilesystem", async () => {
    const files = {
      'g/a.js': 'const x = 1;\n// TODO one\nfunction foo() {}\n// todo two\nTODO TODO\n',
      'g/sub/b.ts': 'line\nTODO in b\nctx after\nmore\n',
      'g/.hidden/c.js': 'TODO hidden\n',
      'g/.dot.md': 'TODO dot\n',
      'g/img.png': 'TODO binary-ish\n',
      'g/deep/er/d.md': 'nothing\nTODO deep\n',
      'g/odd:7:name.txt': 'x\nTODO odd name: in x\n',
    };
    for (const [p, c] of Object.entries(files)) await same(f => f.writeFile(p, c));
    const plainFs = new Proxy(osfs, { get: (t, k) => (k === 'grep' || k === 'walk' ? undefined : typeof t[k] === 'function' ? t[k].bind(t) : t[k]) });
    const run = async (fsys, tool, input) => {
      const ws = new Workspace({ filesystem: fsys });
      const tools = await createWorkspaceTools(ws);
      return tools[tool].execute(input, { workspace: ws });
    };
    const { GREP, LIST_FILES } = WORKSPACE_TOOLS.FILESYSTEM;
    for (const input of [
      { pattern: 'TODO', path: 'g' },
      { pattern: 'todo', path: 'g', caseSensitive: false },
      { pattern: 'TODO', path: 'g', includeHidden: true },
      { pattern: 'TODO', path: 'g', maxCount: 1 },
      { pattern: 'TODO', path: 'g', contextLines: 1 },
      { pattern: 'fun.*\\(', path: 'g' },
      { pattern: 'TODO', path: 'g/**/*.md' },
      { pattern: 'TODO', path: 'g/sub/b.ts' },
      { pattern: 'nomatch', path: 'g' },
      { pattern: 'TODO one|in b', path: 'g' },
      { pattern: 'x = 1;', path: 'g' },
      { pattern: 'foo\\(\\)', path: 'g' },
    ]) {
      const ours = await run(osfs, GREP, input);
      assert.equal(ours, await run(plainFs, GREP, input), JSON.stringify(input));
      assert.equal(ours, await run(local, GREP, input), JSON.stringify(input));
    }
    for (const input of [{ path: 'g' }, { path: 'g', maxDepth: 1 }, { path: 'g', showHidden: true }, { path: 'g', extension: '.md' }]) {
      const ours = await run(osfs, LIST_FILES, input);
      assert.equal(ours, await run(plainFs, LIST_FILES, input), JSON.stringify(input));
      assert.equal(ours, await run(local, LIST_FILES, input), JSON.stringify(input));
    }
    // which patterns narrow the files with one grep -rlF in the sandbox (the RegExp still decides)
    assert.deepEqual(requiredLiterals('TODO'), ['TODO']);
    assert.deepEqual(requiredLiterals('TODO one|in b'), ['TODO one', 'in b']);
    assert.deepEqual(requiredLiterals('foo\\(\\)'), ['foo()']);
    assert.deepEqual(requiredLiterals('-v'), ['-v']);
    for (const p of ['fun.*', '\\bword', 'a|', '(x)', '[ab]', '^x', 'x$', 'a?', '\\d']) assert.equal(requiredLiterals(p), null, p);
    assert.equal(requiredLiterals('café', false), null);
    assert.deepEqual(requiredLiterals('café', true), ['café']);
    // the native methods directly: limits and context; a literal pattern went through the sandbox's grep
    const run0 = sandbox.executeCommand;
    const greps = [];
    sandbox.executeCommand = function (cmd, args, o) {
      if (cmd === 'sh' && /grep -rnaFZ/.test(args[1])) greps.push(args.slice(3));
      return run0.call(this, cmd, args, o);
    };
    let r;
    try {
      r = await osfs.grep({ pattern: 'TODO', path: 'g', caseSensitive: true, includeHidden: false, maxTotalMatches: 2 });
    } finally {
      sandbox.executeCommand = run0;
    }
    assert.deepEqual(greps, [['/workspace/fs/g', '-e', 'TODO']]);
    assert.deepEqual(r, [{ path: 'a.js', matches: [{ line: 2, column: 3, text: '// TODO one' }, { line: 5, column: 0, text: 'TODO TODO' }] }]);
    const c = await osfs.grep({ pattern: 'in b', path: 'g/sub', caseSensitive: true, includeHidden: false, contextLines: 1 });
    assert.deepEqual(c, [{ path: 'b.ts', matches: [{ line: 2, column: 5, text: 'TODO in b', before: ['line'], after: ['ctx after'] }] }]);
    const w = await osfs.walk('g', { maxDepth: 2 });
    assert.deepEqual(w.map(e => e.path).sort(), ['a.js', 'deep', 'deep/er', 'img.png', 'odd:7:name.txt', 'sub', 'sub/b.ts']);
    // a NUL byte in a matching line: the sandbox's grep cannot report it exactly, every file is read instead
    await same(f => f.writeFile('g/nul.txt', Buffer.from('TODO\0nul\n')));
    assert.equal(await run(osfs, GREP, { pattern: 'TODO', path: 'g' }), await run(local, GREP, { pattern: 'TODO', path: 'g' }));
    assert.deepEqual((await osfs.grep({ pattern: 'nul', path: 'g', caseSensitive: true, includeHidden: false })), [{ path: 'nul.txt', matches: [{ line: 1, column: 5, text: 'TODO\0nul' }] }]);
  });

  it('confines paths to basePath: .., absolute paths outside, symlinks leading out', async () => {
    for (const p of ['../outside.txt', '/etc/passwd', 'a/../../x']) {
      assert.equal((await same(f => f.readFile(p))).err, 'PermissionError');
      assert.equal((await same(f => f.writeFile(p, 'x'))).err, 'PermissionError');
    }
    assert.equal(osfs.resolveAbsolutePath('x/../y.txt'), '/workspace/fs/y.txt');
    assert.equal(osfs.resolveAbsolutePath('../y.txt'), undefined);
    // symlinks made inside the sandbox: one out of basePath, one inside it
    const r = await sandbox.executeCommand('mkdir -p /workspace/secret && echo s > /workspace/secret/k.txt && ln -sfn /workspace/secret /workspace/fs/out && ln -sfn ls /workspace/fs/in && ln -sfn /workspace/fs/a.txt /workspace/fs/alink');
    assert.equal(r.exitCode, 0, r.stderr);
    await assert.rejects(osfs.readFile('out/k.txt'), PermissionError);
    await assert.rejects(osfs.writeFile('out/new.txt', 'x'), PermissionError);
    await assert.rejects(osfs.writeFile('out/newdir/new.txt', 'x'), PermissionError);
    await assert.rejects(osfs.readdir('out'), PermissionError);
    assert.equal((await sandbox.executeCommand('ls /workspace/secret')).stdout, 'k.txt\n');
    assert.equal(await osfs.readFile('in/a.ts', { encoding: 'utf8' }), 'a');
    assert.equal(await osfs.realpath('in/a.ts'), 'ls/a.ts');
    assert.equal(await osfs.readFile('alink', { encoding: 'utf8' }), await osfs.readFile('a.txt', { encoding: 'utf8' }));
    const entries = await osfs.readdir('.');
    assert.deepEqual(entries.find(e => e.name === 'in'), { name: 'in', type: 'directory', isSymlink: true, symlinkTarget: 'ls' });
    assert.deepEqual(entries.find(e => e.name === 'alink'), { name: 'alink', type: 'file', isSymlink: true, symlinkTarget: '/workspace/fs/a.txt' });
    await osfs.deleteFile('alink'); // removes the link, not its target
    assert.equal(await osfs.exists('a.txt'), true);
  });

  it('the path checks of concurrent operations share one GET /files/info; each operation still gets its own answer', async () => {
    const names = Array.from({ length: 16 }, (_, i) => `batch/f${i}.txt`);
    await osfs.mkdir('batch');
    // 16 writes of new files in one turn: 16 uploads, 16 checks of the (missing) targets, one request for the parents
    let before = stats().requestsStarted;
    await Promise.all(names.map((n, i) => osfs.writeFile(n, `file ${i}`)));
    assert.equal(stats().requestsStarted - before, 2 * names.length + 1);
    // 16 reads in one turn: 16 downloads and one GET /files/info for every check (the official client's count + 1)
    before = stats().requestsStarted;
    assert.deepEqual(await Promise.all(names.map(n => osfs.readFile(n, { encoding: 'utf8' }))), names.map((_, i) => `file ${i}`));
    assert.equal(stats().requestsStarted - before, names.length + 1);
    const r = await sandbox.executeCommand('mkdir -p /workspace/secret && echo s > /workspace/secret/k.txt && ln -sfn /workspace/secret /workspace/fs/batch/out');
    assert.equal(r.exitCode, 0, r.stderr);
    // every path exists (the shared request succeeds): the symlink leading out is still refused, the others read
    assert.deepEqual(await Promise.all([outcome(osfs.readFile('batch/out/k.txt')), outcome(osfs.readFile('batch/f1.txt', { encoding: 'utf8' })),
      outcome(osfs.readFile('batch')), outcome(osfs.exists('batch/f2.txt'))]),
    [{ err: 'PermissionError' }, { ok: 'file 1' }, { err: 'IsDirectoryError' }, { ok: true }]);
    // a missing path in the same turn (execd answers the shared request 404): each operation asks again alone
    assert.deepEqual(await Promise.all([outcome(osfs.readFile('batch/missing.txt')), outcome(osfs.readFile('batch/out/k.txt')),
      outcome(osfs.readFile('batch/f3.txt', { encoding: 'utf8' })), outcome(osfs.exists('batch/none/x')), outcome(osfs.stat('batch/f4.txt').then(s => s.size)),
      outcome(osfs.writeFile('batch/out/new.txt', 'x')), outcome(osfs.writeFile('batch/f5.txt', 'five')), outcome(osfs.writeFile('batch/no/dir.txt', 'x', { recursive: false }))]),
    [{ err: 'FileNotFoundError' }, { err: 'PermissionError' }, { ok: 'file 3' }, { ok: false }, { ok: 6 }, { err: 'PermissionError' }, { ok: undefined }, { err: 'DirectoryNotFoundError' }]);
    assert.equal(await osfs.readFile('batch/f5.txt', { encoding: 'utf8' }), 'five');
    assert.equal((await sandbox.executeCommand('ls /workspace/secret')).stdout, 'k.txt\n');
    await osfs.rmdir('batch', { recursive: true });
  });

  it('refuses paths with $ (execd would expand them) naming the path', async () => {
    for (const p of ['price$USD.txt', 'x$HOME.txt', '${HOME}/a', 'a$$.txt']) {
      await assert.rejects(osfs.writeFile(p, 'x'), e => e instanceof OpenSandboxOptionError && e.message.includes(JSON.stringify(p)));
      await assert.rejects(osfs.readFile(p), OpenSandboxOptionError);
      await assert.rejects(osfs.copyFile('a.txt', p), OpenSandboxOptionError);
    }
    assert.throws(() => new OpenSandboxFilesystem({ sandbox, basePath: '/work$pace' }), OpenSandboxOptionError);
  });

  it('readOnly refuses writes with WorkspaceReadOnlyError and still reads', async () => {
    const ro = new OpenSandboxFilesystem({ sandbox, basePath: '/workspace/fs', readOnly: true });
    assert.equal(await ro.readFile('a.txt', { encoding: 'utf8' }), await osfs.readFile('a.txt', { encoding: 'utf8' }));
    for (const call of [() => ro.writeFile('z', 'z'), () => ro.appendFile('a.txt', 'z'), () => ro.deleteFile('a.txt'),
      () => ro.mkdir('zz'), () => ro.rmdir('ls'), () => ro.copyFile('a.txt', 'z'), () => ro.moveFile('a.txt', 'z')]) {
      await assert.rejects(call(), WorkspaceReadOnlyError);
    }
  });

  it('options are checked at construction, naming the option', () => {
    assert.throws(() => new OpenSandboxFilesystem({ sandbox, basePath: 'rel' }), e => e.option === 'basePath');
    assert.throws(() => new OpenSandboxFilesystem({ sandbox: {} }), e => e.option === 'sandbox');
    assert.throws(() => new OpenSandboxFilesystem({ sandbox, domain: 'x:1' }), e => e.option === 'domain');
    assert.throws(() => new OpenSandboxFilesystem({ sandbox, maxReadBytes: 0 }), e => e.option === 'maxReadBytes');
  });

  it('a filesystem made from the same logical id attaches to the same sandbox', async () => {
    const id = `fs-shared-${Date.now()}`;
    const a = new OpenSandboxSandbox({ domain: server.domain, id });
    try {
      await a.writeFiles([{ path: '/workspace/shared.txt', content: 'from the sandbox' }]);
      const f = new OpenSandboxFilesystem({ domain: server.domain, id, basePath: '/workspace' });
      assert.equal(await f.readFile('shared.txt', { encoding: 'utf8' }), 'from the sandbox');
      assert.equal(f.sandbox.opensandbox.sandboxId, a.opensandbox.sandboxId);
      await f.destroy();
    } finally {
      await a._destroy();
    }
  });

  it('a Workspace with both shares one sandbox: files written by either are seen by the other', async () => {
    const before = (await (await fetch(`${server.baseUrl}/v1/sandboxes`)).json()).items.length;
    const s = new OpenSandboxSandbox({ domain: server.domain });
    const ws = new Workspace({ sandbox: s, filesystem: new OpenSandboxFilesystem({ sandbox: s }) });
    try {
      await ws.init();
      assert.equal(ws.filesystem.basePath, '/workspace');
      await ws.filesystem.writeFile('hello.sh', 'echo hello from the filesystem\n');
      const r = await s.executeCommand('sh hello.sh > out.txt');
      assert.equal(r.exitCode, 0, r.stderr);
      assert.equal(await ws.filesystem.readFile('out.txt', { encoding: 'utf8' }), 'hello from the filesystem\n');
      const after = (await (await fetch(`${server.baseUrl}/v1/sandboxes`)).json()).items.length;
      assert.equal(after, before + 1);
    } finally {
      await ws.destroy();
    }
  });

  it('a sandbox deleted behind our back: the file call runs again on a newly provisioned sandbox (dead-sandbox recovery)', async () => {
    const s = new OpenSandboxSandbox({ domain: server.domain });
    const f = new OpenSandboxFilesystem({ sandbox: s });
    try {
      await f.writeFile('a.txt', 'one');
      const first = s.opensandbox.sandboxId;
      assert.equal((await fetch(`${server.baseUrl}/v1/sandboxes/${first}`, { method: 'DELETE' })).status, 204);
      // the refused request started nothing: retried once on a new sandbox, where a.txt does not exist
      await assert.rejects(f.readFile('a.txt'), err => err.constructor.name === 'FileNotFoundError');
      assert.notEqual(s.opensandbox.sandboxId, first);
      assert.equal(s.status, 'running');
      await f.writeFile('a.txt', 'two');
      assert.equal(await f.readFile('a.txt', { encoding: 'utf8' }), 'two');
    } finally {
      await s._destroy();
    }
  });

  it('large files go up and down intact (one buffer, Range-free)', async () => {
    const big = Buffer.alloc(24 * 1024 * 1024);
    for (let i = 0; i < big.length; i += 4096) big.writeUInt32LE(i, i);
    await osfs.writeFile('big.bin', big);
    const back = await osfs.readFile('big.bin');
    assert.equal(back.length, big.length);
    assert.ok(back.equals(big));
    const small = new OpenSandboxFilesystem({ sandbox, basePath: '/workspace/fs', maxReadBytes: 1024 });
    await assert.rejects(small.readFile('big.bin'), (e) => {
      assert.equal(e.code, 'RESPONSE_TOO_LARGE');
      assert.match(e.message, /: response too large: the file is larger than the 1024-byte limit/);
      assert.doesNotMatch(e.message, /malformed/);
      return true;
    });
    await osfs.deleteFile('big.bin');
  });
});
