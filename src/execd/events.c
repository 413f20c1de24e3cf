/* What the C execd's event streams share (see events.h). */
#include "events.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "xd.h"

uint64_t xd_wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int xd_event_append(osb_buf *b, const xd_event *ev) {
  size_t before = b->len;
  int rc = osb_buf_append_str(b, "{\"type\":");
  rc |= xd_json_str(b, ev->type, strlen(ev->type));
  if (ev->text) {
    rc |= osb_buf_append_str(b, ",\"text\":");
    rc |= xd_json_str(b, ev->text, ev->text_len);
  }
  if (ev->has_time) rc |= osb_buf_appendf(b, ",\"execution_time\":%llu", (unsigned long long)ev->time);
  rc |= osb_buf_appendf(b, ",\"timestamp\":%llu", (unsigned long long)xd_wall_ms());
  if (ev->ename) {
    rc |= osb_buf_append_str(b, ",\"error\":{\"ename\":");
    rc |= xd_json_str(b, ev->ename, strlen(ev->ename));
    rc |= osb_buf_append_str(b, ",\"evalue\":");
    rc |= xd_json_str(b, ev->evalue, ev->error_len ? ev->error_len : strlen(ev->evalue));
    rc |= osb_buf_append_str(b, ",\"traceback\":[");
    rc |= xd_json_str(b, ev->traceback, ev->error_len ? ev->error_len : strlen(ev->traceback));
    rc |= osb_buf_append_str(b, "]}");
  }
  rc |= osb_buf_append_str(b, "}\n\n");
  if (rc != 0 || !b->data) {
    if (b->data) b->len = before, b->data[before] = 0;
    return -1;
  }
  return 0;
}

const char *xd_signal_text(int sig, char *buf, size_t cap) {
  static const struct {
    int sig;
    const char *text;
  } texts[] = {
      {SIGKILL, "killed"}, {SIGTERM, "terminated"}, {SIGINT, "interrupt"}, {SIGHUP, "hangup"}, {SIGQUIT, "quit"},
      {SIGSEGV, "segmentation fault"}, {SIGABRT, "aborted"}, {SIGPIPE, "broken pipe"}, {SIGALRM, "alarm clock"},
      {SIGUSR1, "user defined signal 1"}, {SIGUSR2, "user defined signal 2"}, {SIGBUS, "bus error"},
      {SIGFPE, "floating point exception"},
  };
  static const char *const names[] = {
      NULL, "SIGHUP", "SIGINT", "SIGQUIT", "SIGILL", "SIGTRAP", "SIGABRT", "SIGBUS", "SIGFPE", "SIGKILL", "SIGUSR1",
      "SIGSEGV", "SIGUSR2", "SIGPIPE", "SIGALRM", "SIGTERM", "SIGSTKFLT", "SIGCHLD", "SIGCONT", "SIGSTOP", "SIGTSTP",
      "SIGTTIN", "SIGTTOU", "SIGURG", "SIGXCPU", "SIGXFSZ", "SIGVTALRM", "SIGPROF", "SIGWINCH", "SIGIO", "SIGPWR",
      "SIGSYS"};
  for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
    if (texts[i].sig == sig) return texts[i].text;
  }
  if (sig > 0 && (size_t)sig < sizeof names / sizeof names[0]) return names[sig];
  snprintf(buf, cap, "%d", sig); /* a real-time signal: Node reports its number */
  return buf;
}

/* The digits of v into the end of buf (at w), returns the new start. */
static size_t put_int(char *buf, size_t w, uint64_t v) {
  do {
    buf[--w] = (char)('0' + v % 10);
    v /= 10;
  } while (v > 0);
  return w;
}

/* The fraction v / 10^prec without trailing zeros (nothing, not even the point, when it is 0) into the end of buf. */
static size_t put_frac(char *buf, size_t w, uint64_t *v, int prec) {
  int any = 0;
  for (int i = 0; i < prec; i++) {
    unsigned digit = (unsigned)(*v % 10);
    any |= digit != 0;
    if (any) buf[--w] = (char)('0' + digit);
    *v /= 10;
  }
  if (any) buf[--w] = '.';
  return w;
}

void xd_go_duration_text(int64_t ns, char out[40]) {
  char buf[40];
  size_t w = sizeof buf;
  uint64_t u = ns < 0 ? (uint64_t)0 - (uint64_t)ns : (uint64_t)ns;
  buf[--w] = 's';
  if (u < 1000000000u) {
    int prec = 0;
    if (u == 0) {
      buf[--w] = '0';
    } else {
      if (u < 1000u) {
        buf[--w] = 'n';
      } else if (u < 1000000u) {
        prec = 3;
        buf[--w] = '\xb5'; /* U+00B5 MICRO SIGN, as Go writes it */
        buf[--w] = '\xc2';
      } else {
        prec = 6;
        buf[--w] = 'm';
      }
      w = put_frac(buf, w, &u, prec);
      w = put_int(buf, w, u);
    }
  } else {
    w = put_frac(buf, w, &u, 9);
    w = put_int(buf, w, u % 60);
    u /= 60;
    if (u > 0) {
      buf[--w] = 'm';
      w = put_int(buf, w, u % 60);
      u /= 60;
      if (u > 0) {
        buf[--w] = 'h';
        w = put_int(buf, w, u);
      }
    }
  }
  if (ns < 0) buf[--w] = '-';
  memcpy(out, buf + w, sizeof buf - w);
  out[sizeof buf - w] = 0;
}

