// Mastra's Workspace({ lsp }) on OpenSandboxSandbox: typescript-language-server (the typescript and
// typescript-language-server devDependencies, reaching the sandbox through a read-only host volume, as a user would
// provide them in an image or a volume) runs inside the sandbox through openSandboxLspServers(). A real Agent
// (scripted model) writes a file with a type error and gets the server's diagnostics in the write_file result, fixes
// it with edit_file and gets none; the server outlives its watchdog's first checks (Mastra's initialize carries the
// host's pid, which the wrapper replaces with its own). Without the wrapper the same server exits on its own. pylsp
// (Debian's python3-pylsp and python3-pyflakes, installed by scripts/setup.sh, seen in the sandbox's /usr) the same way.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Agent } from '@mastra/core/agent';
import { Workspace, WORKSPACE_TOOLS } from '@mastra/core/workspace';
import { startServer } from '../lib/dev-server/index.js';
import { OpenSandboxSandbox, OpenSandboxFilesystem, openSandboxLspServers, withSandboxParent, PARENT_WRAPPER } from '../lib/index.js';
import { createScriptedModel } from './helpers/scripted-model.js';
import { waitFor } from './helpers/poll.js';

const { WRITE_FILE, EDIT_FILE } = WORKSPACE_TOOLS.FILESYSTEM;
const nodeModules = fs.realpathSync(fileURLToPath(new URL('../node_modules', import.meta.url)));
const TOOLS = '/opt/lsp/node_modules';
const TSLS = `${TOOLS}/typescript-language-server/lib/cli.mjs`;
const BAD = 'export const answer: number = "forty-two";\n';
const TYPE_ERROR = `\n\nLSP Diagnostics:\nErrors:\n  1:14 - Type 'string' is not assignable to type 'number'. [typescript]`;

