// Typed errors of mastra-opensandbox: one hierarchy on Mastra's SandboxError, and the mapping from the
// native layer's plain errors (own properties kind/status/code/message/requestId/attempts) onto it.
//
//   SandboxError (@mastra/core/workspace)
//   └─ OpenSandboxError                 base of everything thrown by this package (code, kind, operation)
//      ├─ OpenSandboxOptionError        bad constructor option or call argument (code INVALID_OPTION)
//      ├─ OpenSandboxApiError           the server answered non-2xx (status, code, requestId)
//      │  ├─ OpenSandboxNotFoundError   404: the sandbox (or the thing asked for) does not exist
//      │  │  └─ OpenSandboxSandboxGoneError  our sandbox disappeared behind our back; the handle was reset
//      │  └─ OpenSandboxStreamError     an error object inside an execd event stream
//      ├─ OpenSandboxTransportError     connect/reset/TLS/DNS failure, or a stream cut (attempts)
//      ├─ OpenSandboxTimeoutError       one of our deadlines elapsed (timeoutMs)
//      ├─ OpenSandboxProtocolError      malformed response or event stream
//      ├─ OpenSandboxSnapshotError      a snapshot capture failed (snapshotId, state, reason)
//      ├─ OpenSandboxTemplateBuildError a template build step failed (templateId, step, exitCode, stdout, stderr)
//      ├─ OpenSandboxUnsupportedError   the server lacks an API the call needs (feature, requiredServerVersion)
//      └─ OpenSandboxCancelledError     the operation was cancelled (abort signal)
import { SandboxError } from '@mastra/core/workspace';

export class OpenSandboxError extends SandboxError {
  constructor(message, code, details = {}) {
    super(message, code, details);
    this.name = 'OpenSandboxError';
    this.kind = details.kind;
    this.operation = details.operation;
  }
}

export class OpenSandboxOptionError extends OpenSandboxError {
  constructor(option, message) {
    super(`Invalid option "${option}": ${message}`, 'INVALID_OPTION', { kind: 'option', option });
    this.name = 'OpenSandboxOptionError';
    this.option = option;
  }
}

export class OpenSandboxApiError extends OpenSandboxError {
  constructor(message, details) {
    super(message, details.code || 'API_ERROR', { kind: 'api', ...details });
    this.name = 'OpenSandboxApiError';
    this.status = details.status ?? 0;
    this.serverMessage = details.serverMessage;
    this.requestId = details.requestId;
  }
}

export class OpenSandboxNotFoundError extends OpenSandboxApiError {
  constructor(message, details) {
    super(message, details);
    this.name = 'OpenSandboxNotFoundError';
  }
}

export class OpenSandboxSandboxGoneError extends OpenSandboxNotFoundError {
  constructor(sandboxId, details) {
    super(
      `Sandbox ${sandboxId} no longer exists on the OpenSandbox server (deleted or expired); ` +
        'the next call provisions a new sandbox',
      { ...details, status: details.status || 404, code: details.code || 'SANDBOX_GONE' },
    );
    this.name = 'OpenSandboxSandboxGoneError';
    this.sandboxId = sandboxId;
  }
}

export class OpenSandboxStreamError extends OpenSandboxApiError {
  constructor(message, details) {
    super(message, { ...details, kind: 'stream' });
    this.name = 'OpenSandboxStreamError';
  }
}

export class OpenSandboxTransportError extends OpenSandboxError {
  constructor(message, details) {
    super(message, details.code || 'TRANSPORT', { kind: 'transport', ...details });
    this.name = 'OpenSandboxTransportError';
    this.attempts = details.attempts ?? 1;
  }
}

export class OpenSandboxTimeoutError extends OpenSandboxError {
  constructor(message, details) {
    super(message, details.code || 'TIMEOUT', { kind: 'timeout', ...details });
    this.name = 'OpenSandboxTimeoutError';
    this.timeoutMs = details.timeoutMs;
  }
}

export class OpenSandboxProtocolError extends OpenSandboxError {
  constructor(message, details) {
    super(message, details.code || 'PROTOCOL', { kind: 'protocol', ...details });
    this.name = 'OpenSandboxProtocolError';
  }
}

