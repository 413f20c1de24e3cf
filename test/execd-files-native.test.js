// GET /files/info, GET|HEAD /files/download, GET /files/search and GET /directories/list of the C execd
// (src/execd/files.c) against the Node execd's answers to the same requests, byte for byte: both execds run side by side
// on one workspace (outside a sandbox, each on a loopback port), every request goes to both on raw sockets, and the
// answers are compared after removing what the two HTTP servers write differently for every route (Date; Node's
// Connection: keep-alive and Keep-Alive; where Connection: close stands in the head, see docs/dev-server-execd.md).
// Where the Node execd's answer was a JavaScript artefact the C execd answers as the real (Go) execd: those requests
// are listed in `goDiffers` with how the C answer follows from the Node one, and why.
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
    fs.mkdirSync(path.join(ws, 'sub', 'deep'), { recursive: true });
    fs.writeFileSync(path.join(ws, 'sub', 'deep', 'd.txt'), 'd');
    fs.writeFileSync(path.join(ws, 'sub', 'b.md'), 'b');
    fs.writeFileSync(path.join(ws, 'a.txt'), 'line1\nline2\n');
    fs.utimesSync(path.join(ws, 'a.txt'), 1764500000.123, 1764500000.5);
    fs.writeFileSync(path.join(ws, 'empty'), '');
    fs.writeFileSync(path.join(ws, '<x>&'), 'x');
    fs.writeFileSync(path.join(ws, 'q"b.txt'), 'q');
    fs.writeFileSync(path.join(ws, 'été.txt'), 'e');
    fs.writeFileSync(path.join(ws, '7'), 'seven');
    fs.writeFileSync(path.join(ws, 'nonl'), 'a\nb\nc');
    fs.writeFileSync(path.join(ws, '€ x!(1).txt'), 'euro');
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
    'GET /files/download?path=a.txt&offset=1&limit=1',
    'GET /files/download?path=a.txt&offset=1&limit=99',
    'GET /files/download?path=a.txt&offset=3&limit=1',
    'GET /files/download?path=a.txt&offset=0&limit=1',
    'GET /files/download?path=a.txt&offset=1&limit=x',
    'GET /files/download?path=a.txt&offset=&limit=',
    'HEAD /files/download?path=a.txt&offset=2&limit=1',
    'GET /files/download?path=nonl&offset=2&limit=5',
    'GET /files/download?path=missing&offset=1&limit=1',
    'HEAD /files/download?path=big',
    'GET /files/download?path=%E2%82%AC%20x!(1).txt',
    'GET /files/search?path=.',
    'GET /files/search?path=.&pattern=*.txt',
    'GET /files/search?path=.&pattern=%7Ba%2C%3C%7D*',
    'GET /files/search?path=.&pattern=%5B!a-c%5D*',
    'GET /files/search?path=.&pattern=**%2F*.txt',
    'GET /files/search?path=.&pattern=%5B',
    'GET /files/search?path=missing&pattern=%5B',
    'GET /files/search?path=a.txt',
    'GET /files/search?path=link',
    'GET /files/search?path=sub&pattern=*',
    'GET /files/search',
    'GET /files/search?path=%24NOPE_FILES_NATIVE',
    'GET /directories/list?path=.',
    'GET /directories/list?path=.&depth=0',
    'GET /directories/list?path=.&depth=3',
    'GET /directories/list?path=.&depth=',
    'GET /directories/list?path=.&depth=x',
    'GET /directories/list?path=.&depth=-1',
    'GET /directories/list?path=sub',
    'GET /directories/list?path=link',
    'GET /directories/list?path=a.txt',
    'GET /directories/list?path=missing',
    'GET /directories/list',
  ];

  // Where the C execd deliberately answers as the real (Go) execd and the Node execd does not (a JavaScript artefact):
  // the request -> how the C answer is derived from the Node one (docs/dev-server-execd.md, "Differences").
  const body = (t) => t.slice(t.indexOf('\r\n\r\n') + 4);
  const withBody = (t, b) => normal(t).replace(/Content-Length: \d+/, `Content-Length: ${Buffer.byteLength(b, 'latin1')}`)
    .replace(/\r\n\r\n[^]*$/, `\r\n\r\n${b}`);
  // Go's encoding/json writes a map's keys sorted byte by byte (JSON.stringify: insertion order, array indices first,
  // and `__proto__` dropped): the members of Node's answer, re-ordered (each member's text cut out of Node's body)
  const sortedKeys = (fromNode) => {
    const text = Buffer.from(body(fromNode), 'latin1').toString('utf8');
    const members = [];
    let depth = 0;
    let inStr = false;
    let from = 1;
    for (let i = 0; i < text.length; i++) { // split the top-level object at its own commas
      const ch = text[i];
      if (inStr) {
        if (ch === '\\') i++;
        else if (ch === '"') inStr = false;
      } else if (ch === '"') inStr = true;
      else if (ch === '{') depth++;
      else if (ch === '}' && --depth === 0) members.push(text.slice(from, i));
      else if (ch === ',' && depth === 1) {
        members.push(text.slice(from, i));
        from = i + 1;
      }
    }
    const key = (m) => Buffer.from(JSON.parse(m.slice(0, m.indexOf('":') + 1)));
    members.sort((x, y) => Buffer.compare(key(x), key(y)));
    return Buffer.from(`{${members.join(',')}}`, 'utf8').toString('latin1');
  };
  const goDiffers = {
    'GET /files/info?path=a.txt&path=sub&path=link&path=a.txt&path=dangling': (n) => withBody(n, sortedKeys(n)),
    'GET /files/info?path=%3Cx%3E%26&path=q%22b.txt&path=%C3%A9t%C3%A9.txt&path=~': (n) => withBody(n, sortedKeys(n)),
    'GET /files/info?path=a.txt&path=7': (n) => withBody(n, sortedKeys(n)),
    // Go's invalid-UTF-8 bytes in JSON: the escape \ufffd (Node's execd decoded the query to U+FFFD, written raw)
    'GET /files/info?path=%FF': (n) => withBody(n, body(n).replaceAll('\u00ef\u00bf\u00bd', '\\ufffd')),
    'GET /files/download?path=%FF': (n) => withBody(n, body(n).replaceAll('\u00ef\u00bf\u00bd', '\\ufffd')),
    // Go's url.PathEscape in the RFC 5987 form (Node's execd used encodeURIComponent: `!`, `(`, `)` kept)
    'GET /files/download?path=%E2%82%AC%20x!(1).txt': (n) => normal(n).replaceAll('%E2%82%AC%20x!(1).txt', '%E2%82%AC%20x%21%281%29.txt'),
    'GET /files/download?path=a%00b': (n) => withBody(n, body(n).replace(/The argument 'path' must be .*Received '(.*)\\\\x00b'/,
      (m, p) => `open ${p}\\u0000b: invalid argument`)),
    // Go's lstat of a path with a NUL: EINVAL (Node's fs refuses it with its own text)
    'GET /files/info?path=a%00b': (n) => withBody(n, body(n).replace(/The argument 'path' must be .*Received '(.*)\\\\x00b'/,
      (m, p) => `lstat ${p}\\u0000b: invalid argument`)),
  };

  for (const r of requests) {
    it(r, async () => {
      const text = `${r} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`;
      const [fromNode, fromC] = await Promise.all([exchange(node.port, text), exchange(c.port, text)]);
      assert.ok(fromNode.startsWith('HTTP/1.1 '), fromNode);
      assert.equal(normal(fromC), goDiffers[r] ? goDiffers[r](fromNode) : normal(fromNode));
    });
  }

  for (const [file, range] of [['a.txt', 'bytes=2-5'], ['a.txt', 'bytes=-3'], ['a.txt', 'bytes=5-'], ['a.txt', 'bytes=100-'],
    ['a.txt', 'bytes=x'], ['a.txt', 'bytes=3-1'], ['a.txt', 'bytes=50-60, 1-2'], ['a.txt', 'bytes= 1 - 2 ,'], ['a.txt', 'items=1-2'],
    ['a.txt', 'bytes=-0'], ['empty', 'bytes=0-'], ['big', 'bytes=8388000-'], ['big', 'bytes=0-8388608'], ['sub', 'bytes=0-1']]) {
    it(`Range: ${range} of ${file}`, async () => {
      const text = `GET /files/download?path=${file} HTTP/1.1\r\nHost: x\r\nRange: ${range}\r\nConnection: close\r\n\r\n`;
      const [fromNode, fromC] = await Promise.all([exchange(node.port, text), exchange(c.port, text)]);
      assert.ok(fromNode.startsWith('HTTP/1.1 '), fromNode);
      // the reason phrase of 416 is Go's (http.StatusText), Node's http server words it its own way
      assert.equal(normal(fromC), normal(fromNode).replace(/^HTTP\/1\.1 416 Range Not Satisfiable/, 'HTTP/1.1 416 Requested Range Not Satisfiable'));
    });
  }

  it('a FIFO: Go\'s answer once a writer opened it (500 "seeker can\'t seek"; the Node execd answered 200 and no bytes)', async () => {
    const text = 'GET /files/download?path=fifo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n';
    const fifo = path.join(dir, 'ws', 'fifo');
    const pending = exchange(c.port, text);
    // a writer that opens it and writes nothing
    const writer = spawn('/bin/sh', ['-c', `sleep 0.2; : > '${fifo}'`]);
    const got = await pending;
    await new Promise((r) => (writer.exitCode !== null ? r() : writer.once('exit', r)));
    assert.equal(normal(got), 'HTTP/1.1 500 Internal Server Error\r\nContent-Disposition: attachment; filename="fifo"\r\n'
      + 'Content-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\nContent-Length: 18\r\n\r\nseeker can\'t seek\n');
  });
});
