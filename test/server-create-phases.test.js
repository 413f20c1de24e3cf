// The local server's log line of a create names where its time went (lib/dev-server/sandboxes.js phasesText, the
// runner's SandboxProcess.phases): what `node scripts/bench.js --phases` prints per phase. Off unless the server logs.
import assert from 'node:assert/strict';
import { startServer } from '../lib/dev-server/index.js';
import { phasesText } from '../lib/dev-server/sandboxes.js';
import { request } from './helpers/raw.js';

const LINE = /^sandbox ([0-9a-f-]{36}) created(?: \(network: [^)]+\))? in ([\d.]+) ms: (.*)$/;

describe('dev-server: the phases of a create in its log line', function () {
  this.timeout(60000);
  let server;
  const lines = [];

  before(async () => {
    server = await startServer({ commandTailMs: 0, log: (line) => lines.push(line) });
  });
  after(async () => {
    await server?.close();
  });

  it('phasesText: the total is the sum, each phase with one decimal, in order', () => {
    assert.equal(phasesText([['request', 1], ['disk', 20.04], ['execd', 70.35]]), '91.4 ms: request 1.0, disk 20.0, execd 70.3');
  });

  it('a create logs its phases in the order they ran, summing to the total, each a duration', async () => {
    const created = await request(`${server.baseUrl}/v1/sandboxes`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: { image: { uri: 'python:3.11' }, timeout: 600, resourceLimits: { cpu: '1', memory: '1Gi' }, entrypoint: ['tail', '-f', '/dev/null'] },
    });
    assert.equal(created.status, 202, created.text);
    const line = lines.map((l) => LINE.exec(l)).find((m) => m?.[1] === created.json.id);
    assert.ok(line, `no create line for ${created.json.id} in ${JSON.stringify(lines)}`);
    const phases = line[3].split(', ').map((p) => /^([a-z]+) ([\d.]+)$/.exec(p)).map((m) => [m[1], Number(m[2])]);
    const names = phases.map(([n]) => n);
    // the phases this server has (a cgroup, a disk image, slirp4netns only where the machine gives them)
    const expected = ['request', 'disk', 'dirs', 'spawn', 'bwrap', 'network', 'execd', 'ready', 'relay'];
    assert.deepEqual(names, expected.filter((n) => names.includes(n)));
    for (const n of ['request', 'dirs', 'spawn', 'bwrap', 'execd', 'ready', 'relay']) assert.ok(names.includes(n), `${n} missing: ${line[0]}`);
    assert.ok(phases.every(([, ms]) => ms >= 0), line[0]);
    const sum = phases.reduce((s, [, ms]) => s + ms, 0);
    assert.ok(Math.abs(sum - Number(line[2])) <= 0.05 * phases.length + 0.1, `${sum} vs ${line[2]}`);
    assert.equal((await request(`${server.baseUrl}/v1/sandboxes/${created.json.id}`, { method: 'DELETE' })).status, 204);
  });
});
