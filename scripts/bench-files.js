#!/usr/bin/env node
// Benchmark of file I/O (`npm run bench`, third part): OpenSandboxFilesystem (execd's files API through the native
// addon) side by side with the official @alibaba-group/opensandbox client's files API and with doing the same through
// executeCommand and shell tools, all against one local OpenSandbox-compatible server and one sandbox:
//   1. 1,000 small files (1 KiB) written, then read back (16 in flight for every path);
//   2. one 100 MB file up, then down (the shell path moves it as base64 in 64 KiB command lines: --shell-mb of it);
//   3. grep for a literal over 10,000 files (50 contain it), and ours again with a regex that needs every file read.
// The server runs in a child process (its relay to execd must not count as our JS-thread time).
// Every result is verified byte for byte. Reported: wall time, JS-thread time (event-loop active time from
// performance.eventLoopUtilization: what the operation cost the application's thread), process CPU (all threads),
// and the largest RSS seen. Options: --small N (1000), --rounds R (4: the small files measured in R slices, the clients
// alternating which goes first, each phase after a `sync` in the sandbox), --big-mb N (100), --shell-mb N (8), --grep-files N (10000),
// --parts small,big,grep (which parts to run), --smoke (tiny sizes: seconds). The grep part first warms the sandbox's file cache with one
// unmeasured grep, so no path pays for a cold cache the others do not; likewise the small part starts with an unmeasured
// tenth of its writes and reads on each client.
import { parseArgs } from 'node:util';
import { randomBytes } from 'node:crypto';
import { OpenSandboxSandbox, OpenSandboxFilesystem } from '../lib/index.js';
import { profile as measure, startChildServer, officialSandbox, reportFigure, sizeOf } from './lib/bench-util.js';

const { values: args } = parseArgs({
  options: {
    small: { type: 'string' },
    rounds: { type: 'string' },
    'big-mb': { type: 'string' },
    'shell-mb': { type: 'string' },
    'grep-files': { type: 'string' },
    parts: { type: 'string', default: 'small,big,grep' },
    smoke: { type: 'boolean', default: false },
  },
});
const size = sizeOf(args);
const SMALL = size('small', 1000, 20);
const ROUNDS = size('rounds', 4, 2);
const BIG_MB = size('big-mb', 100, 2);
const SHELL_MB = size('shell-mb', 8, 1);
const GREP_FILES = size('grep-files', 10000, 500);
const PARTS = new Set(args.parts.split(','));
const CONCURRENCY = 16;
const BASE = '/workspace/bench';

/** Runs fn(i) for i < n, `limit` at a time. */
async function pool(n, limit, fn) {
  let next = 0;
  await Promise.all(Array.from({ length: Math.min(limit, n) }, async () => {
    while (next < n) await fn(next++);
  }));
}

const smallContent = i => Buffer.from(`${String(i).padStart(6, '0')} `.repeat(128)); // 1 KiB of text
const check = (ok, what) => {
  if (!ok) throw new Error(`verification failed: ${what}`);
};

const shq = s => `'${s.replace(/'/g, "'\\''")}'`;

/** Shell path: a file up as base64 in command lines of at most 64 KiB. */
async function shellUpload(sandbox, path, data) {
  const r0 = await sandbox.executeCommand(`mkdir -p "$(dirname ${shq(path)})" && : > ${shq(path)}`);
  check(r0.exitCode === 0, r0.stderr);
  const chunk = 48 * 1024; // 64 KiB of base64
  for (let o = 0; o < data.length; o += chunk) {
    const r = await sandbox.executeCommand(`printf %s ${data.subarray(o, o + chunk).toString('base64')} | base64 -d >> ${shq(path)}`);
    check(r.exitCode === 0, r.stderr);
  }
}

async function shellDownload(sandbox, path) {
  const r = await sandbox.executeCommand(`base64 ${shq(path)}`, [], { maxRetainedBytes: Infinity });
  check(r.exitCode === 0, r.stderr);
  return Buffer.from(r.stdout.replace(/\n/g, ''), 'base64');
}

/** A JS grep over file texts (what the official client's users would write): [{ path, line, text }]. */
function grepTexts(entries, regex) {
  const out = [];
  for (const { path, text } of entries) {
    const lines = text.split('\n');
    lines.forEach((l, i) => regex.test(l) && out.push({ path, line: i + 1, text: l }));
  }
  return out;
}

const fmt = n => (n === undefined ? '-' : n >= 100 ? n.toFixed(0) : n.toFixed(1));
const rows = [];
const row = (what, path, m, note = '') => {
  rows.push([what, path, m]);
  console.log(what.padEnd(30), path.padEnd(26), fmt(m.wall).padStart(9), fmt(m.js).padStart(9), fmt(m.cpu).padStart(9), fmt(m.rss).padStart(8), note ? ` ${note}` : '');
};

