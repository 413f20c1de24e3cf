// How OpenSandboxSandbox reaches execd: an endpoint with a path prefix and routing headers that must be sent on
// every execd request, the execd access token, and the lifecycle server's proxy (useServerProxy).
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { startServer } from '../lib/dev-server/index.js';
import { OpenSandboxSandbox, OpenSandboxApiError } from '../lib/index.js';

const TOKEN = `execd-token-${randomUUID()}`;

describe('OpenSandboxSandbox execd endpoints', function () {
  this.timeout(30000);
  let server;
  const cleanup = [];
  const make = (options = {}) => {
    const s = new OpenSandboxSandbox({ domain: server.domain, execdAccessToken: TOKEN, ...options });
    cleanup.push(s);
    return s;
  };

  before(async function () {
    this.timeout(60000);
    server = await startServer({ port: 0, execdEndpoint: 'proxy', endpointHeaders: true, execdAccessToken: TOKEN });
  });

  after(async function () {
    this.timeout(60000);
    for (const s of cleanup) await s._destroy().catch(() => {});
    await server?.close();
  });

  it('keeps the endpoint path prefix and sends its headers on every execd request', async () => {
    const s = make();
    assert.deepEqual(await s._start(), { outcome: 'created' });
    assert.match(s.opensandbox.execdUrl, /^http:\/\/127\.0\.0\.1:\d+\/proxy\/44772$/);
    assert.deepEqual(s.opensandbox.endpointHeaders, ['OpenSandbox-Ingress-To', 'OpenSandbox-Secure-Access']);
    const chunks = [];
    const r = await s.executeCommand('echo via-prefix; echo err >&2; exit 7', [], { onStdout: d => chunks.push(d) });
    assert.equal(r.exitCode, 7);
    assert.equal(r.stdout, 'via-prefix\n');
    assert.equal(r.stderr, 'err\n');
    assert.equal(chunks.join(''), 'via-prefix\n');
    const t = await s.executeCommand('sleep 30', [], { timeout: 300 });
    assert.equal(t.exitCode, 124);
    // after a pause/resume the endpoint is resolved again and still works
    await s._stop();
    assert.equal((await s.executeCommand('echo after-resume')).stdout, 'after-resume\n');
  });

  it('works through the lifecycle server proxy (useServerProxy)', async () => {
    const s = make({ useServerProxy: true });
    await s._start();
    const id = s.opensandbox.sandboxId;
    assert.equal(s.opensandbox.execdUrl, `${server.baseUrl}/v1/sandboxes/${id}/proxy/44772`);
    assert.equal((await s.executeCommand('echo via-server-proxy')).stdout, 'via-server-proxy\n');
  });

  it('a wrong execd access token fails the start with a typed error, token not echoed', async () => {
    const s = make({ execdAccessToken: `wrong-${TOKEN}`, readyTimeoutMs: 2000 });
    await assert.rejects(s._start(), err => {
      assert.ok(err instanceof OpenSandboxApiError, String(err));
      assert.equal(err.status, 401);
      assert.match(err.message, /wait for execd .*Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN/);
      assert.ok(!err.message.includes(TOKEN), 'token leaked');
      return true;
    });
    assert.equal(s.status, 'error');
  });
});
