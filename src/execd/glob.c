/* glob.c: see glob.h. A pattern is compiled to a Thompson automaton (instructions: one character, any character but
 * '/', any character, a class, a split into two, a jump, a dead end, the match), and a name is run through it one
 * character at a time with the set of live states (Pike's simulation without captures): no backtracking.
 *
 * The pattern is read as files-glob.js compiles it: a `{` ends at the `}` that balances it (escapes skipped, classes
 * not seen), its alternatives are split at its own commas, and each alternative is read on its own (a class or an
 * escape cannot run past its end; `**` is a whole segment at the alternative's start or after a '/'). The braces and
 * commas are matched in one pass with a stack of indices, then the instructions are written in a second pass that
 * keeps the open groups on a heap stack. */
#include "glob.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "utf8.h"

enum { G_CHAR, G_NOSLASH, G_ANY, G_CLASS, G_SPLIT, G_JMP, G_FAIL, G_MATCH };

typedef struct {
  uint8_t op;
  uint8_t neg;  /* G_CLASS: [!x] */
  uint32_t a;   /* G_CHAR: the code point; G_CLASS: first range; G_SPLIT/G_JMP: the target */
  uint32_t b;   /* G_CLASS: number of ranges; G_SPLIT: the other target */
} ins;

struct xd_glob {
  ins *prog;
  size_t n, cap;
  uint32_t (*ranges)[2];
  size_t nr, rcap;
  /* scratch of a match: two state lists, the marks of the current step and the closure's stack */
  uint32_t *cur, *next, *stack, *mark;
  uint32_t gen;
};

#define HOLE UINT32_MAX

/* The code point at s (n > 0 bytes): *len its length; an invalid byte is U+FFFD of length 1. */
static uint32_t decode(const unsigned char *s, size_t n, size_t *len) {
  size_t l = xd_utf8_seq(s, n);
  if (l == 0) {
    *len = 1;
    return 0xFFFD;
  }
  *len = l;
  if (l == 1) return s[0];
  if (l == 2) return ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
  if (l == 3) return ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
  return ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) | ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
}

/* Appends an instruction; its index, or HOLE when out of memory. */
static uint32_t emit(xd_glob *g, uint8_t op, uint32_t a, uint32_t b) {
  if (g->n == g->cap) {
    size_t nc = g->cap ? g->cap * 2 : 64;
    ins *np = realloc(g->prog, nc * sizeof *np);
    if (!np) return HOLE;
    g->prog = np;
    g->cap = nc;
  }
  g->prog[g->n] = (ins){op, 0, a, b};
  return (uint32_t)g->n++;
}

static int add_range(xd_glob *g, uint32_t lo, uint32_t hi) {
  if (g->nr == g->rcap) {
    size_t nc = g->rcap ? g->rcap * 2 : 16;
    uint32_t(*nr)[2] = realloc(g->ranges, nc * sizeof *nr);
    if (!nr) return -1;
    g->ranges = nr;
    g->rcap = nc;
  }
  g->ranges[g->nr][0] = lo;
  g->ranges[g->nr][1] = hi;
  g->nr++;
  return 0;
}

/* `x*` for one instruction x (G_NOSLASH or G_ANY): split to x or past, x, jump back. 0 or -1 (OOM). */
static int emit_star(xd_glob *g, uint8_t op) {
  uint32_t at = (uint32_t)g->n;
  if (emit(g, G_SPLIT, at + 1, at + 3) == HOLE || emit(g, op, 0, 0) == HOLE || emit(g, G_JMP, at, 0) == HOLE) return -1;
  return 0;
}

/* The class at p[i] == '[' within [.., end): instruction written, *next past its ']'. 0, 1 malformed, -1 OOM. */
static int compile_class(xd_glob *g, const unsigned char *p, size_t i, size_t end, size_t *next) {
  size_t j = i + 1;
  int neg = 0;
  if (j < end && (p[j] == '!' || p[j] == '^')) {
    neg = 1;
    j++;
  }
  if (j >= end || p[j] == ']') return 1;
  /* the atoms, in order: a code point, and whether it was written as a bare '-' (a range operator between two atoms) */
  size_t first = g->nr;
  uint32_t prev = 0;
  int have_prev = 0;   /* an atom that may start a range */
  int pending_dash = 0; /* have_prev, then a bare '-' */
  for (; j < end && p[j] != ']';) {
    if (p[j] == '\\') {
      j++;
      if (j >= end) return 1;
    }
    size_t l;
    uint32_t c = decode(p + j, end - j, &l);
    j += l;
    int bare_dash = c == '-'; /* files-glob.js writes an escaped '-' as a bare one too */
    if (pending_dash) {
      /* prev '-' c: a range (out of order: matches nothing) */
      if (prev <= c && add_range(g, prev, c) != 0) return -1;
      have_prev = pending_dash = 0;
      continue;
    }
    if (bare_dash && have_prev) {
      pending_dash = 1;
      continue;
    }
    if (have_prev && add_range(g, prev, prev) != 0) return -1;
    prev = c;
    have_prev = 1;
  }
  if (j >= end) return 1;
  if (have_prev && add_range(g, prev, prev) != 0) return -1;
  if (pending_dash && add_range(g, '-', '-') != 0) return -1;
  uint32_t at = emit(g, G_CLASS, (uint32_t)first, (uint32_t)(g->nr - first));
  if (at == HOLE) return -1;
  g->prog[at].neg = (uint8_t)neg;
  *next = j + 1;
  return 0;
}

