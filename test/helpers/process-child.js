// Child process of test/process-faults.test.js ("processes survive the client"): attaches to (or creates) the
// sandbox with the given logical id, spawns a background process, prints {"pid"} and exits without stopping
// anything. argv: <domain> <logical id> [early|ackwait|selfkill]. "selfkill": the command SIGKILLs its wrapper after the spawner is gone. "early" exits right after the spawn, before the command is
// started; "ackwait" spawns with ackWaitSeconds 1 a command that ends after this process is gone (so its wrapper
// gives up waiting for a client and the session ends); otherwise it waits until the command has started.
import { OpenSandboxSandbox, OpenSandboxProcessManager } from '../../lib/index.js';
import { waitFor } from './poll.js';

const [domain, logicalId, mode] = process.argv.slice(2);
const sandbox = new OpenSandboxSandbox({ domain, id: logicalId });
await sandbox._start();
if (mode === 'ackwait') {
  const ep = await sandbox.opensandbox.endpoint(44772);
  const pm = new OpenSandboxProcessManager({ ackWaitSeconds: 1, connection: () => ({ baseUrl: `http://${ep.endpoint}`, headers: ep.headers }) });
  pm.sandbox = sandbox;
  const h = await pm.spawn(`echo started; sleep 0.5; echo ran >> /tmp/${logicalId}.runs; echo done; exit 9`);
  await waitFor(() => h.stdout.startsWith('started\n'), { message: 'the command started' });
  console.log(JSON.stringify({ pid: h.pid }));
  process.exit(0);
}
if (mode === 'selfkill') {
  // the wrapper (the command's $$) is killed while no client is attached: no exit status is ever printed
  const h = await sandbox.processes.spawn(`echo ran >> /tmp/${logicalId}.runs; echo started; sleep 0.5; kill -9 $$`);
  await waitFor(() => h.stdout.startsWith('started\n'), { message: 'the command started' });
  console.log(JSON.stringify({ pid: h.pid }));
  process.exit(0);
}
if (mode === 'early') {
  const h = await sandbox.processes.spawn('echo early-output; exit 7');
  console.log(JSON.stringify({ pid: h.pid }));
  process.exit(0);
}
const h = await sandbox.processes.spawn(
  `echo ran >> /tmp/${logicalId}.runs; echo started; for i in 1 2 3; do echo tick-$i; sleep 0.1; done; ` +
    'while IFS= read -r l; do echo "got $l"; done',
);
await waitFor(() => h.stdout.startsWith('started\n'), { message: 'the command started' });
console.log(JSON.stringify({ pid: h.pid }));
process.exit(0);
