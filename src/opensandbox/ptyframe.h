/* What execd sends on a PTY WebSocket (pipe mode), parsed without side effects, for the process table
 * (process.c) and the fuzz target: binary frames 0x01 stdout / 0x02 stderr / 0x03 replay (8-byte big-endian byte
 * offset of the merged output, then bytes), JSON text frames ({"type":"connected"|"exit"|"error"|"pong",…}), and
 * the wrapper's nonce-tagged markers inside the output (see process.h and docs/processes.md):
 *   \x1fOSB-EXIT:<nonce>:<status>\x1f  (stdout)  \x1fOSB-ERR:<nonce>\x1f  (stderr)  \x1fOSB-RUN:<nonce>\x1f
 *   \x1fOSB-W:<nonce>\x1f  (stderr: the stdin decoder wrote one frame into the command's stdin; counted)
 *   \x1fOSB-H:<nonce>:<pid>\x1f  (stderr, before the run marker: the command's stdin is held by the sandbox's stdin
 *                                holder, pid <pid> in the sandbox; see process.c)
 * The marker scanner strips whole markers and holds back a possible marker prefix at the end of a chunk (at most
 * OSB_PTY_HOLD_MAX bytes per stream, in the struct): it never allocates. Not thread-safe (one owner). */
#ifndef OSB_PTYFRAME_H
#define OSB_PTYFRAME_H
#include <stddef.h>
#include <stdint.h>

enum {
  OSB_PTY_IGNORED = 0, /* empty, unknown type, short replay header, or a text frame we do not use */
  OSB_PTY_STDOUT,
  OSB_PTY_STDERR,
  OSB_PTY_REPLAY,
  OSB_PTY_CONNECTED,
  OSB_PTY_EXIT,
  OSB_PTY_ERROR,
  OSB_PTY_PONG
};

typedef struct {
  int kind;               /* OSB_PTY_* */
  const char *data;       /* STDOUT/STDERR/REPLAY payload: borrowed from the frame */
  size_t len;
  uint64_t offset;        /* REPLAY: offset of data[0] in the merged output */
  int exit_code;          /* EXIT: exit_code, -1 when absent or not a number */
  char error_code[64];    /* ERROR: "code" ("error" when absent) */
  char error_text[256];   /* ERROR: "error" ("" when absent) */
} osb_pty_frame;

/* Decodes one WebSocket message (binary or text). Always fills f; returns f->kind. */
int osb_pty_frame_parse(int binary, const char *d, size_t n, osb_pty_frame *f);

/* Replay bookkeeping: *received is how many bytes of the merged output were seen. For replayed bytes at offset
 * (len of them) returns how many leading bytes were already seen (skip them), adds the bytes lost between
 * *received and offset (overwritten in execd's ring) to *gap, and advances *received. All of them already seen:
 * returns len and changes nothing. */
size_t osb_pty_replay_skip(uint64_t *received, uint64_t offset, size_t len, uint64_t *gap);

#define OSB_PTY_NONCE_LEN 32
#define OSB_PTY_HOLD_MAX 64 /* longer than the longest marker (the exit marker with "-" and 11 digits: 56) */

enum { OSB_PTY_MARK_EXIT = 1, OSB_PTY_MARK_ERR = 2, OSB_PTY_MARK_RUN = 3, OSB_PTY_MARK_WROTE = 4, OSB_PTY_MARK_HOLDER = 5 };

typedef struct {
  char pat_exit[64], pat_err[64], pat_run[64], pat_wrote[64], pat_holder[64];
  char hold[2][OSB_PTY_HOLD_MAX]; /* per stream (0 stdout, 1 stderr): a marker prefix held back */
  size_t hold_len[2];
  int got_exit, got_err, got_run; /* markers seen (ever) */
  int exit_code;                  /* from the exit marker */
  unsigned long wrote;            /* frame-written markers seen (ever) */
  long holder_pid;                /* from the holder marker; 0 = none seen */
} osb_pty_markers;

/* Output that is not marker text, in order. which: 0 stdout, 1 stderr. */
typedef void (*osb_pty_emit_fn)(void *ud, int which, const char *s, size_t n);

/* nonce: NUL-terminated, at most OSB_PTY_NONCE_LEN characters (longer is cut). */
void osb_pty_markers_init(osb_pty_markers *m, const char *nonce);
/* Feeds a chunk of one stream; whole markers are stripped (and recorded), other bytes emitted, a trailing marker
 * prefix held back. Returns the bytes of marker text stripped by this call (held-back bytes count once emitted or
 * stripped later). */
size_t osb_pty_markers_scan(osb_pty_markers *m, int which, const char *data, size_t n, osb_pty_emit_fn emit,
                            void *ud);
/* End of a stream: a held-back prefix is output after all. */
void osb_pty_markers_flush(osb_pty_markers *m, int which, osb_pty_emit_fn emit, void *ud);

#endif
