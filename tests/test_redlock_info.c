/* labels: redis; timeout: 180 */
/* test_redlock_info.c -- lock information on Redlock is what a quorum of
 * masters says (dlock_lock_info, `dlock status`, and so `dlock list`).
 *
 *  - all three masters up: a free lock is "free", a held one names its
 *    holder;
 *  - master 1 down while the lock is taken on masters 2 and 3 (a quorum),
 *    then restarted empty: the lock is held, naming the holder -- in
 *    dlock_lock_info, `dlock status` and dlock_list -- as `dlock exec -n`
 *    finds it busy; a shared hold taken the same way counts as one shared
 *    holder;
 *  - two of three masters down: ENOLCK, "only 1 of 3 Redlock masters
 *    answered (a quorum is 2)", `dlock status` exits 69 with it, whether
 *    the lock is held or free;
 *  - masters that disagree without a quorum for any one holder (or for
 *    "free"): ENOLCK saying that they disagree, never "free";
 *  - dlock_list, with too few masters or with masters that disagree,
 *    lists what the master that has the lock says, then ENOLCK.
 *
 * Every server is started here and killed by pid (the fixture's).  No
 * speed is asserted.
 */
#include "fixture_multi.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dlock.h>

#ifndef DLOCK_CLI
#error "DLOCK_CLI (the path of the built dlock program) must be defined by the build"
#endif

#define NM 3
#define BUF 8192

static dlt_masters rl; /* the three masters; rl.url: their redlock:// URL */

#define SERVERS_UP() DLT_MASTERS_UP(&rl, NM, 0)

static int has(const char *s, const char *what) {
    return s != NULL && strstr(s, what) != NULL;
}

static int client_on(dlock_client_t **c) {
    dlock_config_t cfg;
    dlock_config_init(&cfg);
    cfg.url = rl.url;
    cfg.unreachable_ms = 2000;
    return dlock_client_create(c, &cfg);
}

/* The dlock command on rl.url: its exit code (-1: it did not end in 30 s),
 * its stdout and stderr (NUL-terminated, truncated to BUF). */
static int cli(char *out, char *err, const char *a, ...) {
    char *argv[32];
    int argc = 0, code;
    va_list ap;
    argv[argc++] = (char *)DLOCK_CLI;
    argv[argc++] = (char *)"--url";
    argv[argc++] = rl.url;
    va_start(ap, a);
    for (; a != NULL && argc < 31; a = va_arg(ap, const char *)) argv[argc++] = (char *)a;
    va_end(ap);
    argv[argc] = NULL;
    code = dlt_run_capture(argv, out, err, BUF, 30000);
    printf("  dlock %s %s: exit %d\n%s%s", argv[3], argc > 4 ? argv[4] : "", code, out, err);
    return code;
}

static int count_lock(const char *name, const dlock_lock_info_t *info, void *arg) {
    (void)name;
    if (info->held) (*(int *)arg)++;
    return 0;
}

/* ---------------------------------------------------- all masters up */

static void test_all_up(void) {
    char out[BUF], err[BUF], pid[32];
    dlock_client_t *c = NULL;
    dlock_lock_info_t info;
    dlock_mutex_t m;

    SERVERS_UP();
    DLT_ASSERT_ERR(client_on(&c), 0);
    CU_ASSERT_FATAL(c != NULL);
    /* free */
    DLT_ASSERT_ERR(dlock_lock_info(c, "ri/a", &info), 0);
    DLT_ASSERT_INT_EQ(info.held, 0);
    DLT_ASSERT_INT_EQ(cli(out, err, "status", "ri/a", NULL), 0);
    CU_ASSERT_TRUE(has(out, "free"));
    /* held */
    DLT_ASSERT_ERR(dlt_mutex_make(&m, "ri/a", 10000, c), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_lock_info(c, "ri/a", &info), 0);
    DLT_ASSERT_INT_EQ(info.held, 1);
    DLT_ASSERT_INT_EQ(info.pid, getpid());
    CU_ASSERT_TRUE(info.fence > 0);
    CU_ASSERT_TRUE(info.lease_left_ms > 0 && info.lease_left_ms <= 10000);
    DLT_ASSERT_INT_EQ(cli(out, err, "status", "ri/a", NULL), 0);
    CU_ASSERT_TRUE(has(out, "exclusive"));
    snprintf(pid, sizeof pid, "pid %ld,", (long)getpid());
    CU_ASSERT_TRUE(has(out, pid));
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_lock_info(c, "ri/a", &info), 0);
    DLT_ASSERT_INT_EQ(info.held, 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_masters_cleanup(&rl);
}