describe('Mastra LSP on OpenSandboxSandbox (typescript-language-server and pylsp in the sandbox)', function () {
  this.timeout(120000);
  let server;
  const made = [];

  before(async function () {
    this.timeout(60000);
    process.env.MASTRA_TELEMETRY_DISABLED = '1';
    server = await startServer({ port: 0, allowedHostPaths: [nodeModules] });
  });
  afterEach(async function () {
    this.timeout(60000);
    for (const w of made.splice(0)) await w.destroy().catch(() => {});
  });
  after(async function () {
    this.timeout(60000);
    await server?.close();
  });

  async function workspaceWith(servers, diagnosticTimeout = 60000, initTimeout = 60000) {
    const sandbox = new OpenSandboxSandbox({
      domain: server.domain,
      volumes: [{ name: 'lsp-tools', host: { path: nodeModules }, mountPath: TOOLS, readOnly: true }],
    });
    // initTimeout: a cold server start (node loading typescript in a one-core sandbox) gets as long as the first
    // diagnostics; Mastra's 15 s default would be a timed assertion on a loaded machine
    const workspace = new Workspace({ sandbox, filesystem: new OpenSandboxFilesystem({ sandbox }), lsp: { root: '/workspace', servers, diagnosticTimeout, initTimeout } });
    made.push(workspace);
    // the project's marker: Mastra walks up from the file to the first tsconfig.json/package.json, and a walk past
    // the filesystem's basePath is refused (contained mode, as with LocalFilesystem)
    await sandbox.writeFiles([{ path: 'tsconfig.json', content: '{ "compilerOptions": { "strict": true, "noEmit": true } }\n' }]);
    return { sandbox, workspace };
  }

  /** The sandbox's typescript-language-server processes: [{ pid, seconds running }] from ps. */
  async function serverProcs(sandbox) {
    const r = await sandbox.executeCommand(`ps -eo pid=,etimes=,args= | awk '$3 == "node" && $4 == "${TSLS}" { print $1, $2 }'`);
    assert.equal(r.exitCode, 0, r.stderr);
    return r.stdout.split('\n').filter(Boolean).map(l => l.split(' ')).map(([pid, secs]) => ({ pid: Number(pid), secs: Number(secs) }));
  }

  it('the wrapper (in the sandbox, around cat) rewrites only the initialize processId, to its own pid; options are checked', async () => {
    assert.ok(!PARENT_WRAPPER.includes("'"));
    assert.equal(withSandboxParent('pyright-langserver --stdio', '/usr/bin/node'), `/usr/bin/node -e '${PARENT_WRAPPER}' -- pyright-langserver --stdio`);
    assert.throws(() => openSandboxLspServers({ typescript: '' }), /typescript must be a non-empty string/);
    assert.throws(() => openSandboxLspServers({ pyhton: 'pylsp' }), /unknown option pyhton/);
    assert.deepEqual(Object.keys(openSandboxLspServers({ python: false })), ['typescript']);
    const defaults = openSandboxLspServers();
    assert.equal(defaults.typescript.command, withSandboxParent('typescript-language-server --stdio'));
    assert.equal(defaults.typescript.initializationOptions, undefined);
    assert.equal(defaults.python.command, 'pylsp');
    const given = openSandboxLspServers({ typescript: '/opt/tsls', tsserverPath: '/opt/ts/lib/tsserver.js', python: '/usr/bin/pylsp -v', node: '/opt/node/bin/node' });
    assert.equal(given.typescript.command, withSandboxParent('/opt/tsls --stdio', '/opt/node/bin/node'));
    assert.deepEqual(given.typescript.initializationOptions, { tsserver: { path: '/opt/ts/lib/tsserver.js', logVerbosity: 'off' } });
    assert.equal(given.python.command, '/usr/bin/pylsp -v');

    const sandbox = new OpenSandboxSandbox({ domain: server.domain });
    made.push({ destroy: () => sandbox._destroy() });
    const frame = (m) => `Content-Length: ${Buffer.byteLength(JSON.stringify(m))}\r\n\r\n${JSON.stringify(m)}`;
    const init = { jsonrpc: '2.0', id: 1, method: 'initialize', params: { processId: process.pid, rootUri: 'file:///workspace', capabilities: {} } };
    const next = frame({ jsonrpc: '2.0', method: 'initialized', params: { processId: process.pid, text: 'é' } });
    // $BASHPID: the shell that execs the wrapper (the command runs in a subshell of the process wrapper, whose pid $$ is)
    const h = await sandbox.processes.spawn(`echo "wrapper $BASHPID" >&2; exec ${withSandboxParent('cat')}`);
    const wire = frame(init) + next;
    // split inside the header, inside the body, and with the next frame glued to the end of the first
    for (const piece of [wire.slice(0, 7), wire.slice(7, 40), wire.slice(40, frame(init).length + 5), wire.slice(frame(init).length + 5)]) await h.sendStdin(piece);
    await h.closeStdin();
    const r = await h.wait();
    assert.equal(r.exitCode, 0, r.stderr);
    const wrapperPid = Number(/^wrapper (\d+)$/m.exec(r.stderr)[1]);
    assert.notEqual(wrapperPid, process.pid);
    assert.equal(r.stdout, frame({ ...init, params: { ...init.params, processId: wrapperPid } }) + next);
    const other = await sandbox.processes.spawn(withSandboxParent('cat'));
    await other.sendStdin(next + next);
    await other.closeStdin();
    assert.equal((await other.wait()).stdout, next + next);
    // the server's end is the wrapper's: its exit code, its signal (re-raised past the wrapper's own handler)
    const exits = await sandbox.processes.spawn(withSandboxParent('sh -c "exit 7"'));
    assert.equal((await exits.wait()).exitCode, 7);
    const killed = await sandbox.processes.spawn(withSandboxParent(`sh -c 'kill -TERM $$'`));
    assert.equal((await killed.wait()).exitCode, 143);
  });

  it('an Agent gets the type error after write_file and none after the fix; the server stays up past its watchdog', async () => {
    const { sandbox, workspace } = await workspaceWith(openSandboxLspServers({ typescript: `node ${TSLS}`, python: false }));
    const results = [];
    const model = createScriptedModel([
      { toolCall: { toolName: WRITE_FILE, input: { path: 'src/answer.ts', content: BAD } } },
      ctx => {
        results.push(ctx.lastToolResult);
        return { toolCall: { toolName: EDIT_FILE, input: { path: 'src/answer.ts', old_string: '"forty-two"', new_string: '42' } } };
      },
      ctx => {
        results.push(ctx.lastToolResult);
        return { text: 'fixed' };
      },
    ]);
    // the first diagnostics wait for tsserver to load the project (seconds on a loaded machine): warm it up, as an
    // agent's first edit would, within Mastra's 10 s per-edit cap only once it is warm
    const warm = await workspace.lsp.getDiagnostics('/workspace/src/warm.ts', 'export const warm: boolean = 1;\n');
    assert.deepEqual(warm.map(d => [d.line, d.character, d.message]), [[1, 14, "Type 'number' is not assignable to type 'boolean'."]]);
    const agent = new Agent({ id: 'osb-lsp-agent', name: 'lsp agent', instructions: 'Fix type errors.', model, workspace });
    const res = await agent.generate('Write src/answer.ts and fix its type errors.', { maxSteps: 5 });
    assert.equal(res.text, 'fixed');
    assert.equal(results.length, 2);
    assert.ok(results[0].endsWith(TYPE_ERROR), results[0]);
    assert.doesNotMatch(results[1], /LSP Diagnostics/);
    assert.equal(await sandbox.executeCommand('cat src/answer.ts').then(r => r.stdout), 'export const answer: number = 42;\n');

    // the watchdog checks every 3 s: the same server is still running after 7 s, and answers the next edit
    const [first] = await serverProcs(sandbox);
    assert.ok(first, 'typescript-language-server is running in the sandbox');
    const later = await waitFor(async () => {
      const procs = await serverProcs(sandbox);
      return procs.length === 0 || procs[0].secs >= 7 ? procs : undefined;
    }, { timeoutMs: 30000, intervalMs: 500, message: 'the server to run for 7 s' });
    assert.deepEqual(later.map(p => p.pid), [first.pid]);
    const again = await workspace.lsp.getDiagnostics('/workspace/src/answer.ts', BAD);
    assert.deepEqual(again.map(d => [d.severity, d.line, d.character, d.message]), [['error', 1, 14, "Type 'string' is not assignable to type 'number'."]]);
  });

  it('pylsp (Debian python3-pylsp with pyflakes, in the sandbox image): an Agent gets the undefined name after write_file, none after the fix', async () => {
    const { sandbox, workspace } = await workspaceWith(openSandboxLspServers({ typescript: false }));
    await sandbox.writeFiles([{ path: 'py/pyproject.toml', content: '[project]\nname = "demo"\n' }]);
    const warm = await workspace.lsp.getDiagnostics('/workspace/py/warm.py', 'print(warm_up)\n');
    assert.deepEqual(warm.map(d => [d.severity, d.line, d.character, d.message, d.source]), [['error', 1, 7, "undefined name 'warm_up'", 'pyflakes']]);
    const results = [];
    const model = createScriptedModel([
      { toolCall: { toolName: WRITE_FILE, input: { path: 'py/app.py', content: 'def greet():\n    return gretting\n' } } },
      ctx => {
        results.push(ctx.lastToolResult);
        return { toolCall: { toolName: EDIT_FILE, input: { path: 'py/app.py', old_string: 'gretting', new_string: '"hello"' } } };
      },
      ctx => {
        results.push(ctx.lastToolResult);
        return { text: 'fixed' };
      },
    ]);
    const agent = new Agent({ id: 'osb-pylsp-agent', name: 'pylsp agent', instructions: 'Fix errors.', model, workspace });
    const res = await agent.generate('Write py/app.py and fix its errors.', { maxSteps: 5 });
    assert.equal(res.text, 'fixed');
    assert.ok(results[0].endsWith(`\n\nLSP Diagnostics:\nErrors:\n  2:12 - undefined name 'gretting' [pyflakes]`), results[0]);
    assert.doesNotMatch(results[1], /LSP Diagnostics/);
  });

  it('without the wrapper the same server exits at its first watchdog check (the host pid is not in the sandbox)', async () => {
    const servers = openSandboxLspServers({ python: false });
    servers.typescript.command = `node ${TSLS} --stdio`;
    const { sandbox, workspace } = await workspaceWith(servers, 5000, 15000); // Mastra's default initTimeout
    await workspace.init();
    const diagnostics = workspace.lsp.getDiagnostics('/workspace/src/answer.ts', BAD);
    const started = await waitFor(async () => ((await serverProcs(sandbox)).length === 1 ? true : undefined), { timeoutMs: 30000, intervalMs: 200, message: 'the unwrapped server to start' });
    assert.equal(started, true);
    const gone = await waitFor(async () => ((await serverProcs(sandbox)).length === 0 ? true : undefined), { timeoutMs: 30000, intervalMs: 500, message: 'the unwrapped server to exit' });
    assert.deepEqual(await diagnostics, []);
    assert.equal(gone, true);
  });
});
