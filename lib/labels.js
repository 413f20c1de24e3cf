// The metadata label that ties a remote OpenSandbox sandbox to the logical id of an OpenSandboxSandbox, so a new
// instance (or a new process) with the same `id` finds and reattaches to it.
//
// Label key: `mastra.ai/sandbox-id`. OpenSandbox metadata must be Kubernetes label syntax (value <= 63 chars of
// [A-Za-z0-9-_.], starting and ending alphanumeric), so the logical id is encoded as
//   <first 16 hex chars of sha256(id)> [ "-" <readable part: id lowercased, other chars -> "-", cut to fit> ]
// The hash keeps distinct ids distinct; the readable part is only for humans looking at the server.
import { createHash } from 'node:crypto';

export const LOGICAL_ID_LABEL = 'mastra.ai/sandbox-id';
const MAX_LABEL_VALUE = 63;

/** Encodes a logical sandbox id into a Kubernetes-label-safe value (deterministic, <= 63 chars). */
export function encodeLogicalId(id) {
  const hash = createHash('sha256').update(String(id), 'utf8').digest('hex').slice(0, 16);
  const room = MAX_LABEL_VALUE - hash.length - 1;
  const readable = String(id)
    .toLowerCase()
    .replace(/[^a-z0-9._-]+/g, '-')
    .slice(0, room)
    .replace(/^[^a-z0-9]+|[^a-z0-9]+$/g, '');
  return readable ? `${hash}-${readable}` : hash;
}

const LABEL_VALUE_RE = /^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$/;
const LABEL_NAME_RE = /^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;
const DNS_SUBDOMAIN_RE = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/** Returns why a metadata key/value pair is not valid label syntax, or null when it is. */
export function labelProblem(key, value) {
  const slash = key.lastIndexOf('/');
  const prefix = slash >= 0 ? key.slice(0, slash) : '';
  const name = slash >= 0 ? key.slice(slash + 1) : key;
  if (slash >= 0 && (prefix.length === 0 || prefix.length > 253 || !DNS_SUBDOMAIN_RE.test(prefix))) {
    return `key "${key}": prefix must be a DNS subdomain`;
  }
  if (name.length === 0 || name.length > 63 || !LABEL_NAME_RE.test(name)) {
    return `key "${key}": name must be 1-63 chars of [A-Za-z0-9-_.], alphanumeric at both ends`;
  }
  if (prefix === 'opensandbox.io') return `key "${key}": the prefix opensandbox.io/ is reserved`;
  if (value.length > MAX_LABEL_VALUE || !LABEL_VALUE_RE.test(value)) {
    return `value of "${key}": must be at most 63 chars of [A-Za-z0-9-_.], alphanumeric at both ends`;
  }
  return null;
}