/* ----------------------- master 1 down at the acquire, restarted empty */

static void test_master_restarted_empty(void) {
    char out[BUF], err[BUF], pid[32];
    dlock_client_t *c = NULL;
    dlock_lock_info_t info;
    dlock_mutex_t m;
    dlock_rwlock_t rw;
    dlock_mutexattr_t a;
    int n = 0;

    SERVERS_UP();
    DLT_ASSERT_ERR(client_on(&c), 0);
    CU_ASSERT_FATAL(c != NULL);
    DLT_ASSERT_ERR(dlt_mutex_make(&m, "ri/b", 10000, c), 0);
    dlock_mutexattr_init(&a);
    dlock_mutexattr_setclient(&a, c);
    dlock_mutexattr_setlease(&a, 10000);
    DLT_ASSERT_ERR(dlock_rwlock_init(&rw, "ri/r", &a), 0);
    dlock_mutexattr_destroy(&a);

    DLT_ASSERT_INT_EQ(dlt_redis_kill(&rl.srv[0]), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);   /* on masters 2 and 3 */
    DLT_ASSERT_ERR(dlock_rwlock_rdlock(&rw), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_restart(&rl.srv[0]), 0); /* empty: no save, no AOF */

    DLT_ASSERT_ERR(dlock_lock_info(c, "ri/b", &info), 0);
    DLT_ASSERT_INT_EQ(info.held, 1);
    DLT_ASSERT_INT_EQ(info.pid, getpid());
    CU_ASSERT_TRUE(info.fence > 0);
    DLT_ASSERT_ERR(dlock_lock_info(c, "ri/r", &info), 0);
    DLT_ASSERT_INT_EQ(info.held, 0);
    DLT_ASSERT_INT_EQ(info.readers, 1);

    /* what exec -n finds, status says */
    DLT_ASSERT_INT_EQ(cli(out, err, "exec", "-n", "ri/b", "true", NULL), 1);
    DLT_ASSERT_INT_EQ(cli(out, err, "status", "ri/b", NULL), 0);
    CU_ASSERT_TRUE(has(out, "exclusive"));
    CU_ASSERT_FALSE(has(out, "free"));
    snprintf(pid, sizeof pid, "pid %ld,", (long)getpid());
    CU_ASSERT_TRUE(has(out, pid));
    DLT_ASSERT_INT_EQ(cli(out, err, "status", "ri/r", NULL), 0);
    CU_ASSERT_TRUE(has(out, "shared"));
    /* and the list, which reads each lock found */
    DLT_ASSERT_ERR(dlock_list(c, "ri/*", count_lock, &n), 0);
    DLT_ASSERT_INT_EQ(n, 1);

    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_lock_info(c, "ri/b", &info), 0);
    DLT_ASSERT_INT_EQ(info.held, 0);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&rw), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_masters_cleanup(&rl);
}

/* ------------------------------------------------ two of three down */

static void test_quorum_down(void) {
    char out[BUF], err[BUF];
    dlock_client_t *c = NULL;
    dlock_lock_info_t info;
    dlock_mutex_t m;
    int rc, n = 0;

    SERVERS_UP();
    DLT_ASSERT_ERR(client_on(&c), 0);
    CU_ASSERT_FATAL(c != NULL);
    DLT_ASSERT_ERR(dlt_mutex_make(&m, "ri/c", 10000, c), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_kill(&rl.srv[1]), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_kill(&rl.srv[2]), 0);

    /* held on the one that answers: not known */
    rc = dlock_lock_info(c, "ri/c", &info);
    printf("  info, 2 of 3 down, held: %s: %s\n", dlock_err_name(rc), dlock_last_error());
    DLT_ASSERT_ERR(rc, ENOLCK);
    CU_ASSERT_TRUE(has(dlock_last_error(), "only 1 of 3 Redlock masters answered (a quorum is 2)"));
    DLT_ASSERT_INT_EQ(cli(out, err, "status", "ri/c", NULL), 69);
    CU_ASSERT_TRUE(has(err, "only 1 of 3 Redlock masters answered (a quorum is 2)"));
    CU_ASSERT_FALSE(has(out, "exclusive"));
    /* free on the one that answers: not known either */
    rc = dlock_lock_info(c, "ri/free", &info);
    DLT_ASSERT_ERR(rc, ENOLCK);
    CU_ASSERT_TRUE(has(dlock_last_error(), "only 1 of 3 Redlock masters answered (a quorum is 2)"));
    DLT_ASSERT_INT_EQ(cli(out, err, "status", "ri/free", NULL), 69);
    CU_ASSERT_TRUE(has(err, "only 1 of 3 Redlock masters answered (a quorum is 2)"));
    CU_ASSERT_FALSE(has(out, "free"));
    /* the list still shows what the master that answers has, and says
     * that it is incomplete */
    rc = dlock_list(c, "ri/*", count_lock, &n);
    printf("  list, 2 of 3 down: %s, %d held: %s\n", dlock_err_name(rc), n, dlock_last_error());
    DLT_ASSERT_ERR(rc, ENOLCK);
    DLT_ASSERT_INT_EQ(n, 1);
    CU_ASSERT_TRUE(has(dlock_last_error(), "only 1 of 3 Redlock masters answered (a quorum is 2)"));

    (void)dlock_mutex_unlock(&m); /* lost or not: two masters are gone */
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_masters_cleanup(&rl);
}

