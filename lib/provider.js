// The Mastra Editor provider of OpenSandboxSandbox: `openSandboxProvider` (id 'opensandbox', a JSON-Schema
// configSchema of every serializable option, createSandbox) and `sandboxProviders`, the registry to pass as
// `new MastraEditor({ sandboxes: sandboxProviders })`. Stored configs never hold secrets: the API key and the
// execd token come from the environment at hydration; a stored secret is refused, as are unknown fields and
// wrong types, all before any network call.
import { OpenSandboxSandbox } from './sandbox.js';
import { OpenSandboxFilesystem, SANDBOX_OPTIONS, SHARE_SANDBOX } from './filesystem.js';
import { DEFAULTS } from './options.js';
import { OpenSandboxOptionError } from './errors.js';

const str = (description, extra = {}) => ({ type: 'string', description, ...extra });
const stringMap = description => ({ type: 'object', description, additionalProperties: { type: 'string' } });

/** JSON Schema of the stored config (what getInfo().metadata contains). */
export const openSandboxConfigSchema = Object.freeze({
  $schema: 'http://json-schema.org/draft-07/schema#',
  type: 'object',
  additionalProperties: false,
  properties: {
    id: str('Logical sandbox id: the same id reconnects to the same remote sandbox (metadata label mastra.ai/sandbox-id). Generated when omitted.'),
    domain: str('OpenSandbox lifecycle server: host[:port][/path] or an http(s) URL.', { default: DEFAULTS.domain }),
    protocol: { type: 'string', enum: ['http', 'https'], default: DEFAULTS.protocol, description: 'Scheme of the lifecycle server and execd.' },
    sandboxId: str('Attach to this existing remote sandbox instead of finding/creating one by logical id.'),
    image: {
      description: 'Container image reference (registry credentials cannot be stored).',
      default: DEFAULTS.image,
      oneOf: [{ type: 'string' }, { type: 'object', additionalProperties: false, required: ['uri'], properties: { uri: { type: 'string' } } }],
    },
    entrypoint: { type: 'array', items: { type: 'string' }, minItems: 1, default: [...DEFAULTS.entrypoint], description: 'Container entrypoint.' },
    timeoutSeconds: { type: ['integer', 'null'], minimum: 60, default: DEFAULTS.timeoutSeconds, description: 'Time to live in seconds; null = no expiry.' },
    idleTimeoutMinutes: { type: 'number', exclusiveMinimum: 0, description: 'Expire this long after the last activity; renewed while commands or processes run.' },
    resources: { ...stringMap('Resource limits, e.g. { cpu: "1", memory: "2Gi" }.'), default: { ...DEFAULTS.resources } },
    env: stringMap('Environment variables of every command (do not store secrets here).'),
    metadata: stringMap('Extra metadata labels of the remote sandbox (Kubernetes label syntax).'),
    volumes: {
      type: 'array',
      description: 'OpenSandbox volumes passed through at creation (host, pvc or ossfs; ossfs credentials cannot be stored).',
      items: { type: 'object', required: ['name', 'mountPath'], properties: { name: { type: 'string' }, mountPath: { type: 'string' }, readOnly: { type: 'boolean' }, subPath: { type: 'string' }, host: { type: 'object' }, pvc: { type: 'object' }, ossfs: { type: 'object' } } },
    },
    networkPolicy: { type: 'object', description: 'Egress policy: { defaultAction, egress: [{ action, target }] }.' },
    useServerProxy: { type: 'boolean', default: DEFAULTS.useServerProxy, description: "Reach execd through the lifecycle server's proxy." },
    caFile: str('https/wss: PEM CA bundle to verify the lifecycle server and execd with (default: SSL_CERT_FILE/SSL_CERT_DIR, else the system bundle).'),
    requestTimeoutMs: { type: 'integer', minimum: 1, default: DEFAULTS.requestTimeoutMs, description: 'Deadline of each lifecycle/execd request.' },
    readyTimeoutMs: { type: 'integer', minimum: 1, default: DEFAULTS.readyTimeoutMs, description: 'Deadline for execd to answer /ping once the sandbox runs.' },
    createTimeoutMs: { type: 'integer', minimum: 1, default: DEFAULTS.createTimeoutMs, description: 'Deadline of a create request and of the server\'s own transitions (Pending/Allocated, Pausing, Resuming).' },
    maxRetainedBytes: { type: 'integer', minimum: 0, default: DEFAULTS.maxRetainedBytes, description: 'executeCommand: newest bytes of stdout/stderr kept per stream in the result (older ones dropped and counted).' },
    workingDirectory: str('Default cwd of commands, created on start.', { default: DEFAULTS.workingDirectory }),
    instructions: str('Instructions for the agent about this sandbox ("" = none); default: a description of the sandbox.'),
    checkpointName: { type: ['string', 'null'], description: 'Checkpoint snapshot() captures into and a start without a live sandbox boots from. Default: id; null = no checkpoints.' },
    seedCheckpointName: str('Boot-only fallback checkpoint when checkpointName has none yet.'),
    snapshotId: str('Create the sandbox from this snapshot instead of image.'),
    template: {
      type: 'object',
      description: 'Template definition (Template().toJSON()): base image, family and build steps; ephemeral env values are never stored (only their names).',
      required: ['steps'],
      properties: { image: { type: 'string' }, family: { type: 'string' }, steps: { type: 'array', items: { type: 'object' } } },
    },
    keepCheckpoints: { type: 'integer', minimum: 1, default: DEFAULTS.keepCheckpoints, description: 'Ready checkpoints of a name kept after each snapshot().' },
    snapshotTimeoutMs: { type: 'integer', minimum: 1, default: DEFAULTS.snapshotTimeoutMs, description: 'Deadline of one snapshot() capture.' },
  },
});

