// One attached WebSocket client of a PTY session (local OpenSandbox-compatible server's execd), speaking the
// real execd's PTY frame protocol (docs/opensandbox-protocol.md §6.5):
//   server -> client: [0x03 + u64 BE offset + replay bytes], {"type":"connected",…}, 0x01+stdout / PTY stream,
//                     0x02+stderr (pipe mode), {"type":"pong"}, {"type":"error","code","error"},
//                     {"type":"exit","exit_code"} then close 1000 "process exited"; 4001 "TAKEN_OVER" on takeover.
//   client -> server: 0x00+stdin bytes, {"type":"stdin","data"}, {"type":"resize","cols","rows"},
//                     {"type":"signal","signal"}, {"type":"ping"}.
// RFC 6455 pings every 30 s; the client is dropped after 60 s without any frame or pong from it.
// Every output byte is sent before the exit frame. With `exitRace` (execd --pty-exit-race) the upstream race is
// reproduced on purpose: live output is held back RACE_HOLD_MS, and at process exit the held output is dropped
// (it stays in the replay buffer) and the exit frame + close go out at once.
import { SIGNALS } from './pty-session.js';
import { goJson } from './http.js';

const PING_MS = 30_000;
const READ_TIMEOUT_MS = 60_000;
const RACE_HOLD_MS = 250;
/** signalForwarding: the exit frame of a run killed by DELETE /pty waits this long (see clientGone). */
const KILLED_EXIT_HOLD_MS = 200;
const HIGH_WATER = 8 * 1024 * 1024;
const LOW_WATER = 1024 * 1024;

export class PtyConnection {
  constructor(ws, session, { exitRace = false, closeLinger = false, onWriteToClosed = null } = {}) {
    this.ws = ws;
    this.session = session;
    this.exitRace = exitRace;
    this.run = null;
    this.held = [];       // race mode: [{frame, timer}]
    this.live = false;    // output goes to the socket only after replay + connected were sent
    this.done = false;
    this.closing = false; // set when we close: any other ws.close() is the library's answer to the client's close
    this.corked = false;  // the socket is corked until the next setImmediate (batch)
    this.onWriteToClosed = onWriteToClosed;
    this.pinger = setInterval(() => ws.ping(), PING_MS);
    this.reader = setTimeout(() => ws.terminate(), READ_TIMEOUT_MS);
    ws.on('message', (data, isBinary) => {
      this.reader.refresh();
      this.onMessage(data, isBinary);
    });
    ws.on('pong', () => this.reader.refresh());
    ws.on('close', () => this.clientGone());
    ws.on('error', () => this.clientGone());
    // the library answers a client's close frame by echoing its code and reason; execd answers with no reason.
    // closeLinger (execd --pty-close-linger) reproduces what the real execd does next: it never closes the TCP
    // connection (the client has to drop it); the session is free for the next client at once.
    const close = ws.close.bind(ws);
    ws.close = (code, reason) => {
      if (this.closing) return close(code, reason);
      if (!closeLinger) return close(code, '');
      this.detach();
      const c = code ?? 1000;
      ws._socket?.write(Buffer.from([0x88, 2, c >> 8, c & 0xff])); // the answer frame; ws would end the socket after it
    };
  }

  /** Starts the process if needed, then replay + connected, then live output. */
  async attach({ pipeMode, since }) {
    const s = this.session;
    if (!s.running) {
      try {
        await s.start(pipeMode);
      } catch (err) {
        this.sendError('START_FAILED', String(err.message ?? err));
        this.finish(1011, 'start failed');
        return;
      }
      if (this.done) return;
    }
    // Snapshot and go live in one tick: no byte is lost or sent twice.
    this.run = s.run;
    const { data, offset } = s.replay.readFrom(since);
    if (data.length > 0) {
      const frame = Buffer.allocUnsafe(9 + data.length);
      frame[0] = 0x03;
      frame.writeBigUInt64BE(BigInt(offset), 1);
      data.copy(frame, 9);
      this.batch();
      this.ws.send(frame);
    }
    this.sendJson({ type: 'connected', session_id: s.id, mode: s.isPty ? 'pty' : 'pipe' });
    this.live = true;
    // a run that already ended (it can exit, and drain, while start() resolves) gets its exit frame now
    if (this.run.drained || (this.exitRace && this.run.exitCode !== null)) this.exited(this.run.exitCode);
  }

  onOutput(stream, chunk) {
    if (this.done || !this.live) return;
    const frame = Buffer.allocUnsafe(1 + chunk.length);
    frame[0] = stream === 2 ? 0x02 : 0x01;
    chunk.copy(frame, 1);
    if (!this.exitRace) {
      this.sendBinary(frame);
      return;
    }
    const entry = { frame };
    entry.timer = setTimeout(() => {
      this.held.splice(this.held.indexOf(entry), 1);
      this.sendBinary(frame);
    }, RACE_HOLD_MS);
    this.held.push(entry);
  }

