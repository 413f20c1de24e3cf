// A real Mastra Agent (scripted model) whose Workspace has an OpenSandboxSandbox and an OpenSandboxFilesystem on
// it: Mastra's own file tools write, read, edit, grep and list files inside the sandbox, then execute_command runs
// the file the agent wrote. Every tool result is asserted exactly where Mastra's output is stable.
import assert from 'node:assert/strict';
import { Agent } from '@mastra/core/agent';
import { Workspace, WORKSPACE_TOOLS } from '@mastra/core/workspace';
import { startServer } from '../lib/dev-server/index.js';
import { OpenSandboxSandbox, OpenSandboxFilesystem } from '../lib/index.js';
import { createScriptedModel } from './helpers/scripted-model.js';

const { READ_FILE, WRITE_FILE, EDIT_FILE, LIST_FILES, GREP } = WORKSPACE_TOOLS.FILESYSTEM;
const { EXECUTE_COMMAND } = WORKSPACE_TOOLS.SANDBOX;

describe('Mastra Agent with OpenSandboxFilesystem', function () {
  this.timeout(90000);
  let server;
  let workspace;
  let sandbox;

  before(async function () {
    this.timeout(60000);
    process.env.MASTRA_TELEMETRY_DISABLED = '1';
    server = await startServer({ port: 0 });
    sandbox = new OpenSandboxSandbox({ domain: server.domain });
    workspace = new Workspace({ sandbox, filesystem: new OpenSandboxFilesystem({ sandbox }) });
  });
  after(async function () {
    this.timeout(60000);
    await workspace?.destroy();
    await server?.close();
  });

  it('writes, reads, edits, greps and lists with Mastra tools, then runs the file with execute_command', async () => {
    const results = [];
    const step = (toolName, input) => ctx => {
      if (ctx.callIndex > 0) results.push(ctx.lastToolResult);
      return { toolCall: { toolName, input } };
    };
    const model = createScriptedModel([
      step(WRITE_FILE, { path: 'app/greet.sh', content: '#!/bin/sh\n# TODO: greet\necho "hello $1"\n' }),
      step(WRITE_FILE, { path: 'app/lib/util.sh', content: 'helper() { echo TODO-later; }\n' }),
      step(READ_FILE, { path: 'app/greet.sh' }),
      step(EDIT_FILE, { path: 'app/greet.sh', old_string: 'echo "hello $1"', new_string: 'echo "hello, $1!"' }),
      step(GREP, { pattern: 'TODO', path: 'app' }),
      step(LIST_FILES, { path: 'app' }),
      step(EXECUTE_COMMAND, { command: 'sh app/greet.sh world' }),
      ctx => {
        results.push(ctx.lastToolResult);
        return { text: 'done' };
      },
    ]);
    const agent = new Agent({ id: 'osb-fs-agent', name: 'files agent', instructions: 'Work on the files.', model, workspace });
    const res = await agent.generate('Write and run a script.', { maxSteps: 10 });
    assert.equal(res.text, 'done');
    const [write1, write2, read, edit, grep, list, exec] = results;
    assert.match(write1, /app\/greet\.sh/);
    assert.match(write2, /app\/lib\/util\.sh/);
    assert.match(read, /echo "hello \$1"/);
    assert.match(edit, /app\/greet\.sh/);
    assert.doesNotMatch(edit, /error/i);
    // Mastra's grep output: path:line:column: text, for both files
    assert.match(grep, /^2 matches across 2 files\n/);
    assert.match(grep, /app\/greet\.sh:2:3: # TODO: greet/);
    assert.match(grep, /app\/lib\/util\.sh:1:17: helper\(\) \{ echo TODO-later; \}/);
    assert.match(list, /greet\.sh/);
    assert.match(list, /lib/);
    assert.match(list, /util\.sh/);
    assert.match(exec, /hello, world!/);
    // the files really are the sandbox's: a command sees the edited content
    const r = await sandbox.executeCommand('cat app/greet.sh');
    assert.equal(r.stdout, '#!/bin/sh\n# TODO: greet\necho "hello, $1!"\n');
    // the model was offered Mastra's file tools next to execute_command and got the filesystem's instructions
    const tools = (model.calls[0].tools ?? []).map(t => t.name);
    for (const t of [READ_FILE, WRITE_FILE, EDIT_FILE, LIST_FILES, GREP, EXECUTE_COMMAND]) assert.ok(tools.includes(t), `${t} in ${tools}`);
    const system = model.calls[0].prompt.filter(m => m.role === 'system').map(m => m.content).join('\n');
    assert.match(system, /OpenSandbox sandbox filesystem at "\/workspace"/);
  });
});
