// Shell quoting of the client: the one quoting of words put into a shell command line (command arguments, template
// package names and working directories, mount paths). Below every module that builds command lines.

/** Mastra's shell quoting: safe words pass through, anything else is single-quoted. */
export function shellQuote(arg) {
  if (/^[a-zA-Z0-9._\-/=:@]+$/.test(arg)) return arg;
  return `'${arg.replace(/'/g, `'\\''`)}'`;
}
