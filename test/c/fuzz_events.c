/* libFuzzer target of the execd event-stream parser: the input is fed in chunks whose sizes come from the
 * first byte, with a small line bound so the "line too long" path is reached (strict mode, odd first bytes) or the
 * oversized-line path (lenient mode, even ones); a callback that sometimes asks to
 * stop exercises that path. The same bytes are then mapped as a non-2xx response body (error.c: JSON bodies,
 * 422 detail summaries, redaction). ASan/UBSan catch memory errors; nothing may crash or grow unboundedly. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "core/events.h"
#include "opensandbox/error.h"

static int on_event(void *ud, const osb_event *ev) {
  size_t *count = ud;
  (*count)++;
  volatile size_t sink = ev->text_len;
  if (ev->text && ev->text_len) sink += (unsigned char)ev->text[ev->text_len - 1];
  if (ev->type == OSB_EV_ERROR && ev->evalue) sink += (unsigned char)ev->evalue[0];
  if (ev->type == OSB_EV_STREAM_ERROR) sink += (unsigned char)ev->code[0] + (unsigned char)ev->message[0];
  if (ev->type_name) sink += (unsigned char)ev->type_name[0];
  sink += (size_t)(ev->text_dropped + ev->line_bytes);
  (void)sink;
  return ev->type == OSB_EV_COMPLETE && (*count & 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  size_t step = (size_t)(data[0] % 17) + 1;
  int lenient = !(data[0] & 1);
  data++, size--;
  size_t count = 0;
  osb_events *p = osb_events_new(1024, on_event, &count);
  if (!p) return 0;
  osb_events_set_lenient(p, lenient);
  int rc = OSB_EVENTS_OK;
  for (size_t off = 0; off < size && rc == OSB_EVENTS_OK; off += step)
    rc = osb_events_feed(p, (const char *)data + off, size - off < step ? size - off : step);
  if (rc == OSB_EVENTS_OK) osb_events_finish(p);
  (void)osb_events_error(p);
  osb_events_free(p);

  osb_http_result res;
  memset(&res, 0, sizeof res);
  res.status = 400 + (long)(step % 100);
  res.body = (const char *)data;
  res.body_len = size;
  res.request_id = "rid";
  const char *secrets[] = {"ab", "key", NULL};
  osb_error err;
  osb_error_from_http(&err, &res, secrets, NULL);
  return 0;
}
