// Language servers for Workspace({ lsp }) on a sandbox (docs/integration.md, "Language servers (LSP)").
// Mastra's LSP client starts a server through the sandbox's process manager, but it looks binaries up on the host
// (lsp: true finds nothing inside the sandbox) and sends `processId: process.pid` in `initialize`: the host's pid, which
// does not exist in the sandbox's PID namespace, so servers built on vscode-languageserver (typescript-language-server,
// pyright, the eslint server) see their "parent" dead at their first 3 s watchdog check and exit.
// openSandboxLspServers() returns Mastra `servers` definitions (they replace the built-in ones of the same id) whose
// commands run inside the sandbox; a Node server runs under PARENT_WRAPPER, which passes stdin/stdout through unchanged
// except that the first message's `initialize` processId becomes the wrapper's own pid: the server's real parent
// inside the sandbox, so the watchdog keeps its meaning (the server exits once the wrapper is gone).

/**
 * The wrapper, run as `node -e '<this>' -- <server argv…>` (no single quote in it: it goes through the sandbox's
 * shell inside single quotes). Reads the first LSP frame (headers, blank line, Content-Length bytes) from stdin,
 * rewrites params.processId of an `initialize` request to its own pid, rewrites Content-Length to the new body's
 * byte length (other headers kept), then forwards every further byte as it comes; the server's stdout and stderr are
 * the wrapper's own. Exits with the server's exit code (a signal is re-raised); SIGTERM/SIGINT/SIGHUP are passed on.
 */
export const PARENT_WRAPPER = [
  'const { spawn } = require("node:child_process");',
  'const [cmd, ...args] = process.argv.slice(1);',
  'const child = spawn(cmd, args, { stdio: ["pipe", "inherit", "inherit"] });',
  'child.on("error", (e) => { process.stderr.write(`lsp wrapper: ${cmd}: ${e.message}\\n`); process.exit(127); });',
  'child.on("exit", (code, signal) => {',
  '  if (!signal) process.exit(code ?? 1);',
  '  process.removeAllListeners(signal);',
  '  process.kill(process.pid, signal);',
  '});',
  'for (const s of ["SIGTERM", "SIGINT", "SIGHUP"]) process.on(s, () => child.kill(s));',
  'child.stdin.on("error", () => {});',
  'let head = Buffer.alloc(0);',
  'const first = (data) => {',
  '  head = Buffer.concat([head, data]);',
  '  const end = head.indexOf("\\r\\n\\r\\n");',
  '  if (end < 0) return false;',
  '  const headers = head.subarray(0, end).toString("latin1").split("\\r\\n");',
  '  const at = headers.findIndex((h) => /^content-length:/i.test(h));',
  '  const length = at < 0 ? NaN : Number(headers[at].slice(headers[at].indexOf(":") + 1).trim());',
  '  if (!Number.isSafeInteger(length) || length < 0) { child.stdin.write(head); return true; }',
  '  if (head.length < end + 4 + length) return false;',
  '  let body = head.subarray(end + 4, end + 4 + length);',
  '  try {',
  '    const message = JSON.parse(body.toString("utf8"));',
  '    if (message && message.method === "initialize" && message.params && typeof message.params === "object") {',
  '      message.params.processId = process.pid;',
  '      body = Buffer.from(JSON.stringify(message), "utf8");',
  '      headers[at] = `Content-Length: ${body.length}`;',
  '    }',
  '  } catch {}',
  '  child.stdin.write(Buffer.concat([Buffer.from(headers.join("\\r\\n") + "\\r\\n\\r\\n", "latin1"), body, head.subarray(end + 4 + length)]));',
  '  return true;',
  '};',
  'let passing = false;',
  'process.stdin.on("data", (data) => { if (passing) child.stdin.write(data); else passing = first(data); });',
  'process.stdin.on("end", () => { if (!passing && head.length) child.stdin.write(head); child.stdin.end(); });',
].join('\n');

/** `node -e '<PARENT_WRAPPER>' -- <command>`: a command for the sandbox's shell. */
export function withSandboxParent(command, node = 'node') {
  if (typeof command !== 'string' || !command.trim()) throw new TypeError('withSandboxParent: command must be a non-empty string');
  if (typeof node !== 'string' || !node.trim()) throw new TypeError('withSandboxParent: node must be a non-empty string');
  return `${node} -e '${PARENT_WRAPPER}' -- ${command}`;
}

const TS_EXTENSIONS = ['.ts', '.tsx', '.js', '.jsx', '.mjs', '.cjs', '.mts', '.cts'];
const TS_LANGUAGES = ['typescript', 'typescriptreact', 'javascript', 'javascriptreact'];

function stringOption(options, key, fallback) {
  const v = options[key];
  if (v === undefined) return fallback;
  if (typeof v !== 'string' || !v.trim()) throw new TypeError(`openSandboxLspServers: ${key} must be a non-empty string (a command or path inside the sandbox)`);
  return v;
}

/**
 * Mastra `lsp.servers` definitions that run the TypeScript and Python language servers inside the sandbox.
 * options (every command and path is inside the sandbox; false leaves that server out):
 * - typescript: the typescript-language-server command (default 'typescript-language-server', from the sandbox's
 *   PATH), started with --stdio under PARENT_WRAPPER; false: none
 * - tsserverPath: typescript's lib/tsserver.js for it (default: the server finds typescript itself — the project's
 *   node_modules, then its own)
 * - python: the pylsp command (default 'pylsp'; pylsp only watches its parent when started with
 *   --check-parent-process, so it runs without the wrapper and needs no Node); false: none
 * - node: the Node the wrapper runs on (default 'node', from the sandbox's PATH)
 */
export function openSandboxLspServers(options = {}) {
  if (options === null || typeof options !== 'object') throw new TypeError('openSandboxLspServers: options must be an object');
  const known = new Set(['typescript', 'tsserverPath', 'python', 'node']);
  for (const k of Object.keys(options)) if (!known.has(k)) throw new TypeError(`openSandboxLspServers: unknown option ${k}`);
  const node = stringOption(options, 'node', 'node');
  const servers = {};
  if (options.typescript !== false) {
    const ts = stringOption(options, 'typescript', 'typescript-language-server');
    const tsserverPath = stringOption(options, 'tsserverPath', undefined);
    servers.typescript = {
      id: 'typescript',
      name: 'TypeScript Language Server',
      languageIds: TS_LANGUAGES,
      extensions: TS_EXTENSIONS,
      markers: ['tsconfig.json', 'package.json'],
      command: withSandboxParent(`${ts} --stdio`, node),
      ...(tsserverPath ? { initializationOptions: { tsserver: { path: tsserverPath, logVerbosity: 'off' } } } : {}),
    };
  }
  if (options.python !== false) {
    servers.python = {
      id: 'python',
      name: 'Python Language Server (pylsp)',
      languageIds: ['python'],
      extensions: ['.py', '.pyi'],
      markers: ['pyproject.toml', 'setup.py', 'requirements.txt', 'setup.cfg'],
      command: stringOption(options, 'python', 'pylsp'),
    };
  }
  return servers;
}
