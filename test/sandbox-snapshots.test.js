// OpenSandboxSandbox snapshots against the local OpenSandbox-compatible server: the raw handle's snapshot calls
// (create/wait/get/list/delete, typed errors) and starting from any snapshot (`snapshotId` option).
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { SandboxNotReadyError } from '@mastra/core/workspace';
import { startServer } from '../scripts/dev-server/index.js';
import { OpenSandboxSandbox, OpenSandboxNotFoundError, OpenSandboxSnapshotError } from '../lib/index.js';

describe('OpenSandboxSandbox snapshots', function () {
  this.timeout(60000);
  let server;
  const cleanup = [];
  const make = (options = {}) => {
    const s = new OpenSandboxSandbox({ domain: server.domain, ...options });
    cleanup.push(s);
    return s;
  };
  const sh = async (s, cmd) => {
    const r = await s.executeCommand(cmd);
    assert.equal(r.exitCode, 0, r.stderr);
    return r.stdout.trim();
  };

  before(async function () {
    server = await startServer({ port: 0, maxSnapshotBytes: 8 * 1024 * 1024 });
  });
  after(async function () {
    for (const s of cleanup) await s._destroy().catch(() => {});
    await server?.close();
  });

  it('raw handle: createSnapshot (accepted or waited), getSnapshot, listSnapshots, deleteSnapshot, typed errors', async () => {
    const s = make({ id: `raw-${randomUUID()}` });
    await assert.rejects(s.opensandbox.createSnapshot(), SandboxNotReadyError);
    await s._start();
    await sh(s, 'echo v1 > data.txt');
    const accepted = await s.opensandbox.createSnapshot({ name: 'raw-accepted' });
    assert.equal(accepted.status.state, 'Creating');
    const readyOne = await s.opensandbox.waitForSnapshot(accepted.id, { timeoutMs: 30000 });
    assert.equal(readyOne.status.state, 'Ready');
    const waited = await s.opensandbox.createSnapshot({ name: 'raw-waited', wait: true, timeoutMs: 30000 });
    assert.deepEqual([waited.name, waited.sandboxId, waited.status.state], ['raw-waited', s.opensandbox.sandboxId, 'Ready']);
    assert.deepEqual(await s.opensandbox.getSnapshot(waited.id), waited);
    const page = await s.opensandbox.listSnapshots({ sandboxId: s.opensandbox.sandboxId, states: ['Ready'], pageSize: 1 });
    assert.deepEqual(page.items.map(i => i.id), [waited.id]);
    assert.equal(page.pagination.totalItems, 2);
    await s.opensandbox.deleteSnapshot(accepted.id);
    const gone = await s.opensandbox.getSnapshot(accepted.id).catch(e => e);
    assert.ok(gone instanceof OpenSandboxNotFoundError, String(gone));
    assert.deepEqual([gone.status, gone.code], [404, 'SNAPSHOT::NOT_FOUND']);
    assert.match(gone.message, new RegExp(`^get snapshot ${accepted.id}: the server answered 404 SNAPSHOT::NOT_FOUND`));
    await assert.rejects(s.opensandbox.deleteSnapshot(accepted.id), OpenSandboxNotFoundError);
    // a capture the server fails (over its snapshot disk limit) is a typed error, and is deleted
    await sh(s, 'head -c 9000000 /dev/zero > big.bin');
    const failed = await s.opensandbox.createSnapshot({ name: 'raw-too-big', wait: true, timeoutMs: 30000 }).catch(e => e);
    assert.ok(failed instanceof OpenSandboxSnapshotError, String(failed));
    assert.equal(failed.state, 'Failed');
    assert.equal(failed.reason, 'snapshot_capture_failed');
    assert.match(failed.message, /snapshot disk limit/);
    await assert.rejects(s.opensandbox.getSnapshot(failed.snapshotId), OpenSandboxNotFoundError);
    await s.opensandbox.deleteSnapshot(waited.id);
  });
});
