// GET /files/info and GET|HEAD /files/download of the C execd (src/execd/files.c) against the Node execd's answers to
// the same requests, byte for byte: both execds run side by side on one workspace (outside a sandbox, each on a
// loopback port), every request goes to both on raw sockets, and the answers are compared after removing what the two
// HTTP servers write differently for every route (Date; Node's Connection: keep-alive and Keep-Alive; where
// Connection: close stands in the head, see docs/dev-server-execd.md). Requests files.c hands to the Node execd (Range,
// offset/limit, a FIFO, non-ASCII names, a NUL or non-UTF-8 path) are part of the list: they must come out the same too.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { spawn, execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { execdBinary } from '../lib/dev-server/execd-binary.js';
import { waitFor } from './helpers/poll.js';

const MAIN = fileURLToPath(new URL('../lib/dev-server/execd/main.js', import.meta.url));

/** Starts an execd on a free loopback port; resolves { child, port }. */
async function startExecd(argv) {
  const child = spawn(argv[0], [...argv.slice(1), '--port', '0', '--command-tail-ms', '0'], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.on('data', (d) => { out += d; });
  await waitFor(() => /execd ready \d+\n/.test(out), { timeoutMs: 15000, message: `${argv[0]} ready` });
  return { child, port: Number(/execd ready (\d+)/.exec(out)[1]) };
}

/** Writes `text` on a new connection and reads until the server closes it (every request asks for Connection: close). */
function exchange(port, text) {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1');
    const got = [];
    const timer = setTimeout(() => {
      s.destroy();
      reject(new Error(`no answer to ${JSON.stringify(text)}`));
    }, 15000);
    s.on('data', (d) => got.push(d));
    s.on('error', reject);
    s.on('close', () => {
      clearTimeout(timer);
      resolve(Buffer.concat(got).toString('latin1'));
    });
    s.write(text);
  });
}

/** An answer without the header differences of the two servers (the same for every route). */
function normal(text) {
  const end = text.indexOf('\r\n\r\n');
  const head = text.slice(0, end).split('\r\n').filter((l) => !/^(Date|Connection|Keep-Alive): /i.test(l));
  return `${head.join('\r\n')}\r\n\r\n${text.slice(end + 4)}`;
}

describe('execd files/info and files/download: the C execd answers as the Node execd', function () {
  this.timeout(120000);
  let dir;
  let node;
  let c;

  before(async function () {
    if (!execdBinary()) throw new Error('no osb-execd binary: build it first (node scripts/build.js)');
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'osb-files-native-'));
    const ws = path.join(dir, 'ws');
    fs.mkdirSync(path.join(ws, 'sub'), { recursive: true });
    fs.writeFileSync(path.join(ws, 'a.txt'), 'line1\nline2\n');
    fs.utimesSync(path.join(ws, 'a.txt'), 1764500000.123, 1764500000.5);
    fs.writeFileSync(path.join(ws, 'empty'), '');
    fs.writeFileSync(path.join(ws, '<x>&'), 'x');
    fs.writeFileSync(path.join(ws, 'q"b.txt'), 'q');
    fs.writeFileSync(path.join(ws, 'été.txt'), 'e');
    fs.writeFileSync(path.join(ws, '7'), 'seven');
    fs.writeFileSync(path.join(ws, 'big'), Buffer.alloc(8 * 1024 * 1024 + 1, 1));
    fs.symlinkSync('a.txt', path.join(ws, 'link'));
    fs.symlinkSync('nowhere', path.join(ws, 'dangling'));
    execFileSync('mkfifo', [path.join(ws, 'fifo')]);
    if (process.getuid() === 0) fs.chownSync(path.join(ws, 'a.txt'), 54321, 54322); // no names: the numbers
    node = await startExecd([process.execPath, MAIN, '--workspace', ws]);
    c = await startExecd([execdBinary(), '--workspace', ws, '--node', process.execPath, '--node-execd', MAIN]);
  });
  after(async () => {
    for (const p of [node, c]) {
      if (!p) continue;
      p.child.kill('SIGTERM');
      await new Promise((r) => (p.child.exitCode !== null ? r() : p.child.once('exit', r)));
    }
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  const requests = [
    'GET /files/info?path=a.txt&path=sub&path=link&path=a.txt&path=dangling',
    'GET /files/info?path=missing&path=a.txt',
    'GET /files/info?path=a.txt%2Fx',
    'GET /files/info?path=a.txt&path=%24NOPE_FILES_NATIVE%2Fx',
    'GET /files/info',
    'GET /files/info?path=',
    'GET /files/info?path=%3Cx%3E%26&path=q%22b.txt&path=%C3%A9t%C3%A9.txt&path=~',
    'GET /files/info?path=a.txt&path=7',
    'GET /files/info?path=__proto__',
    'GET /files/info?path=a%00b',
    'GET /files/info?path=%FF',
    'GET /files/download?path=a.txt',
    'HEAD /files/download?path=a.txt',
    'GET /files/download?path=link',
    'GET /files/download?path=empty',
    'GET /files/download?path=q%22b.txt',
    'GET /files/download?path=%3Cx%3E%26',
    'GET /files/download?path=%C3%A9t%C3%A9.txt',
    'GET /files/download?path=sub',
    'HEAD /files/download?path=sub',
    'GET /files/download?path=missing',
    'HEAD /files/download?path=missing',
    'GET /files/download?path=dangling',
    'GET /files/download?path=a.txt%2Fx',
    'GET /files/download',
    'GET /files/download?path=&path=a.txt',
    'GET /files/download?path=%24NOPE_FILES_NATIVE',
    'GET /files/download?path=a.txt&offset=2&limit=1',
    'GET /files/download?path=a.txt&limit=1',
    'GET /files/download?path=big',
    'GET /files/download?path=%2Fdev%2Fnull',
    'GET /files/download?path=a%00b',
    'GET /files/download?path=%FF',
  ];

  for (const r of requests) {
    it(r, async () => {
      const text = `${r} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`;
      const [fromNode, fromC] = await Promise.all([exchange(node.port, text), exchange(c.port, text)]);
      assert.ok(fromNode.startsWith('HTTP/1.1 '), fromNode);
      assert.equal(normal(fromC), normal(fromNode));
    });
  }

  it('a Range request', async () => {
    const text = 'GET /files/download?path=a.txt HTTP/1.1\r\nHost: x\r\nRange: bytes=2-5\r\nConnection: close\r\n\r\n';
    const [fromNode, fromC] = await Promise.all([exchange(node.port, text), exchange(c.port, text)]);
    assert.match(fromNode, /^HTTP\/1\.1 206 /);
    assert.equal(normal(fromC), normal(fromNode));
  });

  it('a FIFO: the same answer (the C execd hands it over unopened: opening it waits for a writer)', async () => {
    // the Node execd's open waits for a writer too: one is started for each of the two requests
    const text = 'GET /files/download?path=fifo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n';
    const answers = [];
    const fifo = path.join(dir, 'ws', 'fifo');
    for (const port of [node.port, c.port]) {
      fs.utimesSync(fifo, 1764500000, 1764500000);
      const pending = exchange(port, text);
      // a writer that opens it and writes nothing (a write would change its mtime while the answer is made)
      const writer = spawn('/bin/sh', ['-c', `sleep 0.2; : > '${fifo}'`]);
      answers.push(await pending);
      await new Promise((r) => (writer.exitCode !== null ? r() : writer.once('exit', r)));
    }
    assert.equal(normal(answers[1]), normal(answers[0]));
  });
});
