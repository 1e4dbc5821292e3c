/* labels: preload redis; timeout: 180 */
/* test_preload_owner.c -- a mapped pthread mutex follows the program's own
 * mutex type (docs/preload.md, "Mutexes by symbol"): tests/preload/
 * dlpl_handoff.c, an unmodified program, locks its global mutex in one
 * thread and unlocks it in another, under LD_PRELOAD=libdlock_preload.so
 * with a mutex: rule, against the suite's real redis-server.
 *   NORMAL (the default, PTHREAD_MUTEX_INITIALIZER): glibc lets any thread
 *   unlock it, and that unlock releases the cluster lock: a thread of the
 *   program waiting for it gets it, and so does another process at once,
 *   while the program runs on (its locking thread alive).
 *   ERRORCHECK: the unlock by another thread is EPERM, as in glibc, and
 *   the cluster lock stays with its owner until the owner unlocks.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"

static char dir[256];

/* Runs script in sh, in a fresh folder, with P() running a command under
 * the library with the rule mutex:handoff_lock=test/handoff; its stdout
 * and stderr go to out.  Returns sh's exit status. */
static int sh(const char *script, char *out, size_t cap) {
    char path[512], *cmd;
    FILE *f, *p;
    size_t n = 0, k;
    int st;
    if (dir[0] == '\0') {
        snprintf(dir, sizeof dir, "%s/dlplo-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        if (mkdtemp(dir) == NULL) return -1;
    }
    snprintf(path, sizeof path, "%s/scenario.sh", dir);
    if ((f = fopen(path, "w")) == NULL) return -1;
    fprintf(f,
            "cd '%s' || exit 99\n"
            "P() { LD_PRELOAD='%s' DLOCK_MAP='mutex:handoff_lock=test/handoff' \"$@\"; }\n"
            "H='%s'\n"
            /* waits (up to 30 s) until file $1 has a line starting with $2 */
            "until_line() { i=0; until grep -q \"^$2\" \"$1\"; do i=$((i+1)); [ $i -gt 600 ] && return 1;"
            " sleep 0.05; done; }\n"
            "%s\n",
            dir, DLPL_SO, DLPL_HANDOFF, script);
    fclose(f);
    if (asprintf(&cmd, "sh '%s' 2>&1", path) < 0) return -1;
    p = popen(cmd, "r");
    free(cmd);
    if (p == NULL) return -1;
    while (n + 1 < cap && (k = fread(out + n, 1, cap - 1 - n, p)) > 0) n += k;
    out[n] = '\0';
    {
        char sink[512];
        while (fread(sink, 1, sizeof sink, p) > 0)
            ;
    }
    st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

/* The n-th number after "key " in out (n = 0 the first), or -1. */
static long long num(const char *out, const char *key, int n) {
    char pat[64];
    const char *p;
    char *end;
    long long v;
    snprintf(pat, sizeof pat, "%s ", key);
    if ((p = strstr(out, pat)) == NULL) return -1;
    p += strlen(pat);
    for (;;) {
        v = strtoll(p, &end, 10);
        if (end == p) return -1;
        if (n-- == 0) return v;
        p = end;
    }
}

static void test_normal_mutex_unlocked_by_another_thread(void) {
    char out[8192];
    int rc = sh("P \"$H\" normal 4000 > h.out 2>&1 & hp=$!\n"
                "until_line h.out handed || echo never_handed\n"
                "P \"$H\" try 3000\n" /* another process, while the program runs on */
                "wait $hp; echo handoff_rc $?\n"
                "cat h.out\n",
                out, sizeof out);
    DLT_ASSERT_INT_EQ(rc, 0);
    CU_ASSERT(strstr(out, "never_handed") == NULL);
    DLT_ASSERT_INT_EQ(num(out, "A_lock", 0), 0);
    DLT_ASSERT_INT_EQ(num(out, "B_unlock", 0), 0); /* glibc allows it */
    /* The thread that waited in the program got it once B unlocked. */
    DLT_ASSERT_ERR(num(out, "C_lock", 0), 0);
    CU_ASSERT(num(out, "C_lock", 1) >= 300);
    DLT_ASSERT_INT_EQ(num(out, "C_unlock", 0), 0);
    /* Another process gets it at once: the cluster lock was released,
     * though the thread that locked it still lives. */
    DLT_ASSERT_ERR(num(out, "try_lock", 0), 0);
    DLT_ASSERT_INT_EQ(num(out, "try_unlock", 0), 0);
    DLT_ASSERT_INT_EQ(num(out, "handoff_rc", 0), 0);
    CU_ASSERT(strstr(out, "done") != NULL);
    CU_ASSERT(strstr(out, "lost the cluster lock") == NULL);
    DLT_ASSERT_INT_EQ(dlt_key_exists("test/handoff"), 0);
    if (num(out, "try_lock", 0) != 0 || num(out, "C_lock", 0) != 0) dlt_out_show(out);
}

static void test_errorcheck_mutex_keeps_eperm(void) {
    char out[8192];
    int rc = sh("P \"$H\" errorcheck 2500 > e.out 2>&1 & ep=$!\n"
                "until_line e.out handed || echo never_handed\n"
                "P \"$H\" try 800 | sed 's/^try_/held_/'\n" /* the owner still holds it */
                "wait $ep; echo handoff_rc $?\n"
                "P \"$H\" try 3000\n"
                "cat e.out\n",
                out, sizeof out);
    DLT_ASSERT_INT_EQ(rc, 0);
    CU_ASSERT(strstr(out, "never_handed") == NULL);
    DLT_ASSERT_INT_EQ(num(out, "A_lock", 0), 0);
    DLT_ASSERT_ERR(num(out, "B_unlock", 0), EPERM); /* as glibc says */
    DLT_ASSERT_ERR(num(out, "held_lock", 0), ETIMEDOUT);
    DLT_ASSERT_INT_EQ(num(out, "A_unlock", 0), 0); /* the owner's unlock */
    DLT_ASSERT_INT_EQ(num(out, "handoff_rc", 0), 0);
    DLT_ASSERT_ERR(num(out, "try_lock", 0), 0);
    DLT_ASSERT_INT_EQ(num(out, "try_unlock", 0), 0);
    CU_ASSERT(strstr(out, "lost the cluster lock") == NULL);
    if (num(out, "B_unlock", 0) != EPERM || num(out, "try_lock", 0) != 0) dlt_out_show(out);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_normal_mutex_unlocked_by_another_thread),
    DLT_TEST(test_errorcheck_mutex_keeps_eperm),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    int rc = dlt_main(argc, argv, "preload_owner", tests);
    if (dir[0] != '\0') {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        (void)!system(cmd);
    }
    return rc;
}