const SECRET_FIELDS = new Set(['apiKey', 'execdAccessToken', 'accessToken', 'token', 'password', 'secret', 'credentials', 'auth']);
const OSSFS_SECRETS = ['accessKeyId', 'accessKeySecret'];

const typeName = v => (v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v);
const fail = (field, message) => {
  throw new OpenSandboxOptionError(field, message);
};

function checkType(field, value, schema) {
  const types = [].concat(schema.type ?? []);
  if (schema.oneOf) {
    if (!schema.oneOf.some(s => [].concat(s.type).includes(typeName(value)))) fail(field, `expected ${schema.oneOf.map(s => s.type).join(' or ')}, got ${typeName(value)}`);
    return;
  }
  const t = typeName(value);
  const ok = types.some(ty => ty === t || (ty === 'integer' && t === 'number' && Number.isInteger(value)));
  if (!ok) fail(field, `expected ${types.join(' or ')}, got ${t === 'number' ? JSON.stringify(value) : t}`);
  if (schema.enum && !schema.enum.includes(value)) fail(field, `expected one of ${schema.enum.join(', ')}, got ${JSON.stringify(value)}`);
  if (schema.additionalProperties?.type === 'string' && t === 'object') {
    for (const [k, v] of Object.entries(value)) if (typeof v !== 'string') fail(`${field}.${k}`, `expected a string, got ${typeName(v)}`);
  }
  if (schema.items?.type === 'string' && t === 'array') {
    value.forEach((v, i) => typeof v !== 'string' && fail(`${field}[${i}]`, `expected a string, got ${typeName(v)}`));
  }
}

/**
 * Validates a stored config (JSON) for createSandbox: unknown fields, wrong types and stored secrets are
 * refused with an OpenSandboxOptionError naming the field. Returns a copy.
 */
