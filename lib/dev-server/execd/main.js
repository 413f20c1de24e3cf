#!/usr/bin/env node
// execd of the local OpenSandbox-compatible server: the daemon that runs *inside* each sandbox
// (under bubblewrap: its own mount, PID and network namespaces) and serves commands, files, the PTY
// WebSocket API and the code interpreter, like OpenSandbox's execd on port 44772.
//
// It listens on a Unix socket (--socket PATH, bind-mounted from the host) or a TCP port (--port N);
// the lifecycle server on the host relays one loopback TCP port per sandbox to it byte for byte.
// With --handoff it listens on nothing: the C execd (src/execd/, osb-execd) owns that socket, answers its native
// routes and hands every other connection over Node's IPC channel (src/execd/handoff.h): each arrives as a
// message { head } (base64 of the bytes the C execd already read) with the connection's handle, and is served as if
// accepted here; --socket/--port then name the C execd, for /proxy/44772 to reach execd itself.
//
// Route modules (each sees the request target's canonical URL, http.js parseTarget): each exports `createRoutes(ctx)` returning
//   { handle(req, res, url): boolean | Promise<boolean>   // true when the module answered the request
//     upgrade?(req, socket, head, url): boolean          // true when the module took the WebSocket upgrade
//     close?(): void }                                     // execd shutdown
// ctx = { token, workspace, ptyExitRace, signalForwarding, ptyCloseLinger, commandTailMs, self, interrupters }
//   token: required X-EXECD-ACCESS-TOKEN or ''; workspace: default cwd; ptyExitRace: --pty-exit-race given;
//   signalForwarding: --signal-forwarding given (relay signals to the foreground command, SIGPIPE included, see commands.js);
//   ptyCloseLinger: --pty-close-linger given (a client's close is answered, the TCP connection never closed);
//   commandTailMs: how long a /command stream stays open after its final event (execd's graceful-shutdown tail);
//   self: where this execd listens ({ socketPath } or { host, port }), for /proxy/44772 to reach execd itself;
//   (--native-addon FILE: the addon spawn.js starts processes with, see there)
//   interrupters: array of async (id) => boolean; DELETE /command?id= asks them for ids that are not commands
//   (e.g. code contexts) before answering "no such session";
//   relaySignal(sig): hands a signal execd received to the foreground command (signalForwarding; set by commands.js).
import { createRequire } from 'node:module';
import fs from 'node:fs';
import { parseArgs } from 'node:util';
import { answerBadRequest, parseTarget, sendBadRequest, sendEmpty, sendError, sendJson, sendNotFound } from './http.js';
import { createRoutes as commandRoutes } from './commands.js';
import { createRoutes as fileRoutes } from './files.js';
import { createRoutes as proxyRoutes, proxyRequest, proxyUpgrade } from './proxy.js';
import { useNativeAddon } from './spawn.js';
// CommonJS require for node:http: an ESM import of it builds its whole namespace, which loads undici (~25 ms of start)
const http = createRequire(import.meta.url)('node:http');

const { values: opts } = parseArgs({
  options: {
    socket: { type: 'string' },
    port: { type: 'string' },
    host: { type: 'string', default: '127.0.0.1' },
    'access-token': { type: 'string', default: process.env.EXECD_ACCESS_TOKEN ?? '' },
    'access-token-fd': { type: 'string' }, // the token read from this inherited fd (kept out of environ and argv)
    workspace: { type: 'string', default: '/workspace' },
    'pty-exit-race': { type: 'boolean', default: false },
    'signal-forwarding': { type: 'boolean', default: false },
    'pty-close-linger': { type: 'boolean', default: false },
    'command-tail-ms': { type: 'string', default: '1000' },
    handoff: { type: 'boolean', default: false },
    'native-addon': { type: 'string' }, // the addon file whose spawn() starts processes (loaded at the first one)
  },
});

useNativeAddon(opts['native-addon']);

// the token must not leak into commands through the environment
delete process.env.EXECD_ACCESS_TOKEN;

let fdToken = null;
if (opts['access-token-fd'] !== undefined) {
  const fd = Number(opts['access-token-fd']);
  fdToken = fs.readFileSync(fd, 'utf8');
  fs.closeSync(fd);
}

