// Emulated upstream deployments (`startServer({ emulate, serverVersion, workloadProvider, emulateDelays })`,
// lib/dev-server/upstream.js): each behaviour of docs/dev-server.md "Emulating an upstream deployment" over real HTTP
// against real sandboxes.
import assert from 'node:assert/strict';
import { startServer } from '../lib/dev-server/index.js';
import { waitFor } from './helpers/poll.js';
import { request } from './helpers/raw.js';

const KEY = 'emulate-test-key';
const minimal = (extra = {}) => ({ image: { uri: 'python:3.11' }, entrypoint: ['tail', '-f', '/dev/null'], resourceLimits: {}, timeout: 600, ...extra });

/** A server with `options` and the helpers of a test on it; close() deletes everything. */
async function serve(options) {
  const server = await startServer({ apiKey: KEY, commandTailMs: 50, ...options });
  const api = (p, opts = {}) => request(`${server.baseUrl}${p}`, { ...opts, headers: { 'OPEN-SANDBOX-API-KEY': KEY, 'Content-Type': 'application/json', ...opts.headers } });
  const create = async (extra) => {
    const r = await api('/v1/sandboxes', { method: 'POST', body: minimal(extra) });
    assert.equal(r.status, 202, r.text);
    return r.json;
  };
  return { server, api, create, close: () => server.close() };
}

describe('dev-server emulating upstream deployments', function () {
  this.timeout(120000);

  describe('options', () => {
    const rejects = (options, pattern) => assert.rejects(startServer(options), pattern);
    it('refuses an unknown runtime, naming the option and the known ones', () => rejects({ emulate: 'podman' }, /^Error: emulate must be one of 'docker', 'kubernetes' .*got "podman"$/));
    it('refuses a malformed server version', async () => {
      await rejects({ serverVersion: '0.1' }, /^Error: serverVersion must be an OpenSandbox server version 'X\.Y\.Z' .*got "0\.1"$/);
      await rejects({ serverVersion: 13 }, /^Error: serverVersion must be .*got 13$/);
      await rejects({ serverVersion: 'v0.1.13' }, /^Error: serverVersion must be .*got "v0\.1\.13"$/);
    });
    it('refuses a workload provider without kubernetes, and an unknown one', async () => {
      await rejects({ workloadProvider: 'agent-sandbox' }, /^Error: workloadProvider needs emulate: 'kubernetes'$/);
      await rejects({ emulate: 'kubernetes', workloadProvider: 'pod' }, /^Error: workloadProvider must be one of 'batchsandbox', 'agent-sandbox', got "pod"$/);
    });
    it('refuses unknown and malformed delays', async () => {
      await rejects({ emulate: 'docker', emulateDelays: { pull: 1 } }, /^Error: emulateDelays\.pull is unknown; known: create, ready, endpoint, pause, resume$/);
      await rejects({ emulate: 'docker', emulateDelays: { create: -1 } }, /^Error: emulateDelays\.create must be an integer 0\.\.600000 \(milliseconds\), got -1$/);
      await rejects({ emulate: 'docker', emulateDelays: [] }, /^Error: emulateDelays must be an object/);
    });
  });
});