export class OpenSandboxSnapshotError extends OpenSandboxError {
  constructor(message, details = {}) {
    super(message, details.code || 'SNAPSHOT_FAILED', { kind: 'snapshot', ...details });
    this.name = 'OpenSandboxSnapshotError';
    this.snapshotId = details.snapshotId;
    this.state = details.state;
    this.reason = details.reason;
    this.serverMessage = details.serverMessage;
  }
}

export class OpenSandboxTemplateBuildError extends OpenSandboxError {
  constructor(message, details = {}) {
    super(message, details.code || 'TEMPLATE_BUILD_FAILED', { kind: 'template', ...details });
    this.name = 'OpenSandboxTemplateBuildError';
    this.templateId = details.templateId;
    this.step = details.step; // 1-based index of the failed step
    this.description = details.description;
    this.exitCode = details.exitCode;
    this.stdout = details.stdout;
    this.stderr = details.stderr;
  }
}

export class OpenSandboxUnsupportedError extends OpenSandboxError {
  constructor(message, details = {}) {
    super(message, details.code || 'UNSUPPORTED_BY_SERVER', { kind: 'unsupported', ...details });
    this.name = 'OpenSandboxUnsupportedError';
    this.feature = details.feature;
    this.requiredServerVersion = details.requiredServerVersion;
  }
}

export class OpenSandboxCancelledError extends OpenSandboxError {
  constructor(message, details) {
    super(message, details.code || 'CANCELLED', { kind: 'cancelled', ...details });
    this.name = 'OpenSandboxCancelledError';
  }
}

/** Replaces every occurrence of a secret in `text` with `***` (defence in depth: the C core never puts one there). */
export function redact(text, secrets = []) {
  let out = String(text ?? '');
  for (const s of secrets) if (typeof s === 'string' && s.length >= 4) out = out.split(s).join('***');
  return out;
}

/**
 * Maps an error rejected by the native layer (or anything else) onto the hierarchy above.
 * `operation` names what we were doing ("create sandbox", "run command", …) and prefixes the message;
 * `secrets` are scrubbed from the message. Errors that are already ours pass through unchanged.
 */
export function fromNative(err, { operation, secrets = [], timeoutMs } = {}) {
  if (err instanceof OpenSandboxError) return err;
  const kind = err?.kind;
  const serverMessage = redact(err?.message ?? String(err), secrets);
  const details = {
    operation,
    status: err?.status || 0,
    code: err?.code || undefined,
    requestId: err?.requestId || undefined,
    attempts: err?.attempts || undefined,
    serverMessage,
    timeoutMs,
  };
  const where = operation ? `${operation}: ` : '';
  const rid = details.requestId ? ` (request id ${details.requestId})` : '';
  switch (kind) {
    case 'api': {
      const code = details.code && details.code !== `HTTP_${details.status}` ? ` ${details.code}` : '';
      const msg = `${where}the server answered ${details.status}${code}: ${serverMessage}${rid}`;
      return details.status === 404 ? new OpenSandboxNotFoundError(msg, details) : new OpenSandboxApiError(msg, details);
    }
    case 'stream':
      return new OpenSandboxStreamError(`${where}error inside the execd stream${details.code ? ` ${details.code}` : ''}: ${serverMessage}`, details);
    case 'transport': {
      const tries = details.attempts > 1 ? ` after ${details.attempts} attempts` : '';
      return new OpenSandboxTransportError(`${where}cannot reach the OpenSandbox server${tries}: ${serverMessage}`, details);
    }
    case 'timeout':
      return new OpenSandboxTimeoutError(`${where}timed out: ${serverMessage}`, details);
    case 'protocol':
      if (details.code === 'RESPONSE_TOO_LARGE') return new OpenSandboxProtocolError(`${where}response too large: ${serverMessage}`, details);
      return new OpenSandboxProtocolError(`${where}malformed response from the OpenSandbox server: ${serverMessage}`, details);
    case 'cancelled':
      return new OpenSandboxCancelledError(`${where}cancelled: ${serverMessage}`, details);
    case 'invalid':
      return new OpenSandboxError(`${where}invalid argument: ${serverMessage}`, 'INVALID_ARGUMENT', { kind: 'invalid', operation });
    default: {
      const e = new OpenSandboxError(`${where}${serverMessage}`, 'INTERNAL', { kind: 'internal', operation });
      if (err instanceof Error) e.cause = err;
      return e;
    }
  }
}