  onRunEvent(run, what, code) {
    if (this.done || !this.live || run !== this.run) return;
    if (what !== (this.exitRace ? 'processExit' : 'exit')) return;
    // strict form of upstream's race after DELETE /pty: a client that closes as soon as the DELETE answered always
    // closes before the exit frame is written (then clientGone relays SIGPIPE)
    if (this.onWriteToClosed && this.session.closed) setTimeout(() => this.done || this.exited(code), KILLED_EXIT_HOLD_MS);
    else this.exited(code);
  }

  exited(code) {
    this.sendJson({ type: 'exit', exit_code: code });
    this.finish(1000, 'process exited');
  }

  /**
   * The frames sent in one turn of the event loop leave in one write: the socket stays corked until setImmediate
   * (a quick process's output, its markers, the exit frame and the close often come in one turn; each write costs a
   * system call here, in the relay in front of execd and in the client). Order is kept; end() flushes a corked socket.
   */
  batch() {
    const socket = this.ws._socket;
    if (this.corked || !socket || socket.destroyed) return;
    this.corked = true;
    socket.cork();
    setImmediate(() => {
      this.corked = false;
      socket.uncork();
    });
  }

  sendBinary(frame) {
    if (this.done) return;
    this.batch();
    this.ws.send(frame, () => {
      if (this.ws.bufferedAmount < LOW_WATER && this.session.holder === this) this.session.setPaused(false);
    });
    if (this.ws.bufferedAmount > HIGH_WATER) this.session.setPaused(true);
  }

  sendJson(obj) {
    if (this.done) return;
    this.batch();
    this.ws.send(`${goJson(obj)}\n`); // execd's text frames end with a newline
  }

  sendError(code, error) {
    this.sendJson({ type: 'error', error, code }); // execd's field order
  }

  onMessage(data, isBinary) {
    if (this.done) return;
    if (isBinary) {
      if (data.length === 0) return;
      if (data[0] !== 0x00) {
        this.sendError('INVALID_FRAME', `unknown binary frame type 0x${data[0].toString(16).padStart(2, '0')}`);
        return;
      }
      this.stdin(data.subarray(1));
      return;
    }
    let frame;
    try {
      frame = JSON.parse(data.toString('utf8'));
    } catch (err) {
      this.sendError('INVALID_FRAME', `invalid JSON frame: ${err.message}`);
      return;
    }
    switch (frame?.type) {
      case 'stdin':
        if (typeof frame.data !== 'string') this.sendError('INVALID_FRAME', 'stdin frame needs a string "data"');
        else this.stdin(Buffer.from(frame.data, 'utf8'));
        break;
      case 'resize':
        if (Number.isInteger(frame.cols) && Number.isInteger(frame.rows) && frame.cols > 0 && frame.rows > 0
          && frame.cols <= 0xffff && frame.rows <= 0xffff) this.session.resize(frame.cols, frame.rows);
        else this.sendError('INVALID_FRAME', 'resize frame needs positive integer "cols" and "rows"');
        break;
      case 'signal':
        if (SIGNALS.has(frame.signal)) this.session.signal(frame.signal);
        else this.sendError('INVALID_FRAME', `unsupported signal ${JSON.stringify(frame.signal)} (SIGINT, SIGTERM, SIGKILL, SIGQUIT, SIGHUP)`);
        break;
      case 'ping':
        this.sendJson({ type: 'pong' });
        break;
      default:
        this.sendError('INVALID_FRAME', `unknown frame type ${JSON.stringify(frame?.type ?? null)}`);
    }
  }

  stdin(bytes) {
    this.session.writeStdin(bytes, (err) => {
      if (err && !this.done) {
        this.sendError('STDIN_WRITE_FAILED', String(err.message ?? err));
        this.finish(1011, 'stdin write failed');
      }
    });
  }

  /** Takeover by another client: close 4001 "TAKEN_OVER". */
  evict() {
    this.finish(4001, 'TAKEN_OVER');
  }

  finish(code, reason) {
    if (this.done) return;
    this.detach();
    this.closing = true;
    this.ws.close(code, reason);
    // a client that never answers the close handshake is cut off
    setTimeout(() => this.ws.terminate(), 5000).unref();
  }

  /**
   * The client closed the connection before we closed it. Upstream's exit watcher still writes the exit and close
   * frames once a process that is already exiting (killed by DELETE /pty, or exited) is gone: to a closed socket,
   * EPIPE, and the SIGPIPE goes to execd's foreground command. onWriteToClosed (execd --signal-forwarding) reproduces
   * that write (strict form: every such close relays).
   */
  clientGone() {
    const run = this.run;
    const pending = !this.done && !this.closing && this.live && run && (this.session.closed || run.exitCode !== null);
    this.detach();
    if (!pending || !this.onWriteToClosed) return;
    if (run.exitCode !== null) this.onWriteToClosed();
    else run.onProcessGone(this.onWriteToClosed);
  }

  detach() {
    if (this.done) return;
    this.done = true;
    clearInterval(this.pinger);
    clearTimeout(this.reader);
    for (const h of this.held) clearTimeout(h.timer);
    this.held = [];
    if (this.session.holder === this) {
      this.session.holder = null;
      this.session.setPaused(false);
    }
  }
}
