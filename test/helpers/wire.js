// Test helper: a raw HTTP/1.1 and WebSocket client on a plain TCP socket that records what a transcript records —
// status line, headers in order, framing, every chunk (HTTP/1.1 chunk, or TCP read for other framings) with its
// arrival time, when the message ended and whether/when the server closed the connection (FIN); for WebSockets every
// frame in both directions including control frames. Every wait has a deadline; nothing is retried.
import net from 'node:net';
import crypto from 'node:crypto';

const now = (t0) => Math.round((performance.now() - t0) * 10) / 10;

/** One TCP connection that can carry several HTTP requests in turn (keep-alive). */
export class WireConnection {
  constructor(host, port) {
    this.socket = net.connect(port, host);
    this.socket.setNoDelay(true);
    this.buf = Buffer.alloc(0);
    this.eof = false;
    this.eofAt = null; // performance.now() of the server's FIN
    this.waiters = new Set();
    this.ready = new Promise((resolve, reject) => {
      this.socket.once('connect', resolve);
      this.socket.once('error', reject);
    });
    this.socket.on('data', (d) => {
      this.buf = Buffer.concat([this.buf, d]);
      this.wake();
    });
    this.socket.on('end', () => {
      this.eof = true;
      this.eofAt = performance.now();
      this.wake();
    });
    this.socket.on('error', () => {
      this.eof = true;
      this.eofAt ??= performance.now();
      this.wake();
    });
    this.socket.on('close', () => {
      this.eof = true;
      this.eofAt ??= performance.now();
      this.wake();
    });
  }

  wake() {
    for (const w of [...this.waiters]) w();
  }

  /** Waits until pred() is true or the deadline passes; resolves with pred's last value. */
  until(pred, timeoutMs) {
    return new Promise((resolve) => {
      const check = () => {
        const v = pred();
        if (v || this.eof) {
          this.waiters.delete(check);
          clearTimeout(timer);
          resolve(v);
        }
      };
      const timer = setTimeout(() => {
        this.waiters.delete(check);
        resolve(pred());
      }, timeoutMs);
      this.waiters.add(check);
      check();
    });
  }

  take(n) {
    const out = this.buf.subarray(0, n);
    this.buf = this.buf.subarray(n);
    return out;
  }

  close() {
    this.socket.destroy();
  }

