/* The argument parsing of osb-execd --image-root (src/execd/rootfs.c, rootfs_parse): a full command line (layers
 * bottom first, the idmap numbers, bubblewrap's argv after "--"), the non-root form without --idmap, and each refusal
 * (missing directories, relative paths, a layer path with ':' or ',' that would split overlay's options, a bad --idmap,
 * an unknown option, nothing after "--"). The mounting itself runs in test/images-sandbox.test.js. */
#include "harness.h"

#include <string.h>

#include "execd/rootfs.h"

static int parse(char **argv, rootfs_args *a, char *err) {
  int argc = 0;
  while (argv[argc]) argc++;
  return rootfs_parse(argc, argv, a, err, 256);
}

static void test_full(void) {
  char *argv[] = {"osb-execd", "--image-root", "--rootfs", "/s/rootfs", "--upper", "/s/upper", "--work", "/s/work",
                  "--idmap", "999999999:999999998:1000000001:1000000002", "--layer", "/l/a", "--layer", "/l/b",
                  "--", "/usr/bin/bwrap", "--args", "9", NULL};
  rootfs_args a;
  char err[256] = "";
  CHECK(parse(argv, &a, err) == 0);
  CHECK_STR(a.rootfs, "/s/rootfs");
  CHECK_STR(a.upper, "/s/upper");
  CHECK_STR(a.work, "/s/work");
  CHECK(a.nlayers == 2);
  CHECK_STR(a.layers[0], "/l/a");
  CHECK_STR(a.layers[1], "/l/b");
  CHECK(a.idmap == 1 && a.owner_uid == 999999999UL && a.owner_gid == 999999998UL && a.uid == 1000000001UL && a.gid == 1000000002UL);
  CHECK_STR(a.exec_argv[0], "/usr/bin/bwrap");
  CHECK_STR(a.exec_argv[2], "9");
  CHECK(a.exec_argv[3] == NULL);
}

static void test_not_root_form(void) {
  char *argv[] = {"x", "--image-root", "--rootfs", "/r", "--upper", "/u", "--work", "/w", "--layer", "/l", "--", "/b", NULL};
  rootfs_args a;
  char err[256] = "";
  CHECK(parse(argv, &a, err) == 0);
  CHECK(a.idmap == 0 && a.nlayers == 1);
}

static void refused(char **argv, const char *want) {
  rootfs_args a;
  char err[256] = "";
  CHECK(parse(argv, &a, err) == -1);
  if (!strstr(err, want)) printf("  FAIL error \"%s\" lacks \"%s\"\n", err, want), t_cur_failed = 1;
}

static void test_refusals(void) {
  refused((char *[]){"x", "--image-root", "--upper", "/u", "--work", "/w", "--layer", "/l", "--", "/b", NULL}, "required");
  refused((char *[]){"x", "--image-root", "--rootfs", "r", "--upper", "/u", "--work", "/w", "--layer", "/l", "--", "/b", NULL}, "not an absolute path");
  refused((char *[]){"x", "--image-root", "--rootfs", "/r", "--upper", "/u", "--work", "/w", "--layer", "/l:/etc", "--", "/b", NULL}, "layer");
  refused((char *[]){"x", "--image-root", "--rootfs", "/r", "--upper", "/u", "--work", "/w", "--layer", "/l,upperdir=/", "--", "/b", NULL}, "layer");
  refused((char *[]){"x", "--image-root", "--rootfs", "/r", "--upper", "/u", "--work", "/w", "--", "/b", NULL}, "no --layer");
  refused((char *[]){"x", "--image-root", "--rootfs", "/r", "--upper", "/u", "--work", "/w", "--layer", "/l", "--idmap", "1:2:3", "--", "/b", NULL}, "--idmap");
  refused((char *[]){"x", "--image-root", "--rootfs", "/r", "--upper", "/u", "--work", "/w", "--layer", "/l", "--idmap", "1:2:3:-4", "--", "/b", NULL}, "--idmap");
  refused((char *[]){"x", "--image-root", "--rootfs", "/r", "--upper", "/u", "--work", "/w", "--layer", "/l", "--bogus", "1", "--", "/b", NULL}, "unknown option");
  refused((char *[]){"x", "--image-root", "--rootfs", "/r", "--upper", "/u", "--work", "/w", "--layer", "/l", "--", NULL}, "after --");
  refused((char *[]){"x", "--image-root", "--rootfs", "/r", "--upper", "/u", "--work", "/w", "--layer", "/l", NULL}, "no -- BWRAP");
  refused((char *[]){"x", "--image-root", "--rootfs", NULL}, "needs a value");
}

int main(void) {
  RUN(test_full);
  RUN(test_not_root_form);
  RUN(test_refusals);
  return t_summary();
}
