// The demo flow shared by `npm run demo` (scripts/demo.js) and scripts/agent-test.js: a real Mastra Agent with a
// Workspace on OpenSandboxSandbox and a host mount. The agent writes a program, runs it with streamed output,
// starts a background server, reads its output, reaches it through getPortUrl (the fetch_sandbox_port tool), kills
// it, and the host checks the proof file the server wrote into the mounted folder. Scripted model by default;
// MASTRA_DEMO_MODEL (a Mastra model router string, e.g. openai/gpt-4o-mini, with its provider key) for a real one.
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { z } from 'zod';
import { Agent } from '@mastra/core/agent';
import { createTool } from '@mastra/core/tools';
import { Workspace, LocalFilesystem, WORKSPACE_TOOLS } from '@mastra/core/workspace';
import { OpenSandboxSandbox } from '../../lib/index.js';
import { startServer } from '../../lib/dev-server/index.js';
import { createScriptedModel } from './scripted-model.js';

const { EXECUTE_COMMAND, GET_PROCESS_OUTPUT, KILL_PROCESS } = WORKSPACE_TOOLS.SANDBOX;
const PORT = 8080;
const MOUNT = '/mnt/shared';

const COUNTER = `for (let i = 1; i <= 3; i++) setTimeout(() => console.log('tick ' + i), i * 150);\n`;
const SERVER = [
  "const http = require('http');",
  "const fs = require('fs');",
  'http.createServer((req, res) => {',
  `  fs.writeFileSync('${MOUNT}/proof.txt', 'served ' + req.url + ' from inside the sandbox\\n');`,
  "  console.log('request ' + req.url);",
  "  res.end('proof written for ' + req.url);",
  `}).listen(${PORT}, () => console.log('listening on ${PORT}'));`,
  '',
].join('\n');
const WRITE_PROGRAMS = `mkdir -p /workspace/demo && cat > /workspace/demo/count.js <<'EOF'\n${COUNTER}EOF\ncat > /workspace/demo/server.js <<'EOF'\n${SERVER}EOF\necho programs written`;

const pidOf = text => /PID: (\S+?)\)/.exec(text ?? '')?.[1];

const TASK = `Use the sandbox tools, one step at a time:
1. Run exactly this shell command to write two programs: ${WRITE_PROGRAMS}
2. Run "node /workspace/demo/count.js" in the foreground.
3. Start "node /workspace/demo/server.js" as a background process.
4. Read the background process output until it says "listening on ${PORT}".
5. Call fetch_sandbox_port with port ${PORT} and path /proof.
6. Kill the background process.
Then answer with one sentence summarising what happened.`;

function scriptedModel(sandbox) {
  let pid;
  return createScriptedModel([
    { toolCall: { toolName: EXECUTE_COMMAND, input: { command: WRITE_PROGRAMS } } },
    { toolCall: { toolName: EXECUTE_COMMAND, input: { command: 'node /workspace/demo/count.js' } } },
    { toolCall: { toolName: EXECUTE_COMMAND, input: { command: 'node /workspace/demo/server.js', background: true } } },
    async ctx => {
      pid = pidOf(ctx.lastToolResult);
      const handle = await sandbox.processes.get(pid);
      const deadline = Date.now() + 10000;
      while (handle && !handle.stdout.includes('listening') && Date.now() < deadline) await new Promise(r => setTimeout(r, 50));
      return { toolCall: { toolName: GET_PROCESS_OUTPUT, input: { pid } } };
    },
    { toolCall: { toolName: 'fetch_sandbox_port', input: { port: PORT, path: '/proof' } } },
    () => ({ toolCall: { toolName: KILL_PROCESS, input: { pid } } }),
    ctx => ({ text: `The server answered, wrote the proof file and was stopped. ${String(ctx.lastToolResult).split('\n')[0]}` }),
  ]);
}

function portTool(sandbox) {
  return createTool({
    id: 'fetch_sandbox_port',
    description: 'HTTP GET a path on a port of the sandbox, from the host, through the sandbox networking URL.',
    inputSchema: z.object({ port: z.number().int(), path: z.string() }),
    execute: async ({ port, path: p }) => {
      const url = await sandbox.networking.getPortUrl(port);
      if (!url) return `port ${port} cannot be exposed`;
      const deadline = Date.now() + 10000;
      for (;;) {
        try {
          const res = await fetch(`${url}${p}`, { signal: AbortSignal.timeout(5000) });
          return `GET ${url}${p} -> ${res.status}: ${await res.text()}`;
        } catch (err) {
          if (Date.now() >= deadline) return `GET ${url}${p} failed: ${err.message}`;
          await new Promise(r => setTimeout(r, 100));
        }
      }
    },
  });
}

