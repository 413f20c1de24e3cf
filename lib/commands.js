// Foreground commands of OpenSandboxSandbox.executeCommand: the execd request of a Mastra command call, the mapping
// of execd's result onto Mastra's CommandResult (exit codes of timeouts, aborts, kills and start failures) and the
// delivery of streamed output to the caller's callbacks. The sandbox runs the request (recovery, keep-alive).
import { shellQuote } from './shell.js';
import { resolveCwd } from './files.js';

/** Exit code reported for a command stopped through its abortSignal (like a shell's 128 + SIGINT). */
export const ABORTED_EXIT_CODE = 130;
/** Exit code reported for a command that timed out (like coreutils `timeout`). */
export const TIMED_OUT_EXIT_CODE = 124;
/** Exit code reported for a command killed by a signal we did not send (execd reports -1). */
export const KILLED_EXIT_CODE = 137;
/** Exit code reported when execd could not start the command (its reason is appended to stderr). */
export const START_FAILED_EXIT_CODE = 1;

/** The command line of a normalized call: the command, then its args shell-quoted. */
export function commandLine(command, call) {
  return call.args.length ? `${command} ${call.args.map(shellQuote).join(' ')}` : command;
}

/**
 * The native run request of a normalized call: `env` (the sandbox's, under the call's), `cwd` the working directory
 * (the default, and what a relative call cwd resolves against: execd would resolve it against its own cwd; a cwd
 * with `$` was refused by normalizeCommandCall).
 */
export function commandRequest(full, call, env, cwd) {
  const envs = {};
  for (const [k, v] of Object.entries({ ...env, ...call.env })) if (v !== undefined) envs[k] = String(v);
  return { command: full, cwd: resolveCwd(call.cwd, cwd), envs, timeoutMs: call.timeoutMs, maxRetainedBytes: call.maxRetainedBytes };
}

/** The result of a command aborted before it ran. */
export function abortedResult(base, started) {
  return { ...base, success: false, exitCode: ABORTED_EXIT_CODE, stdout: '', stderr: '', executionTimeMs: Date.now() - started, timedOut: false, killed: true };
}

/** Mastra's CommandResult fields of a native run result `r` (started: Date.now() when the call began). */
export function toResult(r, started) {
  let exitCode = r.exitCode;
  let killed = false;
  let startFailure;
  if (r.timedOut) {
    exitCode = TIMED_OUT_EXIT_CODE;
    killed = true;
  } else if (r.cancelled) {
    exitCode = ABORTED_EXIT_CODE;
    killed = true;
  } else if (typeof exitCode !== 'number' || exitCode < 0) {
    // execd reports -1 both for a process killed by a signal ("signal: killed") and for a start failure
    // (the reason in the error text): the first is a kill, the second a plain failure with the reason on stderr.
    if (/^signal: /m.test(r.errorText ?? '')) {
      exitCode = KILLED_EXIT_CODE;
      killed = true;
    } else {
      exitCode = START_FAILED_EXIT_CODE;
      startFailure = r.errorText || 'the command could not be started';
    }
  }
  let stderr = r.stderr ?? '';
  if (startFailure) stderr += (stderr && !stderr.endsWith('\n') ? '\n' : '') + startFailure;
  const stdoutDroppedBytes = r.stdoutDroppedBytes || 0;
  const stderrDroppedBytes = r.stderrDroppedBytes || 0;
  return {
    success: exitCode === 0,
    exitCode,
    stdout: r.stdout ?? '',
    stderr,
    executionTimeMs: Date.now() - started,
    timedOut: Boolean(r.timedOut),
    killed,
    stdoutTruncated: stdoutDroppedBytes > 0,
    stderrTruncated: stderrDroppedBytes > 0,
    stdoutDroppedBytes,
    stderrDroppedBytes,
  };
}

/**
 * The native onBatch callback for a call's streaming callbacks (undefined when it has none): a throwing callback is
 * logged through `logger()`, never allowed to break the stream.
 */
export function batchDelivery(call, logger) {
  if (!call.onStdout && !call.onStderr) return undefined;
  return batch => {
    for (const [text, cb] of [[batch.stdout, call.onStdout], [batch.stderr, call.onStderr]]) {
      if (!text || !cb) continue;
      try {
        cb(text);
      } catch (err) {
        logger().warn('OpenSandboxSandbox: output callback threw', { error: err instanceof Error ? err.message : String(err) });
      }
    }
  };
}
