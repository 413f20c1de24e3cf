// Line splitter for execd command output: splits a byte stream on \n, \r and \r\n (coalesced), like execd's
// tailer. Each line is delivered without its terminator; an empty line is delivered as "\n"; flush() delivers
// a trailing partial line without newline. Bytes are kept until a line is complete so UTF-8 is never cut.
// A line longer than maxLine bytes is not buffered whole: each maxLine bytes (cut back to a UTF-8 character
// boundary) are delivered as a line of their own, so memory stays bounded whatever the process writes.
// When onLine returns false (the consumer's buffer is full) the splitter stops at that line and holds the rest of
// the chunk until resume(), so one pipe read never turns into thousands of queued events.

/** Longest line delivered as one piece (1 MiB; the real execd sends a 70 KB line whole). */
export const MAX_LINE_BYTES = 1024 * 1024;

/** Where to cut buf at most n bytes in so that no UTF-8 character is split (n itself when none would be). */
function utf8Cut(buf, n) {
  let cut = n;
  // step back over continuation bytes (10xxxxxx) to the lead byte of the character that straddles n
  while (cut > n - 3 && cut > 0 && (buf[cut] & 0xc0) === 0x80) cut--;
  if (cut === 0 || (buf[cut] & 0xc0) === 0x80) return n; // not UTF-8 there: cut anywhere
  return cut;
}

export class LineSplitter {
  constructor(onLine, { maxLine = MAX_LINE_BYTES } = {}) {
    this.onLine = onLine;
    this.maxLine = maxLine;
    this.parts = [];
    this.size = 0; // bytes in parts
    this.pendingCR = false; // the previous chunk ended with \r: a leading \n belongs to it
    this.discarding = false;
    this.blocked = false; // onLine said stop: the rest of the current chunk waits in `held`
    this.held = null;
  }

  /** Delivers what was held back since onLine returned false (it may stop again). */
  resume() {
    this.blocked = false;
    const rest = this.held;
    this.held = null;
    if (rest) this.push(rest);
  }

  /** From now on everything pushed is dropped unread (nobody listens any more): costs no memory and no decoding. */
  discard() {
    this.discarding = true;
    this.parts = [];
    this.size = 0;
    this.held = null;
  }

  push(buf) {
    if (this.discarding) return;
    if (this.blocked) {
      // a read already under way when the consumer asked to stop: keep it behind what is held, in order
      this.held = this.held ? Buffer.concat([this.held, buf]) : Buffer.from(buf);
      return;
    }
    let start = 0;
    let i = 0;
    if (this.pendingCR && buf.length > 0) {
      this.pendingCR = false;
      if (buf[0] === 0x0a) start = i = 1;
    }
    let nl = -2; // next \n at or after i (-1: none), -2: not looked up yet; likewise cr for \r
    let cr = -2;
    for (; i < buf.length; i++) {
      // jump to the next terminator (native search: a long line is not walked byte by byte)
      if (nl !== -1 && nl < i) nl = buf.indexOf(0x0a, i);
      if (cr !== -1 && cr < i) cr = buf.indexOf(0x0d, i);
      i = nl < 0 ? cr : cr < 0 ? nl : Math.min(nl, cr);
      if (i < 0) break;
      const c = buf[i];
      this.add(buf.subarray(start, i));
      this.emit();
      if (c === 0x0d) {
        if (i + 1 < buf.length) {
          if (buf[i + 1] === 0x0a) i++;
        } else {
          this.pendingCR = true;
        }
      }
      start = i + 1;
      if (this.blocked) {
        if (start < buf.length) this.held = buf.subarray(start);
        return;
      }
    }
    if (start < buf.length) this.add(Buffer.from(buf.subarray(start)));
  }

  /** Appends bytes of the current line; delivers maxLine-byte pieces while more than maxLine bytes are held. */
  add(part) {
    this.parts.push(part);
    this.size += part.length;
    while (this.size > this.maxLine) {
      const all = Buffer.concat(this.parts);
      const cut = utf8Cut(all, this.maxLine);
      this.parts = [all.subarray(cut)];
      this.size = all.length - cut;
      if (this.onLine(all.subarray(0, cut).toString('utf8')) === false) this.blocked = true;
    }
  }

  emit() {
    const text = Buffer.concat(this.parts).toString('utf8');
    this.parts = [];
    this.size = 0;
    if (this.onLine(text === '' ? '\n' : text) === false) this.blocked = true;
  }

  /** Delivers everything still held (the output ended), whether or not the consumer asked to stop. */
  flush() {
    while (this.held) this.resume();
    this.blocked = false;
    if (this.size > 0) this.emit();
    this.blocked = false;
    this.parts = [];
    this.size = 0;
  }
}
