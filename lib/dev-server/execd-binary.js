// Where the local server finds the C execd (src/execd/, built as `osb-execd` next to the addon): $MASTRA_OPENSANDBOX_EXECD
// when set, else the one beside the addon lib/native.js loads ($MASTRA_OPENSANDBOX_ADDON's directory, the prebuilt
// prebuilds/linux-<arch>/, or the source build's build/Release/), else null (execd then runs on Node alone).
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const EXECD_BINARY_NAME = 'osb-execd';

/** Absolute path of the C execd to run, or null when there is none. */
export function execdBinary(env = process.env) {
  if (env.MASTRA_OPENSANDBOX_EXECD) return path.resolve(env.MASTRA_OPENSANDBOX_EXECD);
  const dirs = env.MASTRA_OPENSANDBOX_ADDON ? [path.dirname(path.resolve(env.MASTRA_OPENSANDBOX_ADDON))] : [
    path.join(root, 'prebuilds', `${process.platform}-${process.arch}`),
    path.join(root, 'build', 'Release'),
  ];
  for (const d of dirs) {
    const file = path.join(d, EXECD_BINARY_NAME);
    if (fs.existsSync(file)) return file;
  }
  return null;
}
