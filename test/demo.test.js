// The README main command's flow as part of the suite: spawns scripts/agent-test.js (the demo with the scripted
// model against a local server it starts) and expects the DEMO OK verdict and exit code 0.
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { runNode } from './helpers/run-node.js';

const SCRIPT = fileURLToPath(new URL('../scripts/agent-test.js', import.meta.url));

describe('demo (scripts/agent-test.js)', function () {
  this.timeout(90000);
  it('an agent runs the whole flow and prints DEMO OK', async () => {
    const { code, out } = await runNode(SCRIPT, { timeoutMs: 80000 });
    assert.equal(code, 0, out);
    assert.match(out, /^DEMO OK: /m);
  });
});
