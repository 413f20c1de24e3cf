// Who deletes the remote sandbox of an OpenSandboxFilesystem (issue 26): ownership follows creation. A filesystem
// made from sandbox options whose sandbox created the remote sandbox deletes it on destroy() (through Mastra's
// Workspace.destroy(), which calls the filesystem's _destroy()); one that attached (sandboxId, or the logical id of a
// live OpenSandboxSandbox) or was given `sandbox` leaves it. Also for workspaces hydrated by the Mastra Editor
// provider. The remote state is read from the local server's lifecycle API.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { MastraEditor } from '@mastra/editor';
import { Workspace } from '@mastra/core/workspace';
import { startServer } from '../lib/dev-server/index.js';
import { OpenSandboxSandbox, OpenSandboxFilesystem, openSandboxProviders } from '../lib/index.js';
import { sandboxes } from './helpers/sandboxes.js';

describe('OpenSandboxFilesystem: who deletes the remote sandbox', function () {
  this.timeout(60000);
  let server;
  const made = sandboxes(() => server);
  const workspaces = [];

  before(async function () {
    server = await startServer({ port: 0 });
  });
  afterEach(async () => {
    for (const ws of workspaces.splice(0)) await ws.destroy().catch(() => {});
    await made.destroyAll();
  });
  after(async () => {
    await server?.close();
  });

  /** The remote sandbox's state from the lifecycle API, or 'gone' (404). */
  async function remoteState(remoteId) {
    const res = await fetch(`${server.baseUrl}/v1/sandboxes/${encodeURIComponent(remoteId)}`);
    if (res.status === 404) return 'gone';
    const text = await res.text();
    assert.equal(res.status, 200, text);
    return JSON.parse(text).status.state;
  }

  const logicalId = what => `fs-own-${what}-${randomUUID()}`;
  const workspace = options => {
    const ws = new Workspace({ id: `ws-${randomUUID()}`, name: 'files', ...options });
    workspaces.push(ws);
    return ws;
  };

  /** A Workspace on `filesystem` alone: init, a file round trip, then the remote id its sandbox holds. */
  async function initWithFile(ws) {
    await ws.init();
    await ws.filesystem.writeFile('owned.txt', 'data');
    assert.equal(await ws.filesystem.readFile('owned.txt', { encoding: 'utf8' }), 'data');
    const remoteId = ws.filesystem.sandbox.opensandbox.sandboxId;
    assert.equal(await remoteState(remoteId), 'Running');
    return remoteId;
  }

  it('made from options, its sandbox created the remote one: Workspace.destroy() deletes it', async () => {
    const ws = workspace({ filesystem: new OpenSandboxFilesystem({ domain: server.domain, id: logicalId('created') }) });
    const remoteId = await initWithFile(ws);
    await ws.destroy();
    assert.equal(await remoteState(remoteId), 'gone');
    assert.equal(ws.filesystem.sandbox.status, 'destroyed');
    assert.equal(ws.filesystem.status, 'destroyed');
  });

  it('made from options without a logical id: destroy() called directly deletes what it created', async () => {
    const f = new OpenSandboxFilesystem({ domain: server.domain });
    made.track(f.sandbox);
    await f.writeFile('a.txt', 'x');
    const remoteId = f.sandbox.opensandbox.sandboxId;
    assert.equal(await remoteState(remoteId), 'Running');
    await f.destroy();
    assert.equal(await remoteState(remoteId), 'gone');
  });

  it('the same logical id as a live OpenSandboxSandbox: attached, destroy() leaves it running', async () => {
    const id = logicalId('attached');
    const live = made.make({ id });
    await live.writeFiles([{ path: '/workspace/from-sandbox.txt', content: 'hello' }]);
    const ws = workspace({ filesystem: new OpenSandboxFilesystem({ domain: server.domain, id }) });
    await ws.init();
    assert.equal(ws.filesystem.sandbox.opensandbox.sandboxId, live.opensandbox.sandboxId);
    assert.equal(await ws.filesystem.readFile('from-sandbox.txt', { encoding: 'utf8' }), 'hello');
    await ws.destroy();
    assert.equal(await remoteState(live.opensandbox.sandboxId), 'Running');
    assert.equal(await made.sh(live, 'cat from-sandbox.txt'), 'hello');
  });

  it('a sandboxId: attached, destroy() leaves it running', async () => {
    const live = made.make();
    await live._start();
    const remoteId = live.opensandbox.sandboxId;
    const f = new OpenSandboxFilesystem({ domain: server.domain, sandboxId: remoteId });
    made.track(f.sandbox);
    const ws = workspace({ filesystem: f });
    assert.equal(await initWithFile(ws), remoteId);
    await ws.destroy();
    assert.equal(await remoteState(remoteId), 'Running');
    assert.equal(await made.sh(live, 'cat owned.txt'), 'data');
  });

  it('given `sandbox`: destroy() leaves it running (the sandbox object owns it)', async () => {
    const s = made.make();
    const ws = workspace({ filesystem: new OpenSandboxFilesystem({ sandbox: s }) });
    const remoteId = await initWithFile(ws);
    await ws.destroy();
    assert.equal(await remoteState(remoteId), 'Running');
    assert.equal(s.status, 'running');
    assert.equal(await made.sh(s, 'cat owned.txt'), 'data');
  });

  it('created, paused and resumed (a reconnect, not a creation): still deleted by destroy()', async () => {
    const f = new OpenSandboxFilesystem({ domain: server.domain, id: logicalId('paused') });
    made.track(f.sandbox);
    await f.writeFile('a.txt', 'x');
    const remoteId = f.sandbox.opensandbox.sandboxId;
    await f.sandbox._stop();
    assert.equal(await remoteState(remoteId), 'Paused');
    await f.sandbox._start();
    assert.equal(f.sandbox.opensandbox.sandboxId, remoteId);
    assert.equal(await f.readFile('a.txt', { encoding: 'utf8' }), 'x');
    await f.destroy();
    assert.equal(await remoteState(remoteId), 'gone');
  });

  it('created, deleted behind its back, created again by the recovery: destroy() deletes the new one', async () => {
    const f = new OpenSandboxFilesystem({ domain: server.domain, id: logicalId('recovered') });
    made.track(f.sandbox);
    await f.writeFile('a.txt', 'x');
    const first = f.sandbox.opensandbox.sandboxId;
    const del = await fetch(`${server.baseUrl}/v1/sandboxes/${first}`, { method: 'DELETE' });
    assert.equal(del.status, 204);
    // a command that started nothing on the gone sandbox runs again on a new one (a file call would do the same,
    // after fileops.c's retries of the refused connection have used up requestTimeoutMs)
    assert.equal(await made.sh(f.sandbox, 'echo again'), 'again');
    const second = f.sandbox.opensandbox.sandboxId;
    assert.notEqual(second, first);
    assert.equal(await remoteState(second), 'Running');
    assert.equal(await f.exists('a.txt'), false); // the new sandbox's files are new
    await f.destroy();
    assert.equal(await remoteState(second), 'gone');
  });

  it('the caller\'s onStart still runs, with the outcome', async () => {
    const outcomes = [];
    const f = new OpenSandboxFilesystem({ domain: server.domain, onStart: ({ outcome }) => { outcomes.push(outcome); } });
    made.track(f.sandbox);
    await f.init();
    assert.deepEqual(outcomes, ['created']);
    const remoteId = f.sandbox.opensandbox.sandboxId;
    await f.destroy();
    assert.equal(await remoteState(remoteId), 'gone');
    assert.throws(() => new OpenSandboxFilesystem({ domain: server.domain, onStart: 'no' }), e => e.option === 'onStart');
  });

  describe('hydrated by the Mastra Editor provider', () => {
    const editor = () => new MastraEditor({ ...openSandboxProviders });

    /** The stored form of a workspace whose filesystem (and sandbox, with `withSandbox`) has logical id `id`. */
    async function stored(id, { withSandbox = false } = {}) {
      const s = new OpenSandboxSandbox({ domain: server.domain, id });
      const ws = new Workspace({
        id: `ws-${id}`, name: 'files', ...(withSandbox ? { sandbox: s } : {}),
        filesystem: new OpenSandboxFilesystem({ sandbox: s, basePath: '/workspace/p' }),
      });
      const snap = JSON.parse(JSON.stringify(await editor().workspace.snapshotFromWorkspace(ws)));
      assert.equal(snap.filesystem.config.sandbox.id, id);
      assert.equal(snap.sandbox !== undefined, withSandbox);
      return snap;
    }

    async function hydrate(snap) {
      const ws = await editor().workspace.hydrateSnapshotToWorkspace(`ws-h-${randomUUID()}`, snap);
      workspaces.push(ws);
      made.track(ws.filesystem.sandbox);
      return ws;
    }

    it('a stored workspace with a filesystem only, nothing live: destroy() deletes the sandbox it created', async () => {
      const ws = await hydrate(await stored(logicalId('hydrated-created')));
      assert.equal(ws.sandbox, undefined);
      const remoteId = await initWithFile(ws);
      await ws.destroy();
      assert.equal(await remoteState(remoteId), 'gone');
    });

    it('a stored workspace with a filesystem only, its logical id live: attached, destroy() leaves it', async () => {
      const id = logicalId('hydrated-attached');
      const live = made.make({ id });
      await live._start();
      const ws = await hydrate(await stored(id));
      assert.equal(await initWithFile(ws), live.opensandbox.sandboxId);
      await ws.destroy();
      assert.equal(await remoteState(live.opensandbox.sandboxId), 'Running');
      assert.equal(await made.sh(live, 'cat /workspace/p/owned.txt'), 'data');
    });

    it('a stored workspace with both: the shared sandbox is the workspace\'s; the filesystem\'s destroy() leaves it', async () => {
      const ws = await hydrate(await stored(logicalId('hydrated-shared'), { withSandbox: true }));
      assert.equal(ws.filesystem.sandbox, ws.sandbox);
      const remoteId = await initWithFile(ws); // created by the shared sandbox
      await ws.filesystem._destroy();
      assert.equal(await remoteState(remoteId), 'Running');
      assert.equal(ws.sandbox.status, 'running');
      await ws.destroy(); // through its sandbox
      assert.equal(await remoteState(remoteId), 'gone');
    });
  });
});
