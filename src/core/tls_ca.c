/* Run-time choice of the default CA certificates (see tls_ca.h). */
#include "tls_ca.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

static const char *const BUNDLES[] = {
    "/etc/ssl/certs/ca-certificates.crt",                /* Debian, Ubuntu, Gentoo, Arch, Alpine */
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", /* RHEL, Fedora, CentOS, Amazon Linux */
    "/etc/pki/tls/certs/ca-bundle.crt",                  /* older RHEL/Fedora */
    "/etc/ssl/ca-bundle.pem",                            /* openSUSE, SLES */
    "/var/lib/ca-certificates/ca-bundle.pem",            /* SLES 12+ */
    "/etc/ssl/cert.pem",                                 /* Alpine, Void, OpenELEC */
    NULL,
};

osb_tls_ca osb_tls_pick_ca(const char *env_file, const char *env_dir, const char *const *candidates) {
  osb_tls_ca ca = {NULL, NULL};
  if (env_file && *env_file) ca.file = env_file;
  if (env_dir && *env_dir) ca.dir = env_dir;
  if (ca.file || ca.dir) return ca;
  for (const char *const *p = candidates; *p; p++) {
    if (access(*p, R_OK) == 0) {
      ca.file = *p;
      break;
    }
  }
  return ca;
}

static uv_once_t g_once = UV_ONCE_INIT;
static osb_tls_ca g_ca;
static char g_file[PATH_MAX], g_dir[PATH_MAX]; /* copies of the variables: the environment may change later */

/* src copied into dst[PATH_MAX]; NULL when it does not fit (no such path can be opened anyway). */
static const char *keep(char *dst, const char *src) {
  size_t n = strlen(src);
  if (n >= PATH_MAX) return NULL;
  memcpy(dst, src, n + 1);
  return dst;
}

static void pick(void) {
  const char *env_file = getenv("SSL_CERT_FILE");
  osb_tls_ca ca = osb_tls_pick_ca(env_file, getenv("SSL_CERT_DIR"), BUNDLES);
  g_ca.file = ca.file && ca.file == env_file ? keep(g_file, ca.file) : ca.file; /* else one of BUNDLES */
  g_ca.dir = ca.dir ? keep(g_dir, ca.dir) : NULL;
}

const osb_tls_ca *osb_tls_default_ca(void) {
  uv_once(&g_once, pick);
  return &g_ca;
}
