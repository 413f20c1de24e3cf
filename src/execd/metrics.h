/* The C execd's metrics module (metrics.c; its route functions xd_metrics_* are declared in xd.h): GET /metrics and
 * GET /metrics/watch from /proc/stat and /proc/meminfo, as upstream's metric controller (gopsutil) computes them.
 * This header: what the C test (test/c/test_xd_metrics.c) needs besides. */
#ifndef XD_METRICS_H
#define XD_METRICS_H

/* Reads these files instead of /proc/stat and /proc/meminfo (borrowed: they must outlive the module). Tests only. */
void xd_metrics_use_files(void *module, const char *stat, const char *meminfo);

#endif
