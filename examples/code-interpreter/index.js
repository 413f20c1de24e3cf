// Example: a Mastra Agent with the code interpreter tools of mastra-opensandbox.
//   node examples/code-interpreter/index.js
// Against a real OpenSandbox server set OPEN_SANDBOX_DOMAIN (and OPEN_SANDBOX_API_KEY, and SANDBOX_IMAGE to a
// code-interpreter image); without it, the package's local OpenSandbox-compatible server is started here.
// With MODEL set (e.g. "openai/gpt-4o-mini", provider key in the environment) a real model drives the agent;
// without it a scripted model makes the tool calls, so the example runs offline.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Agent } from '@mastra/core/agent';
import { OpenSandboxSandbox, createCodeInterpreterTools } from '../../lib/index.js';

process.env.MASTRA_TELEMETRY_DISABLED ??= '1';

async function localServer() {
  const { startServer } = await import('../../lib/dev-server/index.js');
  const server = await startServer({ port: 0 });
  console.log(`local OpenSandbox-compatible server on ${server.domain}`);
  return server;
}

async function pickModel() {
  if (process.env.MODEL) return process.env.MODEL;
  const { createScriptedModel } = await import('../../test/helpers/scripted-model.js');
  let mean;
  return createScriptedModel([
    { toolCall: { toolName: 'run_code', input: { code: 'data = [3, 1, 4, 1, 5, 9, 2, 6]\nprint("loaded", len(data), "values")' } } },
    { toolCall: { toolName: 'run_code', input: { code: 'sum(data) / len(data)' } } },
    (ctx) => {
      mean = JSON.parse(ctx.lastToolResult).result; // the tool result the model got
      return { toolCall: { toolName: 'run_code', input: { code: 'import matplotlib.pyplot as plt\nplt.bar(range(len(data)), data)\nplt.show()' } } };
    },
    () => ({ text: `The mean is ${mean}; the chart is attached.` }),
  ]);
}

const server = process.env.OPEN_SANDBOX_DOMAIN ? undefined : await localServer();
const sandbox = new OpenSandboxSandbox({
  domain: process.env.OPEN_SANDBOX_DOMAIN ?? server.domain,
  apiKey: process.env.OPEN_SANDBOX_API_KEY,
  ...(process.env.SANDBOX_IMAGE ? { image: process.env.SANDBOX_IMAGE } : {}),
});
const outDir = fs.mkdtempSync(path.join(os.tmpdir(), 'code-interpreter-example-'));

const tools = createCodeInterpreterTools(sandbox, {
  languages: ['python', 'javascript', 'bash'],
  timeoutMs: 30000,
  // The model gets a compact result; the application gets everything, e.g. the chart images.
  onResult: ({ result }) => {
    for (const [i, bundle] of result.results.entries()) {
      if (typeof bundle['image/png'] !== 'string') continue;
      const file = path.join(outDir, `cell-${result.executionCount}-${i}.png`);
      fs.writeFileSync(file, Buffer.from(bundle['image/png'], 'base64'));
      console.log(`  [app] saved ${file}`);
    }
  },
});

try {
  const agent = new Agent({
    id: 'code-interpreter-example',
    name: 'Data analyst',
    instructions: 'You analyse data with the run_code tool (Python). State persists between calls.',
    model: await pickModel(),
    tools,
  });
  const out = await agent.stream('Load the data [3,1,4,1,5,9,2,6], give me its mean and plot it.', { maxSteps: 6 });
  for await (const chunk of out.fullStream) {
    if (chunk.type === 'data-code-stdout') process.stdout.write(`  [cell stdout] ${chunk.data.output}`);
    if (chunk.type === 'tool-result') console.log(`  [tool result] ${JSON.stringify(chunk.payload?.result ?? chunk.result)}`);
  }
  console.log(`agent: ${await out.text}`);
} finally {
  await sandbox.destroy();
  await server?.close();
}
