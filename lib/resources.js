// Converts OpenSandbox resource limits (Kubernetes quantities such as cpu "500m", memory "2Gi") into the
// numeric `resources` of Mastra's SandboxInfo ({ cpuCores, memoryMB }), read with the local server's grammar
// (dev-server/quantities.js). Unparseable values are left out.

import { parseBytes, parseCpu } from './dev-server/quantities.js';

export function parseResources(limits = {}) {
  const out = {};
  const cores = limits.cpu !== undefined ? parseCpu(limits.cpu) : NaN;
  const bytes = limits.memory !== undefined ? parseBytes(limits.memory) : NaN;
  if (!Number.isNaN(cores)) out.cpuCores = cores;
  if (!Number.isNaN(bytes)) out.memoryMB = Math.round(bytes / 2 ** 20);
  return out;
}