const ctx = {
  token: fdToken ?? opts['access-token'],
  workspace: opts.workspace,
  ptyExitRace: opts['pty-exit-race'],
  signalForwarding: opts['signal-forwarding'],
  ptyCloseLinger: opts['pty-close-linger'],
  commandTailMs: Math.max(0, Number(opts['command-tail-ms']) || 0),
  self: opts.socket ? { socketPath: opts.socket } : { host: opts.host, port: Number(opts.port ?? 44772) },
  interrupters: [],
};
const commands = commandRoutes(ctx);
ctx.relaySignal = commands.relaySignal;

/**
 * A route module loaded on the first request under `prefix` (the path itself or below it): what a sandbox's first
 * command needs (commands, files, the proxy) loads at start; bash sessions, PTYs (with ws), the code interpreter and
 * metrics (about a third of execd's start) only when used. Its handle/upgrade then answer exactly as if it had been
 * loaded at start (the modules are tried in the same order); nothing of it exists before, so it has no sessions,
 * contexts or interrupters to miss.
 */
function lazyRoutes(prefix, load) {
  let loading = null;
  let routes = null; // once loaded: close() at shutdown must be synchronous (process.exit follows)
  const routesOf = () => (loading ??= load().then((m) => (routes = m.createRoutes(ctx))));
  const mine = (url) => url.pathname === prefix || url.pathname.startsWith(`${prefix}/`);
  return {
    async handle(req, res, url) {
      return mine(url) && (await routesOf()).handle(req, res, url);
    },
    async upgrade(req, socket, head, url) {
      if (!mine(url)) return false;
      // the http server no longer watches an upgraded socket: a reset while the module loads must not be uncaught
      const ignore = () => {};
      socket.on('error', ignore);
      try {
        return (await routesOf()).upgrade?.(req, socket, head, url) ?? false;
      } finally {
        socket.off('error', ignore);
      }
    },
    close() {
      routes?.close?.();
    },
  };
}

/**
 * --handoff: the C execd's own routes — the commands (POST and DELETE /command, GET /command/status/{id} and
 * /command/{id}/logs), the PTY API (POST /pty, GET and DELETE /pty/{id}, the WebSocket /pty/{id}/ws), the bash
 * sessions (POST /session, POST /session/{id}/run, DELETE /session/{id}) and GET /metrics[/watch] — arriving on
 * a connection the C execd handed over (a keep-alive connection whose earlier request was a file's), are passed back
 * to it (ctx.self), so that every command and PTY session is in its one registry (a session made here would be
 * unknown to the WebSocket the C execd serves). A DELETE /command?id= of a code context (an interrupter's) is this
 * execd's; the C execd hands nothing this process sent it back here (it knows the peer's pid).
 */
function nativeBack() {
  const native = (method, p) => (p === '/command' && (method === 'POST' || method === 'DELETE')) ||
    (method === 'GET' && (/^\/command\/status\/[^/]+$/.test(p) || /^\/command\/[^/]+\/logs$/.test(p))) ||
    (p === '/pty' && method === 'POST') || ((method === 'GET' || method === 'DELETE') && /^\/pty\/[^/]+$/.test(p)) ||
    (p === '/session' && method === 'POST') || (method === 'POST' && /^\/session\/[^/]+\/run$/.test(p)) ||
    (method === 'DELETE' && /^\/session\/[^/]+$/.test(p)) || (method === 'GET' && (p === '/metrics' || p === '/metrics/watch'));
  return {
    upgrade(req, socket, head, url) {
      if (!/^\/pty\/[^/]+\/ws$/.test(url.pathname)) return false;
      proxyUpgrade(req, socket, head, ctx.self, url.pathname + url.search);
      return true;
    },
    async handle(req, res, url) {
      if (!native(req.method, url.pathname)) return false;
      const id = req.method === 'DELETE' && url.pathname === '/command' ? url.searchParams.get('id') : null;
      for (const fn of id ? ctx.interrupters : []) {
        if (await fn(id)) {
          req.resume();
          sendEmpty(res);
          return true;
        }
      }
      proxyRequest(req, res, ctx.self, url.pathname + url.search);
      return true;
    },
  };
}

const modules = [
  ...(opts.handoff ? [nativeBack()] : []), commands, lazyRoutes('/session', () => import('./sessions.js')), fileRoutes(ctx), lazyRoutes('/pty', () => import('./pty.js')),
  proxyRoutes(ctx), lazyRoutes('/code', () => import('./code.js')), lazyRoutes('/metrics', () => import('./metrics.js')),
];

function authorized(req) {
  return !ctx.token || req.headers['x-execd-access-token'] === ctx.token;
}
const UNAUTHORIZED = { error: 'Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN' };
/** GET routes without parameters: with a trailing slash execd's router answers 301 to the path without it. */
const GET_ROUTES = new Set(['/ping', '/metrics', '/metrics/watch', '/files/info', '/files/download', '/files/search', '/directories/list', '/code/contexts']);

