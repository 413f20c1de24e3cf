// Test helper: runs a Node script file with arguments (runNode) or an inline ES module (runNodeCode) in a child Node (no
// OPEN_SANDBOX_DOMAIN, telemetry off) with a deadline; resolves { code, signal, out } with stdout and stderr merged.
// A child that does not finish is killed and the call rejects.
import { spawn } from 'node:child_process';

function run(args, what, { timeoutMs = 60000, env = {} } = {}) {
  return new Promise((resolve, reject) => {
    const env2 = { ...process.env, MASTRA_TELEMETRY_DISABLED: '1', ...env };
    delete env2.OPEN_SANDBOX_DOMAIN;
    const child = spawn(process.execPath, args, { env: env2, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', d => { out += d; });
    child.stderr.on('data', d => { out += d; });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${what} did not finish within ${timeoutMs} ms:\n${out}`));
    }, timeoutMs);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, out });
    });
  });
}

export function runNode(file, { args = [], ...opts } = {}) {
  return run([file, ...args], file, opts);
}

export function runNodeCode(code, opts) {
  return run(['--input-type=module', '-e', code], 'the child script', opts);
}
