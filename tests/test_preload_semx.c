/* labels: preload redis; timeout: 120 */
/* test_preload_semx.c -- what an unmodified program's POSIX named
 * semaphores (tests/preload/dlpl_semx.c) do under libdlock_preload.so
 * beyond counting: a signal handler ends a mapped wait with EINTR, as
 * glibc's, unless it was installed with SA_RESTART (then the wait goes
 * on, as glibc's); sem_open without O_CREAT of a name that exists nowhere is
 * ENOENT, and finds one that exists only on the server; and a
 * `sem+undo:` rule makes a unit taken by a process killed with SIGKILL
 * come back, where a `sem:` rule's is lost (POSIX).
 */

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fixture.h"

static char dir[256];
static char prelude[4096];
static char tag[32]; /* semaphore names of this run: /dev/shm is shared */

static void setup_dir(void) {
    if (dir[0] != '\0') return;
    snprintf(dir, sizeof dir, "%s/dlpx-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        exit(1);
    }
    snprintf(tag, sizeof tag, "dlpx%d", (int)getpid());
    snprintf(prelude, sizeof prelude,
             "cd '%s' || exit 99\n"
             "SO='%s'\nPROG='%s'\nT='%s'\n"
             "P() { LD_PRELOAD=\"$SO\" \"$@\"; }\n",
             dir, DLPL_SO, DLPL_SEMX, tag);
}

static void cleanup_dir(void) {
    char cmd[512];
    if (dir[0] == '\0') return;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'; rm -f /dev/shm/sem.%s*", dir, tag);
    (void)!system(cmd);
}

/* Runs the prelude plus script in sh; its output to out.  sh's status. */
static int sh(const char *script, char *out, size_t cap) {
    setup_dir();
    return dlt_sh_scenario(dir, prelude, script, out, cap);
}

#define SHOW(out) fprintf(stderr, "---- output ----\n%s----\n", out)

/* The value by the semaphore's own op (which first gives back lapsed
 * leases, as every op does), below 0 on an error. */
static int op_value(const char *name) {
    dlock_sem_t s;
    int v = -100;
    if (dlock_sem_init(&s, name, 0, NULL) != 0) return -101;
    if (dlock_sem_getvalue(&s, &v) != 0) v = -102;
    dlock_sem_destroy(&s);
    return v;
}

/* The cluster semaphore's value, read through the library (-1 if it
 * does not exist, below that an error). */
static int cluster_value(const char *name) {
    dlock_sem_info_t si;
    if (dlock_sem_info(NULL, name, &si) != 0) return -100;
    return si.exists ? si.value : -1;
}

/* A SIGALRM handler installed without SA_RESTART ends sem_wait and
 * sem_timedwait with EINTR; one with SA_RESTART lets the timed wait go on
 * to its deadline: under the library as without it (each run bounded by
 * timeout(1), so a wait that never ends fails the test). */
static void test_semx_eintr(void) {
    char out[4096];
    int rc = sh("export DLOCK_MAP=\"sem:/$T-[ir]=$T-intr\"\n"
                "timeout 20 env LD_PRELOAD=\"$SO\" \"$PROG\" intr /$T-i; echo mapped_rc $?\n"
                "timeout 20 \"$PROG\" intr /$T-j; echo local_rc $?\n"
                "timeout 20 env LD_PRELOAD=\"$SO\" \"$PROG\" restart /$T-r; echo mapped_restart_rc $?\n"
                "timeout 20 \"$PROG\" restart /$T-s; echo local_restart_rc $?\n",
                out, sizeof out);
    if (strstr(out, "mapped_rc 0") == NULL || strstr(out, "mapped_restart_rc 0") == NULL) SHOW(out);
    DLT_ASSERT_INT_EQ(rc, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "mapped_rc 0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "local_rc 0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "mapped_restart_rc 0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "local_restart_rc 0"));
    CU_ASSERT_PTR_NULL(strstr(out, "FAIL"));
    /* The wait really was the cluster's: it made the semaphore there, and
     * left no waiter behind (each interrupted wait withdrew). */
    char name[64];
    snprintf(name, sizeof name, "%s-intr", tag);
    DLT_ASSERT_INT_EQ(cluster_value(name), 0);
    dlock_sem_info_t si;
    DLT_ASSERT_INT_EQ(dlock_sem_info(NULL, name, &si), 0);
    DLT_ASSERT_INT_EQ(si.waiters, 0);
}

/* sem_open without O_CREAT: ENOENT when the name exists neither here nor
 * on the server; opened when only the server has it (another host made
 * it). */
static void test_semx_open_existing_only(void) {
    char out[4096], name[64];
    dlock_sem_t s;
    int rc = sh("export DLOCK_MAP=\"sem:/$T-o*=$T-open\"\n"
                "P \"$PROG\" open /$T-o1\n",
                out, sizeof out);
    DLT_ASSERT_INT_EQ(rc, 0);
    if (strstr(out, "errno ENOENT") == NULL) SHOW(out);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "errno ENOENT"));
    snprintf(name, sizeof name, "%s-open", tag);
    DLT_ASSERT_INT_EQ(cluster_value(name), -1); /* and nothing was made */
    DLT_ASSERT_ERR(dlock_sem_init(&s, name, 3, NULL), 0);
    rc = sh("export DLOCK_MAP=\"sem:/$T-o*=$T-open\"\n"
            "P \"$PROG\" open /$T-o2\n",
            out, sizeof out);
    DLT_ASSERT_INT_EQ(rc, 0);
    if (strstr(out, "opened") == NULL) SHOW(out);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "opened"));
    DLT_ASSERT_INT_EQ(cluster_value(name), 3);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
}

