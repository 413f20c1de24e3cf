// The README main command's flow as part of the suite: spawns scripts/agent-test.js (the demo with the scripted
// model against a local server it starts) and expects the DEMO OK verdict and exit code 0.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const SCRIPT = fileURLToPath(new URL('../scripts/agent-test.js', import.meta.url));

export function runNode(file, { timeoutMs = 60000, env = {} } = {}) {
  return new Promise((resolve, reject) => {
    const env2 = { ...process.env, MASTRA_TELEMETRY_DISABLED: '1', ...env };
    delete env2.OPEN_SANDBOX_DOMAIN;
    const child = spawn(process.execPath, [file], { env: env2, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', d => { out += d; });
    child.stderr.on('data', d => { out += d; });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${file} did not finish within ${timeoutMs} ms:\n${out}`));
    }, timeoutMs);
    child.on('close', code => {
      clearTimeout(timer);
      resolve({ code, out });
    });
  });
}

describe('demo (scripts/agent-test.js)', function () {
  this.timeout(90000);
  it('an agent runs the whole flow and prints DEMO OK', async () => {
    const { code, out } = await runNode(SCRIPT, { timeoutMs: 80000 });
    assert.equal(code, 0, out);
    assert.match(out, /^DEMO OK: /m);
  });
});
