// Mastra's sandbox behaviours on an image sandbox (images 'run'): an image with busybox and a static bash (the
// process wrapper and execd's PTY API run bash) pushed to Debian's docker-registry on loopback, an OpenSandboxSandbox
// on it, and through @mastra/core's Workspace: commands (exit codes, stdout/stderr, env, the image's WorkingDir),
// background processes with stdin, closeStdin and kill, the filesystem, and a real Agent with a scripted model using
// the workspace tools. Every check also shows the files are the image's (its /marker and /etc/os-release), not the host's.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Agent } from '@mastra/core/agent';
import { Workspace, WORKSPACE_TOOLS } from '@mastra/core/workspace';
import { startServer } from '../lib/dev-server/index.js';
import { OpenSandboxFilesystem, OpenSandboxSandbox } from '../lib/index.js';
import { makeTar, pushImage, startRegistry, writeOciLayout } from './helpers/images.js';
import { createScriptedModel } from './helpers/scripted-model.js';
import { waitFor } from './helpers/poll.js';

const BUSYBOX = ['/bin/busybox', '/usr/bin/busybox'].find((p) => fs.existsSync(p));
const BASH_STATIC = ['/bin/bash-static', '/usr/bin/bash-static'].find((p) => fs.existsSync(p));
const { EXECUTE_COMMAND, GET_PROCESS_OUTPUT } = WORKSPACE_TOOLS.SANDBOX;
const { READ_FILE, WRITE_FILE, LIST_FILES } = WORKSPACE_TOOLS.FILESYSTEM;
const OS_RELEASE = 'NAME=mastra-image-test\nID=mastra-image\n';
const WORKDIR = '/srv/app';
const pidOf = (text) => /PID: (\S+?)\)/.exec(text ?? '')?.[1];

/**
 * The image's two layers: busybox (every applet linked in /bin), /etc/os-release and /marker; then bash-static as
 * /bin/bash and the working directory with a file of the image.
 */
function imageLayers() {
  const applets = execFileSync(BUSYBOX, ['--list'], { encoding: 'utf8' }).split('\n').filter((a) => a && a !== 'busybox' && a !== 'bash' && !a.includes('/'));
  const base = makeTar([
    { name: 'bin/', type: 'dir' }, { name: 'bin/busybox', data: fs.readFileSync(BUSYBOX), mode: 0o755 },
    ...applets.map((a) => ({ name: `bin/${a}`, type: 'symlink', linkname: 'busybox' })),
    { name: 'etc/', type: 'dir' }, { name: 'etc/os-release', data: OS_RELEASE }, { name: 'etc/passwd', data: 'root:x:0:0:root:/root:/bin/sh\n' },
    { name: 'tmp/', type: 'dir', mode: 0o1777 }, { name: 'root/', type: 'dir', mode: 0o700 }, { name: 'marker', data: 'mastra-image\n' },
  ]);
  const top = makeTar([
    { name: 'bin/bash', data: fs.readFileSync(BASH_STATIC), mode: 0o755 },
    { name: 'srv/', type: 'dir' }, { name: 'srv/app/', type: 'dir' }, { name: 'srv/app/readme.txt', data: 'shipped in the image\n' },
  ]);
  return [{ tar: base }, { tar: top, compression: 'zstd' }];
}

