// A real Mastra Agent round trip with the packed package, run by scripts/test-packed.sh in the fresh projects that
// installed the tarball next to one @mastra/core version each (the oldest the peer range accepts and the newest 1.x):
// the Agent (scripted model, scripted-model.js copied next to this file) runs a command through the workspace's
// execute_command tool and writes a file through write_file on an OpenSandboxSandbox behind the https front of
// smoke-server.mjs, then the file is read back through the sandbox.
// argv: <CA cert> <CA key> <the @mastra/core version this project must have loaded>. Prints "agent ok <version>".
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { Agent } from '@mastra/core/agent';
import { Workspace, WORKSPACE_TOOLS } from '@mastra/core/workspace';
import { OpenSandboxSandbox, OpenSandboxFilesystem } from 'mastra-opensandbox';
import { createScriptedModel } from './scripted-model.js';
import { startSmokeServer } from './smoke-server.mjs';

const [caFile, keyFile, expected] = process.argv.slice(2);
const deadline = setTimeout(() => {
  console.error('agent: no result within 120 s');
  process.exit(1);
}, 120000);

const version = createRequire(import.meta.url)('@mastra/core/package.json').version;
assert.equal(version, expected, 'the project resolved another @mastra/core');
const server = await startSmokeServer(caFile, keyFile);
const sandbox = new OpenSandboxSandbox({ domain: server.domain, caFile, env: { GREETING: 'hello from the agent' } });
const workspace = new Workspace({ sandbox, filesystem: new OpenSandboxFilesystem({ sandbox }) });
try {
  const model = createScriptedModel([
    { toolCall: { toolName: WORKSPACE_TOOLS.SANDBOX.EXECUTE_COMMAND, input: { command: 'echo "$GREETING"; uname -s' } } },
    ({ lastToolResult }) => ({ toolCall: { toolName: WORKSPACE_TOOLS.FILESYSTEM.WRITE_FILE, input: { path: 'note.txt', content: `ran: ${lastToolResult.includes('hello from the agent')}\n` } } }),
    { text: 'done' },
  ]);
  const agent = new Agent({ id: 'packed', name: 'packed agent', instructions: 'Use the sandbox.', model, workspace });
  const res = await agent.generate('Greet me from the sandbox and leave a note.', { maxSteps: 5 });
  assert.equal(res.text, 'done');
  const results = res.steps.flatMap((s) => s.toolResults ?? []).map((r) => r.payload?.toolName ?? r.toolName);
  assert.deepEqual(results, [WORKSPACE_TOOLS.SANDBOX.EXECUTE_COMMAND, WORKSPACE_TOOLS.FILESYSTEM.WRITE_FILE]);
  const cat = await sandbox.executeCommand('cat', ['note.txt']);
  assert.equal(cat.stdout, 'ran: true\n');
  console.log(`agent ok ${version}`);
} finally {
  await workspace.destroy().catch(() => {});
  await server.close();
  clearTimeout(deadline);
}