export function validateStoredConfig(config) {
  if (config === undefined || config === null) return {};
  if (typeof config !== 'object' || Array.isArray(config)) fail('config', `expected an object, got ${typeName(config)}`);
  const props = openSandboxConfigSchema.properties;
  for (const [key, value] of Object.entries(config)) {
    if (SECRET_FIELDS.has(key)) {
      fail(key, 'secrets are never stored in a sandbox config: set OPEN_SANDBOX_API_KEY / OPEN_SANDBOX_EXECD_ACCESS_TOKEN in the environment of the process that hydrates it');
    }
    if (!props[key]) fail(key, `unknown field of the opensandbox provider config (known: ${Object.keys(props).join(', ')})`);
    if (value === undefined) continue;
    checkType(key, value, props[key]);
  }
  if (config.image && typeof config.image === 'object' && config.image.auth !== undefined) {
    fail('image.auth', 'registry credentials are never stored in a sandbox config: use an OpenSandboxSandbox in code for private images');
  }
  (config.volumes ?? []).forEach((v, i) => {
    for (const k of OSSFS_SECRETS) {
      if (v?.ossfs?.[k] !== undefined) fail(`volumes[${i}].ossfs.${k}`, 'credentials are never stored in a sandbox config');
    }
  });
  return structuredClone(config);
}

/** Builds the constructor options from a stored config plus the secrets of the environment. */
export function optionsFromStoredConfig(config, env = process.env) {
  const options = validateStoredConfig(config);
  if (env.OPEN_SANDBOX_API_KEY) options.apiKey = env.OPEN_SANDBOX_API_KEY;
  if (env.OPEN_SANDBOX_EXECD_ACCESS_TOKEN) options.execdAccessToken = env.OPEN_SANDBOX_EXECD_ACCESS_TOKEN;
  return options;
}

export const openSandboxProvider = Object.freeze({
  id: 'opensandbox',
  name: 'OpenSandbox',
  description: 'Remote Linux sandboxes on an OpenSandbox server (Docker or Kubernetes), through a native C client: ' +
    'commands with streamed output, background processes, files, ports, host-volume mounts, reconnect by logical id.',
  configSchema: openSandboxConfigSchema,
  /**
   * Validates the stored config (throws before any network call) and returns an unstarted sandbox — the one
   * openSandboxFilesystemProvider just made for the same stored sandbox config, if any (one shared sandbox).
   */
  createSandbox(config) {
    const options = optionsFromStoredConfig(config);
    return pairedSandbox('sandbox', config, () => ({ sandbox: new OpenSandboxSandbox(options) }));
  },
});

/** The sandbox providers of this package, keyed by id: `new MastraEditor({ sandboxes: sandboxProviders })`. */
export const sandboxProviders = Object.freeze({ [openSandboxProvider.id]: openSandboxProvider });

// ---------------------------------------------------------------- the filesystem provider

const { $schema: _schema, ...sandboxSchema } = openSandboxConfigSchema;

/** JSON Schema of the stored filesystem config (what OpenSandboxFilesystem's getInfo().metadata contains). */
export const openSandboxFilesystemConfigSchema = Object.freeze({
  $schema: 'http://json-schema.org/draft-07/schema#',
  type: 'object',
  additionalProperties: false,
  properties: {
    sandbox: { ...sandboxSchema, description: "The sandbox whose files these are: the opensandbox sandbox provider's config (the same logical id attaches to the same remote sandbox)." },
    basePath: str('Directory inside the sandbox that relative paths resolve against and that confines the filesystem. Default: the sandbox working directory.'),
    contained: { type: 'boolean', default: true, description: 'Refuse paths outside basePath (absolute, .., symlinks).' },
    readOnly: { type: 'boolean', default: false, description: 'Refuse every write.' },
    maxReadBytes: { type: 'integer', minimum: 1, default: 1024 * 1024 * 1024, description: 'Largest file a read may return.' },
    instructions: str('Instructions for the agent about this filesystem; default: a description of it.'),
  },
});

/**
 * Validates a stored filesystem config: unknown fields, wrong types and secrets (also inside `sandbox`, named
 * `sandbox.<field>`) throw OpenSandboxOptionError. Returns a copy.
 */
