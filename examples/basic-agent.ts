// Example: a Mastra Agent whose Workspace runs on an OpenSandbox sandbox.
//   node examples/basic-agent.ts
// MASTRA_DEMO_MODEL (e.g. openai/gpt-4o-mini, with its provider key) uses a real model; otherwise a scripted one.
import { Agent } from '@mastra/core/agent';
import { Workspace, WORKSPACE_TOOLS } from '@mastra/core/workspace';
import { OpenSandboxSandbox } from 'mastra-opensandbox';
import { createScriptedModel } from '../scripts/lib/scripted-model.js';
import { openSandboxServer } from './lib/server.ts';

const server = await openSandboxServer();
const sandbox = new OpenSandboxSandbox({ domain: server.domain, env: { GREETING: 'hello from OpenSandbox' } });
const workspace = new Workspace({ sandbox });
const model = process.env.MASTRA_DEMO_MODEL || createScriptedModel([
  { toolCall: { toolName: WORKSPACE_TOOLS.SANDBOX.EXECUTE_COMMAND, input: { command: 'echo "$GREETING"; uname -s; pwd' } } },
  ({ lastToolResult }) => ({ text: `The sandbox said: ${lastToolResult}` }),
]);
const agent = new Agent({ id: 'basic', name: 'Basic agent', instructions: 'Run shell commands in the sandbox.', model, workspace });
try {
  const res = await agent.generate('Greet me from the sandbox, then tell me the OS and the working directory.', { maxSteps: 4 });
  console.log(res.text);
  if (!res.text.includes('Linux')) throw new Error('the agent did not report the sandbox OS');
  console.log('OK basic-agent');
} finally {
  await workspace.destroy();
  await server.close();
}
