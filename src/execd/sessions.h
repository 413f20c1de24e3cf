/* The C execd's bash sessions module (sessions.c; its route functions xd_sessions_* are declared in xd.h). This
 * header: its request rules, also run by the fuzz target (test/c/fuzz_sessions.c). Ownership: *out (a cJSON object
 * or NULL) and msg are the caller's. */
#ifndef XD_SESSIONS_H
#define XD_SESSIONS_H
#include <stddef.h>
#include <cjson/cJSON.h>
#include "core/buf.h"

/* A POST /session (run 0: optional, model.CreateSessionRequest) or POST /session/{id}/run (run 1:
 * model.RunInSessionRequest) body as Go's decoder and validator read it: 0 with *out (the object, or NULL for an
 * empty or null create body), or -1 with the text of the 400 INVALID_REQUEST_BODY answer appended to msg. */
int xd_sessions_parse(const char *body, size_t len, int run, cJSON **out, osb_buf *msg);

#endif
