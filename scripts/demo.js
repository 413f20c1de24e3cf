// The README main command (`npm run demo`): a Mastra agent on an OpenSandbox sandbox, with a readable transcript
// and a one-line verdict; exits non-zero on any failure. See scripts/lib/demo-flow.js for what it does.
process.env.MASTRA_TELEMETRY_DISABLED ??= '1';
const { runDemo } = await import('./lib/demo-flow.js');
const { ok, verdict } = await runDemo();
console.log(verdict);
process.exit(ok ? 0 : 1);
