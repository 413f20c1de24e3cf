// Type check of the package's declarations (compiled by `tsc -p examples`, part of the test command) that also
// runs without a server: every export used with the types a user would write.
//   node examples/types-check.ts
import type { SandboxProvider } from '@mastra/core/editor';
import type { SandboxInfo, SandboxStartResult, CommandResult, MountResult, WorkspaceSandbox, WorkspaceFilesystem, FileEntry } from '@mastra/core/workspace';
import { SandboxError, supportsNetworking } from '@mastra/core/workspace';
import {
  OpenSandboxSandbox, type OpenSandboxSandboxOptions, type OpenSandboxStoredConfig, OpenSandboxFilesystem,
  openSandboxProvider, sandboxProviders, openSandboxConfigSchema, validateStoredConfig,
  LOGICAL_ID_LABEL, MOUNTS_LABEL, encodeLogicalId,
  OpenSandboxError, OpenSandboxOptionError, OpenSandboxApiError, OpenSandboxNotFoundError, OpenSandboxSandboxGoneError,
  OpenSandboxStreamError, OpenSandboxTransportError, OpenSandboxTimeoutError, OpenSandboxProtocolError, OpenSandboxCancelledError,
  OpenSandboxSnapshotError, OpenSandboxTemplateBuildError, Template, type OpenSandboxStartResult, type OpenSandboxSnapshot,
  openSandboxLspServers, withSandboxParent, type OpenSandboxLspServersOptions,
} from 'mastra-opensandbox';
import type { LSPConfig } from '@mastra/core/workspace';

const options: OpenSandboxSandboxOptions = {
  id: 'typed', domain: '127.0.0.1:9', timeoutSeconds: 600, idleTimeoutMinutes: 5, env: { A: '1', B: undefined },
  volumes: [{ name: 'data', mountPath: '/data', host: { path: '/srv/data' }, readOnly: true }],
  onStart: ({ outcome }) => { void outcome; },
};
const sandbox = new OpenSandboxSandbox(options);
const asMastra: WorkspaceSandbox = sandbox;
const provider: SandboxProvider<OpenSandboxStoredConfig> = openSandboxProvider;
const registry: Record<string, SandboxProvider<any>> = sandboxProviders;
const stored: OpenSandboxStoredConfig = validateStoredConfig({ id: 'x', timeoutSeconds: null });
const sibling: OpenSandboxSandbox = sandbox.clone({ env: { C: '3' }, idleTimeoutMinutes: 1, checkpointName: 'c', seedCheckpointName: 'base' });
const template = Template().setWorkdir('/workspace/app').setEnvs({ A: '1' }).setEnvs({ T: 's' }, { ephemeral: true })
  .runCmd('echo hi').npmInstall(['typescript'], { global: true }).withFamily('web');
const templated = new OpenSandboxSandbox({ domain: '127.0.0.1:9', template, keepCheckpoints: 2, snapshotTimeoutMs: 60000 });
const fromStored = new OpenSandboxSandbox({ domain: '127.0.0.1:9', template: Template.fromJSON(template.toJSON()) });
function restored(r: OpenSandboxStartResult): string {
  if (r.restoredFrom?.kind === 'template') return `${r.restoredFrom.templateId}${r.templatePending ? ' (pending)' : ''}`;
  return r.restoredFrom?.snapshotId ?? r.outcome;
}
const snapshotState = (s: OpenSandboxSnapshot): string => s.status.state;
const files: WorkspaceFilesystem = new OpenSandboxFilesystem({ sandbox, basePath: '/workspace/project', readOnly: false });
const ownFiles = new OpenSandboxFilesystem({ id: 'typed', domain: '127.0.0.1:9', maxReadBytes: 1 << 20 });
const sharedSandbox: OpenSandboxSandbox = ownFiles.sandbox;
const listing: ReturnType<typeof ownFiles.readdir> extends Promise<FileEntry[]> ? true : never = true;
void files; void sharedSandbox; void listing;

