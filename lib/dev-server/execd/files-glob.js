// Glob patterns of execd's `GET /files/search` (local OpenSandbox-compatible server), compiled to a RegExp.
// Syntax (doublestar-style, as the real execd): `*` any run of non-`/` characters, `**` any run including `/`
// when it is a whole path segment, `?` one non-`/` character, `[abc]` / `[a-z]` / `[!x]` / `[^x]` classes,
// `{a,b}` alternatives (nestable), `\x` a literal x. A malformed pattern throws.
// The search matches the pattern against each file's base name only.

function escapeRe(ch) {
  return /[\\^$.*+?()[\]{}|/]/.test(ch) ? `\\${ch}` : ch;
}

function compileClass(p, i) {
  // p[i] === '['
  let j = i + 1;
  let out = '[';
  if (p[j] === '!' || p[j] === '^') {
    out += '^';
    j++;
  }
  if (j >= p.length || p[j] === ']') throw new Error('syntax error in pattern');
  for (; j < p.length && p[j] !== ']'; j++) {
    let ch = p[j];
    if (ch === '\\') {
      j++;
      if (j >= p.length) throw new Error('syntax error in pattern');
      ch = p[j];
    }
    out += ch === '-' ? '-' : escapeRe(ch);
  }
  if (j >= p.length) throw new Error('syntax error in pattern');
  return { re: `${out}]`, next: j + 1 };
}

/** Index of the `}` closing the `{` at i, or -1. */
function closingBrace(p, i) {
  let depth = 0;
  for (let j = i; j < p.length; j++) {
    if (p[j] === '\\') j++;
    else if (p[j] === '{') depth++;
    else if (p[j] === '}' && --depth === 0) return j;
  }
  return -1;
}

function compile(p) {
  let re = '';
  for (let i = 0; i < p.length;) {
    const ch = p[i];
    const segStart = i === 0 || p[i - 1] === '/';
    if (ch === '*') {
      if (p[i + 1] === '*' && segStart && (i + 2 === p.length || p[i + 2] === '/')) {
        if (i + 2 === p.length) {
          re += '.*';
          i += 2;
        } else {
          re += '(?:[^/]*/)*';
          i += 3;
        }
      } else {
        while (p[i] === '*') i++;
        re += '[^/]*';
      }
    } else if (ch === '?') {
      re += '[^/]';
      i++;
    } else if (ch === '[') {
      const c = compileClass(p, i);
      re += c.re;
      i = c.next;
    } else if (ch === '{') {
      const end = closingBrace(p, i);
      if (end < 0) throw new Error('syntax error in pattern');
      const alts = [];
      let depth = 0;
      let start = i + 1;
      for (let j = i + 1; j < end; j++) {
        if (p[j] === '\\') j++;
        else if (p[j] === '{') depth++;
        else if (p[j] === '}') depth--;
        else if (p[j] === ',' && depth === 0) {
          alts.push(p.slice(start, j));
          start = j + 1;
        }
      }
      alts.push(p.slice(start, end));
      re += `(?:${alts.map(compile).join('|')})`;
      i = end + 1;
    } else if (ch === '\\') {
      if (i + 1 >= p.length) throw new Error('syntax error in pattern');
      re += escapeRe(p[i + 1]);
      i += 2;
    } else {
      re += escapeRe(ch);
      i++;
    }
  }
  return re;
}

/** Compiles a glob to an anchored RegExp; throws Error('syntax error in pattern') when malformed. */
export function globToRegExp(pattern) {
  return new RegExp(`^${compile(pattern)}$`, 'su');
}
