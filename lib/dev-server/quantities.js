// Kubernetes quantities (resourceLimits values): bytes ("512Mi", "2Gi", "1G", "1e9") and CPU ("1", "2.5", "500m").
// One grammar for the local server's limits (validate.js) and the client's SandboxInfo resources (lib/resources.js).

const BYTE_SUFFIXES = { '': 1, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18, Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50, Ei: 2 ** 60 };

/** A Kubernetes byte quantity ("512Mi", "2Gi", "1G", "1000000", "1.5Gi", "1e9") as whole bytes (rounded up), or NaN. */
export function parseBytes(text) {
  const m = /^(\d+(?:\.\d+)?|\.\d+)(?:[eE](\d+))?([kMGTPE]i?|Ki)?$/.exec(String(text).trim());
  if (!m || (m[2] !== undefined && m[3] !== undefined)) return NaN;
  const n = Number(m[1]) * (m[2] !== undefined ? 10 ** Number(m[2]) : BYTE_SUFFIXES[m[3] ?? '']);
  return Number.isFinite(n) && n <= Number.MAX_SAFE_INTEGER ? Math.ceil(n) : NaN;
}

/** A Kubernetes CPU quantity ("1", "2.5", "500m") as cores, or NaN. */
export function parseCpu(text) {
  const m = /^(\d+(?:\.\d+)?|\.\d+)(m?)$/.exec(String(text).trim());
  if (!m) return NaN;
  return Number(m[1]) / (m[2] ? 1000 : 1);
}
