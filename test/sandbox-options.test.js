// OpenSandboxSandbox construction: option validation (clear typed errors naming the option), defaults,
// domain parsing, logical-id label encoding, shell quoting, getInfo/getInstructions before any start.
// No server needed: nothing here does I/O.
import assert from 'node:assert/strict';
import { SandboxError } from '@mastra/core/workspace';
import { OpenSandboxSandbox, OpenSandboxOptionError, OpenSandboxError, encodeLogicalId, LOGICAL_ID_LABEL } from '../lib/index.js';
import { normalizeOptions } from '../lib/options.js';
import { shellQuote } from '../lib/shell.js';
import { labelProblem } from '../lib/labels.js';
import { parseResources } from '../lib/resources.js';

function rejectsOption(options, option, pattern) {
  assert.throws(() => new OpenSandboxSandbox(options), err => {
    assert.ok(err instanceof OpenSandboxOptionError, `expected OpenSandboxOptionError, got ${err}`);
    assert.ok(err instanceof OpenSandboxError);
    assert.ok(err instanceof SandboxError);
    assert.equal(err.code, 'INVALID_OPTION');
    assert.equal(err.option, option);
    assert.match(err.message, new RegExp(`"${option}"`));
    if (pattern) assert.match(err.message, pattern);
    return true;
  });
}

