// The demo flow as a test: runs scripts/lib/demo-flow.js with the scripted model (MASTRA_DEMO_MODEL is ignored
// unless AGENT_TEST_REAL_MODEL=1), prints the transcript only on failure, exits 0 only when every check passed.
process.env.MASTRA_TELEMETRY_DISABLED ??= '1';
if (process.env.AGENT_TEST_REAL_MODEL !== '1') delete process.env.MASTRA_DEMO_MODEL;
const { runDemo } = await import('./lib/demo-flow.js');
const lines = [];
const { ok, verdict } = await runDemo({ print: line => lines.push(line) });
if (!ok) console.log(lines.join('\n'));
console.log(verdict);
process.exit(ok ? 0 : 1);
