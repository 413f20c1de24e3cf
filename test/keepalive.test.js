// KeepAlive (lib/keepalive.js): expiry times come from the server clock anchored on server timestamps, renewals
// happen while busy and once when activity ends, and nothing is renewed while idle. The renew function here
// records what it is asked (the real renew-expiration call is exercised in test/integration.test.js).
import assert from 'node:assert/strict';
import { KeepAlive } from '../lib/keepalive.js';
import { waitFor } from './helpers/poll.js';
import { quietPeriod } from './helpers/raw.js';

describe('KeepAlive', () => {
  const make = (busyRef, renewals, idleMs = 3000) => new KeepAlive({
    idleMs,
    busy: () => busyRef.busy,
    renew: async at => { renewals.push(at.getTime()); },
  });

  it('computes expiries on the server clock anchored on a server timestamp', async () => {
    const renewals = [];
    const k = make({ busy: false }, renewals);
    const sentAt = Date.now();
    const serverTime = new Date(sentAt + 3600000).toISOString(); // the server is one hour ahead
    k.anchor(serverTime, sentAt, sentAt);
    await k.start();
    k.stop();
    assert.equal(renewals.length, 1);
    const expected = sentAt + 3600000 + 3000;
    assert.ok(Math.abs(renewals[0] - expected) < 1000, `renewed to ${renewals[0] - sentAt} ms from now`);
    k.anchor('not a date', 0, 0); // ignored
    assert.ok(Math.abs(k.serverNow() - (Date.now() + 3600000)) < 1000);
  });

  it('renews while busy, once to now + idle when activity ends, never while idle', async () => {
    const renewals = [];
    const state = { busy: true };
    const k = make(state, renewals, 1500); // ticks every 500 ms
    try {
      await k.start();
      await waitFor(() => renewals.length >= 3, { timeoutMs: 5000, message: 'renewed while busy' });
      state.busy = false;
      const endedAt = Date.now();
      // the first idle tick renews once more (idle counts from then), later idle ticks never
      const busyRenewals = renewals.length;
      await waitFor(() => renewals.length > busyRenewals && renewals.at(-1) >= endedAt + 1500 && renewals.at(-1) < endedAt + 1500 + 1000,
        { timeoutMs: 3000, message: 'one renewal to now + idle when activity ends' });
      await quietPeriod(100); // a busy renewal under way when activity ended may land before the idle one
      const settled = renewals.length;
      await quietPeriod(1200); // two idle ticks
      assert.equal(renewals.length, settled);
    } finally {
      k.stop();
    }
  });

  it('activity renews only when less than idle is left, half a period ahead', async () => {
    const renewals = [];
    const k = make({ busy: false }, renewals, 60000); // period 20 s: no tick during the test
    try {
      const t0 = Date.now();
      await k.start(); // to now + 60 s
      assert.equal(renewals.length, 1);
      await quietPeriod(5); // now less than idle is left
      k.activity();
      k.activity();
      await waitFor(() => renewals.length === 2, { timeoutMs: 2000, message: 'first activity renews (less than idle left)' });
      assert.ok(renewals[1] - t0 >= 60000 + 10000 && renewals[1] - t0 < 60000 + 10000 + 1000, `renewed ${renewals[1] - t0} ms ahead`);
      await quietPeriod(100);
      assert.equal(renewals.length, 2); // the second one found enough time left
    } finally {
      k.stop();
    }
  });

  it('does nothing without idleMs', async () => {
    const renewals = [];
    const k = new KeepAlive({ idleMs: undefined, busy: () => true, renew: async at => { renewals.push(at); } });
    await k.start();
    k.activity();
    assert.equal(k.enabled, false);
    assert.deepEqual(renewals, []);
  });
});
