// Example: host folders mounted into the sandbox. Workspace mounts become OpenSandbox host volumes when the
// sandbox is created (read-only honoured); mounting later cannot work because volumes are fixed at creation.
// A real server must list the folders under [storage].allowed_host_paths (examples/opensandbox-server.dev.toml).
//   node examples/mounts.ts
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Workspace, LocalFilesystem } from '@mastra/core/workspace';
import { OpenSandboxSandbox } from 'mastra-opensandbox';
import { openSandboxServer } from './lib/server.ts';

const root = await fs.realpath(await fs.mkdtemp(path.join(os.tmpdir(), 'mounts-example-')));
const project = path.join(root, 'project');
const config = path.join(root, 'config');
await fs.mkdir(project);
await fs.mkdir(config);
await fs.writeFile(path.join(config, 'settings.json'), '{"mode":"demo"}\n');

const server = await openSandboxServer([root]);
const sandbox = new OpenSandboxSandbox({ domain: server.domain });
const workspace = new Workspace({
  sandbox,
  mounts: {
    '/mnt/project': new LocalFilesystem({ basePath: project }),
    '/mnt/config': new LocalFilesystem({ basePath: config, readOnly: true }),
  },
});
try {
  await workspace.init();
  const r = await sandbox.executeCommand('cat /mnt/config/settings.json && echo "written in the sandbox" > /mnt/project/out.txt');
  console.log('sandbox read:', r.stdout.trim());
  console.log('host sees:', (await fs.readFile(path.join(project, 'out.txt'), 'utf8')).trim());
  const ro = await sandbox.executeCommand('touch /mnt/config/nope');
  console.log('write to the read-only mount:', ro.exitCode === 0 ? 'allowed?!' : ro.stderr.trim());
  console.log('getInfo().mounts:', JSON.stringify((await sandbox.getInfo()).mounts));
  const late = await sandbox.mount(new LocalFilesystem({ basePath: root }), '/mnt/late');
  console.log('late mount:', late.error);
  if (ro.exitCode === 0 || late.success) throw new Error('unexpected mount behaviour');
  console.log('OK mounts');
} finally {
  await workspace.destroy();
  await server.close();
  await fs.rm(root, { recursive: true, force: true });
}
