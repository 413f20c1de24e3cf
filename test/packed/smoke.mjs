// Smoke test of the packed package, run by scripts/test-packed.sh inside a bubblewrap environment without a
// compiler and without the curl, libwebsockets, cJSON and OpenSSL libraries, in a fresh project where the tarball
// was installed. Uses only the package's public entry points: the local server behind an https front with a private
// CA (smoke-server.mjs; in this process, or already running at <domain> when given), and OpenSandboxSandbox with
// caFile over https and wss — a command, a background process fed through stdin, a file upload; the sandbox's execd is
// the package's prebuilt osb-execd.
// argv: <CA cert> <CA key> [<domain>]. Prints "smoke ok".
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { OpenSandboxSandbox } from 'mastra-opensandbox';
import { startSmokeServer } from './smoke-server.mjs';

const [caFile, keyFile, external] = process.argv.slice(2);
const deadline = setTimeout(() => {
  console.error('smoke: no result within 120 s');
  process.exit(1);
}, 120000);

const server = external ? null : await startSmokeServer(caFile, keyFile);
const domain = external ?? server.domain;

// the addon that got loaded is the prebuilt one inside the installed package
const pkgDir = fs.realpathSync(path.dirname(createRequire(import.meta.url).resolve('mastra-opensandbox/package.json')));
const sandbox = new OpenSandboxSandbox({ domain, caFile });
try {
  const r = await sandbox.executeCommand('echo', ['hello', 'from the prebuilt addon']);
  assert.equal(r.exitCode, 0);
  assert.equal(r.stdout, 'hello from the prebuilt addon\n');
  const maps = fs.readFileSync('/proc/self/maps', 'utf8');
  const loaded = [...new Set(maps.split('\n').map((l) => l.split(/\s+/)[5]).filter((f) => f && f.startsWith('/')))];
  assert.deepEqual(loaded.filter((f) => f.endsWith('.node')), [path.join(pkgDir, 'prebuilds', `linux-${process.arch}`, 'mastra_opensandbox.node')]);
  assert.deepEqual(loaded.filter((f) => /lib(curl|websockets|cjson|ssl|crypto|z)\.so/.test(f)), [], 'no system curl/lws/cjson/OpenSSL library is loaded');
  if (server) {
    // the sandbox's execd is the package's prebuilt C execd, osb-execd beside the addon (the same file: device and inode)
    const want = fs.statSync(path.join(pkgDir, 'prebuilds', `linux-${process.arch}`, 'osb-execd'));
    const execds = fs.readdirSync('/proc').filter((d) => /^\d+$/.test(d)).filter((pid) => {
      try {
        const st = fs.statSync(`/proc/${pid}/exe`);
        return st.ino === want.ino && st.dev === want.dev;
      } catch {
        return false;
      }
    });
    assert.equal(execds.length, 1, 'the sandbox runs the prebuilt osb-execd');
  }

  await sandbox.writeFiles([{ path: 'up/data.txt', content: 'uploaded over https\n' }]);
  const h = await sandbox.processes.spawn('read line; echo "stdin: $line"; cat up/data.txt');
  await h.sendStdin('over wss\n');
  const w = await h.wait();
  assert.equal(w.exitCode, 0);
  assert.equal(w.stdout, 'stdin: over wss\nuploaded over https\n');
  console.log('smoke ok');
} finally {
  await sandbox._destroy().catch(() => {});
  await server?.close();
  clearTimeout(deadline);
}
