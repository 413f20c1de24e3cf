// Port URLs of OpenSandboxSandbox (`sandbox.networking.getPortUrl`): what the endpoints API answers for a port,
// turned into a plain URL, or null when a plain URL cannot reach it. The sandbox asks (recovery, start on demand).
import { OpenSandboxError, OpenSandboxSandboxGoneError } from './errors.js';

/** Throws the option error of a port that is not an integer 1-65535. */
export function checkPort(port) {
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    throw new OpenSandboxError(`getPortUrl: port must be an integer 1-65535, got ${JSON.stringify(port)}`, 'INVALID_OPTION', { kind: 'option' });
  }
}

/** True when the endpoints API refused the port itself (a 4xx other than auth): the port cannot be exposed. */
export function portNotExposable(err) {
  if (err instanceof OpenSandboxSandboxGoneError) return false;
  return err.kind === 'api' && err.status >= 400 && err.status < 500 && !(err.status === 401 || err.status === 403);
}

/**
 * The URL of endpoint answer `ep` (scheme `protocol` added when it has none, path prefix kept, no trailing slash);
 * null when there is no endpoint or reaching it needs extra request headers (a plain URL would not work). Through
 * the lifecycle server's proxy (`serverProxy`) a Kubernetes gateway's routing header (OpenSandbox-Ingress-To, which
 * upstream keeps in that answer) is not needed: the proxy route finds the sandbox itself. An access token header is.
 */
export function portUrl(ep, protocol, { serverProxy = false } = {}) {
  if (!ep || typeof ep.endpoint !== 'string' || ep.endpoint === '') return null;
  const needed = Object.keys(ep.headers ?? {}).filter(h => !(serverProxy && h.toLowerCase() === 'opensandbox-ingress-to'));
  if (needed.length > 0) return null;
  const url = /^https?:\/\//i.test(ep.endpoint) ? ep.endpoint : `${protocol}://${ep.endpoint}`;
  return url.replace(/\/+$/, '');
}
