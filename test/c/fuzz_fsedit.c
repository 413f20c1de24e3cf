/* libFuzzer target of the C execd's Go-string rewrite of JSON bodies (src/execd/fsedit.c xd_go_json_strings), which
 * runs on any request body of POST /files/permissions, /files/mv and /files/replace that the strict grammar refuses.
 * Invariants: the result is 0, 1 or -1 (never -1 here: no allocation fails); a body that is valid UTF-8 and has no
 * \u escape of a surrogate or of U+0000 comes out byte for byte as it went in, with nul 0; a result the strict
 * grammar accepts parses with cJSON, and every string in it is valid UTF-8 (no byte that is not, no surrogate). */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "execd/fsedit.h"
#include "execd/json.h"
#include "execd/utf8.h"

/* 1 when the input has a \u escape of a surrogate or of 0000 anywhere (in or out of strings, a slight over-count) */
static int has_special_escape(const uint8_t *d, size_t n) {
  for (size_t i = 0; i + 5 < n; i++) {
    if (d[i] != '\\' || d[i + 1] != 'u') continue;
    char h[5] = {(char)d[i + 2], (char)d[i + 3], (char)d[i + 4], (char)d[i + 5], 0};
    char *end;
    unsigned long v = strtoul(h, &end, 16);
    if (*end == 0 && strspn(h, "0123456789abcdefABCDEF") == 4 && (v == 0 || (v >= 0xd800 && v <= 0xdfff))) return 1;
  }
  return 0;
}

static void strings_ok(const cJSON *j) {
  for (; j; j = j->next) {
    if (j->string && !xd_utf8_valid((const unsigned char *)j->string, strlen(j->string))) abort();
    if (cJSON_IsString(j) && !xd_utf8_valid((const unsigned char *)j->valuestring, strlen(j->valuestring))) abort();
    strings_ok(j->child);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  osb_buf out = {0};
  int nul = 0;
  int rc = xd_go_json_strings((const char *)data, size, &out, &nul);
  if (rc != 0 && rc != 1) abort();
  if (rc == 0) {
    if (xd_utf8_valid(data, size) && !has_special_escape(data, size) &&
        (nul || out.len != size || (size && memcmp(out.data, data, size) != 0)))
      abort();
    if (xd_json_check(out.data ? out.data : "", out.len) == XD_JSON_OK) {
      cJSON *j = cJSON_ParseWithLength(out.data, out.len);
      if (!j) abort();
      strings_ok(j);
      cJSON_Delete(j);
    }
  }
  osb_buf_free(&out);
  return 0;
}
