// Reusable templates on OpenSandbox snapshots. `Template()` records build steps; their definition (base image,
// steps, family — never the values of ephemeral envs) is hashed into a content id. The first start that needs a
// template builds it: a base sandbox (labelled mastra.ai/template-build) runs the steps, is snapshotted under the
// name `mastra.template.<family>.<id>` and deleted; later starts create from that snapshot at once. While a build
// runs (in this process, or a labelled builder sandbox elsewhere), other starts use the newest Ready member of the
// same family (or the base image) and report `templatePending`.
import { createHash } from 'node:crypto';
import { OpenSandboxOptionError, OpenSandboxTemplateBuildError } from './errors.js';
import { shellQuote } from './shell.js';
import { buildTemplateStandalone } from './template-standalone.js';

export const TEMPLATE_PREFIX = 'mastra.template.';
/** Metadata label of a builder sandbox: the template id it builds (cross-process "build running" marker). */
export const TEMPLATE_BUILD_LABEL = 'mastra.ai/template-build';
export const DEFAULT_TEMPLATE_IMAGE = 'ubuntu:22.04';
/** Working directory of the build steps before any setWorkdir (the sandbox default). */
const DEFAULT_BUILD_WORKDIR = '/workspace';
const FAMILY_RE = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;
const ENV_KEY_RE = /^[A-Za-z_][A-Za-z0-9_]*$/;
const PKG_RE = /^[A-Za-z0-9@][A-Za-z0-9@._+:=<>~^/-]*$/;

const STORED_EPHEMERAL = Symbol('storedEphemeral');
const isPlainObject = v => v !== null && typeof v === 'object' && !Array.isArray(v);

function fail(option, message) {
  throw new OpenSandboxOptionError(option, message);
}

function packages(method, list) {
  const pkgs = Array.isArray(list) ? list : [list];
  if (pkgs.length === 0 || pkgs.some(p => typeof p !== 'string' || !PKG_RE.test(p))) {
    fail(`template.${method}`, `expected package names (a string or an array of strings like "jq", "requests==2.32.3", "@scope/pkg@1"), got ${JSON.stringify(list)}`);
  }
  return [...pkgs];
}

/**
 * A check run before a package-manager step: the directory it installs into must be writable, else the step fails
 * with a message saying why (the local dev server's default, images 'host', mounts the host system read-only).
 */
function writableGuard(step, dirExpr) {
  const msg = `${step} needs the image's package manager, but its install directory $d is not writable in this sandbox ` +
    "(the local dev server runs sandboxes on the host system, mounted read-only, unless started with images 'run'). Use " +
    'an image that has the package manager (a real OpenSandbox server, or the local one with images \'run\'), or runCmd steps that write under /workspace, /tmp or /root.';
  return `d=${dirExpr}; if [ ! -w "$d" ]; then echo "${msg}" >&2; exit 100; fi`;
}

/** The shell command of a package-manager step (guard + install). */
function packageCommand(step) {
  const pkgs = step.packages.map(shellQuote).join(' ');
  switch (step.type) {
    case 'apt':
      return `${writableGuard('aptInstall', '/var/lib/dpkg')} && ` +
        `apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ${pkgs}`;
    case 'pip':
      return `${writableGuard('pipInstall', `"$(python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" 2>/dev/null || echo /usr/lib/python3)"`)} && ` +
        `python3 -m pip install -q ${pkgs}`;
    case 'npm':
      return step.global
        ? `${writableGuard('npmInstall', '"$(npm prefix -g 2>/dev/null || echo /usr/local)/lib"')} && npm install -g --no-audit --no-fund ${pkgs}`
        : `npm install --no-audit --no-fund ${pkgs}`;
    default:
      throw new Error(`unknown package step ${step.type}`);
  }
}

