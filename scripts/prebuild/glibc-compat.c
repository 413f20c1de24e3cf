/* glibc-compat.c: keeps the prebuilt addon loadable on glibc 2.28 (Node 22's own floor) although it is linked
 * against a newer glibc. glibc 2.34 moved the pthread and dl functions into libc.so.6 under new symbol versions,
 * and 2.33 made stat/fstat real functions; the static OpenSSL, curl and libwebsockets archives (and our own code)
 * reference those new versions. The link adds -Wl,--wrap=NAME for every __wrap_NAME defined here (prebuild.sh
 * reads them from this object), so each reference lands in a function below that calls the oldest version of the
 * same function, present in every glibc since the architecture's first release. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/stat.h>

#if defined(__x86_64__)
#define BASE "GLIBC_2.2.5"
#define BASE_2_3_3 "GLIBC_2.3.3" /* functions added in 2.3.3 */
#define STAT_VER 1 /* _STAT_VER_LINUX of x86_64 */
#elif defined(__aarch64__)
#define BASE "GLIBC_2.17"
#define BASE_2_3_3 BASE
#define STAT_VER 0 /* the generic _STAT_VER */
#else
#error "glibc-compat.c: add this architecture's first glibc version"
#endif

/* __wrap_NAME(params) { return NAME@VERSION(args); } */
#define COMPAT_AT(version, ret, name, params, args)       \
  ret compat_##name params;                               \
  __asm__(".symver compat_" #name "," #name "@" version); \
  ret __wrap_##name params;                               \
  ret __wrap_##name params { return compat_##name args; }
#define COMPAT(ret, name, params, args) COMPAT_AT(BASE, ret, name, params, args)

COMPAT(int, pthread_create, (pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg), (t, a, fn, arg))
COMPAT(int, pthread_detach, (pthread_t t), (t))
COMPAT(int, pthread_join, (pthread_t t, void **ret), (t, ret))
COMPAT(int, pthread_once, (pthread_once_t *once, void (*fn)(void)), (once, fn))
COMPAT(int, pthread_key_create, (pthread_key_t *k, void (*dtor)(void *)), (k, dtor))
COMPAT(int, pthread_key_delete, (pthread_key_t k), (k))
COMPAT(void *, pthread_getspecific, (pthread_key_t k), (k))
COMPAT(int, pthread_setspecific, (pthread_key_t k, const void *v), (k, v))
COMPAT(int, pthread_rwlock_init, (pthread_rwlock_t *l, const pthread_rwlockattr_t *a), (l, a))
COMPAT(int, pthread_rwlock_destroy, (pthread_rwlock_t *l), (l))
COMPAT(int, pthread_rwlock_rdlock, (pthread_rwlock_t *l), (l))
COMPAT(int, pthread_rwlock_wrlock, (pthread_rwlock_t *l), (l))
COMPAT(int, pthread_rwlock_unlock, (pthread_rwlock_t *l), (l))
/* these were added for libuv when osb-execd linked glibc (it links musl now); kept: they cost nothing and
 * any of them may be referenced by the static libraries of a later build */
COMPAT(int, pthread_attr_setstacksize, (pthread_attr_t *a, size_t size), (a, size))
COMPAT(int, pthread_mutex_trylock, (pthread_mutex_t *m), (m))
COMPAT(int, pthread_mutexattr_init, (pthread_mutexattr_t *a), (a))
COMPAT(int, pthread_mutexattr_destroy, (pthread_mutexattr_t *a), (a))
COMPAT(int, pthread_mutexattr_settype, (pthread_mutexattr_t *a, int type), (a, type))
COMPAT_AT(BASE_2_3_3, int, pthread_condattr_setclock, (pthread_condattr_t *a, clockid_t clock), (a, clock))
COMPAT(int, pthread_rwlock_tryrdlock, (pthread_rwlock_t *l), (l))
COMPAT(int, pthread_rwlock_trywrlock, (pthread_rwlock_t *l), (l))
COMPAT(int, pthread_barrier_init, (pthread_barrier_t *b, const pthread_barrierattr_t *a, unsigned n), (b, a, n))
COMPAT(int, pthread_barrier_wait, (pthread_barrier_t *b), (b))
COMPAT(int, pthread_barrier_destroy, (pthread_barrier_t *b), (b))
COMPAT(int, pthread_sigmask, (int how, const sigset_t *set, sigset_t *old), (how, set, old))
COMPAT(int, sem_init, (sem_t *s, int shared, unsigned v), (s, shared, v))
COMPAT(int, sem_destroy, (sem_t *s), (s))
COMPAT(int, sem_post, (sem_t *s), (s))
COMPAT(int, sem_wait, (sem_t *s), (s))
COMPAT(int, sem_trywait, (sem_t *s), (s))
COMPAT(void *, dlopen, (const char *file, int mode), (file, mode))
COMPAT(void *, dlsym, (void *h, const char *name), (h, name))
COMPAT(int, dlclose, (void *h), (h))
COMPAT(char *, dlerror, (void), ())
COMPAT(int, dladdr, (const void *addr, Dl_info *info), (addr, info))

/* Before 2.33 stat, fstat and lstat were inline wrappers of __xstat/__fxstat/__lxstat (with a structure version
 * argument). lstat: referenced by the aarch64 build. */
int compat_xstat(int ver, const char *path, struct stat *st);
__asm__(".symver compat_xstat,__xstat@" BASE);
int compat_fxstat(int ver, int fd, struct stat *st);
__asm__(".symver compat_fxstat,__fxstat@" BASE);
int compat_lxstat(int ver, const char *path, struct stat *st);
__asm__(".symver compat_lxstat,__lxstat@" BASE);
int __wrap_stat(const char *path, struct stat *st);
int __wrap_fstat(int fd, struct stat *st);
int __wrap_lstat(const char *path, struct stat *st);
int __wrap_stat(const char *path, struct stat *st) { return compat_xstat(STAT_VER, path, st); }
int __wrap_fstat(int fd, struct stat *st) { return compat_fxstat(STAT_VER, fd, st); }
int __wrap_lstat(const char *path, struct stat *st) { return compat_lxstat(STAT_VER, path, st); }
/* the 64-bit names (the same structure on these 64-bit architectures) */
int __wrap_stat64(const char *path, struct stat64 *st);
int __wrap_fstat64(int fd, struct stat64 *st);
int __wrap_lstat64(const char *path, struct stat64 *st);
int __wrap_stat64(const char *path, struct stat64 *st) { return compat_xstat(STAT_VER, path, (struct stat *)st); }
int __wrap_fstat64(int fd, struct stat64 *st) { return compat_fxstat(STAT_VER, fd, (struct stat *)st); }
int __wrap_lstat64(const char *path, struct stat64 *st) { return compat_lxstat(STAT_VER, path, (struct stat *)st); }
