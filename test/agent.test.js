// A real Mastra Agent with a Workspace on OpenSandboxSandbox, driven by a scripted model: the agent runs shell
// commands through the mastra_workspace_execute_command tool in a sandbox of the local OpenSandbox server.
import assert from 'node:assert/strict';
import { Agent } from '@mastra/core/agent';
import { Workspace, WORKSPACE_TOOLS } from '@mastra/core/workspace';
import { startServer } from '../lib/dev-server/index.js';
import { OpenSandboxSandbox } from '../lib/index.js';
import { createScriptedModel } from './helpers/scripted-model.js';

const { EXECUTE_COMMAND } = WORKSPACE_TOOLS.SANDBOX;

describe('Mastra Agent on OpenSandboxSandbox', function () {
  this.timeout(60000);
  let server;
  let workspace;
  let sandbox;

  before(async function () {
    this.timeout(60000);
    process.env.MASTRA_TELEMETRY_DISABLED = '1';
    server = await startServer({ port: 0 });
    sandbox = new OpenSandboxSandbox({ domain: server.domain, env: { GREETING: 'hi-from-opensandbox' } });
    workspace = new Workspace({ sandbox });
  });

  after(async function () {
    this.timeout(60000);
    await workspace?.destroy();
    await server?.close();
  });

  it('runs a command through mastra_workspace_execute_command (generate)', async () => {
    const model = createScriptedModel([
      { toolCall: { toolName: EXECUTE_COMMAND, input: { command: 'echo "$GREETING"; pwd; printf "%s" "$((6*7))"' } } },
      ctx => ({ text: `tool said: ${ctx.lastToolResult}` }),
    ]);
    const agent = new Agent({ id: 'osb-agent', name: 'OpenSandbox agent', instructions: 'Use the sandbox.', model, workspace });
    const res = await agent.generate('Run it.', { maxSteps: 3 });
    // execd delivers output as lines: the unterminated "42" comes back as a line ("42\n")
    assert.equal(res.text, 'tool said: hi-from-opensandbox\n/workspace\n42\n');
    assert.equal(sandbox.status, 'running');
    // the model was offered the tool and got the sandbox's instructions as a system message
    const first = model.calls[0];
    const tools = (first.tools ?? []).map(t => t.name);
    assert.ok(tools.includes(EXECUTE_COMMAND), `tools offered: ${tools}`);
    const system = first.prompt.filter(m => m.role === 'system').map(m => m.content).join('\n');
    assert.match(system, /OpenSandbox sandbox/);
  });

  it('reports a failing command with its exit code, and streams output chunks (stream)', async () => {
    const model = createScriptedModel([
      { toolCall: { toolName: EXECUTE_COMMAND, input: { command: 'echo partial; echo bad >&2; exit 3' } } },
      ctx => ({ text: ctx.lastToolResult }),
    ]);
    const agent = new Agent({ id: 'osb-agent-2', name: 'OpenSandbox agent', instructions: 'Use the sandbox.', model, workspace });
    const out = await agent.stream('Run it.', { maxSteps: 3 });
    const types = [];
    const stdoutChunks = [];
    for await (const chunk of out.fullStream) {
      types.push(chunk.type);
      if (chunk.type === 'data-sandbox-stdout') stdoutChunks.push(chunk.data?.output ?? chunk.data);
    }
    const text = await out.text;
    assert.match(text, /partial/);
    assert.match(text, /bad/);
    assert.match(text, /Exit code: 3/);
    assert.ok(types.includes('tool-result'), `chunk types: ${types}`);
    assert.ok(types.includes('data-sandbox-stdout'), `chunk types: ${types}`);
    assert.ok(types.includes('data-sandbox-exit'), `chunk types: ${types}`);
    assert.ok(stdoutChunks.length >= 1);
  });
});