export function describeStep(step) {
  switch (step.type) {
    case 'run': return `runCmd(${JSON.stringify(step.command)})`;
    case 'workdir': return `setWorkdir(${JSON.stringify(step.path)})`;
    case 'env': return `setEnvs(${(step.ephemeral ? step.keys : Object.keys(step.envs)).join(', ')}${step.ephemeral ? ', { ephemeral: true }' : ''})`;
    case 'apt': return `aptInstall(${step.packages.join(' ')})`;
    case 'pip': return `pipInstall(${step.packages.join(' ')})`;
    case 'npm': return `npmInstall(${step.packages.join(' ')}${step.global ? ', { global: true }' : ''})`;
    default: return step.type;
  }
}

/** A template definition: build steps on a base image. Create with `Template()`; methods chain. */
export class OpenSandboxTemplate {
  #image;
  #family = 'default';
  #steps = []; // stored form: ephemeral env steps hold keys only
  #ephemeral = new Map(); // key -> value of ephemeral envs (memory only)

  constructor({ image } = {}) {
    if (image !== undefined && (typeof image !== 'string' || image.trim() === '')) fail('template.image', 'expected a non-empty image reference');
    this.#image = image ?? DEFAULT_TEMPLATE_IMAGE;
  }

  /** Runs a shell command (bash -c) in the current working directory with the envs set so far. */
  runCmd(command) {
    if (typeof command !== 'string' || command.trim() === '') fail('template.runCmd', 'expected a non-empty command string');
    this.#steps.push({ type: 'run', command });
    return this;
  }

  /** Working directory of the following steps (created) and of sandboxes started from the template. */
  setWorkdir(path) {
    if (typeof path !== 'string' || !path.startsWith('/')) fail('template.setWorkdir', `expected an absolute path, got ${JSON.stringify(path)}`);
    this.#steps.push({ type: 'workdir', path: path.length > 1 ? path.replace(/\/+$/, '') : path });
    return this;
  }

  /**
   * Environment of the following steps. Plain envs are part of the template's identity and become the default env
   * of sandboxes started from it; `{ ephemeral: true }` envs are build-only: their values are kept out of the
   * content id and of every stored config (only their names are recorded).
   */
  setEnvs(envs, { ephemeral = false } = {}) {
    if (!isPlainObject(envs) || Object.keys(envs).length === 0) fail('template.setEnvs', 'expected a non-empty object of strings');
    for (const [k, v] of Object.entries(envs)) {
      if (!ENV_KEY_RE.test(k)) fail('template.setEnvs', `invalid variable name ${JSON.stringify(k)}`);
      if (typeof v !== 'string') fail('template.setEnvs', `value of "${k}" must be a string`);
    }
    if (ephemeral) {
      for (const [k, v] of Object.entries(envs)) this.#ephemeral.set(k, v);
      this.#steps.push({ type: 'env', ephemeral: true, keys: Object.keys(envs).sort() });
    } else {
      this.#steps.push({ type: 'env', envs: { ...envs } });
    }
    return this;
  }

  /** A stored ephemeral-env step: names only, no values (Template.fromJSON). */
  [STORED_EPHEMERAL](keys) {
    if (keys.some(k => typeof k !== 'string' || !ENV_KEY_RE.test(k))) fail('template', `invalid ephemeral env names ${JSON.stringify(keys)}`);
    this.#steps.push({ type: 'env', ephemeral: true, keys: [...keys].sort() });
  }

  aptInstall(pkgs) {
    this.#steps.push({ type: 'apt', packages: packages('aptInstall', pkgs) });
    return this;
  }

  pipInstall(pkgs) {
    this.#steps.push({ type: 'pip', packages: packages('pipInstall', pkgs) });
    return this;
  }

  /** `npm install` in the working directory, or `-g` with `{ global: true }`. */
  npmInstall(pkgs, { global = false } = {}) {
    this.#steps.push({ type: 'npm', packages: packages('npmInstall', pkgs), ...(global ? { global: true } : {}) });
    return this;
  }

  /** Family: while this template builds, starts use the newest ready template of the same family. Default 'default'. */
  withFamily(family) {
    if (typeof family !== 'string' || !FAMILY_RE.test(family)) fail('template.withFamily', 'expected 1-63 chars of [a-z0-9-], alphanumeric at both ends');
    this.#family = family;
    return this;
  }

  get image() {
    return this.#image;
  }

  get family() {
    return this.#family;
  }

