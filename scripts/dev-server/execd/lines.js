// Line splitter for execd command output: splits a byte stream on \n, \r and \r\n (coalesced), like execd's
// tailer. Each line is delivered without its terminator; an empty line is delivered as "\n"; flush() delivers
// a trailing partial line without newline. Bytes are kept until a line is complete so UTF-8 is never cut.
export class LineSplitter {
  constructor(onLine) {
    this.onLine = onLine;
    this.parts = [];
    this.pendingCR = false; // the previous chunk ended with \r: a leading \n belongs to it
  }

  push(buf) {
    let start = 0;
    let i = 0;
    if (this.pendingCR && buf.length > 0) {
      this.pendingCR = false;
      if (buf[0] === 0x0a) start = i = 1;
    }
    for (; i < buf.length; i++) {
      const c = buf[i];
      if (c !== 0x0a && c !== 0x0d) continue;
      this.parts.push(buf.subarray(start, i));
      this.emit();
      if (c === 0x0d) {
        if (i + 1 < buf.length) {
          if (buf[i + 1] === 0x0a) i++;
        } else {
          this.pendingCR = true;
        }
      }
      start = i + 1;
    }
    if (start < buf.length) this.parts.push(Buffer.from(buf.subarray(start)));
  }

  emit() {
    const text = Buffer.concat(this.parts).toString('utf8');
    this.parts = [];
    this.onLine(text === '' ? '\n' : text);
  }

  flush() {
    if (this.parts.some((p) => p.length > 0)) this.emit();
    this.parts = [];
  }
}
