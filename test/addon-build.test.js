// How the addon is found and what it links: lib/native.js's load order and its error, the source build's
// OpenSSL and its C execd osb-execd (the prebuilt binary's promise — glibc floor, NEEDED, exports — is checked by scripts/prebuild.sh, which
// the test command runs through npm pack, see scripts/test-packed.sh).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { runNodeCode } from './helpers/run-node.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const sourceBuild = path.join(root, 'build', 'Release', 'mastra_opensandbox.node');
const nativeJs = pathToFileURL(path.join(root, 'lib', 'native.js')).href;

describe('the native addon: loading and linking', function () {
  this.timeout(60000);

  it('MASTRA_OPENSANDBOX_ADDON that cannot load: NATIVE_ADDON_MISSING naming the file and the source-build command', async () => {
    const missing = path.join(root, 'build', 'no-such-addon.node');
    const r = await runNodeCode(`
      try { await import(${JSON.stringify(nativeJs)}); console.log('loaded'); }
      catch (e) { console.log(e.code); console.log(e.message); }`, { env: { MASTRA_OPENSANDBOX_ADDON: missing } });
    const [code, ...msg] = r.out.trim().split('\n');
    assert.equal(code, 'NATIVE_ADDON_MISSING');
    assert.ok(msg.join('\n').includes(missing), r.out);
    assert.ok(msg.join('\n').includes(`node ${path.join(root, 'scripts', 'build.js')}`), r.out);
  });

  it('MASTRA_OPENSANDBOX_ADDON names the binary that is loaded', async () => {
    const r = await runNodeCode(`
      import fs from 'node:fs';
      const { versions } = await import(${JSON.stringify(nativeJs)});
      versions();
      console.log(fs.readFileSync('/proc/self/maps', 'utf8').split('\\n').filter((l) => l.endsWith('.node')).map((l) => l.split(/\\s+/).pop())[0]);`,
    { env: { MASTRA_OPENSANDBOX_ADDON: sourceBuild } });
    assert.equal(r.out.trim(), fs.realpathSync(sourceBuild));
  });

  it("source build: every OpenSSL function Debian's libcurl and libwebsockets call is one Node exports (a single OpenSSL runs)", () => {
    // The shared libcurl/libwebsockets link Debian's libssl.so.3, but Node's executable exports OpenSSL and comes first
    // in the lookup order: when it exports every function they import, all their TLS work runs in Node's OpenSSL and
    // no object crosses between two OpenSSL copies (docs/ARCHITECTURE.md, "Native build").
    const ldd = execFileSync('ldd', [sourceBuild], { encoding: 'utf8' });
    const libs = [...ldd.matchAll(/\s(lib(?:curl|websockets)[^\s]*) => (\S+)/g)].map((m) => m[2]);
    assert.equal(libs.length, 2, ldd);
    const nm = (args, file) => execFileSync('nm', ['-D', ...args, file], { encoding: 'utf8', maxBuffer: 64 << 20 });
    const exported = new Set(nm(['--defined-only'], fs.realpathSync(process.execPath)).split('\n').map((l) => l.split(' ')[2]?.replace(/@.*/, '')));
    for (const lib of libs) {
      const imports = nm(['--undefined-only'], lib).split('\n').filter((l) => /@OPENSSL_3/.test(l)).map((l) => l.trim().split(/\s+/)[1].replace(/@.*/, ''));
      assert.ok(imports.length > 50, `${lib} imports OpenSSL`);
      assert.deepEqual(imports.filter((s) => !exported.has(s)), [], `${lib}: OpenSSL functions Node does not export`);
    }
  });

  it('source build: the C execd build/Release/osb-execd beside the addon, the one the local server runs, prints the package version', async () => {
    const execd = path.join(root, 'build', 'Release', 'osb-execd');
    const { execdBinary } = await import(pathToFileURL(path.join(root, 'lib', 'dev-server', 'execd-binary.js')).href);
    assert.equal(execdBinary({ MASTRA_OPENSANDBOX_ADDON: sourceBuild }), execd);
    const version = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8')).version;
    assert.equal(execFileSync(execd, ['--version'], { encoding: 'utf8' }), `osb-execd ${version}\n`);
    // Debian's shared libuv and cJSON (pkg-config), never Node's libuv: no libnode, no curl or libwebsockets
    const ldd = execFileSync('ldd', [execd], { encoding: 'utf8' });
    assert.match(ldd, /libuv\.so\.1 => /);
    assert.match(ldd, /libcjson\.so\.1 => /);
    assert.doesNotMatch(ldd, /lib(node|curl|websockets)/);
  });
});