/** One readable line per tool call: a shell command shows its first line (and how many more there are). */
function describeCall(tool, args) {
  if (typeof args.command === 'string') {
    const lines = args.command.split('\n');
    const more = lines.length > 1 ? ` … (+${lines.length - 1} lines)` : '';
    return `${tool}${args.background ? ' [background]' : ''}: ${lines[0]}${more}`;
  }
  return `${tool} ${JSON.stringify(args)}`;
}

/** Runs the flow. print(line) gets the transcript. Resolves { ok, verdict }. */
export async function runDemo({ print = console.log } = {}) {
  const mountDir = await fs.realpath(await fs.mkdtemp(path.join(os.tmpdir(), 'mastra-opensandbox-demo-')));
  let server;
  let workspace;
  try {
    let domain = process.env.OPEN_SANDBOX_DOMAIN;
    if (!domain) {
      server = await startServer({ port: 0, allowedHostPaths: [mountDir] });
      domain = server.domain;
      print(`local OpenSandbox-compatible server on ${domain} (set OPEN_SANDBOX_DOMAIN to use a real one)`);
    } else {
      print(`OpenSandbox server ${domain} (its [storage].allowed_host_paths must include ${mountDir})`);
    }
    // the programs need node: a node image on a real server (the local server runs the host's node and ignores it)
    const sandbox = new OpenSandboxSandbox({ domain, image: process.env.MASTRA_DEMO_IMAGE || 'node:22-slim' });
    workspace = new Workspace({ sandbox, mounts: { [MOUNT]: new LocalFilesystem({ basePath: mountDir }) } });
    const realModel = process.env.MASTRA_DEMO_MODEL;
    const agent = new Agent({
      id: 'opensandbox-demo',
      name: 'OpenSandbox demo agent',
      instructions: 'You operate a remote Linux sandbox through tools. Follow the task exactly.',
      model: realModel || scriptedModel(sandbox),
      workspace,
      tools: { fetch_sandbox_port: portTool(sandbox) },
    });
    print(`model: ${realModel || 'scripted (set MASTRA_DEMO_MODEL for a real one)'}; host folder ${mountDir} mounted at ${MOUNT}`);

    const out = await agent.stream(TASK, { maxSteps: 12 });
    let streamed = 0;
    for await (const chunk of out.fullStream) {
      const p = chunk.payload ?? {};
      if (chunk.type === 'tool-call') print(`> ${describeCall(p.toolName, p.args ?? {})}`);
      else if (chunk.type === 'data-sandbox-stdout') {
        streamed++;
        print(`  | ${String(p.data?.output ?? chunk.data?.output ?? '').trimEnd()}`);
      } else if (chunk.type === 'tool-result') print(`< ${String(typeof p.result === 'string' ? p.result : JSON.stringify(p.result)).trimEnd().replace(/\n/g, '\n  ')}`);
    }
    const text = await out.text;
    print(`agent: ${text}`);

    const proof = await fs.readFile(path.join(mountDir, 'proof.txt'), 'utf8').catch(() => '');
    const procs = await sandbox.processes.list();
    const checks = {
      'streamed output reached the host': streamed > 0,
      'the server wrote the proof file into the mounted host folder': proof === 'served /proof from inside the sandbox\n',
      'no background process left running': procs.every(p => !p.running),
    };
    for (const [what, ok] of Object.entries(checks)) print(`${ok ? 'ok  ' : 'FAIL'} ${what}`);
    const failed = Object.entries(checks).filter(([, ok]) => !ok).map(([w]) => w);
    return failed.length === 0
      ? { ok: true, verdict: `DEMO OK: an agent ran a program with streamed output, served HTTP from the sandbox through getPortUrl and the host read proof.txt ("${proof.trim()}") from the mounted folder` }
      : { ok: false, verdict: `DEMO FAILED: ${failed.join('; ')}` };
  } catch (err) {
    return { ok: false, verdict: `DEMO FAILED: ${err?.message ?? err}` };
  } finally {
    await workspace?.destroy().catch(() => {});
    await server?.close().catch(() => {});
    await fs.rm(mountDir, { recursive: true, force: true }).catch(() => {});
  }
}
