// KeepAlive (lib/keepalive.js): expiry times come from the server clock anchored on server timestamps, renewals
// happen while busy and once when activity ends, and nothing is renewed while idle. The renew function here
// records what it is asked (the real renew-expiration call is exercised in test/integration.test.js). No server: the
// packed-tarball test also runs this file on the arm64 addon under qemu-user. A real sandbox with idleTimeoutMinutes
// on upstream's profiles: test/keepalive-sandbox.test.js.
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

  it('anchors on HTTP Date headers (to the second): observations narrow the offset, a contradicting one starts over', () => {
    const k = make({ busy: false }, []);
    const base = Math.floor(Date.now() / 1000) * 1000 + 7200000; // the server is two hours ahead
    const local = base - 7200000;
    const http = ms => new Date(ms).toUTCString();
    // answered between local+100 and local+300 with Date = base: the offset lies in [7199700, 7200900]
    k.anchor(http(base), local + 100, local + 300, 1000);
    // answered between local+900 and local+950 with Date = base + 1000 (the server's second changed): [7200050, 7201100]
    k.anchor(http(base + 1000), local + 900, local + 950, 1000);
    // intersected: [7200050, 7200900], midpoint 7200475
    const skew = () => k.serverNow() - Date.now();
    assert.ok(Math.abs(skew() - 7200475) <= 5, `offset ${skew()}`);
    // the local clock stepped by an hour: the old bounds contradict the new observation, which alone counts
    k.anchor(http(base), local + 3600000, local + 3600000, 1000);
    assert.ok(Math.abs(skew() - (7200000 - 3600000 + 500)) <= 5, `offset after a step ${skew()}`);
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
