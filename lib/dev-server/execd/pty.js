// Route module of execd (see main.js for the contract): the interactive PTY API of the local
// OpenSandbox-compatible server, like the real execd (docs/opensandbox-protocol.md §6.5; differences in
// docs/dev-server-execd.md).
//   POST /pty {cwd?, command?} -> 201 {session_id}   (nothing starts until the first WebSocket connect)
//   GET /pty/{id} -> {session_id, running, output_offset}     DELETE /pty/{id} -> 200 (SIGKILL the group)
//   GET /pty/{id}/ws?pty=0|1&since=N&takeover=1 -> WebSocket (pty-conn.js); 404 / 409 JSON before the upgrade.
// ctx.ptyExitRace (execd --pty-exit-race) makes connections reproduce upstream's exit race (see pty-conn.js).
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { HttpError, goJson, guard, readJson, sendEmpty, sendJson } from './http.js';
import { expandPath } from './files-paths.js';
import { PtySession } from './pty-session.js';
import { PtyConnection } from './pty-conn.js';
import { mkdirpSync } from './mkdirp.js';
// ws through require: importing a CommonJS package from ESM runs Node's CommonJS export lexer (~30 ms of start)
const { WebSocketServer } = createRequire(import.meta.url)('ws');

/** decodeURIComponent that never throws (a malformed escape just stays as it is). */
function decode(s) {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

function rejectUpgrade(socket, status, text, body) {
  const json = goJson(body);
  socket.on('error', () => {});
  socket.end(`HTTP/1.1 ${status} ${text}\r\nContent-Type: application/json; charset=utf-8\r\n`
    + `Content-Length: ${Buffer.byteLength(json)}\r\nConnection: close\r\n\r\n${json}`);
}

export function createRoutes(ctx) {
  const sessions = new Map();
  const wss = new WebSocketServer({ noServer: true, perMessageDeflate: false, maxPayload: 16 * 1024 * 1024 });

  function defaultCwd() {
    return ctx.workspace && fs.existsSync(ctx.workspace) ? ctx.workspace : process.cwd();
  }

  async function create(req, res) {
    let body = await readJson(req, { optional: true, prefix: 'error parsing request: ' });
    body ??= {};
    if (typeof body !== 'object' || Array.isArray(body)) throw new HttpError(400, 'INVALID_REQUEST_BODY', 'error parsing request: expected a JSON object');
    for (const k of ['cwd', 'command']) {
      if (body[k] !== undefined && body[k] !== null && typeof body[k] !== 'string') {
        throw new HttpError(400, 'INVALID_REQUEST_BODY', `error parsing request: "${k}" must be a string`);
      }
    }
    let cwd = defaultCwd();
    if (body.cwd) {
      cwd = path.resolve(defaultCwd(), expandPath(body.cwd));
      try {
        mkdirpSync(cwd);
      } catch (err) {
        throw new HttpError(500, 'RUNTIME_ERROR', `error creating pty session: error creating PTY session work directory: ${err.message}`);
      }
    }
    const id = crypto.randomUUID();
    sessions.set(id, new PtySession({ id, cwd, command: body.command || '' }));
    sendJson(res, 201, { session_id: id });
  }

  function notFound(id) {
    return new HttpError(404, 'CONTEXT_NOT_FOUND', `pty session ${id} not found`);
  }

  function status(res, id) {
    const s = sessions.get(id);
    if (!s) throw notFound(id);
    sendJson(res, 200, { session_id: id, running: s.running, output_offset: s.replay.total });
  }

  function remove(res, id) {
    const s = sessions.get(id);
    if (!s) throw notFound(id);
    sessions.delete(id);
    s.kill();
    sendEmpty(res);
  }

  function upgrade(req, socket, head, url) {
    const m = /^\/pty\/([^/]+)\/ws$/.exec(url.pathname);
    if (!m) return false;
    const id = decode(m[1]);
    const session = sessions.get(id);
    if (!session) {
      rejectUpgrade(socket, 404, 'Not Found', { code: 'CONTEXT_NOT_FOUND', message: `pty session ${id} not found` });
      return true;
    }
    const takeover = url.searchParams.get('takeover') === '1';
    if (session.holder && !takeover) {
      rejectUpgrade(socket, 409, 'Conflict', { code: 'ALREADY_CONNECTED', message: `another client is already connected to pty session ${id}` });
      return true;
    }
    // Claim the session during the handshake; give it back if the handshake fails.
    const previous = session.holder;
    const claim = { pending: true };
    session.holder = claim;
    const release = () => {
      if (session.holder === claim) session.holder = previous && !previous.pending && !previous.done ? previous : null;
    };
    socket.once('close', release);
    wss.handleUpgrade(req, socket, head, (ws) => {
      socket.off('close', release);
      if (session.holder !== claim) {
        ws.close(4001, 'TAKEN_OVER');
        return;
      }
      if (previous && !previous.pending) previous.evict();
      const conn = new PtyConnection(ws, session, {
        exitRace: Boolean(ctx.ptyExitRace), closeLinger: Boolean(ctx.ptyCloseLinger),
        onWriteToClosed: ctx.signalForwarding ? () => ctx.relaySignal('SIGPIPE') : null,
      });
      session.holder = conn;
      const since = Number.parseInt(url.searchParams.get('since') ?? '0', 10);
      conn.attach({ pipeMode: url.searchParams.get('pty') === '0', since: Number.isFinite(since) ? since : 0 })
        .catch((err) => {
          conn.sendError('START_FAILED', String(err?.message ?? err));
          conn.finish(1011, 'internal error');
        });
    });
    return true;
  }

  return {
    async handle(req, res, url) {
      if (req.method === 'POST' && url.pathname === '/pty') {
        await guard(res, () => create(req, res));
        return true;
      }
      const m = /^\/pty\/([^/]+)$/.exec(url.pathname);
      if (!m) return false;
      const id = decode(m[1]);
      if (req.method === 'GET') await guard(res, async () => status(res, id));
      else if (req.method === 'DELETE') await guard(res, async () => remove(res, id));
      else return false;
      return true;
    },
    upgrade,
    close() {
      for (const s of sessions.values()) {
        if (s.holder && !s.holder.pending) s.holder.finish(1001, 'execd shutting down');
        s.kill();
      }
      sessions.clear();
      wss.close();
    },
  };
}
