// The three Mastra sandbox process tools driven by a real Agent with a scripted model on OpenSandboxSandbox:
// execute_command with background: true starts a process, get_process_output with wait reads it (live output
// first, then the full output at exit), kill_process kills another one; the kill is confirmed in the sandbox.
import assert from 'node:assert/strict';
import { Agent } from '@mastra/core/agent';
import { Workspace, WORKSPACE_TOOLS } from '@mastra/core/workspace';
import { startServer } from '../lib/dev-server/index.js';
import { OpenSandboxSandbox } from '../lib/index.js';
import { createScriptedModel } from './helpers/scripted-model.js';
import { waitFor } from './helpers/poll.js';

const { EXECUTE_COMMAND, GET_PROCESS_OUTPUT, KILL_PROCESS } = WORKSPACE_TOOLS.SANDBOX;
const pidOf = (text) => /PID: (\S+?)\)/.exec(text ?? '')?.[1];

describe('Mastra Agent: background process tools on OpenSandboxSandbox', function () {
  this.timeout(60000);
  let server;
  let sandbox;
  let workspace;

  before(async function () {
    process.env.MASTRA_TELEMETRY_DISABLED = '1';
    server = await startServer({ port: 0 });
    sandbox = new OpenSandboxSandbox({ domain: server.domain, env: { GREETING: 'hi-from-bg' } });
    workspace = new Workspace({ sandbox });
    await workspace.init();
  });

  after(async function () {
    await workspace?.destroy();
    await server?.close();
  });

  it('starts a background process, reads its output with wait, kills another', async () => {
    let waitPid;
    let sleepPid;
    const model = createScriptedModel([
      { toolCall: { toolName: EXECUTE_COMMAND, input: { command: 'echo "$GREETING"; sleep 0.3; echo finished; exit 3', background: true } } },
      (ctx) => {
        waitPid = pidOf(ctx.lastToolResult);
        return { toolCall: { toolName: GET_PROCESS_OUTPUT, input: { pid: waitPid, wait: true } } };
      },
      { toolCall: { toolName: EXECUTE_COMMAND, input: { command: 'echo bg-started; sleep 30', background: true } } },
      async (ctx) => {
        sleepPid = pidOf(ctx.lastToolResult);
        const h = await sandbox.processes.get(sleepPid);
        await waitFor(() => h?.stdout.includes('bg-started'), { message: 'background output' });
        return { toolCall: { toolName: KILL_PROCESS, input: { pid: sleepPid } } };
      },
      (ctx) => ({ text: `last: ${ctx.lastToolResult}` }),
    ]);
    const agent = new Agent({ id: 'osb-bg', name: 'bg agent', instructions: 'Use the sandbox.', model, workspace });
    const res = await agent.generate('Go.', { maxSteps: 8 });
    const results = (res.steps ?? []).flatMap((s) => s.toolResults ?? []).map((r) => r.payload ?? r);
    const [started, waited, started2, killed] = results.map((r) => String(r.result));
    assert.match(started, /^Started background process \(PID: \S+\)$/);
    assert.ok(waitPid && sleepPid && waitPid !== sleepPid);
    assert.match(waited, /hi-from-bg\nfinished/);
    assert.match(waited, /Exit code: 3/);
    assert.match(started2, /Started background process/);
    assert.match(killed, new RegExp(`Process ${sleepPid.replace(/[.]/g, '\\.')} has been killed`));
    assert.match(killed, /bg-started/);
    assert.match(res.text, /has been killed/);
    // the killed process is gone from the sandbox and from the manager
    const left = await sandbox.executeCommand("pgrep -f 'sleep 3[0]' | wc -l");
    assert.equal(left.stdout.trim(), '0');
    assert.equal(await sandbox.processes.get(sleepPid), undefined);
  });
});