/* ------------------------------------ masters that disagree (no quorum) */

/* Writes a holder of "ri/d" on master i, as the acquire would. */
static int plant(int i, const char *token, const char *who) {
    char key[300];
    redisReply *r;
    int ok;
    dlt_lock_key("ri/d", key, sizeof key);
    r = dlt_redis_cmd(&rl.srv[i], "HSET %s owner %s fence 7 who %s since 1700000000000", key, token, who);
    ok = r != NULL && r->type == REDIS_REPLY_INTEGER;
    if (r != NULL) freeReplyObject(r);
    r = dlt_redis_cmd(&rl.srv[i], "PEXPIRE %s 20000", key);
    ok = ok && r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    if (r != NULL) freeReplyObject(r);
    return ok;
}

static void test_disagree(void) {
    char out[BUF], err[BUF];
    dlock_client_t *c = NULL;
    dlock_lock_info_t info;
    int rc, n = 0;

    SERVERS_UP();
    DLT_ASSERT_ERR(client_on(&c), 0);
    CU_ASSERT_FATAL(c != NULL);
    /* one holder each on masters 1 and 2, master 3 free */
    CU_ASSERT_TRUE(plant(0, "tokenA", "hosta:101:1"));
    CU_ASSERT_TRUE(plant(1, "tokenB", "hostb:202:2"));
    rc = dlock_lock_info(c, "ri/d", &info);
    printf("  info, three answers: %s: %s\n", dlock_err_name(rc), dlock_last_error());
    DLT_ASSERT_ERR(rc, ENOLCK);
    CU_ASSERT_TRUE(has(dlock_last_error(), "disagree"));
    DLT_ASSERT_INT_EQ(cli(out, err, "status", "ri/d", NULL), 69);
    CU_ASSERT_TRUE(has(err, "disagree"));
    CU_ASSERT_FALSE(has(out, "free"));
    /* the list shows it as one master has it, and says they disagree */
    rc = dlock_list(c, "ri/*", count_lock, &n);
    printf("  list, disagreeing masters: %s, %d held: %s\n", dlock_err_name(rc), n, dlock_last_error());
    DLT_ASSERT_ERR(rc, ENOLCK);
    DLT_ASSERT_INT_EQ(n, 1);
    CU_ASSERT_TRUE(has(dlock_last_error(), "disagree"));
    /* the same holder on two: held by it, whatever the third says */
    CU_ASSERT_TRUE(plant(2, "tokenB", "hostb:202:2"));
    DLT_ASSERT_ERR(dlock_lock_info(c, "ri/d", &info), 0);
    DLT_ASSERT_INT_EQ(info.held, 1);
    DLT_ASSERT_INT_EQ(info.pid, 202);
    CU_ASSERT_TRUE(has(info.host, "hostb"));
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_masters_cleanup(&rl);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_all_up),
    DLT_TEST(test_master_restarted_empty),
    DLT_TEST(test_quorum_down),
    DLT_TEST(test_disagree),
    { NULL, NULL }
};

int main(int argc, char **argv) {
    int rc = dlt_main(argc, argv, "redlock_info", tests);
    dlt_masters_cleanup(&rl);
    return rc;
}