describe('images: Mastra sandbox behaviours on an image sandbox (busybox + bash from a loopback registry)', function () {
  this.timeout(90000);
  let work;
  let registry;
  let server;
  let sandbox;
  let workspace;
  let image;

  before(async function () {
    if (!BUSYBOX || !BASH_STATIC) this.skip();
    process.env.MASTRA_TELEMETRY_DISABLED = '1';
    work = fs.mkdtempSync(path.join(os.tmpdir(), 'osb-images-mastra-'));
    registry = await startRegistry();
    writeOciLayout(path.join(work, 'oci'), {
      tag: 'm', layers: imageLayers(),
      config: { Env: ['PATH=/usr/local/bin:/usr/bin:/bin', 'IMAGE_VAR=from-image', 'BOTH=image'], WorkingDir: WORKDIR },
    });
    image = `${registry.host}/mastra/busybox-bash:1`;
    await pushImage(path.join(work, 'oci'), 'm', registry, 'mastra/busybox-bash:1');
    server = await startServer({ images: 'run', dataDir: path.join(work, 'data'), log: () => {} });
    sandbox = new OpenSandboxSandbox({ domain: server.domain, image, workingDirectory: WORKDIR, env: { SANDBOX_VAR: 'from-sandbox', BOTH: 'sandbox' } });
    workspace = new Workspace({ sandbox, filesystem: new OpenSandboxFilesystem({ sandbox }) });
    await workspace.init();
  });

  after(async () => {
    await workspace?.destroy().catch(() => {});
    await server?.close();
    await registry?.stop();
    if (work) fs.rmSync(work, { recursive: true, force: true });
  });

  it("executeCommand: the image's files, exit codes, stdout and stderr apart, args, env (image < sandbox < command), the WorkingDir", async () => {
    const files = await sandbox.executeCommand('cat /marker /etc/os-release; ls /srv/app');
    assert.deepEqual([files.exitCode, files.stdout, files.stderr], [0, `mastra-image\n${OS_RELEASE}readme.txt\n`, '']);
    assert.notEqual(fs.readFileSync('/etc/os-release', 'utf8'), OS_RELEASE); // the host's is another file
    const failed = await sandbox.executeCommand('echo out; echo err >&2; exit 3');
    assert.deepEqual([failed.exitCode, failed.success, failed.stdout, failed.stderr], [3, false, 'out\n', 'err\n']);
    const args = await sandbox.executeCommand('printf', ['<%s>', 'a b', "it's"]);
    assert.deepEqual([args.exitCode, args.stdout], [0, "<a b><it's>\n"]); // execd delivers output as lines
    const env = await sandbox.executeCommand('echo "$IMAGE_VAR $SANDBOX_VAR $BOTH $CMD_VAR"', [], { env: { CMD_VAR: 'from-command' } });
    assert.equal(env.stdout, 'from-image from-sandbox sandbox from-command\n');
    const cwd = await sandbox.executeCommand('pwd; cat readme.txt; echo $BASH_VERSION | cut -c1');
    assert.equal(cwd.stdout, `${WORKDIR}\nshipped in the image\n5\n`);
    const sub = await sandbox.executeCommand('pwd', [], { cwd: '/tmp' });
    assert.equal(sub.stdout, '/tmp\n');
  });

  it('background processes: stdin, closeStdin, exit code; kill ends one and it is gone from the sandbox', async () => {
    const p = await sandbox.processes.spawn('read first; echo "got:$first"; cat; echo "end:$IMAGE_VAR" >&2; exit 4');
    await p.sendStdin('hello\n');
    await waitFor(() => p.stdout.includes('got:hello'), { message: 'the first line read' });
    await p.sendStdin('more\n');
    await p.closeStdin();
    const done = await p.wait();
    assert.deepEqual([done.exitCode, done.stdout, done.stderr], [4, 'got:hello\nmore\n', 'end:from-image\n']);
    const sleeper = await sandbox.processes.spawn('echo started; exec sleep 300');
    await waitFor(() => sleeper.stdout.includes('started'), { message: 'the sleeper started' });
    assert.ok((await sandbox.processes.list()).some((x) => x.pid === sleeper.pid && x.running));
    const sleeping = "ps -o args | grep -c '^sleep 30[0]' || true";
    assert.equal((await sandbox.executeCommand(sleeping)).stdout, '1\n');
    await sleeper.kill();
    const killed = await sleeper.wait();
    assert.notEqual(killed.exitCode, 0);
    assert.equal((await sandbox.executeCommand(sleeping)).stdout, '0\n');
  });

  it("the filesystem: write, read, list, stat, move, delete in the image's WorkingDir next to the image's file", async () => {
    const fsys = workspace.filesystem;
    assert.equal(await fsys.readFile('readme.txt', { encoding: 'utf8' }), 'shipped in the image\n');
    await fsys.writeFile('notes/a.txt', 'alpha\n', { recursive: true });
    assert.equal(await fsys.readFile('notes/a.txt', { encoding: 'utf8' }), 'alpha\n');
    const st = await fsys.stat('notes/a.txt');
    assert.deepEqual([st.type, st.size], ['file', 6]);
    assert.equal((await fsys.stat('readme.txt')).size, 21);
    await fsys.moveFile('notes/a.txt', 'notes/b.txt');
    assert.deepEqual((await fsys.readdir('notes')).map((e) => e.name), ['b.txt']);
    assert.deepEqual((await fsys.readdir('.')).map((e) => [e.name, e.type]).sort(), [['notes', 'directory'], ['readme.txt', 'file']]);
    assert.equal(await fsys.exists('notes/a.txt'), false);
    assert.equal((await sandbox.executeCommand(`cat ${WORKDIR}/notes/b.txt`)).stdout, 'alpha\n');
    await fsys.deleteFile('notes/b.txt');
    await fsys.rmdir('notes');
    assert.equal((await sandbox.executeCommand('ls -A; cat /marker')).stdout, 'readme.txt\nmastra-image\n');
  });

  it('a real Agent with a scripted model uses the workspace tools on the image', async () => {
    const results = [];
    const step = (toolName, input) => (ctx) => {
      if (ctx.callIndex > 0) results.push(ctx.lastToolResult);
      return { toolCall: { toolName, input } };
    };
    let bgPid;
    const model = createScriptedModel([
      step(EXECUTE_COMMAND, { command: 'cat /marker; grep ^NAME= /etc/os-release; pwd' }),
      step(READ_FILE, { path: 'readme.txt' }),
      step(WRITE_FILE, { path: 'agent.sh', content: 'echo "agent ran in $(pwd) on $(cat /marker)"\n' }),
      step(LIST_FILES, { path: '.' }),
      step(EXECUTE_COMMAND, { command: 'sh agent.sh; echo bg-done; exit 2', background: true }),
      (ctx) => {
        results.push(ctx.lastToolResult);
        bgPid = pidOf(ctx.lastToolResult);
        return { toolCall: { toolName: GET_PROCESS_OUTPUT, input: { pid: bgPid, wait: true } } };
      },
      (ctx) => {
        results.push(ctx.lastToolResult);
        return { text: 'done' };
      },
    ]);
    const agent = new Agent({ id: 'osb-image-agent', name: 'image agent', instructions: 'Use the sandbox.', model, workspace });
    const res = await agent.generate('Look around the image.', { maxSteps: 10 });
    assert.equal(res.text, 'done');
    const [exec, read, write, list, started, output] = results.map(String);
    assert.equal(exec, `mastra-image\nNAME=mastra-image-test\n${WORKDIR}\n`);
    assert.match(read, /shipped in the image/);
    assert.match(write, /agent\.sh/);
    assert.match(list, /agent\.sh/);
    assert.match(list, /readme\.txt/);
    assert.match(started, /^Started background process \(PID: \S+\)$/);
    assert.ok(bgPid);
    assert.match(output, new RegExp(`agent ran in ${WORKDIR} on mastra-image\nbg-done`));
    assert.match(output, /Exit code: 2/);
    assert.equal((await sandbox.executeCommand('cat agent.sh')).stdout, 'echo "agent ran in $(pwd) on $(cat /marker)"\n');
  });
});
