// Where the local server finds the C execd (src/execd/, built as `osb-execd` next to the addon): $MASTRA_OPENSANDBOX_EXECD
// when set, else the one beside the addon's candidates (addon-file.js: $MASTRA_OPENSANDBOX_ADDON's directory, the
// prebuilt prebuilds/linux-<arch>/, or the source build's build/Release/), else null (execd then runs on Node alone).
import fs from 'node:fs';
import path from 'node:path';
import { addonCandidates } from './addon-file.js';

export const EXECD_BINARY_NAME = 'osb-execd';

/** Absolute path of the C execd to run, or null when there is none. */
export function execdBinary(env = process.env) {
  if (env.MASTRA_OPENSANDBOX_EXECD) return path.resolve(env.MASTRA_OPENSANDBOX_EXECD);
  for (const addon of addonCandidates(env).files) {
    const file = path.join(path.dirname(addon), EXECD_BINARY_NAME);
    if (fs.existsSync(file)) return file;
  }
  return null;
}
