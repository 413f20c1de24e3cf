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

/**
 * What a deployment would not apply of `limits` (resourceLimits as sent), one sentence per problem, for a warning:
 * upstream's Docker runtime reads only cpu and memory (other keys and values it cannot parse are ignored without an
 * error, memory's suffixes case-insensitively with m = 10^6); Kubernetes passes every key to the pod limits, where an
 * unparseable quantity fails the create. The local server applies cpu, memory, pids and ephemeral-storage.
 */
export function resourceWarnings(limits = {}) {
  const out = [];
  for (const [key, value] of Object.entries(limits)) {
    if (key === 'cpu' || key === 'memory') {
      const ok = key === 'cpu' ? !Number.isNaN(parseCpu(value)) : !Number.isNaN(parseBytes(value));
      if (key === 'memory' && /^[\d.]+m$/.test(String(value).trim())) {
        out.push(`resources.memory "${value}": Kubernetes reads "m" as milli (thousandths of a byte), upstream's Docker runtime as 10^6 bytes, the local server refuses it; write "M" or "Mi"`);
      } else if (!ok) {
        out.push(`resources.${key} "${value}" is not a Kubernetes quantity: upstream's Docker runtime ignores it (no limit), Kubernetes and the local server refuse the create`);
      }
    } else {
      out.push(`resources.${key}: upstream's Docker runtime ignores every key but cpu and memory (no ${key} limit there); Kubernetes passes it to the pod limits`);
    }
  }
  return out;
}
