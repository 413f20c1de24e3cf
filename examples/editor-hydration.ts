// Example: Mastra Editor stored-config hydration. A workspace snapshot taken from a live sandbox is stored as
// JSON (no secrets: the API key comes from OPEN_SANDBOX_API_KEY at hydration) and hydrated into a new sandbox
// that reconnects to the same remote sandbox by its logical id.
//   node examples/editor-hydration.ts
import { MastraEditor } from '@mastra/editor';
import { Workspace } from '@mastra/core/workspace';
import { OpenSandboxSandbox, sandboxProviders } from 'mastra-opensandbox';
import { openSandboxServer } from './lib/server.ts';

const server = await openSandboxServer();
const editor = new MastraEditor({ sandboxes: sandboxProviders });
const live = new OpenSandboxSandbox({ id: `editor-example-${Date.now()}`, domain: server.domain, idleTimeoutMinutes: 15 });
const workspace = new Workspace({ id: 'editor-example', name: 'Editor example', sandbox: live });
try {
  await workspace.init();
  await live.executeCommand('echo "state kept in the remote sandbox" > /workspace/state.txt');

  const stored = JSON.stringify(await editor.workspace.snapshotFromWorkspace(workspace));
  console.log('stored snapshot:', stored);

  const hydrated = await editor.workspace.hydrateSnapshotToWorkspace('editor-example-2', JSON.parse(stored));
  const sandbox = hydrated.sandbox as OpenSandboxSandbox;
  console.log('start outcome:', await sandbox._start());
  const r = await sandbox.executeCommand('cat /workspace/state.txt');
  console.log('hydrated sandbox reads:', r.stdout.trim());
  if (sandbox.opensandbox.sandboxId !== live.opensandbox.sandboxId) throw new Error('not the same remote sandbox');
  console.log('OK editor-hydration');
} finally {
  await workspace.destroy();
  await server.close();
}
