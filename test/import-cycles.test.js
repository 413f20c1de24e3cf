// lib/'s relative imports form a tree (issue 25): no module may reach itself through static imports
// (`import … from`, `import '…'`), re-exports (`export … from`) or dynamic `import('…')` of a literal. The imports
// are read by TypeScript's import scanner, which skips comments, strings and regular expressions.
import { strict as assert } from 'node:assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { runNodeCode } from './helpers/run-node.js';

const LIB = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'lib');

/** Every .js file under `root`, as absolute paths. */
function jsFiles(root) {
  return fs.readdirSync(root, { withFileTypes: true, recursive: true })
    .filter(e => e.isFile() && e.name.endsWith('.js'))
    .map(e => path.join(e.parentPath ?? e.path, e.name))
    .sort();
}

/** Map: file -> the files under `root` it imports by a relative specifier. */
function importGraph(root) {
  const files = jsFiles(root);
  const known = new Set(files);
  const graph = new Map();
  for (const file of files) {
    const { importedFiles } = ts.preProcessFile(fs.readFileSync(file, 'utf8'), true, true);
    const targets = importedFiles
      .map(i => i.fileName)
      .filter(spec => spec.startsWith('./') || spec.startsWith('../'))
      .map(spec => path.resolve(path.dirname(file), spec))
      .filter(target => known.has(target));
    graph.set(file, [...new Set(targets)]);
  }
  return graph;
}

/** The import cycles a depth-first walk of `graph` closes (each set of files once), each as a closed path of files. */
function findCycles(graph) {
  const state = new Map(); // file -> 'active' | 'done'
  const stack = [];
  const cycles = [];
  const seen = new Set();
  const visit = file => {
    state.set(file, 'active');
    stack.push(file);
    for (const next of graph.get(file) ?? []) {
      if (state.get(next) === 'active') {
        const cycle = [...stack.slice(stack.indexOf(next)), next];
        const key = [...new Set(cycle)].sort().join('\n');
        if (!seen.has(key)) { seen.add(key); cycles.push(cycle); }
      } else if (!state.has(next)) visit(next);
    }
    stack.pop();
    state.set(file, 'done');
  };
  for (const file of graph.keys()) if (!state.has(file)) visit(file);
  return cycles;
}

const show = (root, cycles) => cycles.map(c => c.map(f => path.relative(root, f)).join(' -> ')).join('\n');

describe('import cycles', () => {
  it('lib/**/*.js has no import cycle (relative static, re-export and dynamic imports)', () => {
    const graph = importGraph(LIB);
    assert.ok(graph.size > 20, `expected lib/ to hold its modules, found ${graph.size}`);
    assert.ok(graph.get(path.join(LIB, 'index.js')).includes(path.join(LIB, 'sandbox.js')), 'the scanner reads index.js\' re-exports');
    const cycles = findCycles(graph);
    assert.equal(show(LIB, cycles), '', `import cycles in lib/:\n${show(LIB, cycles)}`);
  });

  it('template.build() reaches the sandbox class through lib/template-standalone.js, which lib/sandbox.js fills', async function () {
    this.timeout(60000);
    const url = file => JSON.stringify(new URL(`../lib/${file}`, import.meta.url).href);
    const probe = async (imports, call) => {
      const { code, out } = await runNodeCode(`${imports}
        const err = await ${call}.then(() => null, e => e);
        console.log(JSON.stringify({ name: err?.name, code: err?.code, message: err?.message }));`);
      assert.equal(code, 0, out);
      return JSON.parse(out.trim().split('\n').pop());
    };
    // lib/template.js alone (no package entry): a clear error, not a TypeError
    assert.deepEqual(await probe(`import { Template } from ${url('template.js')};`, 'Template().build({})'), {
      name: 'OpenSandboxError', code: 'NOT_LOADED',
      message: 'template.build: OpenSandboxSandbox is not loaded (import Template from the package entry, mastra-opensandbox)',
    });
    // through the package entry the sandbox class is there: its option checks answer (before any network call)
    assert.deepEqual(await probe(`import { Template } from ${url('index.js')};`, 'Template().build(5)'), {
      name: 'OpenSandboxError', code: 'INVALID_OPTION', message: 'template.build: options must be an object',
    });
    const bad = await probe(`import { Template } from ${url('index.js')};`, "Template().build({ domain: 'x', colour: 'red' })");
    assert.equal(bad.code, 'INVALID_OPTION');
    assert.match(bad.message, /"colour"/);
  });

  describe('the check itself, on a temporary tree', () => {
    let root;
    beforeEach(() => { root = fs.mkdtempSync(path.join(os.tmpdir(), 'import-cycles-')); });
    afterEach(() => fs.rmSync(root, { recursive: true, force: true }));
    const write = (rel, text) => {
      fs.mkdirSync(path.dirname(path.join(root, rel)), { recursive: true });
      fs.writeFileSync(path.join(root, rel), text);
    };

    it('finds a cycle closed by each kind of import', () => {
      write('a.js', "import {\n  b,\n} from './b.js';\n");                      // static, over several lines
      write('b.js', "export { c } from './sub/c.js';\n");                         // re-export, into a folder
      write('sub/c.js', "export async function c() { return import(`../a.js`); }\n"); // dynamic, template literal
      write('d.js', "import './e.js';\n");                                          // side-effect import
      write('e.js', "export const e = () => import('./d.js');\n");
      write('f.js', "import { a } from './a.js';\n");                              // leads into a cycle, not on it
      assert.equal(show(root, findCycles(importGraph(root))), 'a.js -> b.js -> sub/c.js -> a.js\nd.js -> e.js -> d.js');
    });

    it('finds a module importing itself', () => {
      write('self.js', "export const me = await import('./self.js');\n");
      assert.equal(show(root, findCycles(importGraph(root))), 'self.js -> self.js');
    });

    it('passes a tree, and ignores imports in comments and strings, packages and non-literal imports', () => {
      write('top.js', "import { mid } from './mid.js';\nimport { leaf } from './leaf.js';\nimport fs from 'node:fs';\n");
      write('mid.js', "import { leaf } from './leaf.js';\nexport const mid = leaf;\n");
      write('leaf.js', [
        "// import { mid } from './mid.js';",
        "/* export * from './top.js'; */",
        "const text = \"import('./top.js')\";",
        "const re = /import\\('\\.\\/top\\.js'\\)/;",
        "const name = './top.js';",
        'export const leaf = () => import(name);',
        "export const pkg = () => import('mocha');",
        '',
      ].join('\n'));
      const graph = importGraph(root);
      assert.deepEqual(graph.get(path.join(root, 'top.js')), [path.join(root, 'mid.js'), path.join(root, 'leaf.js')]);
      assert.deepEqual(graph.get(path.join(root, 'leaf.js')), []);
      assert.equal(show(root, findCycles(graph)), '');
    });
  });
});
