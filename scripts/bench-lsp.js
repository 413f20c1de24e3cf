#!/usr/bin/env node
// Benchmark of Mastra's Workspace({ lsp }) diagnostics, standalone: `node scripts/bench-lsp.js`.
// For typescript-language-server (the devDependency, run under openSandboxLspServers' wrapper) and pylsp (Debian's
// python3-pylsp, when installed), side by side on OpenSandboxSandbox (local server, the tools through a read-only
// host volume) and on Mastra's LocalSandbox (same server commands, on this machine):
//   - first diagnostics: from the first workspace.lsp.getDiagnostics() call (server spawn, initialize, project load)
//     to its answer;
//   - edit -> diagnostics: getDiagnostics() of an edited document (what write_file/edit_file wait for after writing),
//     each edit a new document with its own error, so that every call waits for a fresh publishDiagnostics; median /
//     p95. (The same document edited back to back on OpenSandboxSandbox was once answered with [] under load, likely
//     the empty publish after the previous call's didClose arriving after the next didOpen: docs/integration.md,
//     "Language servers (LSP)".)
// The server runs in this process (its relay shares the event loop: a slight overcount for ours).
// Options: --runs R (edits per row, default 20), --no-python (skip pylsp), --cpu C (the sandbox's cpu limit, default
// OpenSandboxSandbox's '1'; LocalSandbox has the whole machine), --smoke (what the test command runs through
// scripts/bench-all.js: one edit, pylsp only where installed — typescript-language-server's cold start alone is
// 10-20 s, and test/lsp.test.js runs it through a real Agent). Run by `npm run bench` (bench-all.js), which prints
// the edit -> diagnostics ratios against LocalSandbox in its summary.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { now, quantiles, reportFigure } from './lib/bench-util.js';
import { Workspace, LocalSandbox, LocalFilesystem } from '@mastra/core/workspace';
import { startServer } from '../lib/dev-server/index.js';
import { OpenSandboxSandbox, OpenSandboxFilesystem, openSandboxLspServers } from '../lib/index.js';

const { values: args } = parseArgs({
  options: { runs: { type: 'string', default: '20' }, 'no-python': { type: 'boolean', default: false }, cpu: { type: 'string' }, smoke: { type: 'boolean', default: false } },
});
const RUNS = args.smoke ? 1 : Number(args.runs);
if (!Number.isInteger(RUNS) || RUNS < 1) throw new Error('--runs must be a positive integer');
process.env.MASTRA_TELEMETRY_DISABLED = '1';

