// OpenSandboxSandbox against the behaviours of real OpenSandbox deployments (issue 20), reproduced by the local
// server: `startServer({ emulate: 'docker' | 'kubernetes', serverVersion })` (lib/dev-server/upstream.js) and its
// server proxy route. Each case is a regression test of a client behaviour that only worked on our own server.
import assert from 'node:assert/strict';
import { startServer } from '../lib/dev-server/index.js';
import { waitFor } from './helpers/poll.js';
import { sandboxes } from './helpers/sandboxes.js';

/** Raw lifecycle call against `server` (the way another process would do it). */
const api = async (server, method, p) => {
  const res = await fetch(`${server.baseUrl}/v1${p}`, { method });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
};

describe('OpenSandboxSandbox on upstream deployments', function () {
  this.timeout(60000);

  describe('local server proxy (useServerProxy)', () => {
    let server;
    const sb = sandboxes(() => server);
    before(async function () {
      this.timeout(60000);
      server = await startServer({ port: 0 });
    });
    after(async function () {
      this.timeout(60000);
      await sb.destroyAll();
      await server?.close();
    });

    it('executeCommand and processes.spawn recover right after an external delete (the proxy answers 401 SANDBOX::UNAUTHORIZED)', async () => {
      const s = sb.make({ useServerProxy: true });
      await s._start();
      for (const call of ['command', 'spawn']) {
        const id = s.opensandbox.sandboxId;
        assert.equal((await api(server, 'DELETE', `/sandboxes/${id}`)).status, 204);
        if (call === 'command') {
          const r = await s.executeCommand('echo recovered');
          assert.deepEqual([r.exitCode, r.stdout], [0, 'recovered\n']);
        } else {
          const h = await s.processes.spawn('echo spawned');
          const r = await h.wait();
          assert.deepEqual([r.exitCode, r.stdout], [0, 'spawned\n']);
        }
        assert.notEqual(s.opensandbox.sandboxId, id);
        assert.equal(s.status, 'running');
      }
    });
  });
});
