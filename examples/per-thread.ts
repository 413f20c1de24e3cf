// Example: one sandbox per memory thread. The Workspace resolves its sandbox per request from the thread id in
// the RequestContext (Mastra's MASTRA_THREAD_ID_KEY) and caches it by that key (sandboxCacheKey), so background
// process tools reach the same sandbox across requests of a thread. The application owns the sandboxes and
// destroys them when a thread ends.
//   node examples/per-thread.ts
import { Agent } from '@mastra/core/agent';
import { RequestContext, MASTRA_THREAD_ID_KEY } from '@mastra/core/request-context';
import { Workspace, WORKSPACE_TOOLS } from '@mastra/core/workspace';
import { OpenSandboxSandbox } from 'mastra-opensandbox';
import { createScriptedModel } from '../scripts/lib/scripted-model.js';
import { openSandboxServer } from './lib/server.ts';

const server = await openSandboxServer();
const sandboxes = new Map<string, OpenSandboxSandbox>();
const threadOf = (rc: RequestContext) => String(rc.get(MASTRA_THREAD_ID_KEY) ?? 'default');

const workspace = new Workspace({
  sandbox: ({ requestContext }) => {
    const thread = threadOf(requestContext);
    let s = sandboxes.get(thread);
    if (!s) {
      // the logical id ties the thread to its remote sandbox, also across restarts of this process
      s = new OpenSandboxSandbox({ id: `thread-${thread}`, domain: server.domain, idleTimeoutMinutes: 30 });
      sandboxes.set(thread, s);
    }
    return s;
  },
  sandboxCacheKey: ({ requestContext }) => threadOf(requestContext),
});

const run = (command: string) => createScriptedModel([
  { toolCall: { toolName: WORKSPACE_TOOLS.SANDBOX.EXECUTE_COMMAND, input: { command } } },
  ({ lastToolResult }) => ({ text: String(lastToolResult).trim() }),
]);

async function ask(thread: string, command: string): Promise<string> {
  const requestContext = new RequestContext();
  requestContext.set(MASTRA_THREAD_ID_KEY, thread);
  const agent = new Agent({ id: 'per-thread', name: 'Per-thread agent', instructions: 'Use the sandbox.', model: process.env.MASTRA_DEMO_MODEL || run(command), workspace });
  const res = await agent.generate(`Run: ${command}`, { maxSteps: 3, requestContext });
  return res.text;
}

try {
  await ask('alice', 'echo alice > /workspace/owner.txt && echo saved');
  await ask('bob', 'echo bob > /workspace/owner.txt && echo saved');
  const a = await ask('alice', 'cat /workspace/owner.txt');
  const b = await ask('bob', 'cat /workspace/owner.txt');
  console.log(`thread alice sees "${a}", thread bob sees "${b}" (${sandboxes.size} sandboxes)`);
  if (a !== 'alice' || b !== 'bob') throw new Error('threads share a sandbox');
  console.log('OK per-thread');
} finally {
  // the application owns resolver-created sandboxes: destroy them when their threads end
  for (const [thread, s] of sandboxes) {
    await s._destroy();
    workspace.clearSandboxCache(thread);
  }
  await server.close();
}
