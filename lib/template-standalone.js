// `template.build(options)`: a template built without a sandbox of the caller's. The build runs through an
// OpenSandboxSandbox configured with the template (never started itself); lib/sandbox.js sits above lib/template.js
// (its starts use templates), so it hands its class down here when it loads and template.js calls down, not up:
// lib/'s imports stay a tree (test/import-cycles.test.js). The package entry loads lib/sandbox.js.
import { OpenSandboxError } from './errors.js';

/** @internal The OpenSandboxSandbox method that builds its template (if not built yet) without provisioning it. */
export const BUILD_TEMPLATE = Symbol('buildTemplate');

let Sandbox = null;

/** @internal lib/sandbox.js registers OpenSandboxSandbox when it loads. */
export function setTemplateSandbox(SandboxClass) {
  Sandbox = SandboxClass;
}

/** Builds `template` through a sandbox configured with it and the connection `options`. */
export function buildTemplateStandalone(template, options = {}) {
  if (options === null || typeof options !== 'object') throw new OpenSandboxError('template.build: options must be an object', 'INVALID_OPTION', { kind: 'option' });
  if (!Sandbox) {
    throw new OpenSandboxError('template.build: OpenSandboxSandbox is not loaded (import Template from the package entry, mastra-opensandbox)',
      'NOT_LOADED', { kind: 'internal', operation: 'build template' });
  }
  return new Sandbox({ ...options, template, checkpointName: null })[BUILD_TEMPLATE]();
}
