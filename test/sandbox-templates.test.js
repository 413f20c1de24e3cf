// Templates against the local OpenSandbox-compatible server: built once by the first start and reused (the second
// start runs none of the steps), ephemeral env values out of identity and storage, family fallback while a build
// runs (in this process, or a labelled builder elsewhere), template.build(), a failed step reported with its output,
// package-manager steps refused on the local server with a message saying why. Run against the local server and
// against it emulating upstream's Docker and Kubernetes runtimes (test/helpers/profiles.js); before the Snapshots API
// (0.1.13) a template is a typed unsupported error.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { LOCAL, PROFILES, NO_SNAPSHOTS, startProfileServer, clientOnly } from './helpers/profiles.js';
import {
  OpenSandboxOptionError, OpenSandboxTemplateBuildError, Template, TEMPLATE_BUILD_LABEL,
  validateStoredConfig, openSandboxProvider, OpenSandboxUnsupportedError,
} from '../lib/index.js';
import { waitFor } from './helpers/poll.js';
import { sandboxes } from './helpers/sandboxes.js';

const family = () => `fam-${randomUUID().slice(0, 8)}`;

for (const profile of [LOCAL, ...PROFILES]) describe(`OpenSandboxSandbox templates${profile.title}`, function () {
  this.timeout(90000);
  let server;
  const { make, sh, track, destroyAll } = sandboxes(() => server);
  const api = async (method, path, body) => {
    const res = await fetch(`${server.baseUrl}/v1${path}`, { method, headers: { 'content-type': 'application/json' }, body: body && JSON.stringify(body) });
    const text = await res.text();
    return text ? JSON.parse(text) : undefined;
  };
  const builders = async templateId =>
    (await api('GET', `/sandboxes?${new URLSearchParams({ metadata: `${TEMPLATE_BUILD_LABEL}=${templateId}` })}`)).items;

  before(async () => {
    server = await startProfileServer(profile, { commandTailMs: 50 });
  });
  after(async function () {
    await destroyAll();
    await server?.close();
  });

  it('the first start builds the template; later starts create from its snapshot without running a step', async () => {
    const tpl = Template()
      .setWorkdir('/workspace/app')
      .setEnvs({ GREETING: 'hello' })
      .setEnvs({ BUILD_TOKEN: 'tok-secret-123' }, { ephemeral: true })
      .runCmd('echo "$GREETING $BUILD_TOKEN" > built.txt; echo ran >> /root/build-count')
      .withFamily(family());
    const same = Template().setWorkdir('/workspace/app').setEnvs({ GREETING: 'hello' })
      .setEnvs({ BUILD_TOKEN: 'another-value' }, { ephemeral: true })
      .runCmd('echo "$GREETING $BUILD_TOKEN" > built.txt; echo ran >> /root/build-count').withFamily(tpl.family);
    assert.equal(same.templateId, tpl.templateId); // ephemeral values are not part of the identity
    assert.match(tpl.templateId, /^[0-9a-f]{16}$/);
    const s1 = make({ template: tpl });
    const r1 = await s1._start();
    assert.equal(r1.outcome, 'created');
    assert.equal(r1.templateBuilt, true);
    assert.deepEqual(Object.keys(r1.restoredFrom), ['kind', 'templateId', 'snapshotId']);
    assert.deepEqual([r1.restoredFrom.kind, r1.restoredFrom.templateId], ['template', tpl.templateId]);
    assert.equal(await sh(s1, 'pwd; cat built.txt; echo "$GREETING/${BUILD_TOKEN:-unset}"'), '/workspace/app\nhello tok-secret-123\nhello/unset');
    assert.deepEqual(await builders(tpl.templateId), []); // the builder sandbox is gone
    const snap = await s1.opensandbox.getSnapshot(r1.restoredFrom.snapshotId);
    assert.equal(snap.name, `mastra.template.${tpl.family}.${tpl.templateId}`);
    // stored config: the definition without ephemeral values; hydrating it reuses the built template
    const stored = (await s1.getInfo()).metadata;
    assert.ok(!JSON.stringify(stored).includes('tok-secret-123'));
    assert.deepEqual(stored.template.steps[2], { type: 'env', ephemeral: true, keys: ['BUILD_TOKEN'] });
    assert.equal(stored.image, undefined);
    const sibling = track(s1.clone());
    assert.deepEqual((await sibling.getInfo()).metadata.template, stored.template);
    const s2 = openSandboxProvider.createSandbox(validateStoredConfig({ ...stored, id: `tpl-${randomUUID()}` }));
    track(s2);
    const r2 = await s2._start();
    assert.deepEqual(r2, { outcome: 'created', restoredFrom: { kind: 'template', templateId: tpl.templateId, snapshotId: snap.id } });
    assert.equal(await sh(s2, 'cat /root/build-count built.txt; pwd'), 'ran\nhello tok-secret-123\n/workspace/app');
    // a stored ephemeral value is refused
    assert.throws(() => make({ template: { ...tpl.toJSON(), steps: [{ type: 'env', ephemeral: true, keys: ['A'], envs: { A: 'x' } }] } }),
      err => err instanceof OpenSandboxOptionError && /never stored/.test(err.message));
  });

  it('while a build runs, starts use the newest ready member of the family and report templatePending', async () => {
    const fam = family();
    const first = Template().runCmd('echo one > version.txt').withFamily(fam);
    const built = await first.build({ domain: server.domain });
    assert.deepEqual([built.templateId, built.built], [first.templateId, true]);
    const again = await first.build({ domain: server.domain });
    assert.deepEqual(again, { templateId: first.templateId, snapshotId: built.snapshotId, built: false });
    // the second version waits in its build until the test lets it go
    const second = Template().runCmd('while [ ! -e /tmp/go ]; do sleep 0.05; done; echo two > version.txt').withFamily(fam);
    const builder = make({ template: second });
    const building = builder._start();
    const [b] = await waitFor(async () => (await builders(second.templateId)).filter(x => x.status.state === 'Running').length && builders(second.templateId),
      { timeoutMs: 30000, message: 'builder sandbox running' });
    const during = make({ template: second });
    assert.deepEqual(await during._start(), {
      outcome: 'created', restoredFrom: { kind: 'template', templateId: first.templateId, snapshotId: again.snapshotId }, templatePending: true,
    });
    assert.equal(await sh(during, 'cat version.txt'), 'one');
    // let the build finish: the building start gets the new template
    const ep = await api('GET', `/sandboxes/${b.id}/endpoints/44772`);
    await fetch(`http://${ep.endpoint}/command`, { method: 'POST', headers: { 'content-type': 'application/json', ...ep.headers }, body: JSON.stringify({ command: 'touch /tmp/go', background: true }) }).then(r => r.text());
    const r = await building;
    assert.equal(r.templateBuilt, true);
    assert.equal(r.restoredFrom.templateId, second.templateId);
    assert.equal(await sh(builder, 'cat version.txt'), 'two');
    // a build running elsewhere (a labelled builder sandbox of another process), no family member: the base image
    const lonely = Template().runCmd('echo never').withFamily(family());
    const other = await api('POST', '/sandboxes', {
      image: { uri: 'ubuntu:22.04' }, entrypoint: ['tail', '-f', '/dev/null'], resourceLimits: {}, metadata: { [TEMPLATE_BUILD_LABEL]: lonely.templateId },
    });
    const fresh = make({ template: lonely });
    assert.deepEqual(await fresh._start(), { outcome: 'created', templatePending: true });
    assert.equal(await sh(fresh, 'ls -A'), '');
    await api('DELETE', `/sandboxes/${other.id}`);
  });

  it('a failed step is reported with its output; the builder is deleted and nothing is snapshotted', async () => {
    const tpl = Template().runCmd('echo fine').runCmd('echo partial; echo "no such tool: frob" >&2; exit 3').withFamily(family());
    const s = make({ template: tpl });
    const err = await s._start().catch(e => e);
    assert.ok(err instanceof OpenSandboxTemplateBuildError, String(err));
    assert.deepEqual([err.templateId, err.step, err.exitCode], [tpl.templateId, 2, 3]);
    assert.equal(err.stdout, 'partial\n');
    assert.equal(err.stderr, 'no such tool: frob\n');
    assert.match(err.message, /step 2 runCmd\(.*\) failed with exit code 3: no such tool: frob/);
    assert.deepEqual(await builders(tpl.templateId), []);
    const snaps = await api('GET', '/snapshots?pageSize=200');
    assert.equal(snaps.items.filter(x => x.name.endsWith(tpl.templateId)).length, 0);
  });

  clientOnly(profile)('on the local server, package-manager steps fail saying they need the image\'s package manager; other steps work', async () => {
    for (const [tpl, method] of [
      [Template().runCmd('echo ok > ok.txt').aptInstall(['jq']), 'aptInstall'],
      [Template().pipInstall('requests==2.32.3'), 'pipInstall'],
      [Template().npmInstall('typescript', { global: true }), 'npmInstall'],
    ]) {
      const err = await tpl.withFamily(family()).build({ domain: server.domain }).catch(e => e);
      assert.ok(err instanceof OpenSandboxTemplateBuildError, `${method}: ${err}`);
      assert.equal(err.exitCode, 100, `${method}: ${err.stderr}`);
      assert.match(err.stderr, new RegExp(`^${method} needs the image's package manager, but its install directory \\S+ is not writable in this sandbox \\(the local dev server`));
    }
    assert.throws(() => Template().aptInstall([]), err => err.option === 'template.aptInstall');
    assert.throws(() => Template().setEnvs({ 'BAD-NAME': 'x' }), err => err.option === 'template.setEnvs');
    assert.throws(() => Template().withFamily('Not_Valid'), err => err.option === 'template.withFamily');
    assert.throws(() => make({ template: Template(), image: 'ubuntu:22.04' }), err => err instanceof OpenSandboxOptionError && err.option === 'template');
  });
});

for (const profile of NO_SNAPSHOTS) describe(`OpenSandboxSandbox templates${profile.title}`, function () {
  this.timeout(60000);
  let server;
  const { make, destroyAll } = sandboxes(() => server);
  before(async () => {
    server = await startProfileServer(profile);
  });
  after(async function () {
    await destroyAll();
    await server?.close();
  });

  it('a template start and template.build() are typed errors naming 0.1.13; no builder sandbox is left', async () => {
    const unsupported = err => {
      assert.ok(err instanceof OpenSandboxUnsupportedError, String(err));
      assert.deepEqual([err.code, err.requiredServerVersion], ['UNSUPPORTED_BY_SERVER', '0.1.13']);
      assert.match(err.message, /templates and the snapshotId option need OpenSandbox server 0\.1\.13 or later/);
      return true;
    };
    const tpl = Template().runCmd('echo built > /tmp/t').withFamily(family());
    await assert.rejects(make({ template: tpl })._start(), unsupported);
    await assert.rejects(tpl.build({ domain: server.domain }), unsupported);
    assert.deepEqual((await fetch(`${server.baseUrl}/v1/sandboxes?pageSize=50`).then(r => r.json())).items, []);
  });
});
