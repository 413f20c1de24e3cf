// Example: a Mastra Agent whose file tools work on the sandbox's own files. The Workspace has an OpenSandboxSandbox
// and an OpenSandboxFilesystem sharing it: write_file / edit_file / grep / list_files act inside the sandbox, and
// execute_command runs what the agent wrote.
//   node examples/filesystem-agent.ts
// MASTRA_DEMO_MODEL (e.g. openai/gpt-4o-mini, with its provider key) uses a real model; otherwise a scripted one.
import { Agent } from '@mastra/core/agent';
import { Workspace, WORKSPACE_TOOLS } from '@mastra/core/workspace';
import { OpenSandboxSandbox, OpenSandboxFilesystem } from 'mastra-opensandbox';
import { createScriptedModel } from '../scripts/lib/scripted-model.js';
import { openSandboxServer } from './lib/server.ts';

const { WRITE_FILE, EDIT_FILE, GREP, LIST_FILES, READ_FILE } = WORKSPACE_TOOLS.FILESYSTEM;
const server = await openSandboxServer();
const sandbox = new OpenSandboxSandbox({ domain: server.domain });
const filesystem = new OpenSandboxFilesystem({ sandbox, basePath: '/workspace/project' });
const workspace = new Workspace({ sandbox, filesystem });
const model = process.env.MASTRA_DEMO_MODEL || createScriptedModel([
  { toolCall: { toolName: WRITE_FILE, input: { path: 'fib.sh', content: '#!/bin/sh\na=0 b=1\nfor i in 1 2 3 4 5; do\n  printf "%s " "$a"\n  t=$((a + b)) a=$b b=$t\ndone\necho\n' } } },
  { toolCall: { toolName: READ_FILE, input: { path: 'fib.sh' } } },
  { toolCall: { toolName: EDIT_FILE, input: { path: 'fib.sh', old_string: 'for i in 1 2 3 4 5; do', new_string: 'for i in 1 2 3 4 5 6 7 8 9 10; do' } } },
  { toolCall: { toolName: GREP, input: { pattern: 'for i in', path: '.' } } },
  { toolCall: { toolName: LIST_FILES, input: { path: '.' } } },
  { toolCall: { toolName: WORKSPACE_TOOLS.SANDBOX.EXECUTE_COMMAND, input: { command: 'sh /workspace/project/fib.sh' } } },
  ({ lastToolResult }) => ({ text: `The script printed: ${lastToolResult}` }),
]);
const agent = new Agent({ id: 'files', name: 'Files agent', instructions: 'Write code in the workspace files, then run it.', model, workspace });
try {
  const res = await agent.generate('Write a shell script printing Fibonacci numbers, print the first ten numbers, and run it.', { maxSteps: 10 });
  console.log(res.text);
  if (!res.text.includes('0 1 1 2 3 5 8 13 21 34')) throw new Error('the script did not print the first ten numbers');
  // the same file, read back through the filesystem
  console.log(await filesystem.readFile('fib.sh', { encoding: 'utf8' }));
  console.log('OK filesystem-agent');
} finally {
  await workspace.destroy();
  await server.close();
}