// signatures only (never called here: they would need a server)
type Calls = [
  ReturnType<typeof sandbox.start> extends Promise<SandboxStartResult> ? true : never,
  ReturnType<typeof sandbox.executeCommand> extends Promise<CommandResult> ? true : never,
  ReturnType<typeof sandbox.getInfo> extends Promise<SandboxInfo> ? true : never,
  ReturnType<typeof sandbox.mount> extends Promise<MountResult> ? true : never,
  ReturnType<typeof sandbox.networking.getPortUrl> extends Promise<string | null> ? true : never,
  ReturnType<typeof sandbox.writeFiles> extends Promise<void> ? true : never,
  ReturnType<typeof sandbox.snapshot> extends Promise<void> ? true : never,
  ReturnType<typeof sandbox.opensandbox.createSnapshot> extends Promise<OpenSandboxSnapshot> ? true : never,
  ReturnType<typeof template.build> extends Promise<{ templateId: string; snapshotId: string; built: boolean }> ? true : never,
];
const calls: Calls = [true, true, true, true, true, true, true, true, true];

function describe(err: unknown): string {
  if (err instanceof OpenSandboxTemplateBuildError) return `step ${err.step} exit ${err.exitCode ?? '?'}: ${err.stderr ?? ''}`;
  if (err instanceof OpenSandboxSnapshotError) return `snapshot ${err.snapshotId ?? '?'} ${err.state ?? ''} ${err.reason ?? ''}`;
  if (err instanceof OpenSandboxSandboxGoneError) return `gone ${err.sandboxId} ${err.status}`;
  if (err instanceof OpenSandboxNotFoundError) return `404 ${err.code}`;
  if (err instanceof OpenSandboxStreamError) return `stream ${err.code}`;
  if (err instanceof OpenSandboxApiError) return `api ${err.status} ${err.code} ${err.serverMessage ?? ''} ${err.requestId ?? ''}`;
  if (err instanceof OpenSandboxTransportError) return `transport after ${err.attempts}`;
  if (err instanceof OpenSandboxTimeoutError) return `timeout ${err.timeoutMs ?? '?'}`;
  if (err instanceof OpenSandboxProtocolError || err instanceof OpenSandboxCancelledError) return err.code;
  if (err instanceof OpenSandboxOptionError) return `option ${err.option}`;
  if (err instanceof OpenSandboxError) return `${err.kind ?? 'internal'} ${err.operation ?? ''}`;
  return String(err);
}

let refused = '';
try {
  openSandboxProvider.createSandbox({ apiKey: 'k' } as unknown as OpenSandboxStoredConfig);
} catch (err) {
  refused = describe(err);
}
const lspOptions: OpenSandboxLspServersOptions = { typescript: '/opt/lsp/node_modules/.bin/typescript-language-server', python: false };
const lsp: LSPConfig = { root: '/workspace', servers: openSandboxLspServers(lspOptions) };
const checks = [
  supportsNetworking(asMastra),
  sandbox.provider === 'opensandbox' && provider.id === 'opensandbox' && registry.opensandbox === openSandboxProvider,
  typeof openSandboxConfigSchema === 'object' && stored.timeoutSeconds === null,
  sibling.id !== sandbox.id && calls.length === 9 && sandbox.supportsCheckpoints,
  template.templateId.length === 16 && fromStored.id !== templated.id && !JSON.stringify(template).includes('"s"'),
  restored({ outcome: 'created', restoredFrom: { kind: 'template', templateId: 't', snapshotId: 's' }, templatePending: true }) === 't (pending)',
  snapshotState({ id: 'a', sandboxId: 'b', status: { state: 'Ready' }, createdAt: '' }) === 'Ready',
  LOGICAL_ID_LABEL === 'mastra.ai/sandbox-id' && MOUNTS_LABEL === 'mastra.ai/mounts' && encodeLogicalId('typed').length <= 63,
  refused === 'option apiKey' && new OpenSandboxOptionError('x', 'y') instanceof SandboxError,
  Object.keys(lsp.servers ?? {}).join() === 'typescript' && withSandboxParent('cat').startsWith("node -e '"),
];
if (checks.some(c => !c)) throw new Error(`types-check failed: ${JSON.stringify(checks)}`);
console.log('OK types-check');
