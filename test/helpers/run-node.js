// Test helper: runs a Node script (no OPEN_SANDBOX_DOMAIN, telemetry off) with a deadline; resolves
// { code, out } with stdout and stderr merged. A script that does not finish is killed and the call rejects.
import { spawn } from 'node:child_process';

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
