// Where the native addon is: $MASTRA_OPENSANDBOX_ADDON when set, else the prebuilt prebuilds/linux-<arch>/ that the
// npm package carries, else the source build in build/Release. lib/native.js loads the first of these that loads;
// the local server only names the file to its execd (runner.js) without loading it itself. Here, in the server's
// directory, because the server runs from a copy of lib/dev-server alone too (it then finds no addon).
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

/** { explicit, files }: the candidates in order; explicit when the environment names the one file to use. */
export function addonCandidates(env = process.env) {
  const explicit = env.MASTRA_OPENSANDBOX_ADDON;
  return {
    explicit: Boolean(explicit),
    files: explicit ? [path.resolve(explicit)] : [
      path.join(root, 'prebuilds', `${process.platform}-${process.arch}`, 'mastra_opensandbox.node'),
      path.join(root, 'build', 'Release', 'mastra_opensandbox.node'),
    ],
  };
}

/** The first candidate that exists (real path), or null. */
export function addonFile() {
  for (const f of addonCandidates().files) {
    try {
      return fs.realpathSync(f);
    } catch { /* next */ }
  }
  return null;
}