  /**
   * Sends one request and reads its response. req: { method, path, headers: [[name, value], …], body?: Buffer }.
   * opts.stopWhen(chunks): the client closes the connection once it returns true (a client that stops reading);
   * opts.timeoutMs: deadline for the whole response. Returns a response shaped like a transcript's.
   */
  async exchange(req, { stopWhen, timeoutMs = 20000, onChunk } = {}) {
    await this.ready;
    const t0 = performance.now();
    const head = [`${req.method} ${req.path} HTTP/1.1`, ...req.headers.map(([k, v]) => `${k}: ${v}`), '', ''].join('\r\n');
    this.socket.write(req.body ? Buffer.concat([Buffer.from(head, 'latin1'), req.body]) : Buffer.from(head, 'latin1'));
    const deadline = t0 + timeoutMs;
    const left = () => Math.max(0, deadline - performance.now());
    // epochMs: the wall clock at t0, so that an event's own `timestamp` (the server's clock when it wrote the event) maps onto t_ms
    const res = { status: null, status_text: '', headers: {}, header_order: [], framing: null, chunks: [], first_byte_ms: null, end_ms: null, eof_ms: null, epochMs: Date.now() - (performance.now() - t0) };
    await this.until(() => this.buf.indexOf('\r\n\r\n') >= 0, left());
    const hEnd = this.buf.indexOf('\r\n\r\n');
    if (hEnd < 0) {
      res.eof_ms = this.eof ? now(t0) : null;
      return res;
    }
    res.first_byte_ms = now(t0);
    const lines = this.take(hEnd + 4).toString('latin1').split('\r\n').slice(0, -2);
    const m = /^HTTP\/1\.1 (\d{3}) ?(.*)$/.exec(lines[0]);
    res.status = Number(m[1]);
    res.status_text = m[2];
    for (const l of lines.slice(1)) {
      const i = l.indexOf(':');
      const k = l.slice(0, i).toLowerCase();
      res.header_order.push(l.slice(0, i));
      res.headers[k] = l.slice(i + 1).trim();
    }
    const stopped = () => stopWhen?.(res.chunks);
    const push = (data) => {
      res.chunks.push({ t_ms: now(t0), data });
      onChunk?.(data, res);
    };
    if (req.method === 'HEAD' || res.status === 204 || res.status === 304 || (res.status >= 100 && res.status < 200)) {
      res.framing = 'none';
      res.end_ms = now(t0);
    } else if (/chunked/i.test(res.headers['transfer-encoding'] ?? '')) {
      res.framing = 'chunked';
      for (;;) {
        const got = await this.until(() => {
          const e = this.buf.indexOf('\r\n');
          if (e < 0) return false;
          const size = parseInt(this.buf.subarray(0, e).toString('latin1'), 16);
          return this.buf.length >= e + 2 + size + 2 ? { e, size } : false;
        }, left());
        if (!got) break;
        this.take(got.e + 2);
        const data = this.take(got.size);
        this.take(2);
        if (got.size === 0) {
          res.end_ms = now(t0);
          break;
        }
        push(data);
        if (stopped()) break;
      }
    } else if (res.headers['content-length'] !== undefined) {
      res.framing = 'content-length';
      let remaining = Number(res.headers['content-length']);
      if (remaining === 0) res.end_ms = now(t0);
      while (remaining > 0) {
        const ok = await this.until(() => this.buf.length > 0, left());
        if (!ok) break;
        const data = this.take(Math.min(remaining, this.buf.length));
        remaining -= data.length;
        push(data);
        if (remaining === 0) res.end_ms = now(t0);
        else if (stopped()) break;
      }
    } else {
      res.framing = 'until-eof';
      for (;;) {
        const ok = await this.until(() => this.buf.length > 0, left());
        if (!ok) break;
        push(this.take(this.buf.length));
        if (stopped()) break;
      }
      if (this.eof) res.end_ms = now(t0);
    }
    if (stopped() && res.end_ms === null) {
      this.close();
      res.client_closed_ms = now(t0);
    }
    res.t0 = t0;
    return res;
  }

  /** After a response: waits up to ms for the server's FIN; returns its time relative to t0 or null. */
  async eofWithin(res, ms) {
    await this.until(() => this.eof, ms);
    return this.eof && this.eofAt !== null ? Math.round((this.eofAt - res.t0) * 10) / 10 : null;
  }
}

/** WebSocket frame bytes (client frames are masked). */
export function encodeFrame(opcode, payload, mask = true) {
  const len = payload.length;
  const head = [0x80 | opcode];
  if (len < 126) head.push((mask ? 0x80 : 0) | len);
  else if (len < 65536) head.push((mask ? 0x80 : 0) | 126, len >> 8, len & 255);
  else {
    head.push((mask ? 0x80 : 0) | 127);
    const b = Buffer.alloc(8);
    b.writeBigUInt64BE(BigInt(len));
    head.push(...b);
  }
  if (!mask) return Buffer.concat([Buffer.from(head), payload]);
  const key = crypto.randomBytes(4);
  const body = Buffer.from(payload);
  for (let i = 0; i < body.length; i++) body[i] ^= key[i & 3];
  return Buffer.concat([Buffer.from(head), key, body]);
}

