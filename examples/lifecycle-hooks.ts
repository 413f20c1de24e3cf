// Example: lifecycle hooks and lifetime. onStart/onStop/onDestroy run around start, stop (= pause: files and
// processes survive) and destroy; idleTimeoutMinutes lets an idle sandbox expire while busy ones are renewed;
// clone() makes an unstarted sibling with the same configuration.
//   node examples/lifecycle-hooks.ts
import { OpenSandboxSandbox } from 'mastra-opensandbox';
import { openSandboxServer } from './lib/server.ts';

const server = await openSandboxServer();
const events: string[] = [];
const who = (s: unknown) => (s === sandbox ? 'main' : 'sibling'); // clone() copies the hooks too
const sandbox: OpenSandboxSandbox = new OpenSandboxSandbox({
  domain: server.domain,
  idleTimeoutMinutes: 10,
  onStart: async ({ sandbox: s, outcome }) => {
    events.push(`${who(s)}:start:${outcome}`);
    // runs once the sandbox is running, e.g. to seed files
    await s.writeFiles?.([{ path: 'seed.txt', content: `seeded on ${outcome}\n` }]);
  },
  onStop: ({ sandbox: s }) => { events.push(`${who(s)}:stop`); },
  onDestroy: ({ sandbox: s }) => { events.push(`${who(s)}:destroy`); },
});
const sibling = sandbox.clone({ env: { ROLE: 'sibling' } });
try {
  await sandbox._start();
  console.log((await sandbox.executeCommand('cat seed.txt')).stdout.trim());
  await sandbox._stop(); // paused on the server
  await sandbox._start(); // resumed: the same remote sandbox
  console.log((await sandbox.executeCommand('cat seed.txt')).stdout.trim());
  console.log('expires at (renewed while busy):', (await sandbox.getInfo()).timeoutAt?.toISOString());
  console.log('sibling:', (await sibling.executeCommand('echo "$ROLE"')).stdout.trim(), sibling.id !== sandbox.id ? '(own sandbox)' : '');
  await sandbox._destroy();
  console.log('hooks:', events.join(' -> '));
  if (events.join(',') !== 'main:start:created,main:stop,main:start:connected,sibling:start:created,main:destroy') throw new Error('unexpected hook order');
  console.log('OK lifecycle-hooks');
} finally {
  await sandbox._destroy().catch(() => {});
  await sibling._destroy().catch(() => {});
  await server.close();
}
