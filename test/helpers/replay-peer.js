// Test helper: a loopback HTTP peer that answers with the real execd's recorded responses (golden transcripts) —
// the recorded status line, headers in the recorded order, chunk boundaries, chunk timing, the 1 s tail and the
// connection closes — so the client is exercised on the real server's bytes, not on the local server's.
// Requests are answered in the order of the exchanges given (one queue per peer, across connections); a request whose
// method/path does not fit the next exchange is recorded in `errors` and gets a 599.
import net from 'node:net';
import { bytesOf } from './transcripts.js';

/** The bytes of a recorded chunk; a chunk the transcript cut to 2 KB (one long stdout line) is rebuilt whole. */
export function chunkBytes(c) {
  if (!c.truncated) return bytesOf(c);
  // `{"type":"stdout","text":"xxxx…` + `","timestamp":<13 digits>}\n\n`: the line is one repeated character
  const m = /^(\{"type":"\w+","text":")(.)/.exec(c.data);
  const tail = `","timestamp":${'1'.repeat(13)}}\n\n`;
  const fill = c.original_length - m[1].length - tail.length;
  return Buffer.from(m[1] + m[2].repeat(fill) + tail);
}

/** The recorded path with the query's order kept, for comparing with the client's request line. */
const pathOnly = (p) => p.split('?')[0];

export async function replayPeer(exchanges, { match = (req, ex) => req.method === ex.request.method && pathOnly(req.path) === pathOnly(ex.request.path) } = {}) {
  const queue = [...exchanges];
  const seen = [];
  const errors = [];
  const sockets = new Set();
  let connections = 0;
  const server = net.createServer((sock) => {
    connections += 1;
    sockets.add(sock);
    sock.on('close', () => sockets.delete(sock));
    sock.on('error', () => {});
    let buf = Buffer.alloc(0);
    let busy = Promise.resolve();
    sock.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      for (;;) {
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0) return;
        const head = buf.subarray(0, end).toString('latin1');
        const len = Number(/\r\ncontent-length:\s*(\d+)/i.exec(head)?.[1] ?? 0);
        if (buf.length < end + 4 + len) return;
        const body = buf.subarray(end + 4, end + 4 + len);
        buf = buf.subarray(end + 4 + len);
        const [method, path] = head.split(' ');
        const req = { method, path, head, body: body.toString('utf8') };
        seen.push(req);
        busy = busy.then(() => answer(sock, req));
      }
    });
  });

  async function answer(sock, req) {
    const ex = queue[0];
    if (!ex || !match(req, ex)) {
      errors.push(`${req.method} ${req.path}: expected ${ex ? `${ex.request.method} ${ex.request.path}` : 'no further request'}`);
      if (!sock.destroyed) sock.end('HTTP/1.1 599 Unexpected\r\nContent-Length: 0\r\n\r\n');
      return;
    }
    queue.shift();
    const r = ex.response;
    const t0 = Date.now();
    const at = (ms) => new Promise((res) => setTimeout(res, Math.max(0, t0 + ms - Date.now())));
    const write = (b) => {
      if (!sock.destroyed) sock.write(b);
    };
    const head = [`HTTP/1.1 ${r.status} ${r.status_text}`];
    for (const name of r.header_order) {
      const v = r.headers[name.toLowerCase()];
      if (v !== undefined) head.push(`${name}: ${v}`);
    }
    await at(r.first_byte_ms ?? 0);
    write(`${head.join('\r\n')}\r\n\r\n`);
    for (const c of r.chunks) {
      await at(c.t_ms);
      const data = chunkBytes(c);
      write(r.framing === 'chunked' ? Buffer.concat([Buffer.from(`${data.length.toString(16)}\r\n`), data, Buffer.from('\r\n')]) : data);
    }
    if (r.end_ms !== null && r.end_ms !== undefined) {
      await at(r.end_ms);
      if (r.framing === 'chunked') write('0\r\n\r\n');
    } else if (r.eof_ms === null) {
      return; // the recorder closed first: nothing more was sent, the connection stays until the client closes it
    }
    if (r.eof_ms !== null && r.eof_ms !== undefined) {
      await at(r.eof_ms);
      sock.end();
    }
  }

  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    seen,
    errors,
    get connections() {
      return connections;
    },
    get left() {
      return queue.length;
    },
    close: () => new Promise((r) => {
      for (const s of sockets) s.destroy();
      server.close(r);
    }),
  };
}