  /** The steps as stored (ephemeral values left out). */
  get steps() {
    return structuredClone(this.#steps);
  }

  /** Content id: 16 hex chars of sha256 over image, family and steps (never the values of ephemeral envs). */
  get templateId() {
    const canonical = JSON.stringify({ v: 1, image: this.#image, family: this.#family, steps: this.#steps });
    return createHash('sha256').update(canonical).digest('hex').slice(0, 16);
  }

  /** Name of the template's snapshot. */
  get snapshotName() {
    return `${TEMPLATE_PREFIX}${this.#family}.${this.templateId}`;
  }

  /** Envs of sandboxes started from the template (the plain ones, in step order). */
  runtimeEnv() {
    const env = {};
    for (const s of this.#steps) if (s.type === 'env' && !s.ephemeral) Object.assign(env, s.envs);
    return env;
  }

  /** Working directory of sandboxes started from the template, or undefined. */
  workdir() {
    return this.#steps.filter(s => s.type === 'workdir').at(-1)?.path;
  }

  /** The stored definition: no ephemeral values. `Template.fromJSON()` reads it back. */
  toJSON() {
    return { image: this.#image, family: this.#family, steps: this.steps };
  }

  /**
   * The shell commands of the build, in order: [{ step, description, command, cwd, envs }]. Throws
   * OpenSandboxTemplateBuildError when an ephemeral env has no value (a template read back from a stored config).
   */
  buildPlan() {
    const plan = [];
    let cwd = DEFAULT_BUILD_WORKDIR;
    let envs = {};
    this.#steps.forEach((step, i) => {
      const description = describeStep(step);
      if (step.type === 'env') {
        if (step.ephemeral) {
          const missing = step.keys.filter(k => !this.#ephemeral.has(k));
          if (missing.length) {
            throw new OpenSandboxTemplateBuildError(`template ${this.templateId}: step ${i + 1} ${description}: no value for ${missing.join(', ')} ` +
              '(ephemeral values are never stored; build the template from code that sets them)', { templateId: this.templateId, step: i + 1, description });
          }
          envs = { ...envs, ...Object.fromEntries(step.keys.map(k => [k, this.#ephemeral.get(k)])) };
        } else envs = { ...envs, ...step.envs };
        return;
      }
      if (step.type === 'workdir') {
        cwd = step.path;
        plan.push({ step: i + 1, description, command: `mkdir -p ${shellQuote(cwd)}`, cwd: '/', envs });
        return;
      }
      const command = step.type === 'run' ? step.command : packageCommand(step);
      plan.push({ step: i + 1, description, command, cwd, envs });
    });
    return plan;
  }

  /**
   * Builds the template on an OpenSandbox server without provisioning a sandbox for you: `options` are
   * OpenSandboxSandbox connection options (domain, apiKey, resources, networkPolicy, …). A template already built
   * is not built again. Resolves { templateId, snapshotId, built }.
   */
  async build(options = {}) {
    return buildTemplateStandalone(this, options);
  }
}

/** `Template({ image? })`: a new template builder. `Template.fromJSON(definition)` reads a stored definition. */
export function Template(options) {
  return new OpenSandboxTemplate(options);
}

Template.fromJSON = function fromJSON(def) {
  if (def instanceof OpenSandboxTemplate) return def;
  if (!isPlainObject(def) || !Array.isArray(def.steps)) fail('template', 'expected a Template() or its stored definition { image, family, steps }');
  const t = new OpenSandboxTemplate({ image: def.image });
  if (def.family !== undefined) t.withFamily(def.family);
  def.steps.forEach((s, i) => {
    const bad = () => fail('template', `step ${i + 1} is not a template step: ${JSON.stringify(s)}`);
    if (!isPlainObject(s)) bad();
    if (s.type === 'run') t.runCmd(s.command);
    else if (s.type === 'workdir') t.setWorkdir(s.path);
    else if (s.type === 'env' && s.ephemeral === true) {
      if (!Array.isArray(s.keys) || s.keys.length === 0) bad();
      if (s.values !== undefined || s.envs !== undefined) fail('template', `step ${i + 1}: ephemeral env values are never stored`);
      t[STORED_EPHEMERAL](s.keys);
    } else if (s.type === 'env') t.setEnvs(s.envs);
    else if (s.type === 'apt') t.aptInstall(s.packages);
    else if (s.type === 'pip') t.pipInstall(s.packages);
    else if (s.type === 'npm') t.npmInstall(s.packages, { global: s.global === true });
    else bad();
  });
  return t;
};

const builds = new Map(); // `${server}|${snapshotName}` -> promise of the build running in this process
const familyMember = (family, name) => typeof name === 'string' && name.startsWith(`${TEMPLATE_PREFIX}${family}.`);

/**
 * Starts building `template` now (registered synchronously, so concurrent starts in this process see it).
 * ctx: { key, snaps (SnapshotClient), makeBuilder(labels) -> unstarted OpenSandboxSandbox, timeoutMs }.
 * Resolves { snapshotId }. A failed step rejects with OpenSandboxTemplateBuildError (its output attached); the
 * builder sandbox is always deleted.
 */
function startBuild(template, ctx) {
  const run = (async () => {
    const plan = template.buildPlan();
    const templateId = template.templateId;
    const builder = ctx.makeBuilder({ [TEMPLATE_BUILD_LABEL]: templateId });
    try {
      await builder._start();
      for (const step of plan) {
        const r = await builder.executeCommand(step.command, [], { cwd: step.cwd, env: step.envs });
        if (r.exitCode !== 0) {
          const output = (r.stderr || r.stdout || '').trim();
          throw new OpenSandboxTemplateBuildError(
            `template ${templateId}: step ${step.step} ${step.description} failed with exit code ${r.exitCode}${output ? `: ${output}` : ''}`,
            { templateId, step: step.step, description: step.description, exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr, operation: 'build template' });
        }
      }
      const snap = await builder.opensandbox.createSnapshot({ name: template.snapshotName, wait: true, timeoutMs: ctx.timeoutMs });
      return { snapshotId: snap.id };
    } finally {
      await builder._destroy().catch(() => {});
    }
  })();
  builds.set(ctx.key, run);
  run.then(() => builds.delete(ctx.key), () => builds.delete(ctx.key));
  return run;
}

/** Builds the template unless a Ready snapshot of it exists (or joins this process's build). { snapshotId, built }. */
export async function buildTemplate(template, ctx) {
  const ready = await ctx.snaps.newestReady(template.snapshotName);
  if (ready) return { templateId: template.templateId, snapshotId: ready.id, built: false };
  const running = builds.get(ctx.key);
  const { snapshotId } = await (running ?? startBuild(template, ctx));
  return { templateId: template.templateId, snapshotId, built: !running };
}

/**
 * Where a fresh start of a sandbox with this template comes from: { snapshotId?, extra } — the template's snapshot
 * (built now when no build runs anywhere: this start waits for it), or while a build runs (in this process, or
 * `buildRunningElsewhere()`) the newest Ready member of the family, else the base image; then `templatePending`.
 */
export async function templateStart(template, ctx, buildRunningElsewhere) {
  const templateId = template.templateId;
  const ready = await ctx.snaps.newestReady(template.snapshotName);
  if (ready) return { snapshotId: ready.id, extra: { restoredFrom: { kind: 'template', templateId, snapshotId: ready.id } } };
  if (!builds.has(ctx.key) && !(await buildRunningElsewhere()) && !builds.has(ctx.key)) {
    const { snapshotId } = await startBuild(template, ctx);
    return { snapshotId, extra: { restoredFrom: { kind: 'template', templateId, snapshotId }, templateBuilt: true } };
  }
  const members = await ctx.snaps.listAll({ states: ['Ready'], filter: s => familyMember(template.family, s.name) });
  const member = members[0];
  if (!member) return { snapshotId: undefined, extra: { templatePending: true } };
  const memberId = member.name.slice(`${TEMPLATE_PREFIX}${template.family}.`.length);
  return { snapshotId: member.id, extra: { restoredFrom: { kind: 'template', templateId: memberId, snapshotId: member.id }, templatePending: true } };
}