typedef struct {
  size_t close;      /* index of the group's '}' */
  size_t outer_start, outer_end; /* the alternative the group stands in */
  uint32_t split;    /* the split before the current alternative, or HOLE */
  uint32_t jumps;    /* the alternatives' jumps to the end, chained through their targets */
} group;

/* Pass 1: for each '{' and each ',' of a group, the index of the group's next ',' or its '}' (SIZE_MAX: none) */
static int match_braces(const unsigned char *p, size_t n, size_t *sep) {
  size_t *stack = malloc((n ? n : 1) * sizeof *stack), depth = 0;
  size_t *last = malloc((n ? n : 1) * sizeof *last);
  if (!stack || !last) {
    free(stack);
    free(last);
    return -1;
  }
  for (size_t j = 0; j < n; j++) sep[j] = SIZE_MAX;
  for (size_t j = 0; j < n; j++) {
    if (p[j] == '\\') j++;
    else if (p[j] == '{') {
      stack[depth] = j;
      last[depth++] = j;
    } else if (p[j] == '}' && depth) {
      sep[last[--depth]] = j;
    } else if (p[j] == ',' && depth) {
      sep[last[depth - 1]] = j;
      last[depth - 1] = j;
    }
  }
  free(stack);
  free(last);
  return 0;
}

/* Pass 2. 0, 1 malformed, -1 OOM. */
static int compile(xd_glob *g, const unsigned char *p, size_t n, const size_t *sep) {
  group *gs = NULL;
  size_t ng = 0, gcap = 0;
  size_t start = 0, end = n, i = 0;
  int rc = 0;
  for (;;) {
    if (i == end) {
      if (ng == 0) break;
      group *gr = &gs[ng - 1];
      if (end == gr->close) { /* the last alternative: every jump lands here */
        uint32_t here = (uint32_t)g->n;
        for (uint32_t k = gr->jumps; k != HOLE;) {
          uint32_t nk = g->prog[k].a;
          g->prog[k].a = here;
          k = nk;
        }
        i = gr->close + 1;
        start = gr->outer_start;
        end = gr->outer_end;
        ng--;
        continue;
      }
      /* at one of the group's commas: jump to the end, the next alternative starts here */
      uint32_t j = emit(g, G_JMP, gr->jumps, 0);
      if (j == HOLE) goto oom;
      gr->jumps = j;
      g->prog[gr->split].b = (uint32_t)g->n;
      start = end + 1;
      size_t e = sep[end];
      if (e != gr->close) {
        uint32_t s = emit(g, G_SPLIT, (uint32_t)g->n + 1, HOLE);
        if (s == HOLE) goto oom;
        gr->split = s;
      }
      i = start;
      end = e;
      continue;
    }
    unsigned char ch = p[i];
    int seg_start = i == start || p[i - 1] == '/';
    if (ch == '*') {
      if (i + 1 < end && p[i + 1] == '*' && seg_start && (i + 2 == end || p[i + 2] == '/')) {
        if (i + 2 == end) {
          if (emit_star(g, G_ANY) != 0) goto oom;
          i += 2;
        } else { /* (?:[^/]*\/)* */
          uint32_t at = (uint32_t)g->n;
          if (emit(g, G_SPLIT, at + 1, at + 6) == HOLE || emit_star(g, G_NOSLASH) != 0 || emit(g, G_CHAR, '/', 0) == HOLE ||
              emit(g, G_JMP, at, 0) == HOLE)
            goto oom;
          i += 3;
        }
      } else {
        while (i < end && p[i] == '*') i++;
        if (emit_star(g, G_NOSLASH) != 0) goto oom;
      }
    } else if (ch == '?') {
      if (emit(g, G_NOSLASH, 0, 0) == HOLE) goto oom;
      i++;
    } else if (ch == '[') {
      int r = compile_class(g, p, i, end, &i);
      if (r != 0) {
        rc = r;
        goto out;
      }
    } else if (ch == '{') {
      size_t close = SIZE_MAX;
      /* the balancing '}' within this alternative (it always is, when there is one) */
      for (size_t k = i; k != SIZE_MAX && k < end; k = sep[k])
        if (p[k] == '}') {
          close = k;
          break;
        }
      if (close == SIZE_MAX) {
        rc = 1;
        goto out;
      }
      if (ng == gcap) {
        size_t nc = gcap ? gcap * 2 : 8;
        group *ngs = realloc(gs, nc * sizeof *ngs);
        if (!ngs) goto oom;
        gs = ngs;
        gcap = nc;
      }
      group *gr = &gs[ng++];
      gr->close = close;
      gr->outer_start = start;
      gr->outer_end = end;
      gr->jumps = HOLE;
      gr->split = HOLE;
      size_t e = sep[i];
      if (e != close) {
        uint32_t s = emit(g, G_SPLIT, (uint32_t)g->n + 1, HOLE);
        if (s == HOLE) goto oom;
        gr->split = s;
      }
      start = i + 1;
      end = e;
      i = start;
    } else if (ch == '\\') {
      if (i + 1 >= end) {
        rc = 1;
        goto out;
      }
      size_t l;
      uint32_t c = decode(p + i + 1, end - i - 1, &l);
      if (emit(g, G_CHAR, c, 0) == HOLE) goto oom;
      i += 1 + l;
    } else {
      size_t l;
      uint32_t c = decode(p + i, end - i, &l);
      if (emit(g, G_CHAR, c, 0) == HOLE) goto oom;
      i += l;
    }
  }
  if (emit(g, G_MATCH, 0, 0) == HOLE) goto oom;
out:
  free(gs);
  return rc;
oom:
  free(gs);
  return -1;
}

