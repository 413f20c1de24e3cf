// Runs every TypeScript example under examples/ (Node strips the types) against a local server each example
// starts itself, and checks that every runtime export of the package is declared in types/.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import { runNode } from './helpers/run-node.js';

const dir = new URL('../examples/', import.meta.url);
const EXAMPLES = ['basic-agent', 'editor-hydration', 'mounts', 'per-thread', 'lifecycle-hooks', 'filesystem-agent', 'types-check'];

describe('examples', function () {
  this.timeout(70000);
  for (const name of EXAMPLES) {
    it(`${name}.ts runs and prints OK ${name}`, async () => {
      const { code, out } = await runNode(fileURLToPath(new URL(`${name}.ts`, dir)), { timeoutMs: 60000, env: { MASTRA_DEMO_MODEL: '' } });
      assert.equal(code, 0, out);
      assert.match(out, new RegExp(`^OK ${name}$`, 'm'));
    });
  }

  it('every runtime export is declared in types/', async () => {
    const mod = await import('../lib/index.js');
    const types = fs.readdirSync(new URL('../types/', import.meta.url)).filter(f => f.endsWith('.d.ts'))
      .map(f => fs.readFileSync(new URL(`../types/${f}`, import.meta.url), 'utf8')).join('\n');
    const declared = new Set([...types.matchAll(/export declare (?:abstract )?(?:const|class|function) ([A-Za-z_$][\w$]*)/g)].map(m => m[1]));
    const missing = Object.keys(mod).filter(k => !declared.has(k));
    assert.deepEqual(missing, []);
  });
});
