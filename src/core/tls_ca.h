/* The CA certificates that https (libcurl) and wss (libwebsockets) verify servers with when the caller gives no
 * caFile. A statically linked TLS stack knows only the build machine's bundle path, so the choice is made at run
 * time, once per process (the environment is read at the first call):
 *   1. SSL_CERT_FILE and/or SSL_CERT_DIR when set (OpenSSL's own variables); only the ones set are used;
 *   2. else the first readable bundle of the usual distributions (Debian/Ubuntu, RHEL/Fedora, SUSE, Alpine).
 * Thread-safe. The strings are owned by this module (static storage). */
#ifndef OSB_TLS_CA_H
#define OSB_TLS_CA_H

typedef struct {
  const char *file; /* PEM bundle, or NULL */
  const char *dir;  /* OpenSSL hashed directory, or NULL */
} osb_tls_ca;

const osb_tls_ca *osb_tls_default_ca(void);

/* The probe itself, for tests: env_file/env_dir stand for the variables (NULL = unset), candidates is a
 * NULL-terminated list of bundle paths; the result points into the arguments. */
osb_tls_ca osb_tls_pick_ca(const char *env_file, const char *env_dir, const char *const *candidates);

#endif