void xd_glob_free(xd_glob *g) {
  if (!g) return;
  free(g->prog);
  free(g->ranges);
  free(g->cur);
  free(g->next);
  free(g->stack);
  free(g->mark);
  free(g);
}

int xd_glob_compile(const char *pattern, size_t len, xd_glob **out) {
  *out = NULL;
  if (len > XD_GLOB_MAX_PATTERN) return 1;
  xd_glob *g = calloc(1, sizeof *g);
  size_t *sep = malloc((len ? len : 1) * sizeof *sep);
  int rc = -1;
  if (!g || !sep) goto fail;
  if (match_braces((const unsigned char *)pattern, len, sep) != 0) goto fail;
  rc = compile(g, (const unsigned char *)pattern, len, sep);
  if (rc != 0) goto fail;
  rc = -1;
  /* a G_SPLIT adds at most two entries to the closure stack per instruction marked: n*2 bounds it */
  g->cur = malloc(g->n * sizeof *g->cur);
  g->next = malloc(g->n * sizeof *g->next);
  g->stack = malloc((2 * g->n + 1) * sizeof *g->stack);
  g->mark = calloc(g->n, sizeof *g->mark);
  if (!g->cur || !g->next || !g->stack || !g->mark) goto fail;
  free(sep);
  *out = g;
  return 0;
fail:
  free(sep);
  xd_glob_free(g);
  return rc;
}

/* Adds the states reachable from pc without reading a character (jumps and splits followed) to list (*n entries);
 * each instruction once per step (g->gen). */
static void add_state(xd_glob *g, uint32_t *list, size_t *n, uint32_t pc) {
  size_t sp = 0;
  g->stack[sp++] = pc;
  while (sp) {
    uint32_t s = g->stack[--sp];
    if (g->mark[s] == g->gen) continue;
    g->mark[s] = g->gen;
    const ins *in = &g->prog[s];
    if (in->op == G_JMP) g->stack[sp++] = in->a;
    else if (in->op == G_SPLIT) {
      g->stack[sp++] = in->b;
      g->stack[sp++] = in->a;
    } else if (in->op != G_FAIL) list[(*n)++] = s;
  }
}

static void next_gen(xd_glob *g) {
  if (++g->gen == 0) { /* wrapped: clear the marks once */
    memset(g->mark, 0, g->n * sizeof *g->mark);
    g->gen = 1;
  }
}

static int in_class(const xd_glob *g, const ins *in, uint32_t c) {
  int hit = 0;
  for (uint32_t k = 0; k < in->b && !hit; k++) hit = g->ranges[in->a + k][0] <= c && c <= g->ranges[in->a + k][1];
  return hit != in->neg;
}

int xd_glob_match(xd_glob *g, const char *name, size_t len) {
  const unsigned char *s = (const unsigned char *)name;
  size_t nc = 0;
  next_gen(g);
  add_state(g, g->cur, &nc, 0);
  for (size_t i = 0; i < len && nc;) {
    size_t l;
    uint32_t c = decode(s + i, len - i, &l);
    i += l;
    size_t nn = 0;
    next_gen(g);
    for (size_t k = 0; k < nc; k++) {
      const ins *in = &g->prog[g->cur[k]];
      int ok = 0;
      switch (in->op) {
      case G_CHAR: ok = c == in->a; break;
      case G_NOSLASH: ok = c != '/'; break;
      case G_ANY: ok = 1; break;
      case G_CLASS: ok = in_class(g, in, c); break;
      default: break;
      }
      if (ok) add_state(g, g->next, &nn, g->cur[k] + 1);
    }
    uint32_t *t = g->cur;
    g->cur = g->next;
    g->next = t;
    nc = nn;
  }
  for (size_t k = 0; k < nc; k++)
    if (g->prog[g->cur[k]].op == G_MATCH) return 1;
  return 0;
}