/* Two holders killed with SIGKILL while each holds the one unit of its
 * semaphore: the `sem+undo:` one's unit comes back within its lease (the
 * library's default, 10 s), the `sem:` one's is lost, as a POSIX unit. */
static void test_semx_undo_kill9(void) {
    char out[4096], undo[64], plain[64];
    double t0, end;
    int v = -2, rc;
    setup_dir(); /* the run's tag */
    snprintf(undo, sizeof undo, "%s-undo", tag);
    snprintf(plain, sizeof plain, "%s-plain", tag);
    rc = sh("export DLOCK_MAP=\"sem+undo:/$T-u=$T-undo;sem:/$T-p=$T-plain\"\n"
            "LD_PRELOAD=\"$SO\" \"$PROG\" hold /$T-u 1 > u.out 2>&1 < /dev/null & echo $! > u.pid\n"
            "LD_PRELOAD=\"$SO\" \"$PROG\" hold /$T-p 1 > p.out 2>&1 < /dev/null & echo $! > p.pid\n"
            "i=0; until grep -q holding u.out && grep -q holding p.out; do\n"
            "  i=$((i+1)); [ $i -gt 200 ] && { echo never held; exit 1; }; sleep 0.05; done\n"
            "echo held\n",
            out, sizeof out);
    if (rc != 0) SHOW(out);
    DLT_ASSERT_INT_EQ(rc, 0);
    DLT_ASSERT_INT_EQ(cluster_value(undo), 0);
    DLT_ASSERT_INT_EQ(cluster_value(plain), 0);
    dlock_sem_info_t si;
    DLT_ASSERT_INT_EQ(dlock_sem_info(NULL, undo, &si), 0);
    DLT_ASSERT_INT_EQ(si.leased, 1);
    rc = sh("kill -9 $(cat u.pid) $(cat p.pid); wait 2>/dev/null; echo killed\n", out, sizeof out);
    DLT_ASSERT_INT_EQ(rc, 0);
    t0 = dlt_now();
    end = t0 + 20.0;
    /* A lapsed lease comes back at the next operation on the semaphore:
     * this poll's getvalue is one. */
    while ((v = op_value(undo)) != 1 && dlt_now() < end) dlt_sleep_ms(200);
    DLT_ASSERT_INT_EQ(v, 1);
    fprintf(stderr, "  (the killed holder's unit came back after %.2fs)\n", dlt_now() - t0);
    DLT_ASSERT_INT_EQ(op_value(plain), 0);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_semx_eintr),
    DLT_TEST(test_semx_open_existing_only),
    DLT_TEST(test_semx_undo_kill9),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    int rc;
    if (DLPL_SO[0] == '\0') {
        fprintf(stderr, "libdlock_preload.so is not built (sanitizer build?): test disabled\n");
        return 77;
    }
    rc = dlt_main(argc, argv, "preload_semx", tests);
    cleanup_dir();
    return rc;
}
