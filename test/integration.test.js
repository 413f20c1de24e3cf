// Mastra integration features of OpenSandboxSandbox against the local server: writeFiles (one upload, modes,
// parents, abort, recovery of a sandbox deleted behind our back), networking.getPortUrl (a server inside the sandbox reached from the host), workspace mounts as
// host volumes (read-only, late mount, non-empty dir, refused host path, reconnect with different mounts),
// idle expiry renewed while busy, and clone().
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import { Workspace, LocalFilesystem, SandboxAbortError, supportsNetworking } from '@mastra/core/workspace';
import { startServer } from '../lib/dev-server/index.js';
import { OpenSandboxSandbox, OpenSandboxApiError, OpenSandboxOptionError, MOUNTS_LABEL } from '../lib/index.js';
import { waitFor } from './helpers/poll.js';
import { stats } from '../lib/native.js';
import { uploadBatches } from '../lib/files.js';
import { descendants } from '../lib/dev-server/proctree.js';

const cmdline = (pid) => {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
  } catch {
    return []; // exited meanwhile
  }
};

describe('OpenSandboxSandbox Mastra integration', function () {
  this.timeout(30000);
  let server;
  let hostRoot;
  const cleanup = [];
  const make = (options = {}) => {
    const s = new OpenSandboxSandbox({ domain: server.domain, ...options });
    cleanup.push(s);
    return s;
  };
  const api = async (p) => {
    const res = await fetch(`${server.baseUrl}/v1${p}`);
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : undefined };
  };
  const hostDir = async (name, files = {}) => {
    const dir = path.join(hostRoot, `${name}-${randomUUID().slice(0, 8)}`);
    await fs.mkdir(dir, { recursive: true });
    for (const [f, c] of Object.entries(files)) await fs.writeFile(path.join(dir, f), c);
    return dir;
  };

  before(async function () {
    this.timeout(60000);
    hostRoot = await fs.realpath(await fs.mkdtemp(path.join(os.tmpdir(), 'osb-mounts-')));
    server = await startServer({ port: 0, allowedHostPaths: [hostRoot] });
  });
  after(async () => {
    for (const s of cleanup) await s._destroy().catch(() => {});
    await server?.close();
    await fs.rm(hostRoot, { recursive: true, force: true });
  });

  describe('writeFiles', () => {
    it('writes many files in one request: parents created, modes honoured, binary intact', async () => {
      const s = make();
      const bin = Buffer.from([0, 1, 2, 255, 254, 10, 13, 0]);
      await s.writeFiles([
        { path: 'a.txt', content: 'alpha\n' },
        { path: '/workspace/deep/er/b.sh', content: '#!/bin/sh\necho run-b\n', mode: 0o755 },
        { path: '/tmp/private.txt', content: 'p', mode: 0o600 },
        { path: 'bin.dat', content: bin },
      ]);
      const r = await s.executeCommand('cat a.txt; ./deep/er/b.sh; stat -c "%a %n" a.txt deep/er/b.sh /tmp/private.txt; od -An -tx1 bin.dat');
      assert.equal(r.exitCode, 0, r.stderr);
      assert.equal(r.stdout, 'alpha\nrun-b\n644 a.txt\n755 deep/er/b.sh\n600 /tmp/private.txt\n 00 01 02 ff fe 0a 0d 00\n');
    });

    it('more than 500 files (execd refuses a form of more than 1,000 parts) or 32 MiB go in several requests', async () => {
      const s = make();
      const files = Array.from({ length: 1201 }, (_, i) => ({ path: `many/f${i}.txt`, content: `${i}\n` }));
      files.push({ path: 'many/big1.bin', content: Buffer.alloc(20 * 1024 * 1024, 1) }, { path: 'many/big2.bin', content: Buffer.alloc(20 * 1024 * 1024, 2) });
      await s.writeFiles(files);
      const r = await s.executeCommand('ls many | wc -l; cat many/f0.txt many/f500.txt many/f1200.txt; wc -c < many/big2.bin; od -An -tx1 -N1 many/big2.bin');
      assert.equal(r.stdout, `1203\n0\n500\n1200\n${20 * 1024 * 1024}\n 02\n`);
    });

    it('uploadBatches: at most 500 files and 32 MiB per request, a larger file alone, order kept', () => {
      const sizes = (...n) => n.map((k) => ({ length: k }));
      assert.deepEqual(uploadBatches(sizes(1, 1, 1, 1, 1), 2, 100), [[0, 2], [2, 4], [4, 5]]);
      assert.deepEqual(uploadBatches(sizes(60, 50, 200, 10), 500, 100), [[0, 1], [1, 2], [2, 3], [3, 4]]);
      assert.deepEqual(uploadBatches(sizes(40, 50, 10, 1), 500, 100), [[0, 3], [3, 4]]);
      assert.deepEqual(uploadBatches([]), []);
      assert.equal(uploadBatches(Array.from({ length: 1001 }, () => ({ length: 1 }))).length, 3);
    });

    it('rejects bad input and aborted calls with typed errors', async () => {
      const s = make();
      await assert.rejects(s.writeFiles([{ path: 'x', content: 'x', mode: 0o1000 }]), /mode/i);
      await assert.rejects(s.writeFiles([{ path: 'x', content: 42 }]), /content must be a string or a Buffer/);
      await assert.rejects(s.writeFiles('nope'), /expected an array/);
      // execd would expand $USD (500) or $HOME (silently another file): refused before any request, naming the path
      for (const p of ['price$USD.txt', 'x$HOME.txt', '/workspace/${HOME}/a', 'a$$.txt']) {
        await assert.rejects(s.writeFiles([{ path: 'ok.txt', content: 'o' }, { path: p, content: 'x' }]), err =>
          err instanceof OpenSandboxOptionError && err.option === 'files' && err.message.includes(JSON.stringify(p)));
      }
      const ac = new AbortController();
      ac.abort();
      await assert.rejects(s.writeFiles([{ path: 'x', content: 'x' }], { abortSignal: ac.signal }), SandboxAbortError);
      assert.equal(s.status, 'pending'); // nothing was started for invalid or aborted calls
    });

    it('a big upload aborted mid-flight rejects with SandboxAbortError', async () => {
      const s = make();
      await s._start();
      const ac = new AbortController();
      const p = s.writeFiles([{ path: 'big.bin', content: Buffer.alloc(64 * 1024 * 1024, 7) }], { abortSignal: ac.signal });
      await waitFor(() => stats().requestsInFlight > 0, { timeoutMs: 5000, intervalMs: 1, message: 'upload in flight' });
      ac.abort();
      await assert.rejects(p, SandboxAbortError);
      await waitFor(() => stats().requestsInFlight === 0, { timeoutMs: 5000, message: 'no request left in flight' });
    });

    it('a sandbox deleted behind our back: the upload (refused, nothing written) runs again on a newly provisioned sandbox', async () => {
      const s = make();
      await s._start();
      const first = s.opensandbox.sandboxId;
      assert.equal((await fetch(`${server.baseUrl}/v1/sandboxes/${first}`, { method: 'DELETE' })).status, 204);
      await s.writeFiles([{ path: 'a.txt', content: 'again\n' }]);
      assert.notEqual(s.opensandbox.sandboxId, first);
      assert.equal(s.status, 'running');
      assert.equal((await s.executeCommand('cat a.txt')).stdout, 'again\n');
    });
  });

  describe('writeFiles into a sandbox that dies mid-upload', () => {
    it('an upload cut by the sandbox\'s deletion (not a refused connect) runs again on a new sandbox', async () => {
      const s = make();
      const before = new Set(descendants(process.pid));
      await s._start();
      const first = s.opensandbox.sandboxId;
      // this sandbox's execd, stopped: the upload cannot finish before the DELETE lands, however fast the machine
      // (osb-execd)
      const execd = descendants(process.pid).filter((p) => !before.has(p) &&
        cmdline(p)[0]?.endsWith('/osb-execd'));
      assert.equal(execd.length, 1, `one new execd: ${execd}`);
      process.kill(execd[0], 'SIGSTOP');
      const big = Buffer.alloc(96 * 1024 * 1024, 5);
      const p = s.writeFiles([{ path: 'big.bin', content: big }]);
      await waitFor(() => stats().requestsInFlight > 0, { timeoutMs: 5000, intervalMs: 1, message: 'upload in flight' });
      assert.equal((await fetch(`${server.baseUrl}/v1/sandboxes/${first}`, { method: 'DELETE' })).status, 204);
      await p; // the sandbox is confirmed gone: the write reached nothing that outlives it
      assert.notEqual(s.opensandbox.sandboxId, first);
      assert.equal((await s.executeCommand('wc -c < big.bin')).stdout, `${big.length}\n`);
    });
  });

  describe('networking', () => {
    it('getPortUrl reaches a server started inside the sandbox', async () => {
      const s = make();
      assert.ok(supportsNetworking(s));
      const server8 = await s.processes.spawn(`node -e "require('http').createServer((q,r)=>r.end('pong '+q.url)).listen(8123)"`);
      const url = await s.networking.getPortUrl(8123);
      assert.match(url, /^http:\/\/127\.0\.0\.1:\d+\/proxy\/8123$/);
      const body = await waitFor(async () => {
        const res = await fetch(`${url}/hello?x=1`);
        return res.status === 200 && (await res.text());
      }, { timeoutMs: 10000, message: 'server in the sandbox reachable' });
      assert.equal(body, 'pong /hello?x=1');
      await s.processes.kill(server8.pid);
      await assert.rejects(s.networking.getPortUrl(0), /port must be an integer/);
      // the sandbox deleted behind our back: the endpoint request (refused) runs again on a newly provisioned sandbox
      const id = s.opensandbox.sandboxId;
      assert.equal((await fetch(`${server.baseUrl}/v1/sandboxes/${id}`, { method: 'DELETE' })).status, 204);
      assert.match(await s.networking.getPortUrl(8123), /^http:\/\/127\.0\.0\.1:\d+\/proxy\/8123$/);
      assert.notEqual(s.opensandbox.sandboxId, id);
    });

    it('through the server proxy the URL keeps its path prefix; header-routed endpoints give null', async () => {
      const s = make({ useServerProxy: true });
      // started detached by a plain command (the HTTP-only path through the proxy)
      const started = await s.executeCommand(`setsid node -e "require('http').createServer((q,r)=>r.end('via proxy')).listen(8124)" >/dev/null 2>&1 </dev/null & echo started`);
      assert.equal(started.stdout, 'started\n');
      const url = await s.networking.getPortUrl(8124);
      assert.equal(url, `http://${server.domain}/v1/sandboxes/${s.opensandbox.sandboxId}/proxy/8124`);
      assert.equal(await waitFor(async () => {
        const res = await fetch(`${url}/`);
        return res.status === 200 && (await res.text());
      }, { timeoutMs: 10000, message: 'reachable through the server proxy' }), 'via proxy');

      const headerServer = await startServer({ port: 0, endpointHeaders: true });
      try {
        const h = new OpenSandboxSandbox({ domain: headerServer.domain });
        try {
          assert.equal(await h.networking.getPortUrl(8125), null);
        } finally {
          await h._destroy();
        }
      } finally {
        await headerServer.close();
      }
    });
  });

  describe('mounts', () => {
    it('workspace mounts become host volumes at creation (read-write and read-only)', async () => {
      const rw = await hostDir('rw', { 'hello.txt': 'from host\n' });
      const ro = await hostDir('ro', { 'config.txt': 'readonly\n' });
      const s = make();
      const ws = new Workspace({ sandbox: s, mounts: { '/mnt/project': new LocalFilesystem({ basePath: rw }), '/mnt/config': new LocalFilesystem({ basePath: ro, readOnly: true }) } });
      await ws.init();
      assert.equal(s.mounts.get('/mnt/project').state, 'mounted');
      assert.equal(s.mounts.get('/mnt/config').state, 'mounted');
      const r = await s.executeCommand('cat /mnt/project/hello.txt /mnt/config/config.txt && echo proof > /mnt/project/proof.txt');
      assert.equal(r.stdout, 'from host\nreadonly\n');
      assert.equal(await fs.readFile(path.join(rw, 'proof.txt'), 'utf8'), 'proof\n');
      const w = await s.executeCommand('echo x > /mnt/config/new.txt');
      assert.notEqual(w.exitCode, 0);
      assert.match(w.stderr, /Read-only file system/);
      const info = await s.getInfo();
      assert.deepEqual(info.mounts.map(m => m.path).sort(), ['/mnt/config', '/mnt/project']);
      assert.equal(info.mounts[0].filesystem, 'local');
      const remote = await api(`/sandboxes/${s.opensandbox.sandboxId}`);
      assert.match(remote.body.metadata[MOUNTS_LABEL], /^[0-9a-f]{16}$/);

      // mounting after the sandbox runs cannot work: volumes are fixed at creation
      const late = await s.mount(new LocalFilesystem({ basePath: await hostDir('late') }), '/mnt/late');
      assert.equal(late.success, false);
      assert.match(late.error, /fixed at sandbox creation/);
      const nonEmpty = await s.mount(new LocalFilesystem({ basePath: await hostDir('ne') }), '/etc');
      assert.equal(nonEmpty.success, false);
      assert.match(nonEmpty.error, /not empty/);
      await s.unmount('/mnt/project');
      assert.equal(s.mounts.has('/mnt/project'), false);
    });

    it('a host path the server refuses fails start() with the server code and message', async () => {
      const outside = await fs.realpath(await fs.mkdtemp(path.join(os.tmpdir(), 'osb-outside-')));
      try {
        const s = make();
        const ws = new Workspace({ sandbox: s, mounts: { '/mnt/x': new LocalFilesystem({ basePath: outside }) } });
        await assert.rejects(ws.init(), err => {
          assert.ok(err instanceof OpenSandboxApiError, String(err));
          assert.equal(err.status, 400);
          assert.equal(err.code, 'VOLUME::HOST_PATH_NOT_ALLOWED');
          assert.match(err.message, /create sandbox: the server answered 400 VOLUME::HOST_PATH_NOT_ALLOWED: Host path .* is not under an allowed host path/);
          return true;
        });
      } finally {
        await fs.rm(outside, { recursive: true, force: true });
      }
    });

    it('reconnecting with different mounts is detected and reported', async () => {
      const id = `mounts-${randomUUID()}`;
      const first = make({ id });
      await new Workspace({ sandbox: first, mounts: { '/mnt/a': new LocalFilesystem({ basePath: await hostDir('a') }) } }).init();
      const second = make({ id });
      await new Workspace({ sandbox: second, mounts: { '/mnt/b': new LocalFilesystem({ basePath: await hostDir('b') }) } }).init();
      assert.equal(second.opensandbox.sandboxId, first.opensandbox.sandboxId);
      const entry = second.mounts.get('/mnt/b');
      assert.equal(entry.state, 'error');
      assert.match(entry.error, /was created with different mounts/);
      assert.deepEqual((await second.getInfo()).mounts, []);
      // the same mounts reconnect cleanly
      const third = make({ id });
      await new Workspace({ sandbox: third, mounts: { '/mnt/a': new LocalFilesystem({ basePath: first.mounts.get('/mnt/a').filesystem.basePath }) } }).init();
      assert.equal(third.mounts.get('/mnt/a').state, 'mounted');
    });
  });

  describe('lifetime', () => {
    it('idleTimeoutMinutes: a busy sandbox is renewed past its idle expiry, an idle one expires', async () => {
      const s = make({ idleTimeoutMinutes: 0.04 }); // 2.4 s idle expiry
      await s._start();
      const id = s.opensandbox.sandboxId;
      const t0 = Date.now();
      const r = await s.executeCommand('sleep 5; echo survived');
      assert.equal(r.stdout, 'survived\n');
      assert.ok(Date.now() - t0 >= 5000);
      assert.equal((await api(`/sandboxes/${id}`)).status, 200);
      // a background process counts as activity too
      const bg = await s.processes.spawn('sleep 4; echo bg-done');
      const bgResult = await bg.wait();
      assert.equal(bgResult.stdout, 'bg-done\n');
      assert.equal((await api(`/sandboxes/${id}`)).status, 200);
      // now idle: the server deletes it about 2.4 s after the last activity
      await waitFor(async () => (await api(`/sandboxes/${id}`)).status === 404, { timeoutMs: 15000, intervalMs: 200, message: 'idle sandbox expired' });
    });

    it('clone() returns an unstarted sibling with the same configuration and a new logical id', async () => {
      const s = make({ env: { A: '1' }, metadata: { team: 'x' }, timeoutSeconds: 900 });
      const c = s.clone({ env: { B: '2' } });
      cleanup.push(c);
      assert.ok(c instanceof OpenSandboxSandbox);
      assert.notEqual(c.id, s.id);
      assert.equal(c.status, 'pending');
      const info = await c.getInfo();
      assert.equal(info.metadata.timeoutSeconds, 900);
      assert.deepEqual(info.metadata.metadata, { team: 'x' });
      assert.equal((await c.executeCommand('echo "$A$B"')).stdout, '2\n');
      assert.equal(s.clone({ id: 'fixed-clone' }).id, 'fixed-clone');
      const cc = s.clone({ checkpointName: 'c', seedCheckpointName: 'base' });
      const ci = (await cc.getInfo()).metadata;
      assert.deepEqual([ci.checkpointName, ci.seedCheckpointName], ['c', 'base']);
      assert.equal((await c.getInfo()).metadata.checkpointName, undefined);
    });
  });
});