async function main() {
  const server = await startChildServer();
  const sandbox = new OpenSandboxSandbox({ domain: server.domain, apiKey: server.apiKey, requestTimeoutMs: 300000 });
  const fs = new OpenSandboxFilesystem({ sandbox, basePath: BASE, maxReadBytes: 512 * 1024 * 1024 });
  try {
    await fs.init();
    const sbx = await officialSandbox(server.domain, server.apiKey, sandbox.opensandbox.sandboxId);
    console.log(`server ${server.domain} (child process), sandbox ${sandbox.opensandbox.sandboxId}${sbx ? '' : ' (official client not installed: skipped)'}\n`);
    console.log('operation'.padEnd(30), 'path'.padEnd(26), 'wall ms'.padStart(9), 'JS ms'.padStart(9), 'CPU ms'.padStart(9), 'RSS MiB'.padStart(8));

    // 1. small files
    if (PARTS.has('small')) {
      const small = Array.from({ length: SMALL }, (_, i) => smallContent(i));
      // unmeasured warm-up of both clients (a tenth of the files each): execd's first uploads, the sandbox disk's first
      // writes and each client's connections are then paid by neither measured path (ours ran first and paid them)
      const WARM = Math.max(1, Math.ceil(SMALL / 10));
      await pool(WARM, CONCURRENCY, async i => {
        await fs.writeFile(`warm/o${i}.txt`, small[i]);
        check((await fs.readFile(`warm/o${i}.txt`)).equals(small[i]), `ours warm-up o${i}`);
      });
      if (sbx) {
        await pool(WARM, CONCURRENCY, async i => {
          await sbx.files.writeFiles([{ path: `${BASE}/warm/f${i}.txt`, data: small[i], mode: 644 }]);
          check(Buffer.from(await sbx.files.readBytes(`${BASE}/warm/f${i}.txt`)).equals(small[i]), `official warm-up f${i}`);
        });
      }
      // measured in ROUNDS slices, the two clients alternating which goes first, each phase after a `sync` in the
      // sandbox: the sandbox disk's writeback of one client's writes is then not paid by the other's next phase
      const paths = {
        ours: { write: i => fs.writeFile(`ours/f${i}.txt`, small[i]),
          read: async i => check((await fs.readFile(`ours/f${i}.txt`)).equals(small[i]), `ours f${i}`) },
        official: sbx && { write: i => sbx.files.writeFiles([{ path: `${BASE}/off/f${i}.txt`, data: small[i], mode: 644 }]),
          read: async i => check(Buffer.from(await sbx.files.readBytes(`${BASE}/off/f${i}.txt`)).equals(small[i]), `official f${i}`) },
      };
      const total = {};
      for (const op of ['write', 'read']) {
        for (let r = 0; r < ROUNDS; r++) {
          const from = Math.floor((SMALL * r) / ROUNDS);
          const to = Math.floor((SMALL * (r + 1)) / ROUNDS);
          for (const who of r % 2 ? ['official', 'ours'] : ['ours', 'official']) {
            if (!paths[who]) continue;
            check((await sandbox.executeCommand('sync')).exitCode === 0, 'sync');
            const m = await measure(() => pool(to - from, CONCURRENCY, i => paths[who][op](from + i)));
            const t = (total[`${who} ${op}`] ??= { wall: 0, js: 0, cpu: 0, rss: 0 });
            for (const k of ['wall', 'js', 'cpu']) t[k] += m[k];
            t.rss = Math.max(t.rss, m.rss);
          }
        }
      }
      row(`${SMALL} x 1 KiB write`, 'ours (filesystem)', total['ours write']);
      row(`${SMALL} x 1 KiB read`, 'ours (filesystem)', total['ours read']);
      if (sbx) {
        const [ow, or, fw, fr] = ['ours write', 'ours read', 'official write', 'official read'].map(k => total[k]);
        row(`${SMALL} x 1 KiB write`, 'official files API', fw);
        row(`${SMALL} x 1 KiB read`, 'official files API', fr);
        reportFigure(`${SMALL} x 1 KiB reads: wall, ours / official`, or.wall / fr.wall, 'x', '<= 0.7', `${fmt(or.wall)} vs ${fmt(fr.wall)} ms`);
        reportFigure(`${SMALL} x 1 KiB writes: wall, ours / official`, ow.wall / fw.wall, 'x', '<= 0.7', `${fmt(ow.wall)} vs ${fmt(fw.wall)} ms`);
      }
      await sandbox.executeCommand(`mkdir -p ${BASE}/sh`);
      row(`${SMALL} x 1 KiB write`, 'executeCommand + shell', await measure(() => pool(SMALL, CONCURRENCY, async i => {
        const r = await sandbox.executeCommand(`printf %s ${shq(small[i].toString())} > ${BASE}/sh/f${i}.txt`);
        check(r.exitCode === 0, r.stderr);
      })));
      row(`${SMALL} x 1 KiB read`, 'executeCommand + shell', await measure(() => pool(SMALL, CONCURRENCY, async i => {
        const r = await sandbox.executeCommand(`cat ${BASE}/sh/f${i}.txt`);
        check(r.stdout === `${small[i].toString()}\n`, `shell f${i}`); // execd delivers lines: the last one gets a \n
      })));
    }

    // 2. one big file
    if (PARTS.has('big')) {
      const big = randomBytes(BIG_MB * 1048576);
      row(`${BIG_MB} MB up`, 'ours (filesystem)', await measure(() => fs.writeFile('big.bin', big)));
      row(`${BIG_MB} MB down`, 'ours (filesystem)', await measure(async () => check((await fs.readFile('big.bin')).equals(big), 'ours big')));
      if (sbx) {
        row(`${BIG_MB} MB up`, 'official files API', await measure(() => sbx.files.writeFiles([{ path: `${BASE}/big-off.bin`, data: big, mode: 644 }])));
        row(`${BIG_MB} MB down`, 'official files API', await measure(async () => check(Buffer.from(await sbx.files.readBytes(`${BASE}/big-off.bin`)).equals(big), 'official big')));
      }
      const part = big.subarray(0, SHELL_MB * 1048576);
      const up = await measure(() => shellUpload(sandbox, `${BASE}/big-sh.bin`, part));
      row(`${SHELL_MB} MB up (x${(BIG_MB / SHELL_MB).toFixed(1)} = ${BIG_MB} MB)`, 'executeCommand + shell', up, `~${fmt((up.wall * BIG_MB) / SHELL_MB)} ms for ${BIG_MB} MB`);
      const down = await measure(async () => check((await shellDownload(sandbox, `${BASE}/big-sh.bin`)).equals(part), 'shell big'));
      row(`${SHELL_MB} MB down (x${(BIG_MB / SHELL_MB).toFixed(1)})`, 'executeCommand + shell', down, `~${fmt((down.wall * BIG_MB) / SHELL_MB)} ms for ${BIG_MB} MB`);
      await sandbox.executeCommand(`rm -f ${BASE}/big*.bin`);
    }

    // 3. grep over many files (setup not measured: 20 uploads of 500 files, then one warm-up grep)
    if (PARTS.has('grep')) {
      const dirs = 100;
      const needles = new Set(Array.from({ length: 50 }, (_, k) => Math.floor((k * GREP_FILES) / 50) + 7));
      const text = i => `file ${i}\nsome ordinary text line\n${needles.has(i) ? 'a needle in the haystack\n' : 'just hay here\n'}the end\n`;
      for (let o = 0; o < GREP_FILES; o += 500) {
        await sandbox.writeFiles(Array.from({ length: Math.min(500, GREP_FILES - o) }, (_, k) => ({ path: `${BASE}/g/d${(o + k) % dirs}/f${o + k}.txt`, content: text(o + k) })));
      }
      await sandbox.executeCommand(`grep -rc warm-up ${BASE}/g > /dev/null`);
      const expect = needles.size;
      let m = await measure(async () => (await fs.grep({ pattern: 'needle', path: 'g', caseSensitive: true, includeHidden: false })).length);
      check(m.value === expect, `ours grep found ${m.value}`);
      row(`grep literal, ${GREP_FILES} files`, 'ours (filesystem)', m);
      m = await measure(async () => (await fs.grep({ pattern: 'ne+dle', path: 'g', caseSensitive: true, includeHidden: false })).length);
      check(m.value === expect, `ours regex grep found ${m.value}`);
      row(`grep regex, ${GREP_FILES} files`, 'ours (reads every file)', m);
      if (sbx) {
        m = await measure(async () => {
          const found = await sbx.files.search({ path: `${BASE}/g`, pattern: '*' });
          const list = Array.isArray(found) ? found : found.files ?? found.items ?? [];
          const texts = [];
          await pool(list.length, CONCURRENCY, async i => texts.push({ path: list[i].path, text: await sbx.files.readFile(list[i].path) }));
          return new Set(grepTexts(texts, /needle/).map(x => x.path)).size;
        });
        check(m.value === expect, `official grep found ${m.value}`);
        row(`grep, ${GREP_FILES} files`, 'official (search+read)', m);
      }
      m = await measure(async () => {
        const r = await sandbox.executeCommand(`grep -rn needle ${BASE}/g`, [], { maxRetainedBytes: Infinity });
        return new Set(r.stdout.split('\n').filter(Boolean).map(l => l.slice(0, l.indexOf(':')))).size;
      });
      check(m.value === expect, `shell grep found ${m.value}`);
      row(`grep, ${GREP_FILES} files`, 'executeCommand grep -rn', m);
    }
    console.log('\nJS ms = time the operation kept the JS thread busy (event-loop active time); CPU ms = all threads of the process.');
  } finally {
    await sandbox._destroy().catch(() => {});
    await server.close();
  }
}

main().catch(err => {
  console.error(err);
  process.exit(1);
});
