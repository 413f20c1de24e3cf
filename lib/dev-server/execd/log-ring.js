// Bounded output log of a background command: the newest `cap` bytes of everything the command wrote (stdout and
// stderr merged in write order), addressed by absolute byte offsets like execd's `logs?cursor=`. Older bytes are
// dropped; `start` says where the retained bytes begin, `end` is the number of bytes ever written.

/** Bytes kept per background command (1 MiB). */
export const LOG_RING_BYTES = 1024 * 1024;

export class LogRing {
  constructor(cap = LOG_RING_BYTES) {
    this.cap = cap;
    this.chunks = []; // Buffers, oldest first; the first may start before `start` by `skip` bytes
    this.skip = 0;
    this.size = 0; // retained bytes (excluding skip)
    this.end = 0;
  }

  get start() {
    return this.end - this.size;
  }

  push(buf) {
    if (buf.length === 0) return;
    // a small read keeps a slice of a larger allocation alive: copy it so memory is what is retained
    const own = buf.length < 4096 && buf.buffer.byteLength > 2 * buf.length ? Buffer.from(buf) : buf;
    this.chunks.push(own);
    this.size += own.length;
    this.end += own.length;
    while (this.size > this.cap) {
      const first = this.chunks[0];
      const drop = Math.min(first.length - this.skip, this.size - this.cap);
      this.skip += drop;
      this.size -= drop;
      if (this.skip === first.length) {
        this.chunks.shift();
        this.skip = 0;
      }
    }
  }

  /** Retained bytes from absolute offset `from` (clamped to [start, end]) to the end, as one Buffer. */
  read(from) {
    const skipTotal = Math.max(0, Math.min(from, this.end) - this.start);
    const out = Buffer.allocUnsafe(this.size - skipTotal);
    let toSkip = skipTotal + this.skip;
    let at = 0;
    for (const c of this.chunks) {
      if (toSkip >= c.length) {
        toSkip -= c.length;
        continue;
      }
      at += c.copy(out, at, toSkip);
      toSkip = 0;
    }
    return out;
  }
}
