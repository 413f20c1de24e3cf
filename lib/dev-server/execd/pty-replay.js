// Replay ring buffer of a PTY session (local OpenSandbox-compatible server's execd): keeps the newest 1 MiB of
// the session's output (stdout and stderr merged, in arrival order) and counts every byte ever written, so a
// client can ask for "everything since absolute offset N".
export const REPLAY_BYTES = 1024 * 1024;

export class ReplayBuffer {
  constructor(size = REPLAY_BYTES) {
    this.buf = Buffer.alloc(size);
    this.size = size;
    this.total = 0; // bytes ever written; the byte at absolute offset o lives at buf[o % size]
  }

  write(chunk) {
    let data = chunk;
    if (data.length >= this.size) {
      this.total += data.length - this.size;
      data = data.subarray(data.length - this.size);
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
