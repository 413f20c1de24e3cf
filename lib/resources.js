// Converts OpenSandbox resource limits (Kubernetes quantities such as cpu "500m", memory "2Gi") into the
// numeric `resources` of Mastra's SandboxInfo ({ cpuCores, memoryMB }). Unparseable values are left out.

const BINARY = { Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50 };
const DECIMAL = { k: 1e3, K: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15 };

/** Bytes of a Kubernetes memory quantity ("512Mi", "2Gi", "1G", "1048576"), or undefined. */
export function memoryBytes(q) {
  const m = /^\s*(\d+(?:\.\d+)?)\s*(Ki|Mi|Gi|Ti|Pi|k|K|M|G|T|P)?\s*$/.exec(String(q));
  if (!m) return undefined;
  const unit = m[2] ? BINARY[m[2]] ?? DECIMAL[m[2]] : 1;
  return Number(m[1]) * unit;
}

/** Cores of a Kubernetes cpu quantity ("1", "0.5", "500m"), or undefined. */
export function cpuCores(q) {
  const m = /^\s*(\d+(?:\.\d+)?)\s*(m)?\s*$/.exec(String(q));
  if (!m) return undefined;
  return m[2] ? Number(m[1]) / 1000 : Number(m[1]);
}

export function parseResources(limits = {}) {
  const out = {};
  const cores = limits.cpu !== undefined ? cpuCores(limits.cpu) : undefined;
  const bytes = limits.memory !== undefined ? memoryBytes(limits.memory) : undefined;
  if (cores !== undefined) out.cpuCores = cores;
  if (bytes !== undefined) out.memoryMB = Math.round(bytes / 2 ** 20);
  return out;
}
