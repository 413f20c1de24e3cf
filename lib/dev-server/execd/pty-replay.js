// Replay ring buffer of a PTY session (local OpenSandbox-compatible server's execd): keeps the newest 1 MiB of
// the session's output (stdout and stderr merged, in arrival order) and counts every byte ever written, so a
// client can ask for "everything since absolute offset N".
// The buffer grows with the output (doubling from GROW_FROM up to the full size) instead of being allocated whole:
// execd forks itself for every process it starts, and a fork copies the page tables of every mapping, so 500
// sessions holding an eagerly allocated 1 MiB each doubled the cost of each spawn (1.1 -> 2.2 ms of execd's CPU,
// its event loop blocked meanwhile) although their output was a few KiB.
export const REPLAY_BYTES = 1024 * 1024;
const GROW_FROM = 4096;

export class ReplayBuffer {
  constructor(size = REPLAY_BYTES) {
    this.buf = Buffer.alloc(0); // until it holds `size` bytes: no wrap yet, the byte at offset o is at buf[o]
    this.size = size;
    this.total = 0; // bytes ever written; the byte at absolute offset o lives at buf[o % size]
  }

  write(chunk) {
    let data = chunk;
    if (data.length >= this.size) {
      this.total += data.length - this.size;
      data = data.subarray(data.length - this.size);
    }
    const need = Math.min(this.size, this.total + data.length);
    if (need > this.buf.length) {
      const grown = Buffer.allocUnsafe(Math.min(this.size, Math.max(need, 2 * this.buf.length, GROW_FROM)));
      this.buf.copy(grown, 0); // still linear: offsets keep their index
      this.buf = grown;
    }
    const head = this.total % this.size;
    const first = Math.min(data.length, this.size - head);
    data.copy(this.buf, head, 0, first);
    if (first < data.length) data.copy(this.buf, 0, first);
    this.total += data.length;
  }

  /** { data, offset }: the retained bytes from `since` (clamped to the oldest retained byte) to the end. */
  readFrom(since) {
    if (since >= this.total) return { data: Buffer.alloc(0), offset: this.total };
    const oldest = Math.max(0, this.total - this.size);
    const offset = Math.max(since, oldest);
    const count = this.total - offset;
    const start = offset % this.size;
    const data = Buffer.allocUnsafe(count);
    const first = Math.min(count, this.size - start);
    this.buf.copy(data, 0, start, start + first);
    if (first < count) this.buf.copy(data, first, 0, count - first);
    return { data, offset };
  }
}
