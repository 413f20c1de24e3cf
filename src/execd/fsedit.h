/* fsedit.c: the files routes of the C execd that change the file system, answered like the Node execd
 * (lib/dev-server/execd/files.js removeFiles, permissions, move, replace, removeDirs) and, where that one's answer
 * is a JavaScript artefact, like the real execd (Go):
 *   DELETE /files?path=…           POST /files/permissions     POST /files/mv
 *   POST /files/replace[?verbose=true]                         DELETE /directories?path=…
 * The request is read on the loop thread; the file system work runs on libuv's thread pool (fsops.h xd_fsjob).
 *
 * Ownership: the module (xd_fsedit_new) is main.c's, closed with xd_fsedit_close (jobs in flight answer no one and
 * free themselves). xd_remove_all is a plain blocking function (thread pool only). */
#ifndef XD_FSEDIT_H
#define XD_FSEDIT_H
#include "fsops.h"
#include "xd.h"

void *xd_fsedit_new(const xd_ctx *ctx); /* NULL on OOM */
int xd_fsedit_route(void *module, const xd_req *req, xd_res *res);
void xd_fsedit_close(void *module);

/* rm -rf of an absolute path as Go's os.RemoveAll does it (a missing path is fine), without following any symlink:
 * every directory is opened with openat(O_NOFOLLOW|O_DIRECTORY) from its parent's descriptor and its entries removed
 * with unlinkat. No recursion: the levels are a heap stack, at most XD_RM_OPEN_LEVELS descriptors open at once (a
 * deeper level's ancestors are closed, and opened again on the way back through the child's "..", checked by device
 * and inode to be the same directory, else by name from the top).
 * 0, or -1 with e set to the first failure (Go's texts: "unlinkat <path>", "openfdat <path>", "open <parent>"). */
#define XD_RM_OPEN_LEVELS 32

/* Levels deeper than this are not entered ("openfdat P: file name too long"): a loop of bind mounts has no bottom. */
#define XD_RM_MAX_DEPTH 65536
int xd_remove_all(const char *path, xd_oserr *e);

/* A JSON body's strings as Go's decoder reads them, rewritten so that cJSON reads them alike (out, appended): each byte
 * of a string that is not UTF-8 as U+FFFD, a surrogate escape that is not half of a pair as \ufffd, \u0000 as
 * U+10FFFE (*nul set; the module turns it back into a NUL byte); everything else as it is. 0, 1 when the body holds
 * U+10FFFE itself (it cannot stand in then), -1 on OOM. Fuzzed (test/c/fuzz_fsedit.c). */
struct osb_buf;
int xd_go_json_strings(const char *b, size_t n, struct osb_buf *out, int *nul);

#endif
