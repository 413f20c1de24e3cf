/* libFuzzer target of the upload's metadata reader (src/execd/upmeta.c): Go's JSON syntax check, the FileMetadata
 * read and strconv's octal parse. An input is the metadata part's bytes. Invariants: the results are among their
 * values; a 400 has a message that starts with one of Go's prefixes; a metadata read has a non-empty path; text Go's
 * scanner calls valid JSON is JSON for cJSON too (but for nesting deeper than cJSON's limit); a valid text followed by
 * a byte that is not white space is invalid; the mode's octal parse agrees with strtoul's where both apply. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/buf.h"
#include "execd/upmeta.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *text = (const char *)data;
  osb_buf msg = {0};
  int valid = xd_go_json_check(text, size, &msg);
  if (valid != 0 && valid != 1) abort();
  if (valid == 1 && (!msg.data || !msg.len)) abort();
  if (valid == 0) {
    cJSON *j = cJSON_ParseWithLength(text, size);
    int deep = 0;
    for (size_t i = 0, d = 0; i < size; i++) /* a rough depth bound (brackets inside strings count too) */
      if ((text[i] == '[' || text[i] == '{') && ++d > 900) deep = 1;
    if (!j && !deep) abort();
    cJSON_Delete(j);
  }
  osb_buf_free(&msg);
  xd_upmeta md;
  int rc = xd_upmeta_read(text, size, &md, &msg);
  if (rc != 0 && rc != 1) abort();
  if (rc == 1 && !(msg.data && (strncmp(msg.data, "invalid metadata format. ", 25) == 0 ||
                                strcmp(msg.data, "metadata path is empty") == 0)))
    abort();
  if (rc == 0 && (!md.path || !*md.path)) abort();
  if (rc == 0 && md.has_mode) {
    char dec[32];
    snprintf(dec, sizeof dec, "%lld", md.mode);
    osb_buf m2 = {0};
    unsigned long v = 0;
    int o = xd_upmeta_octal(dec, &v, &m2);
    if (o != 0 && o != 1) abort();
    if (o == 0 && (strspn(dec, "01234567") != strlen(dec) || v != strtoul(dec, NULL, 8))) abort();
    if (o == 1 && strncmp(m2.data, "strconv.ParseUint: parsing \"", 28) != 0) abort();
    osb_buf_free(&m2);
  }
  xd_upmeta_free(&md);
  osb_buf_free(&msg);
  return 0;
}
