// Package entry of mastra-opensandbox: the Mastra sandbox class backed by OpenSandbox, its Editor provider, and its typed errors.
export { OpenSandboxSandbox } from './sandbox.js';
export { MOUNTS_LABEL } from './mounts.js';
export { OpenSandboxFilesystem } from './filesystem.js';
export { openSandboxLspServers, withSandboxParent, PARENT_WRAPPER } from './lsp.js';
export {
  openSandboxProvider,
  sandboxProviders,
  openSandboxConfigSchema,
  validateStoredConfig,
  openSandboxFilesystemProvider,
  filesystemProviders,
  openSandboxProviders,
  openSandboxFilesystemConfigSchema,
  validateStoredFilesystemConfig,
} from './provider.js';
export { Template, OpenSandboxTemplate, TEMPLATE_PREFIX, TEMPLATE_BUILD_LABEL } from './template.js';
export { CHECKPOINT_PREFIX, DEFAULT_KEEP_CHECKPOINTS } from './checkpoints.js';
export { LOGICAL_ID_LABEL, encodeLogicalId } from './labels.js';
export { OpenSandboxProcessManager, OpenSandboxProcessHandle, DEFAULT_MAX_RETAINED_BYTES, UNKNOWN_EXIT_CODE } from './process-manager.js';
export {
  OpenSandboxError,
  OpenSandboxOptionError,
  OpenSandboxApiError,
  OpenSandboxNotFoundError,
  OpenSandboxSandboxGoneError,
  OpenSandboxStreamError,
  OpenSandboxTransportError,
  OpenSandboxTimeoutError,
  OpenSandboxProtocolError,
  OpenSandboxCancelledError,
  OpenSandboxUnsupportedError,
  OpenSandboxSnapshotError,
  OpenSandboxTemplateBuildError,
} from './errors.js';
export {
  CodeInterpreter,
  OpenSandboxContextNotFoundError,
  createCodeInterpreterTools,
  CODE_INTERPRETER_TOOLS,
  CODE_LANGUAGES,
  DEFAULT_CODE_LANGUAGES,
} from './code-interpreter.js';
