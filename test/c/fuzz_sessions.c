/* libFuzzer target of the C execd's bash sessions request rules (src/execd/sessions.c xd_sessions_parse). An input's
 * first byte picks the body kind (odd: a run's, even: a create's), the rest is the body. Invariants: 0 leaves no text
 * and, for a run, an object whose `command` is a non-empty string, whose `cwd` is absent, null or a string and whose
 * `timeout` is absent, null or a non-negative integer; -1 leaves no object and a text that starts with one of the
 * 400's prefixes. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "execd/cmdreq.h"
#include "execd/sessions.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  int run = data[0] & 1;
  size_t len = size - 1;
  char *body = malloc(len + 1); /* NUL-terminated as the server hands bodies over */
  if (!body) return 0;
  memcpy(body, data + 1, len);
  body[len] = 0;
  cJSON *out = (cJSON *)1;
  osb_buf msg = {0};
  int rc = xd_sessions_parse(body, len, run, &out, &msg);
  if (rc == 0) {
    if (msg.len != 0) abort();
    if (run) {
      const cJSON *c = xd_json_get(out, "command"), *cwd = xd_json_get(out, "cwd"), *t = xd_json_get(out, "timeout");
      if (!cJSON_IsString(c) || !c->valuestring[0]) abort();
      if (xd_json_present(cwd) && !cJSON_IsString(cwd)) abort();
      if (xd_json_present(t) && (!cJSON_IsNumber(t) || t->valuedouble < 0 || floor(t->valuedouble) != t->valuedouble)) abort();
    } else if (out && !cJSON_IsObject(out)) {
      abort();
    }
  } else {
    if (rc != -1 || out != NULL || !msg.data) abort();
    if (strncmp(msg.data, "error parsing request, MAYBE invalid body format. ", 50) != 0 &&
        strncmp(msg.data, "invalid request. Key: 'RunInSessionRequest.", 43) != 0)
      abort();
  }
  cJSON_Delete(out);
  osb_buf_free(&msg);
  free(body);
  return 0;
}
