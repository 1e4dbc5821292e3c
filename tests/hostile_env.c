/* hostile_env.c -- a helper of test_hostile: prints what libdlock takes
 * from its environment (the URL and key prefix a client would use,
 * whether DLOCK_STATS turned the figures off), writes one debug line
 * (shown only under DLOCK_DEBUG), and whether the kernel ran it as a
 * secure (set-uid, set-gid or capability) program.  test_hostile runs a
 * set-uid copy of it: libdlock must then ignore the environment
 * (secure_getenv).  Linked with libdlock statically: a set-uid program
 * ignores $ORIGIN run paths. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/auxv.h>

#include "core/core.h"

/* In the ASan build: LeakSanitizer cannot inspect a set-uid process (it
 * is not dumpable, and /proc/self/environ, where ASAN_OPTIONS would be
 * read, is closed to it), and would fail the run.  Unused otherwise. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
    return "detect_leaks=0";
}

int main(void) {
    dlock__conf conf;
    struct dlock_client *c = calloc(1, sizeof *c);
    if (c == NULL) return 1;
    printf("secure=%lu\n", getauxval(AT_SECURE));
    if (dlock__conf_parse(&conf, NULL) != 0) {
        printf("error=%s\n", dlock_last_error());
        free(c);
        return 1;
    }
    printf("url=%s\nprefix=%s\n", conf.redacted_url, conf.prefix);
    dlock__stats_init(c);
    printf("stats_off=%d\n", c->stats_off);
    fflush(stdout);
    dlock__debug("hostile_env: a debug line");
    dlock__conf_free(&conf);
    free(c);
    return 0;
}
