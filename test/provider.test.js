// The Editor provider against the real @mastra/editor and the local server: registry shape, stored-config
// validation (unknown fields, wrong types, secrets) before any network call, and the round trip
// live sandbox -> snapshotFromWorkspace -> hydrateSnapshotToWorkspace -> the same remote sandbox by logical id.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { MastraEditor } from '@mastra/editor';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Workspace, LocalFilesystem } from '@mastra/core/workspace';
import { startServer } from '../lib/dev-server/index.js';
import {
  OpenSandboxSandbox, OpenSandboxFilesystem, OpenSandboxOptionError, openSandboxProvider, sandboxProviders,
  openSandboxFilesystemProvider, filesystemProviders, openSandboxProviders, validateStoredFilesystemConfig,
} from '../lib/index.js';

describe('openSandboxProvider (Mastra Editor)', function () {
  this.timeout(30000);
  let server;
  let hostRoot;
  const cleanup = [];

  before(async function () {
    this.timeout(60000);
    hostRoot = await fs.realpath(await fs.mkdtemp(path.join(os.tmpdir(), 'osb-editor-')));
    server = await startServer({ port: 0, allowedHostPaths: [hostRoot] });
  });
  after(async () => {
    for (const s of cleanup) await s._destroy().catch(() => {});
    await server?.close();
    await fs.rm(hostRoot, { recursive: true, force: true });
  });

  it('is registered by id and describes every serializable option', () => {
    assert.equal(sandboxProviders.opensandbox, openSandboxProvider);
    assert.equal(openSandboxProvider.id, 'opensandbox');
    assert.equal(openSandboxProvider.name, 'OpenSandbox');
    assert.ok(openSandboxProvider.description.length > 20);
    const props = openSandboxProvider.configSchema.properties;
    for (const key of ['id', 'domain', 'protocol', 'sandboxId', 'image', 'entrypoint', 'timeoutSeconds', 'idleTimeoutMinutes', 'resources',
      'env', 'metadata', 'volumes', 'networkPolicy', 'useServerProxy', 'requestTimeoutMs', 'readyTimeoutMs', 'createTimeoutMs', 'workingDirectory', 'instructions',
      'checkpointName', 'seedCheckpointName', 'snapshotId', 'keepCheckpoints', 'snapshotTimeoutMs', 'template', 'maxRetainedBytes']) {
      assert.ok(props[key], key);
      assert.ok(props[key].description, `${key} has a description`);
    }
    assert.equal(props.timeoutSeconds.default, 600);
    assert.equal(props.workingDirectory.default, '/workspace');
    assert.equal(props.apiKey, undefined);
    const editor = new MastraEditor({ sandboxes: sandboxProviders });
    assert.equal(editor.__sandboxes.get('opensandbox'), openSandboxProvider);
  });

  it('refuses bad stored configs with an error naming the field, before any network call', () => {
    // an unreachable domain: nothing here may try to connect
    const bad = [
      [{ apiKey: 'sk-stored' }, 'apiKey', /secrets are never stored/],
      [{ execdAccessToken: 't' }, 'execdAccessToken', /secrets are never stored/],
      [{ image: { uri: 'x', auth: { username: 'u', password: 'p' } } }, 'image.auth', /registry credentials are never stored/],
      [{ volumes: [{ name: 'o', mountPath: '/o', ossfs: { bucket: 'b', accessKeySecret: 's' } }] }, 'volumes[0].ossfs.accessKeySecret', /credentials/],
      [{ flavour: 'large' }, 'flavour', /unknown field/],
      [{ timeoutSeconds: '600' }, 'timeoutSeconds', /expected integer or null, got string/],
      [{ useServerProxy: 1 }, 'useServerProxy', /expected boolean/],
      [{ env: { A: 1 } }, 'env.A', /expected a string/],
      [{ protocol: 'ftp' }, 'protocol', /one of http, https/],
      [{ timeoutSeconds: 30 }, 'timeoutSeconds', />= 60/],
      [{ workingDirectory: 'relative' }, 'workingDirectory', /absolute path/],
      [{ keepCheckpoints: 1.5 }, 'keepCheckpoints', /expected integer/],
      [{ checkpointName: 3 }, 'checkpointName', /expected string or null/],
      [{ snapshotId: 's', image: 'ubuntu:22.04' }, 'snapshotId', /either an image or a snapshot/],
      ['not-an-object', 'config', /expected an object/],
    ];
    for (const [config, field, re] of bad) {
      assert.throws(() => openSandboxProvider.createSandbox(typeof config === 'object' ? { domain: '203.0.113.1:9', ...config } : config), err => {
        assert.ok(err instanceof OpenSandboxOptionError, `${field}: ${err}`);
        assert.equal(err.option, field);
        assert.match(err.message, re);
        assert.ok(!/sk-stored/.test(err.message));
        return true;
      });
    }
  });

  it('round trip: snapshot of a live sandbox hydrates into a working sandbox attached to the same remote sandbox', async () => {
    const id = `editor-${randomUUID()}`;
    const original = new OpenSandboxSandbox({ id, domain: server.domain, env: { GREETING: 'hello' }, metadata: { team: 'editor' }, idleTimeoutMinutes: 30 });
    cleanup.push(original);
    const ws = new Workspace({ id: 'ws-editor', name: 'editor workspace', sandbox: original });
    await ws.init();
    await original.executeCommand('echo stored > /workspace/marker.txt');

    const editor = new MastraEditor({ sandboxes: sandboxProviders });
    const snapshot = await editor.workspace.snapshotFromWorkspace(ws);
    assert.equal(snapshot.sandbox.provider, 'opensandbox');
    const stored = JSON.parse(JSON.stringify(snapshot)); // what a storage adapter keeps
    assert.equal(stored.sandbox.config.id, id);
    assert.equal(stored.sandbox.config.sandboxId, undefined);
    assert.equal(stored.sandbox.config.idleTimeoutMinutes, 30);
    assert.ok(!JSON.stringify(stored).includes('apiKey'));

    const hydrated = await editor.workspace.hydrateSnapshotToWorkspace('ws-editor-2', stored);
    const sandbox = hydrated.sandbox;
    cleanup.push(sandbox);
    assert.ok(sandbox instanceof OpenSandboxSandbox);
    assert.notEqual(sandbox, original);
    assert.equal(sandbox.id, id);
    assert.deepEqual(await sandbox._start(), { outcome: 'connected' });
    assert.equal(sandbox.opensandbox.sandboxId, original.opensandbox.sandboxId);
    // env values may be secrets: getInfo() leaves them out, so the hydrated sandbox does not have them
    assert.equal(stored.sandbox.config.env, undefined);
    const r = await sandbox.executeCommand('cat /workspace/marker.txt; echo "[$GREETING]"');
    assert.equal(r.stdout, 'stored\n[]\n');
    assert.deepEqual((await sandbox.getInfo()).metadata.metadata, { team: 'editor' });
  });

  it('round trip with a workspace mount: the hydrated workspace mounts the same host folder without a mismatch', async () => {
    const id = `editor-mount-${randomUUID()}`;
    const original = new OpenSandboxSandbox({ id, domain: server.domain });
    cleanup.push(original);
    const ws = new Workspace({ id: 'ws-m', name: 'mounted', sandbox: original, mounts: { '/mnt/data': new LocalFilesystem({ basePath: hostRoot }) } });
    await ws.init();
    await original.executeCommand('echo from-sandbox > /mnt/data/note.txt');
    const editor = new MastraEditor({ sandboxes: sandboxProviders });
    const stored = JSON.parse(JSON.stringify(await editor.workspace.snapshotFromWorkspace(ws)));
    assert.equal(stored.mounts['/mnt/data'].provider, 'local');
    const hydrated = await editor.workspace.hydrateSnapshotToWorkspace('ws-m2', stored);
    cleanup.push(hydrated.sandbox);
    await hydrated.init();
    assert.equal(hydrated.sandbox.opensandbox.sandboxId, original.opensandbox.sandboxId);
    assert.equal(hydrated.sandbox.mounts.get('/mnt/data').state, 'mounted');
    assert.equal((await hydrated.sandbox.executeCommand('cat /mnt/data/note.txt')).stdout, 'from-sandbox\n');
  });

  it('an unregistered provider id is Mastra\'s clear error', async () => {
    const editor = new MastraEditor({ sandboxes: sandboxProviders });
    await assert.rejects(editor.workspace.hydrateSnapshotToWorkspace('x', { name: 'x', sandbox: { provider: 'nope', config: {} } }), /Sandbox provider "nope" is not registered/);
  });

  describe('openSandboxFilesystemProvider', () => {
    it('is registered next to the sandbox provider in one registry object; bad configs name the field', () => {
      assert.equal(filesystemProviders.opensandbox, openSandboxFilesystemProvider);
      assert.deepEqual(openSandboxProviders, { sandboxes: sandboxProviders, filesystems: filesystemProviders });
      const editor = new MastraEditor({ ...openSandboxProviders });
      assert.equal(editor.__filesystems.get('opensandbox'), openSandboxFilesystemProvider);
      assert.equal(editor.__sandboxes.get('opensandbox'), openSandboxProvider);
      const props = openSandboxFilesystemProvider.configSchema.properties;
      for (const key of ['sandbox', 'basePath', 'contained', 'readOnly', 'maxReadBytes', 'instructions']) assert.ok(props[key]?.description, key);
      assert.equal(props.sandbox.properties.id, openSandboxProvider.configSchema.properties.id);
      for (const [config, field] of [[{ apiKey: 'k' }, 'apiKey'], [{ sandbox: { apiKey: 'k' } }, 'sandbox.apiKey'],
        [{ sandbox: { execdAccessToken: 't' } }, 'sandbox.execdAccessToken'], [{ basePath: 3 }, 'basePath'], [{ nope: 1 }, 'nope'],
        [{ sandbox: { timeoutSeconds: 'x' } }, 'sandbox.timeoutSeconds']]) {
        assert.throws(() => openSandboxFilesystemProvider.createFilesystem(config), e => e instanceof OpenSandboxOptionError && e.option === field, field);
      }
      assert.throws(() => openSandboxFilesystemProvider.createFilesystem({ basePath: 'relative' }), e => e.option === 'basePath');
      assert.deepEqual(validateStoredFilesystemConfig({ basePath: '/w', sandbox: { id: 'a' } }), { basePath: '/w', sandbox: { id: 'a' } });
    });

    it('a stored workspace with both hydrates into one shared sandbox (the same remote one), no secret stored', async () => {
      const id = `editor-fs-${randomUUID()}`;
      const original = new OpenSandboxSandbox({ id, domain: server.domain, apiKey: 'sk-never-stored' });
      cleanup.push(original);
      const ws = new Workspace({ id: 'ws-fs', name: 'files', sandbox: original, filesystem: new OpenSandboxFilesystem({ sandbox: original, basePath: '/workspace/p', readOnly: false }) });
      await ws.init();
      await ws.filesystem.writeFile('note.txt', 'kept');
      const editor = new MastraEditor({ ...openSandboxProviders });
      const text = JSON.stringify(await editor.workspace.snapshotFromWorkspace(ws));
      assert.ok(!text.includes('sk-never-stored'));
      const stored = JSON.parse(text);
      assert.equal(stored.filesystem.provider, 'opensandbox');
      assert.equal(stored.filesystem.config.basePath, '/workspace/p');
      assert.equal(stored.filesystem.config.sandbox.id, id);
      const hydrated = await editor.workspace.hydrateSnapshotToWorkspace('ws-fs2', stored);
      cleanup.push(hydrated.sandbox);
      assert.equal(hydrated.filesystem.sandbox, hydrated.sandbox); // one object for both
      await hydrated.init();
      assert.equal(hydrated.sandbox.opensandbox.sandboxId, original.opensandbox.sandboxId);
      assert.equal(await hydrated.filesystem.readFile('note.txt', { encoding: 'utf8' }), 'kept');
      // the pairing is one-shot: a second hydration gets its own sandbox object (same remote by logical id)
      const again = await editor.workspace.hydrateSnapshotToWorkspace('ws-fs3', stored);
      assert.notEqual(again.sandbox, hydrated.sandbox);
      assert.equal(again.filesystem.sandbox, again.sandbox);
    });
  });
});