describe('OpenSandboxSandbox options', () => {
  it('rejects unknown options and wrong types, naming the option', () => {
    rejectsOption({ imagee: 'x' }, 'imagee', /unknown option/);
    rejectsOption({ domain: 42 }, 'domain', /string/);
    rejectsOption({ domain: '' }, 'domain', /empty/);
    rejectsOption({ caFile: '/nonexistent/ca.pem' }, 'caFile', /not a readable file/);
    rejectsOption({ caFile: '/' }, 'caFile', /not a readable file/);
    rejectsOption({ caFile: 7 }, 'caFile', /string/);
    rejectsOption({ domain: 'ftp://x' }, 'domain', /scheme/);
    rejectsOption({ domain: 'http://u:p@h:1' }, 'domain', /credentials/);
    rejectsOption({ protocol: 'ws' }, 'protocol');
    rejectsOption({ domain: 'https://h:1', protocol: 'http' }, 'protocol', /contradicts/);
    rejectsOption({ apiKey: 7 }, 'apiKey');
    rejectsOption({ sandboxId: {} }, 'sandboxId');
    rejectsOption({ image: '' }, 'image');
    rejectsOption({ image: { url: 'x' } }, 'image');
    rejectsOption({ image: { uri: 'x', auth: { username: 'u' } } }, 'image', /auth/);
    rejectsOption({ entrypoint: [] }, 'entrypoint');
    rejectsOption({ entrypoint: 'tail -f /dev/null' }, 'entrypoint');
    rejectsOption({ timeoutSeconds: 59 }, 'timeoutSeconds', />= 60/);
    rejectsOption({ timeoutSeconds: 60.5 }, 'timeoutSeconds');
    rejectsOption({ resources: { cpu: 1 } }, 'resources', /"cpu"/);
    rejectsOption({ resources: {} }, 'resources');
    rejectsOption({ env: { A: 1 } }, 'env', /"A"/);
    rejectsOption({ metadata: { 'bad key!': 'x' } }, 'metadata', /label/);
    rejectsOption({ metadata: { ok: 'x'.repeat(64) } }, 'metadata');
    rejectsOption({ metadata: { 'opensandbox.io/x': 'y' } }, 'metadata', /reserved/);
    rejectsOption({ metadata: { [LOGICAL_ID_LABEL]: 'y' } }, 'metadata', /"id" option/);
    rejectsOption({ volumes: {} }, 'volumes');
    rejectsOption({ volumes: [{ name: 'v', mountPath: 'rel', host: { path: '/x' } }] }, 'volumes', /absolute/);
    rejectsOption({ volumes: [{ name: 'v', mountPath: '/m' }] }, 'volumes', /exactly one/);
    rejectsOption({ networkPolicy: 'deny' }, 'networkPolicy');
    rejectsOption({ useServerProxy: 'yes' }, 'useServerProxy');
    rejectsOption({ requestTimeoutMs: 0 }, 'requestTimeoutMs');
    rejectsOption({ readyTimeoutMs: -5 }, 'readyTimeoutMs');
    rejectsOption({ instructions: 3 }, 'instructions');
    rejectsOption({ onStart: 'x' }, 'onStart');
    rejectsOption({ workingDirectory: 'relative/dir' }, 'workingDirectory', /absolute/);
    assert.throws(() => new OpenSandboxSandbox('x'), OpenSandboxOptionError);
  });

  it('applies the documented defaults', () => {
    const cfg = normalizeOptions({}, {});
    assert.equal(cfg.domain, '127.0.0.1:8080');
    assert.equal(cfg.protocol, 'http');
    assert.equal(cfg.lifecycleBaseUrl, 'http://127.0.0.1:8080/v1');
    assert.equal(cfg.apiKey, undefined);
    assert.equal(cfg.image, 'ubuntu:22.04');
    assert.deepEqual(cfg.entrypoint, ['tail', '-f', '/dev/null']);
    assert.equal(cfg.timeoutSeconds, 600);
    assert.deepEqual(cfg.resources, { cpu: '1', memory: '2Gi' });
    assert.equal(cfg.useServerProxy, false);
    assert.equal(cfg.requestTimeoutMs, 30000);
    assert.equal(cfg.readyTimeoutMs, 30000);
    assert.equal(cfg.workingDirectory, '/workspace');
    assert.match(cfg.id, /^opensandbox-[0-9a-z]+-[0-9a-f]{8}$/);
    assert.equal(normalizeOptions({ timeoutSeconds: null }, {}).timeoutSeconds, null);
  });

  it('reads OPEN_SANDBOX_DOMAIN / OPEN_SANDBOX_API_KEY, options win', () => {
    const env = { OPEN_SANDBOX_DOMAIN: 'sbx.example.com:9000', OPEN_SANDBOX_API_KEY: 'env-key' };
    const a = normalizeOptions({}, env);
    assert.equal(a.lifecycleBaseUrl, 'http://sbx.example.com:9000/v1');
    assert.equal(a.apiKey, 'env-key');
    const b = normalizeOptions({ domain: 'other:1', apiKey: 'opt-key' }, env);
    assert.equal(b.lifecycleBaseUrl, 'http://other:1/v1');
    assert.equal(b.apiKey, 'opt-key');
  });

  it('accepts a full URL as domain, keeps its path, adds /v1 once', () => {
    const a = normalizeOptions({ domain: 'https://gw.example.com/opensandbox/' }, {});
    assert.equal(a.protocol, 'https');
    assert.equal(a.domain, 'gw.example.com/opensandbox');
    assert.equal(a.lifecycleBaseUrl, 'https://gw.example.com/opensandbox/v1');
    assert.equal(normalizeOptions({ domain: 'http://h:8080/v1' }, {}).lifecycleBaseUrl, 'http://h:8080/v1');
    assert.equal(normalizeOptions({ domain: 'h:8080', protocol: 'https' }, {}).lifecycleBaseUrl, 'https://h:8080/v1');
  });

  it('encodes the logical id into a Kubernetes label value', () => {
    const ids = ['my-workspace', 'User@Example.com/ws 1', '---', 'x'.repeat(200), 'ünïcödé', 'a'];
    const values = ids.map(encodeLogicalId);
    for (const [i, v] of values.entries()) {
      assert.ok(v.length <= 63, `${v} too long`);
      assert.equal(labelProblem(LOGICAL_ID_LABEL, v), null, `${ids[i]} -> ${v}`);
      assert.match(v, /^[0-9a-f]{16}(-[a-z0-9._-]*[a-z0-9])?$/);
      assert.equal(encodeLogicalId(ids[i]), v, 'deterministic');
    }
    assert.equal(new Set(values).size, ids.length);
    assert.match(encodeLogicalId('my-workspace'), /^[0-9a-f]{16}-my-workspace$/);
    assert.match(encodeLogicalId('User@Example.com/ws 1'), /^[0-9a-f]{16}-user-example\.com-ws-1$/);
    assert.notEqual(encodeLogicalId('A'), encodeLogicalId('a'));
  });

  it('quotes arguments like Mastra', () => {
    assert.equal(shellQuote('plain-arg_1.txt'), 'plain-arg_1.txt');
    assert.equal(shellQuote('a/b=c:d@e'), 'a/b=c:d@e');
    assert.equal(shellQuote('hello world'), "'hello world'");
    assert.equal(shellQuote("it's"), `'it'\\''s'`);
    assert.equal(shellQuote(''), "''");
    assert.equal(shellQuote('$HOME'), "'$HOME'");
  });

  it('parses resource quantities for getInfo', () => {
    assert.deepEqual(parseResources({ cpu: '1', memory: '2Gi' }), { cpuCores: 1, memoryMB: 2048 });
    assert.deepEqual(parseResources({ cpu: '500m', memory: '512Mi' }), { cpuCores: 0.5, memoryMB: 512 });
    assert.deepEqual(parseResources({ cpu: 'lots', memory: '1G' }), { memoryMB: 954 });
  });

  it('has a fresh identity and pending status, unique ids', async () => {
    const a = new OpenSandboxSandbox();
    const b = new OpenSandboxSandbox();
    assert.equal(typeof a.id, 'string');
    assert.notEqual(a.id, b.id);
    assert.equal(a.name, 'OpenSandboxSandbox');
    assert.equal(a.provider, 'opensandbox');
    assert.equal(a.status, 'pending');
    assert.equal(a.workingDirectory, '/workspace');
    const info = await a.getInfo();
    assert.equal(info.id, a.id);
    assert.equal(info.name, a.name);
    assert.equal(info.provider, 'opensandbox');
    assert.equal(info.status, a.status);
    assert.ok(info.createdAt instanceof Date);
    assert.deepEqual(info.resources, { cpuCores: 1, memoryMB: 2048 });
  });

  it('keeps secrets out of getInfo, and its metadata round-trips into the constructor', async () => {
    const opts = {
      id: 'round-trip', domain: 'h:1', apiKey: 'super-secret-api-key', execdAccessToken: 'super-secret-token',
      image: { uri: 'python:3.11', auth: { username: 'u', password: 'registry-password' } },
      env: { TOKEN: 'env-secret-value' }, metadata: { team: 'a' }, timeoutSeconds: null, instructions: 'custom',
      volumes: [{ name: 'w', mountPath: '/data', host: { path: '/srv/w' } }],
    };
    const info = await new OpenSandboxSandbox(opts).getInfo();
    const text = JSON.stringify(info);
    for (const secret of ['super-secret-api-key', 'super-secret-token', 'registry-password', 'env-secret-value']) {
      assert.ok(!text.includes(secret), `getInfo leaks ${secret}`);
    }
    assert.equal(info.metadata.id, 'round-trip');
    assert.deepEqual(info.metadata.image, { uri: 'python:3.11' });
    assert.equal(info.metadata.timeoutSeconds, null);
    assert.equal(info.metadata.sandboxId, undefined);
    const again = new OpenSandboxSandbox(info.metadata);
    assert.equal(again.id, 'round-trip');
    assert.deepEqual((await again.getInfo()).metadata, info.metadata);
  });

  it('describes itself in getInstructions, honours the instructions option', () => {
    const text = new OpenSandboxSandbox({ workingDirectory: '/srv/app' }).getInstructions();
    assert.match(text, /"\/srv\/app"/);
    assert.match(text, /\/tmp/);
    assert.match(text, /destroyed/);
    assert.equal(new OpenSandboxSandbox({ instructions: 'fixed text' }).getInstructions(), 'fixed text');
    assert.equal(new OpenSandboxSandbox({ instructions: '' }).getInstructions(), '');
    const fn = new OpenSandboxSandbox({ instructions: ({ defaultInstructions }) => `${defaultInstructions} EXTRA` });
    assert.match(fn.getInstructions(), /^OpenSandbox sandbox.* EXTRA$/);
  });

  it('rejects bad executeCommand arguments before doing any I/O', async () => {
    const s = new OpenSandboxSandbox({ domain: '127.0.0.1:9' });
    const bad = [
      [[''], 'command'],
      [['echo', 'not-an-array'], 'args'],
      [['echo', [1]], 'args'],
      [['echo', [], { timeout: -1 }], 'timeout'],
      [['echo', [], { env: { A: 1 } }], 'env'],
      [['echo', [], { cwd: 3 }], 'cwd'],
      [['echo', [], { onStdout: 'x' }], 'onStdout'],
      [['echo', [], { abortSignal: {} }], 'abortSignal'],
      [['echo', [], { maxRetainedBytes: -1 }], 'maxRetainedBytes'],
      [['echo', [], { maxRetainedBytes: 1.5 }], 'maxRetainedBytes'],
      [['echo', [], { cwd: 'a$HOME' }], 'cwd'],
    ];
    for (const [args, option] of bad) {
      await assert.rejects(s.executeCommand(...args), err => err instanceof OpenSandboxOptionError && err.option === option);
    }
    assert.equal(s.status, 'pending');
  });

  it('a pre-aborted command resolves failed without touching the server', async () => {
    const s = new OpenSandboxSandbox({ domain: '127.0.0.1:9' });
    const r = await s.executeCommand('echo', ['hi'], { abortSignal: AbortSignal.abort() });
    assert.equal(r.success, false);
    assert.equal(r.killed, true);
    assert.equal(r.exitCode, 130);
    assert.equal(r.stdout, '');
    assert.equal(r.command, 'echo hi');
    assert.equal(s.status, 'pending');
  });
});