export function validateStoredFilesystemConfig(config) {
  if (config === undefined || config === null) return {};
  if (typeof config !== 'object' || Array.isArray(config)) fail('config', `expected an object, got ${typeName(config)}`);
  const props = openSandboxFilesystemConfigSchema.properties;
  for (const [key, value] of Object.entries(config)) {
    if (SECRET_FIELDS.has(key)) fail(key, 'secrets are never stored in a filesystem config: set OPEN_SANDBOX_API_KEY / OPEN_SANDBOX_EXECD_ACCESS_TOKEN in the environment');
    if (!props[key]) fail(key, `unknown field of the opensandbox filesystem config (known: ${Object.keys(props).join(', ')})`);
    if (value === undefined || key === 'sandbox') continue;
    checkType(key, value, props[key]);
  }
  try {
    validateStoredConfig(config.sandbox);
  } catch (e) {
    if (e instanceof OpenSandboxOptionError) fail(`sandbox.${e.option}`, e.message.replace(/^Invalid option "[^"]*": /, ''));
    throw e;
  }
  return structuredClone(config);
}

export const openSandboxFilesystemProvider = Object.freeze({
  id: 'opensandbox',
  name: 'OpenSandbox filesystem',
  description: "The files of an OpenSandbox sandbox (execd's files API through a native C client), shared with the sandbox.",
  configSchema: openSandboxFilesystemConfigSchema,
  /**
   * Validates the stored config (throws before any network call) and returns an OpenSandboxFilesystem on the
   * sandbox openSandboxProvider made for the same stored sandbox config, else on a sandbox of its own (which
   * openSandboxProvider may then take: shared from then on). A sandbox of its own that created its remote sandbox
   * is deleted by the filesystem's destroy() (a workspace with no sandbox has nobody else to do it).
   */
  createFilesystem(config) {
    const { sandbox: sandboxConfig, ...own } = validateStoredFilesystemConfig(config);
    const options = optionsFromStoredConfig(sandboxConfig);
    for (const k of Object.keys(own)) if (own[k] === undefined) delete own[k];
    let made;
    const sandbox = pairedSandbox('filesystem', sandboxConfig ?? {}, () => {
      made = new OpenSandboxFilesystem({ ...own, [SANDBOX_OPTIONS]: options });
      return { sandbox: made.sandbox, filesystem: made };
    });
    return made ?? new OpenSandboxFilesystem({ ...own, sandbox });
  },
});

/** The filesystem providers of this package, keyed by id: `new MastraEditor({ filesystems: filesystemProviders })`. */
export const filesystemProviders = Object.freeze({ [openSandboxFilesystemProvider.id]: openSandboxFilesystemProvider });

/** Both kinds in one registry object: `new MastraEditor({ ...openSandboxProviders })`. */
export const openSandboxProviders = Object.freeze({ sandboxes: sandboxProviders, filesystems: filesystemProviders });

// A stored workspace holds the sandbox config twice (its sandbox, and inside its filesystem). Hydration creates the
// filesystem, then the sandbox: the second call for an equal sandbox config (with a logical id) takes the sandbox
// the first one made, once, so both share one OpenSandboxSandbox (a filesystem that made it then leaves it to the
// workspace's sandbox). Weak: a sandbox nobody took is not kept alive.
const unpaired = new Map(); // JSON of the stored sandbox config -> { by, ref: WeakRef<OpenSandboxSandbox>, filesystem?: WeakRef }

const stableJson = v => JSON.stringify(v, (k, x) => (x && typeof x === 'object' && !Array.isArray(x) ? Object.fromEntries(Object.entries(x).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) : x));

/** make() -> { sandbox, filesystem? }: a new sandbox, and the filesystem that made it (if one did). */
function pairedSandbox(by, config, make) {
  if (!config?.id) return make().sandbox; // without a logical id two configs are two sandboxes
  const key = stableJson(config);
  const waiting = unpaired.get(key);
  const sandbox = waiting && waiting.by !== by ? waiting.ref.deref() : undefined;
  if (sandbox && sandbox.status !== 'destroyed') {
    unpaired.delete(key);
    waiting.filesystem?.deref()?.[SHARE_SANDBOX]();
    return sandbox;
  }
  const made = make();
  unpaired.set(key, { by, ref: new WeakRef(made.sandbox), ...(made.filesystem ? { filesystem: new WeakRef(made.filesystem) } : {}) });
  return made.sandbox;
}
