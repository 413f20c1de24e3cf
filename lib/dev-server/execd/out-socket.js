// Output channels for background commands: a connected pair of Unix stream sockets per command, the writer end
// given to the process as both stdout and stderr (one channel, so the two stay merged in write order, as in the
// real execd's single log file) and the reader end read by execd into the command's bounded log. Node cannot make
// a pipe or socketpair by itself, so the pair is made by connecting to a private listening socket (abstract
// namespace, random name) and proving the connection with a random token; anything else connecting is dropped.
import net from 'node:net';
import crypto from 'node:crypto';

const TOKEN_LEN = 32; // hex characters
const ACCEPT_TIMEOUT_MS = 10_000;

export class OutputSockets {
  constructor() {
    this.name = `\0osb-execd-out-${crypto.randomBytes(12).toString('hex')}`;
    this.server = null;
    this.listening = null;
    this.pending = new Map(); // token -> (socket) => void
  }

  listen() {
    this.listening ??= new Promise((resolve, reject) => {
      this.server = net.createServer((s) => this.accept(s));
      this.server.once('error', reject);
      this.server.listen(this.name, () => resolve());
    });
    return this.listening;
  }

  accept(s) {
    s.on('error', () => s.destroy());
    const timer = setTimeout(() => s.destroy(), ACCEPT_TIMEOUT_MS);
    let got = Buffer.alloc(0);
    const onData = (b) => {
      got = Buffer.concat([got, b]);
      if (got.length < TOKEN_LEN) return;
      clearTimeout(timer);
      s.off('data', onData);
      s.pause();
      const waiter = got.length === TOKEN_LEN ? this.pending.get(got.toString('latin1')) : undefined;
      if (!waiter) return void s.destroy();
      this.pending.delete(got.toString('latin1'));
      waiter(s);
    };
    s.on('data', onData);
  }

  /** Resolves { reader, writer }: two connected sockets; pass writer to spawn's stdio, then destroy it here. */
  async pair() {
    await this.listen();
    const token = crypto.randomBytes(TOKEN_LEN / 2).toString('hex');
    const reader = net.connect(this.name);
    reader.on('error', () => reader.destroy());
    try {
      const writer = await new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error('output channel not set up in time')), ACCEPT_TIMEOUT_MS);
        this.pending.set(token, (s) => {
          clearTimeout(timer);
          resolve(s);
        });
        reader.write(token);
      });
      return { reader, writer };
    } catch (err) {
      this.pending.delete(token);
      reader.destroy();
      throw err;
    }
  }

  close() {
    this.server?.close();
  }
}