/** Parses one complete frame at the start of buf: { fin, opcode, payload, size } or null when incomplete. */
export function decodeFrame(buf) {
  if (buf.length < 2) return null;
  let len = buf[1] & 0x7f;
  let off = 2;
  if (len === 126) {
    if (buf.length < 4) return null;
    len = buf.readUInt16BE(2);
    off = 4;
  } else if (len === 127) {
    if (buf.length < 10) return null;
    len = Number(buf.readBigUInt64BE(2));
    off = 10;
  }
  const masked = (buf[1] & 0x80) !== 0;
  const keyOff = off;
  if (masked) off += 4;
  if (buf.length < off + len) return null;
  const payload = Buffer.from(buf.subarray(off, off + len));
  if (masked) for (let i = 0; i < payload.length; i++) payload[i] ^= buf[keyOff + (i & 3)];
  return { fin: (buf[0] & 0x80) !== 0, opcode: buf[0] & 0x0f, payload, size: off + len };
}

/**
 * A WebSocket client session recorded frame by frame. open(path, headers) does the handshake; then `frames` fills
 * with { t_ms, dir: 'in'|'out', opcode, payload } and `send(opcode, payload)` writes a masked frame. The client
 * echoes a server close frame once (as the `ws` library does) unless it sent its own close first.
 */
export class WireWebSocket {
  constructor(host, port) {
    this.conn = new WireConnection(host, port);
    this.frames = [];
    this.closeSent = false;
    this.t0 = performance.now();
  }

  async open(path, headers, timeoutMs = 10000) {
    await this.conn.ready;
    const key = crypto.randomBytes(16).toString('base64');
    const lines = [`GET ${path} HTTP/1.1`, ...headers.map(([k, v]) => `${k}: ${/^sec-websocket-key$/i.test(k) ? key : v}`), '', ''];
    this.t0 = performance.now();
    this.conn.socket.write(lines.join('\r\n'));
    await this.conn.until(() => this.conn.buf.indexOf('\r\n\r\n') >= 0, timeoutMs);
    const hEnd = this.conn.buf.indexOf('\r\n\r\n');
    if (hEnd < 0) return { status: null };
    const head = this.conn.take(hEnd + 4).toString('latin1').split('\r\n');
    const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(head[0])[1]);
    const hs = { status, headers: {}, t_ms: now(this.t0) };
    for (const l of head.slice(1, -2)) {
      const i = l.indexOf(':');
      hs.headers[l.slice(0, i).toLowerCase()] = l.slice(i + 1).trim();
    }
    if (status !== 101) {
      const len = Number(hs.headers['content-length'] ?? 0);
      await this.conn.until(() => this.conn.buf.length >= len, timeoutMs);
      hs.body = this.conn.take(len).toString('utf8');
      return hs;
    }
    this.conn.socket.on('data', () => this.pump());
    this.pump();
    return hs;
  }

  pump() {
    for (;;) {
      const f = decodeFrame(this.conn.buf);
      if (!f) return this.conn.wake();
      this.conn.take(f.size);
      this.frames.push({ t_ms: now(this.t0), dir: 'in', opcode: f.opcode, payload: f.payload });
      if (f.opcode === 8 && !this.closeSent) this.send(8, f.payload.subarray(0, 2));
      if (f.opcode === 9) this.send(10, f.payload);
    }
  }

  send(opcode, payload) {
    if (this.conn.eof || this.conn.socket.destroyed) return;
    if (opcode === 8) this.closeSent = true;
    this.frames.push({ t_ms: now(this.t0), dir: 'out', opcode, payload: Buffer.from(payload) });
    this.conn.socket.write(encodeFrame(opcode, Buffer.from(payload)));
  }

  inFrames() {
    return this.frames.filter((f) => f.dir === 'in');
  }

  /** Waits until pred(inFrames) or the server's FIN, at most timeoutMs. */
  until(pred, timeoutMs) {
    return this.conn.until(() => pred(this.inFrames()), timeoutMs);
  }

  finAt() {
    return this.conn.eof && this.conn.eofAt !== null ? Math.round((this.conn.eofAt - this.t0) * 10) / 10 : null;
  }

  close() {
    this.conn.close();
  }
}