function redirectTrailingSlash(res, pathname) {
  const to = pathname.slice(0, -1);
  const body = `<a href="${to}">Moved Permanently</a>.\n\n`;
  res.writeHead(301, { 'Content-Type': 'text/html; charset=utf-8', Location: to, 'Content-Length': Buffer.byteLength(body) });
  res.end(body);
}

/**
 * The request target parsed once (http.js parseTarget); the routes see only its canonical URL. A malformed escape
 * gets Go's 400; a target that could route somewhere other than it reads (dot segments, encoded separators, …) a 400
 * naming why; either closes the connection. Answers through `res` (a request) or the raw socket (an upgrade).
 * Returns the URL, or null after answering.
 */
function target(req, res, socket) {
  const t = parseTarget(req.url);
  if (!t.error) return t.url;
  const body = { code: 'INVALID_REQUEST_PATH', message: t.error };
  if (res) {
    if (t.malformed) sendBadRequest(res);
    else sendJson(res, 400, body, { Connection: 'close' });
    req.resume();
  } else if (t.malformed) {
    answerBadRequest(socket);
  } else {
    const text = JSON.stringify(body);
    socket.end(`HTTP/1.1 400 Bad Request\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n${text}`);
  }
  return null;
}

const server = http.createServer(async (req, res) => {
  const url = target(req, res, null);
  if (!url) return;
  if (!authorized(req)) {
    // read the body first: answering while a proxy in front of us still writes it would reset the connection
    req.on('error', () => res.destroy());
    req.on('end', () => sendJson(res, 401, UNAUTHORIZED));
    req.resume();
    return;
  }
  if (req.method === 'GET' && url.pathname === '/ping') return sendEmpty(res);
  try {
    for (const m of modules) {
      if (await m.handle(req, res, url)) return;
    }
  } catch (err) {
    // a route that failed outside its own guard answers 500; execd keeps serving
    return sendError(res, 500, 'RUNTIME_ERROR', String(err?.message ?? err));
  }
  if (req.method === 'GET' && url.pathname.endsWith('/') && GET_ROUTES.has(url.pathname.slice(0, -1))) return redirectTrailingSlash(res, url.pathname);
  sendNotFound(res);
});
server.on('upgrade', async (req, socket, head) => {
  const url = target(req, null, socket);
  if (!url) return;
  if (!authorized(req)) {
    const body = JSON.stringify(UNAUTHORIZED);
    socket.end(`HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
    return;
  }
  try {
    for (const m of modules) {
      if (await m.upgrade?.(req, socket, head, url)) return;
    }
  } catch (err) {
    socket.destroy();
    return void process.stderr.write(`execd: upgrade of ${url.pathname} failed: ${err?.message ?? err}\n`);
  }
  socket.end('HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n');
});
server.keepAliveTimeout = 60_000;

function shutdown() {
  for (const m of modules) m.close?.();
  server.close();
  process.exit(0);
}
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);
// like upstream, signals execd itself receives go on to the foreground command (SIGTERM/SIGINT stay shutdown here)
if (ctx.signalForwarding) for (const sig of ['SIGHUP', 'SIGUSR2', 'SIGPIPE', 'SIGWINCH']) process.on(sig, () => commands.relaySignal(sig));

if (opts.handoff) {
  const net = createRequire(import.meta.url)('node:net');
  process.on('message', (msg, handle) => {
    if (!handle) return;
    const socket = new net.Socket({ handle, readable: true, writable: true });
    if (typeof msg?.head === 'string' && msg.head) socket.unshift(Buffer.from(msg.head, 'base64'));
    // served from the next loop iteration on, as a connection accepted here would be (its request is read one
    // iteration after the accept): connections that ended in this iteration are closed first (e.g. a PTY client's
    // previous WebSocket, whose close releases the session the new one asks for)
    setImmediate(() => setImmediate(() => server.emit('connection', socket)));
  });
  // the C execd went away (its end of the channel closed): nothing can reach this process any more
  process.on('disconnect', shutdown);
  process.send({ ready: true });
} else if (opts.socket) {
  fs.rmSync(opts.socket, { force: true });
  server.listen(opts.socket, () => process.stdout.write('execd ready\n'));
} else {
  server.listen(Number(opts.port ?? 44772), opts.host, () => process.stdout.write(`execd ready ${server.address().port}\n`));
}
