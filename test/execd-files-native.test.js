// GET /files/download of the C execd (src/execd/files.c) through its real HTTP server, where the answer depends on
// timing a unit test does not drive: a FIFO that a writer opens later gets Go's answer. (The byte-for-byte answers of
// GET /files/info, GET|HEAD /files/download with Range and offset/limit, GET /files/search and GET /directories/list,
// once compared here with the Node execd's, are pinned by test/c/test_xd_files.c.)
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { spawn, execFileSync } from 'node:child_process';
import { execdBinary } from '../lib/dev-server/execd-binary.js';
import { waitFor } from './helpers/poll.js';

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

describe('execd files/download of a FIFO: the C execd answers as Go\'s', function () {
  this.timeout(120000);
  let dir;
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
    c = await startExecd([execdBinary(), '--workspace', ws]);
  });
  after(async () => {
    for (const p of [c]) {
      if (!p) continue;
      p.child.kill('SIGTERM');
      await new Promise((r) => (p.child.exitCode !== null ? r() : p.child.once('exit', r)));
    }
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

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
