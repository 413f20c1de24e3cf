// KeepAlive (lib/keepalive.js) of a real sandbox with idleTimeoutMinutes against the local server emulating
// upstream's Docker and Kubernetes runtimes (test/helpers/profiles.js), whose lastTransitionAt is not the time of the
// last transition (issue 20): the server clock is anchored on the lifecycle answers' Date header instead.
import assert from 'node:assert/strict';
import { quietPeriod } from './helpers/raw.js';
import { sandboxes, warnings } from './helpers/sandboxes.js';
import { PROFILES, startProfileServer } from './helpers/profiles.js';

// upstream's profiles only: the local server's lastTransitionAt is the time of the last transition, the case the unit
// tests above cover
for (const profile of PROFILES) describe(`KeepAlive of a sandbox${profile.title}`, function () {
  this.timeout(60000);
  let server;
  const sb = sandboxes(() => server);
  const api = async (method, p) => {
    const res = await fetch(`${server.baseUrl}/v1${p}`, { method });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : undefined };
  };
  before(async function () {
    server = await startProfileServer(profile);
  });
  after(async function () {
    await sb.destroyAll();
    await server?.close();
  });

  it('idleTimeoutMinutes after stop() then start(): alive through commands over twice the idle time, every renewal in the future', async () => {
    const w = warnings();
    const s = sb.make({ idleTimeoutMinutes: 0.05 }); // 3 s idle expiry
    s.__setLogger(w.logger);
    await s._start();
    const id = s.opensandbox.sandboxId;
    // older than the idle time before the stop: upstream's lastTransitionAt (the container's creation time) is
    // then more than idleMs in the past, and an anchor on it asks for expiries in the past
    assert.equal((await s.executeCommand('sleep 4; echo aged')).stdout, 'aged\n');
    await s._stop();
    assert.equal((await api('GET', `/sandboxes/${id}`)).body.status.state, 'Paused');
    assert.equal((await s._start()).outcome, 'connected');
    const until = Date.now() + 6000; // twice the idle time
    let n = 0;
    while (Date.now() < until) {
      assert.equal((await s.executeCommand(`echo ${n}`)).stdout, `${n}\n`);
      const remote = await api('GET', `/sandboxes/${id}`);
      assert.equal(remote.status, 200, `sandbox ${id} gone after ${n} commands`);
      assert.ok(Date.parse(remote.body.expiresAt) > Date.now(), `expiresAt ${remote.body.expiresAt} is in the past`);
      await quietPeriod(1000); // idle between commands (a third of the idle time)
      n++;
    }
    assert.equal(s.opensandbox.sandboxId, id);
    assert.deepEqual(w.seen.filter(m => /keep-alive/.test(m)), []);
  });
});
