// The local server runs the C execd osb-execd in every sandbox, and nothing else: a missing or unrunnable osb-execd
// stops startServer with an error naming the path (before any data directory is made), never a silent fallback.
// The addon named by MASTRA_OPENSANDBOX_ADDON with no osb-execd beside it, a
// MASTRA_OPENSANDBOX_EXECD that does not exist, is not a file, cannot be executed, or does not print its version.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer } from '../lib/dev-server/index.js';
import { checkExecdBinary, execdBinary } from '../lib/dev-server/execd-binary.js';

describe('startServer: the C execd osb-execd must be there and run', function () {
  this.timeout(30000);
  let work;
  const saved = {};
  const setEnv = (vars) => {
    for (const [k, v] of Object.entries(vars)) {
      if (!(k in saved)) saved[k] = process.env[k];
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  };
  before(() => {
    work = fs.mkdtempSync(path.join(os.tmpdir(), 'osb-execd-binary-'));
  });
  afterEach(() => {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
      delete saved[k];
    }
  });
  after(() => fs.rmSync(work, { recursive: true, force: true }));

  // startServer rejects with a message matching re; no data directory is left behind
  const refused = async (re) => {
    const dataDir = path.join(work, `data-${Math.random().toString(36).slice(2)}`);
    await assert.rejects(startServer({ dataDir, isolation: 'none' }), re);
    assert.equal(fs.existsSync(dataDir), false, 'the failed start made its data directory');
  };

  it('an addon with no osb-execd beside it: the start fails naming where it looked', async () => {
    const dir = fs.mkdtempSync(path.join(work, 'addon-'));
    const addon = path.join(dir, 'mastra_opensandbox.node');
    fs.writeFileSync(addon, '');
    setEnv({ MASTRA_OPENSANDBOX_ADDON: addon, MASTRA_OPENSANDBOX_EXECD: undefined });
    assert.equal(execdBinary(), null);
    const where = path.join(dir, 'osb-execd').replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    await refused(new RegExp(`the C execd osb-execd was not found \\(looked at ${where}\\)`));
  });

  it('MASTRA_OPENSANDBOX_EXECD naming nothing, a directory, a file without x, a program that is not osb-execd', async () => {
    const missing = path.join(work, 'nope', 'osb-execd');
    setEnv({ MASTRA_OPENSANDBOX_EXECD: missing });
    await refused(new RegExp(`the C execd ${missing.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} cannot be used: no such file \\(MASTRA_OPENSANDBOX_EXECD\\)`));
    setEnv({ MASTRA_OPENSANDBOX_EXECD: work });
    await refused(/cannot be used: not a regular file/);
    const noexec = path.join(work, 'osb-execd-noexec');
    fs.writeFileSync(noexec, '#!/bin/sh\necho osb-execd 1\n', { mode: 0o644 });
    setEnv({ MASTRA_OPENSANDBOX_EXECD: noexec });
    await refused(new RegExp(`the C execd ${noexec} does not run \\(spawnSync ${noexec} EACCES\\)`));
    const garbage = path.join(work, 'osb-execd-garbage');
    fs.writeFileSync(garbage, Buffer.from('\x7fELF\x02\x01\x01 not really an executable'), { mode: 0o755 });
    setEnv({ MASTRA_OPENSANDBOX_EXECD: garbage });
    await refused(new RegExp(`the C execd ${garbage} does not run \\(`)); // ENOEXEC: libuv's execvp tries /bin/sh
    const other = path.join(work, 'osb-execd-other');
    fs.writeFileSync(other, '#!/bin/sh\necho "something else"\n', { mode: 0o755 });
    setEnv({ MASTRA_OPENSANDBOX_EXECD: other });
    await refused(/does not run \(printed "something else"\): `osb-execd --version` must print "osb-execd <version>"/);
    const failing = path.join(work, 'osb-execd-failing');
    fs.writeFileSync(failing, '#!/bin/sh\necho "cannot start" >&2\nexit 3\n', { mode: 0o755 });
    setEnv({ MASTRA_OPENSANDBOX_EXECD: failing });
    await refused(/does not run \(exit 3: cannot start\)/);
  });

  it("an execd that fails at a sandbox's start: the create's 500 carries the last of what it wrote, however late it is read", async () => {
    // the exit event can come before the end of its stderr: 200 KB of noise (more than a pipe holds), then the reason
    const failing = path.join(work, 'osb-execd-dies');
    fs.writeFileSync(failing, '#!/bin/sh\n[ "$1" = --version ] && { echo "osb-execd 1"; exit 0; }\n'
      + 'i=0; while [ $i -lt 2000 ]; do echo "noise line $i: ........................................................................................" >&2; i=$((i+1)); done\n'
      + 'echo "the reason it died" >&2\nexit 1\n', { mode: 0o755 });
    setEnv({ MASTRA_OPENSANDBOX_EXECD: failing });
    const server = await startServer({ dataDir: path.join(work, 'data-dies'), isolation: 'none', log: () => {} });
    try {
      for (let i = 0; i < 3; i++) {
        const r = await fetch(`http://${server.domain}/v1/sandboxes`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ image: { uri: 'x' }, entrypoint: ['tail', '-f', '/dev/null'], resourceLimits: {} }) });
        const body = await r.json();
        assert.equal(r.status, 500, JSON.stringify(body));
        assert.match(body.message, /execd exited before it was ready .*noise line 1999: \.+\s+the reason it died$/s, body.message);
      }
    } finally {
      await server.close();
    }
  });

  it('the real one passes the check', function () {
    if (!execdBinary()) this.skip(); // the suites that start sandboxes fail loudly without it
    assert.equal(checkExecdBinary(), fs.realpathSync(execdBinary()));
  });
});