const nodeModules = fs.realpathSync(path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'node_modules'));
const TOOLS = '/opt/lsp/node_modules';
const havePylsp = !args['no-python'] && (() => {
  try {
    execFileSync('pylsp', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();

const f = (n) => n.toFixed(1);

const LANGS = {
  typescript: {
    file: (i) => `src/bench${i}.ts`,
    marker: { path: 'tsconfig.json', content: '{ "compilerOptions": { "strict": true, "noEmit": true } }\n' },
    source: (i) => `export const value${i}: number = "edit ${i}";\n`,
    expect: /Type 'string' is not assignable to type 'number'/,
  },
  python: {
    file: (i) => `py/bench${i}.py`,
    marker: { path: 'py/pyproject.toml', content: '[project]\nname = "bench"\n' },
    source: (i) => `print(undefined_${i})\n`,
    expect: /undefined name 'undefined_\d+'/,
  },
};

/** First diagnostics and RUNS edit -> diagnostics round trips of one language on one workspace. */
async function measure(workspace, root, lang) {
  const { file, source, expect } = LANGS[lang];
  const abs = (i) => path.posix.join(root, file(i));
  const check = (d, what) => {
    if (d.length !== 1 || !expect.test(d[0].message)) throw new Error(`${lang} ${what}: unexpected diagnostics ${JSON.stringify(d)}`);
  };
  let t = now();
  check(await workspace.lsp.getDiagnostics(abs(0), source(0)), 'first diagnostics');
  const first = now() - t;
  const samples = [];
  for (let i = 1; i <= RUNS; i++) {
    t = now();
    check(await workspace.lsp.getDiagnostics(abs(i), source(i)), `edit ${i}`);
    samples.push(now() - t);
  }
  return { first, ...quantiles(samples) };
}

async function main() {
  const langs = [...(args.smoke ? [] : ['typescript']), ...(havePylsp ? ['python'] : [])];
  const results = [];
  const server = await startServer({ port: 0, allowedHostPaths: [nodeModules] });
  const local = fs.mkdtempSync(path.join(os.tmpdir(), 'osb-bench-lsp-'));
  try {
    for (const [name, make] of [
      ['OpenSandboxSandbox', async (lang) => {
        const sandbox = new OpenSandboxSandbox({ domain: server.domain, ...(args.cpu ? { resources: { cpu: args.cpu, memory: '2Gi' } } : {}), volumes: [{ name: 'lsp-tools', host: { path: nodeModules }, mountPath: TOOLS, readOnly: true }] });
        const servers = openSandboxLspServers({ typescript: `node ${TOOLS}/typescript-language-server/lib/cli.mjs`, ...(lang === 'python' ? { typescript: false } : { python: false }) });
        const workspace = new Workspace({ sandbox, filesystem: new OpenSandboxFilesystem({ sandbox }), lsp: { root: '/workspace', servers, diagnosticTimeout: 60000 } });
        await workspace.init();
        await sandbox.writeFiles([LANGS[lang].marker]);
        return { workspace, root: '/workspace' };
      }],
      ['LocalSandbox', async (lang) => {
        const dir = fs.mkdtempSync(path.join(local, `${lang}-`));
        const servers = openSandboxLspServers({ typescript: `node ${nodeModules}/typescript-language-server/lib/cli.mjs`, ...(lang === 'python' ? { typescript: false } : { python: false }) });
        const workspace = new Workspace({ sandbox: new LocalSandbox({ workingDirectory: dir }), filesystem: new LocalFilesystem({ basePath: dir }), lsp: { root: dir, servers, diagnosticTimeout: 60000 } });
        await workspace.init();
        const marker = path.join(dir, LANGS[lang].marker.path);
        fs.mkdirSync(path.dirname(marker), { recursive: true });
        fs.writeFileSync(marker, LANGS[lang].marker.content);
        return { workspace, root: dir };
      }],
    ]) {
      for (const lang of langs) {
        const { workspace, root } = await make(lang);
        try {
          results.push({ name, lang, ...(await measure(workspace, root, lang)) });
        } finally {
          await workspace.destroy().catch(() => {});
        }
      }
    }
  } finally {
    await server.close();
    fs.rmSync(local, { recursive: true, force: true });
  }
  console.log(`LSP diagnostics through Mastra's Workspace({ lsp }) (${RUNS} edits per row; sandbox cpu limit ${args.cpu ?? '1 (default)'}, ${os.cpus().length} cpus here${havePylsp ? '' : args['no-python'] ? '; --no-python' : '; pylsp not installed: no Python rows'})`);
  console.log('  sandbox              server                       first diagnostics ms   edit -> diagnostics ms median     p95');
  for (const r of results) {
    const server = r.lang === 'typescript' ? 'typescript-language-server' : 'pylsp';
    console.log(`  ${r.name.padEnd(20)} ${server.padEnd(28)} ${f(r.first).padStart(21)} ${f(r.median).padStart(31)} ${f(r.p95).padStart(7)}`);
  }
  for (const lang of langs) {
    const ours = results.find((r) => r.lang === lang && r.name === 'OpenSandboxSandbox');
    const local = results.find((r) => r.lang === lang && r.name === 'LocalSandbox');
    const server = lang === 'typescript' ? 'typescript-language-server' : 'pylsp';
    reportFigure(`LSP edit -> diagnostics, ${server}: OpenSandboxSandbox / LocalSandbox`, ours.median / local.median, 'x', undefined,
      `${f(ours.median)} vs ${f(local.median)} ms median`);
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
