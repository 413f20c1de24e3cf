// Where the local server finds the C execd (src/execd/, built as `osb-execd` next to the addon): $MASTRA_OPENSANDBOX_EXECD
// when set, else the one beside the addon's candidates (addon-file.js: $MASTRA_OPENSANDBOX_ADDON's directory, the
// prebuilt prebuilds/linux-<arch>/, or the source build's build/Release/). Every sandbox's execd is that program:
// `checkExecdBinary()` (startServer) fails the server's start with an error naming the path when it is missing or
// does not run — never a fallback.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { addonCandidates } from './addon-file.js';

export const EXECD_BINARY_NAME = 'osb-execd';
const VERSION_TIMEOUT_MS = 10000;
const checked = new Map(); // real path -> the file's identity when its --version last ran fine (one run per file)

/** The paths looked at, in order: $MASTRA_OPENSANDBOX_EXECD alone when set, else beside each addon candidate. */
export function execdCandidates(env = process.env) {
  if (env.MASTRA_OPENSANDBOX_EXECD) return [path.resolve(env.MASTRA_OPENSANDBOX_EXECD)];
  return addonCandidates(env).files.map((addon) => path.join(path.dirname(addon), EXECD_BINARY_NAME));
}

/** Absolute path of the C execd to run, or null when there is none. */
export function execdBinary(env = process.env) {
  const files = execdCandidates(env);
  if (env.MASTRA_OPENSANDBOX_EXECD) return files[0];
  return files.find((f) => fs.existsSync(f)) ?? null;
}

/**
 * The C execd's real path, checked: it exists, is a regular file and `osb-execd --version` runs and prints
 * `osb-execd <version>`. Throws an Error naming the path (or the paths looked at) otherwise.
 */
export function checkExecdBinary(env = process.env) {
  const file = execdBinary(env);
  const how = 'node scripts/build.js builds build/Release/osb-execd; the npm package carries prebuilds/linux-<arch>/osb-execd';
  if (!file) {
    throw new Error(`the C execd ${EXECD_BINARY_NAME} was not found (looked at ${execdCandidates(env).join(', ')}): every sandbox runs it (${how}; or set MASTRA_OPENSANDBOX_EXECD=<file>)`);
  }
  let real;
  let id;
  try {
    real = fs.realpathSync(file);
    const st = fs.statSync(real);
    if (!st.isFile()) throw new Error('not a regular file');
    id = `${st.dev}:${st.ino}:${st.size}:${st.mtimeMs}:${st.mode}`;
  } catch (err) {
    throw new Error(`the C execd ${file} cannot be used: ${err.code === 'ENOENT' ? 'no such file' : err.message}${env.MASTRA_OPENSANDBOX_EXECD ? ' (MASTRA_OPENSANDBOX_EXECD)' : ''}`);
  }
  if (checked.get(real) === id) return real;
  const r = spawnSync(real, ['--version'], { encoding: 'utf8', timeout: VERSION_TIMEOUT_MS, stdio: ['ignore', 'pipe', 'pipe'] });
  const out = (r.stdout ?? '').trim();
  if (r.error || r.status !== 0 || !new RegExp(`^${EXECD_BINARY_NAME} \\S+$`).test(out)) {
    const why = r.error ? r.error.message
      : r.status !== 0 ? `exit ${r.status ?? r.signal}${r.stderr ? `: ${r.stderr.trim().slice(0, 300)}` : ''}`
        : `printed ${JSON.stringify(out.slice(0, 200))}`;
    throw new Error(`the C execd ${real} does not run (${why}): \`${EXECD_BINARY_NAME} --version\` must print "${EXECD_BINARY_NAME} <version>"`);
  }
  checked.set(real, id);
  return real;
}
