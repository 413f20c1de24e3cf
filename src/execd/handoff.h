/* The lazy Node execd (handoff.c): the C execd hands every request no native module takes, with its whole
 * connection, to lib/dev-server/execd/main.js --handoff, started on the first such request. The connection's fd goes
 * over Node's own IPC channel (NODE_CHANNEL_FD, json serialization): one
 * {"cmd":"NODE_HANDLE","type":"net.Native","msg":{"head":<base64 of the bytes already read>},"key":null} line per
 * connection with the fd attached (SCM_RIGHTS), the next one only after Node's NODE_HANDLE_ACK. Connections wait in a
 * queue until Node reports {"ready":true}. Node exiting is logged on stderr; the next handoff starts it again. A Node
 * that does not become ready within XD_NODE_READY_MS is killed and its waiting connections are answered 503.
 *
 * Ownership: the options' strings are borrowed and must outlive the xd_node. The token goes to Node through a pipe
 * (its fd named in argv), never argv or the environment. One libuv loop (the caller's), main thread only. */
#ifndef XD_HANDOFF_H
#define XD_HANDOFF_H
#include <stddef.h>
#include <uv.h>

#define XD_NODE_READY_MS 15000u

typedef struct {
  uv_loop_t *loop;
  const char *node;              /* the node executable */
  const char *const *args;       /* main.js and its arguments (without node, --handoff and the token fd), NULL-ended */
  const char *token;             /* given to Node on an inherited pipe (--access-token-fd); NULL or "": none */
} xd_node_opts;

typedef struct xd_node xd_node;

/* NULL on OOM. Starts nothing yet. */
xd_node *xd_node_new(const xd_node_opts *o);
/* An xd_handoff_fn (server.h): takes `fd` (closes it in every case) and copies head[0..len). */
void xd_node_give(void *node, int fd, int is_unix, const char *head, size_t len);
/* Node runs and has taken connections (xd_ctx.node_running). */
int xd_node_running(const xd_node *n);
/* The pid of the running Node execd, or 0. */
int xd_node_pid(const xd_node *n);
/* SIGTERM to Node, waiting connections closed; frees once the handles are closed (the loop must run on). */
void xd_node_close(xd_node *n);

#endif
