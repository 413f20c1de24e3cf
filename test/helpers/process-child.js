// Child process of test/process-faults.test.js ("processes survive the client"): attaches to (or creates) the
// sandbox with the given logical id, spawns a background process, prints {"pid"} and exits without stopping
// anything. argv: <domain> <logical id> [early]. "early" exits right after the spawn, before the command is
// started; otherwise it waits until the command has started.
import { OpenSandboxSandbox } from '../../lib/index.js';
import { waitFor } from './poll.js';

const [domain, logicalId, mode] = process.argv.slice(2);
const sandbox = new OpenSandboxSandbox({ domain, id: logicalId });
await sandbox._start();
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
