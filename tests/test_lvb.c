/* test_lvb.c -- lock value blocks (dlock_mutex_lvb_set/get, the rwlock's,
 * dlock_lock_lvb): set by the holder, written with its release, read by
 * the next holder in another process; invalid after a holder killed
 * while holding, valid again once written; kept through a fair handoff
 * and a caching mutex's cache; size limits; on one server, Cluster and
 * Sentinel; ENOTSUP on Redlock.
 * labels: redis; timeout: 300
 */
#include "fixture.h"
#include "fixture_multi.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LEASE_MS 400u

enum { OPEN_PLAIN, OPEN_FAIR, OPEN_CACHING };

/* A mutex of name with a short lease on url's client ("" the default
 * client; the client, to destroy, in *cp). */
static int lv_open(dlock_mutex_t *m, const char *url, const char *name, int how, dlock_client_t **cp) {
    dlock_mutexattr_t a;
    int rc;
    *cp = NULL;
    if (url[0] != '\0' && (rc = dlt_client_make(cp, url, 3000)) != 0) return rc;
    if ((rc = dlock_mutexattr_init(&a)) != 0) return rc;
    if ((rc = dlock_mutexattr_setlease(&a, LEASE_MS)) != 0) return rc;
    if (how == OPEN_FAIR && (rc = dlock_mutexattr_setfair(&a, 1)) != 0) return rc;
    if (how == OPEN_CACHING && (rc = dlock_mutexattr_setcaching(&a, 1)) != 0) return rc;
    if (*cp != NULL && (rc = dlock_mutexattr_setclient(&a, *cp)) != 0) return rc;
    rc = dlock_mutex_init(m, name, &a);
    dlock_mutexattr_destroy(&a);
    return rc;
}

/* m's value block is the string want, with validity valid. */
static int lv_is(dlock_mutex_t *m, const char *want, int valid) {
    char buf[DLOCK_LVB_MAX + 1];
    size_t len = 99;
    int v = 99, rc = dlock_mutex_lvb_get(m, buf, DLOCK_LVB_MAX, &len, &v);
    if (rc != 0) return DLT_CK_FAIL("lvb_get", rc, 0);
    buf[len] = '\0';
    if (strcmp(buf, want) != 0 || v != valid) {
        fprintf(stderr, "  value block '%s' valid %d, want '%s' valid %d\n", buf, v, want, valid);
        return 1;
    }
    return 0;
}

typedef struct lv_child {
    char url[600];
    const char *name;
    const char *value; /* set this (NULL: none) */
    int how;           /* OPEN_* */
    int kill_me;       /* hold until killed; else unlock when go */
    int locked, go;
} lv_child;

static int lv_child_main(void *p) {
    lv_child *ch = p;
    dlock_mutex_t m;
    dlock_client_t *c;
    DLT_CK(lv_open(&m, ch->url, ch->name, ch->how, &c), 0);
    DLT_CK(dlock_mutex_lock(&m), 0);
    if (ch->value != NULL) DLT_CK(dlock_mutex_lvb_set(&m, ch->value, strlen(ch->value)), 0);
    dlt_flag_set(&ch->locked, 1);
    DLT_CKT(dlt_flag_wait(&ch->go, 1, DLT_JOIN_MS));
    DLT_CK(dlock_mutex_unlock(&m), 0);
    DLT_CK(dlock_mutex_destroy(&m), 0);
    if (c != NULL) dlock_client_destroy(c);
    return 0;
}

/* A child process takes name, sets value (or not) and then unlocks (go)
 * or is killed; returns when it has ended. */
static void lv_child_run(const char *url, const char *name, const char *value, int how, int kill_me) {
    lv_child *ch = DLT_SHM_NEW(lv_child, 1);
    dlt_task t;
    snprintf(ch->url, sizeof ch->url, "%s", url);
    ch->name = name;
    ch->value = value;
    ch->how = how;
    ch->kill_me = kill_me;
    dlt_task_start(&t, DLT_PROC, lv_child_main, ch);
    CU_ASSERT_TRUE_FATAL(dlt_flag_wait(&ch->locked, 1, 10000));
    if (kill_me) {
        kill(t.pid, SIGKILL);
        DLT_ASSERT_INT_EQ(dlt_task_join(&t, 10000), 128 + SIGKILL);
    } else {
        dlt_flag_set(&ch->go, 1);
        DLT_ASSERT_INT_EQ(dlt_task_join(&t, 10000), 0);
    }
    DLT_SHM_FREE(ch, 1);
}

/* The cycle on url: a value set in one process is read by the next
 * holder, valid; a holder killed holding it (having set a value that is
 * never written, since its release never went) leaves it invalid, the
 * old value kept; a new value written makes it valid again; a holder that
 * sets nothing leaves it as it was. */
static void lv_cycle(const char *url, const char *name) {
    dlock_mutex_t m;
    dlock_client_t *c;
    DLT_ASSERT_ERR(lv_open(&m, url, name, OPEN_PLAIN, &c), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0); /* none yet: empty and valid */
    DLT_ASSERT_INT_EQ(lv_is(&m, "", 1), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    lv_child_run(url, name, "gen=1", OPEN_PLAIN, 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_INT_EQ(lv_is(&m, "gen=1", 1), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    lv_child_run(url, name, "gen=2", OPEN_PLAIN, 1); /* killed: its value never written */
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);          /* (after its lease) */
    DLT_ASSERT_INT_EQ(lv_is(&m, "gen=1", 0), 0);
    DLT_ASSERT_ERR(dlock_mutex_lvb_set(&m, "gen=3", 5), 0);
    DLT_ASSERT_INT_EQ(lv_is(&m, "gen=3", 1), 0); /* this hold's own */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    lv_child_run(url, name, NULL, OPEN_PLAIN, 0); /* sets nothing */
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_INT_EQ(lv_is(&m, "gen=3", 1), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    lv_child_run(url, name, NULL, OPEN_PLAIN, 1); /* killed, set nothing: invalid all the same */
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_INT_EQ(lv_is(&m, "gen=3", 0), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    if (c != NULL) dlock_client_destroy(c);
}

static void test_limits(void) {
    dlock_mutex_t m;
    dlock_client_t *c;
    char big[DLOCK_LVB_MAX + 1], small[4];
    size_t len = 0;
    int valid = 0;
    memset(big, 'x', sizeof big);
    DLT_ASSERT_ERR(lv_open(&m, "", "lv/limits", OPEN_PLAIN, &c), 0);
    DLT_ASSERT_ERR(dlock_mutex_lvb_set(&m, "a", 1), EPERM);
    DLT_ASSERT_ERR(dlock_mutex_lvb_get(&m, small, sizeof small, &len, &valid), EPERM);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_lvb_set(&m, big, DLOCK_LVB_MAX + 1), EINVAL);
    DLT_ASSERT_ERR(dlock_mutex_lvb_set(&m, big, DLOCK_LVB_MAX), 0);
    DLT_ASSERT_ERR(dlock_mutex_lvb_get(&m, small, sizeof small, &len, &valid), ERANGE);
    DLT_ASSERT_INT_EQ(len, DLOCK_LVB_MAX);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_lock_lvb(NULL, "lv/limits", big, sizeof big, &len, &valid), 0);
    DLT_ASSERT_INT_EQ(len, DLOCK_LVB_MAX);
    DLT_ASSERT_INT_EQ(valid, 1);
    DLT_ASSERT_ERR(dlock_lock_lvb(NULL, "lv/none", big, sizeof big, &len, &valid), 0);
    DLT_ASSERT_INT_EQ(valid, -1);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
}

static void test_single(void) {
    lv_cycle("", "lv/one");
}

/* A fair handoff: the holder sets and unlocks while another process's
 * thread waits in the queue; the grant reaches it with the value valid.
 * A break keeps it valid. */
static void test_handoff_and_break(void) {
    lv_child *ch = DLT_SHM_NEW(lv_child, 1);
    dlock_mutex_t m;
    dlock_client_t *c;
    dlt_task t;
    ch->name = "lv/fair";
    ch->value = "handed";
    ch->how = OPEN_FAIR;
    dlt_task_start(&t, DLT_PROC, lv_child_main, ch);
    CU_ASSERT_TRUE_FATAL(dlt_flag_wait(&ch->locked, 1, 10000));
    DLT_ASSERT_ERR(lv_open(&m, "", "lv/fair", OPEN_FAIR, &c), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EBUSY);
    dlt_flag_set(&ch->go, 1); /* unlocks in a moment: this lock waits for the grant */
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_INT_EQ(lv_is(&m, "handed", 1), 0);
    DLT_ASSERT_INT_EQ(dlt_task_join(&t, 10000), 0);
    DLT_ASSERT_ERR(dlock_break(NULL, "lv/fair", DLOCK_BREAK_OWNERDEAD, NULL), 0);
    dlock_mutex_unlock(&m); /* (broken: EPERM) */
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_INT_EQ(lv_is(&m, "handed", 1), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_SHM_FREE(ch, 1);
}

/* A caching mutex: its value stays with the cached lock (read back by
 * the next local hold) and is written when another process's request
 * makes it give the lock back. */
static void test_caching(void) {
    dlock_mutex_t m;
    dlock_client_t *c;
    DLT_ASSERT_ERR(lv_open(&m, "", "lv/cache", OPEN_CACHING, &c), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_lvb_set(&m, "cached", 6), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0); /* kept in the cache */
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_INT_EQ(lv_is(&m, "cached", 1), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    lv_child_run("", "lv/cache", "child", OPEN_PLAIN, 0); /* asks: the cache gives it back, value and all */
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_INT_EQ(lv_is(&m, "child", 1), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
}

/* A rwlock: the writer sets, a reader reads; a reader cannot set. */
static void test_rwlock(void) {
    dlock_rwlock_t rw;
    char buf[DLOCK_LVB_MAX];
    size_t len = 0;
    int valid = 0;
    DLT_ASSERT_ERR(dlock_rwlock_init(&rw, "lv/rw", NULL), 0);
    DLT_ASSERT_ERR(dlock_rwlock_wrlock(&rw), 0);
    DLT_ASSERT_ERR(dlock_rwlock_lvb_set(&rw, "w1", 2), 0);
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), 0);
    DLT_ASSERT_ERR(dlock_rwlock_rdlock(&rw), 0);
    DLT_ASSERT_ERR(dlock_rwlock_lvb_get(&rw, buf, sizeof buf, &len, &valid), 0);
    DLT_ASSERT_INT_EQ(len, 2);
    CU_ASSERT(memcmp(buf, "w1", 2) == 0 && valid == 1);
    DLT_ASSERT_ERR(dlock_rwlock_lvb_set(&rw, "r", 1), EPERM);
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), 0);
    DLT_ASSERT_ERR(dlock_rwlock_lvb_get(&rw, buf, sizeof buf, &len, &valid), EPERM);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&rw), 0);
}

/* dlock status shows it (and --json). */
static void test_cli(void) {
    static char out[8192], err[8192];
    char *const st[] = { DLOCK_CLI, "status", "lv/one", NULL };
    char *const js[] = { DLOCK_CLI, "status", "--json", "lv/one", NULL };
    lv_cycle("", "lv/one");
    DLT_ASSERT_INT_EQ(dlt_run_capture(st, out, err, sizeof out, 10000), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "value block      67 65 6e 3d 33 (5 bytes, invalid"));
    DLT_ASSERT_INT_EQ(dlt_run_capture(js, out, err, sizeof out, 10000), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"lvb\":{\"hex\":\"67656e3d33\",\"valid\":false}"));
}

static void test_cluster(void) {
    dlt_cluster cl;
    char url[600];
    memset(&cl, 0, sizeof cl);
    CU_ASSERT_EQUAL_FATAL(dlt_cluster_start(&cl, 3, 0, 0, NULL), 0);
    dlt_cluster_url(&cl, url, sizeof url, "0", NULL);
    lv_cycle(url, "lv/cl");
    dlt_cluster_cleanup(&cl);
}

static void test_sentinel(void) {
    dlt_sentinel st;
    memset(&st, 0, sizeof st);
    CU_ASSERT_EQUAL_FATAL(dlt_sentinel_start(&st, 0, 1, NULL, 20000), 0);
    lv_cycle(st.url, "lv/st");
    dlt_sentinel_cleanup(&st);
}

/* Redlock: not offered (each master would keep its own block). */
static void test_redlock(void) {
    dlt_masters ms;
    dlock_mutex_t m;
    dlock_client_t *c;
    char buf[8];
    size_t len;
    int valid;
    memset(&ms, 0, sizeof ms);
    CU_ASSERT_EQUAL_FATAL(dlt_masters_start(&ms, 3, 0), 0);
    DLT_ASSERT_ERR(lv_open(&m, ms.url, "lv/rl", OPEN_PLAIN, &c), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_lvb_set(&m, "x", 1), ENOTSUP);
    DLT_ASSERT_ERR(dlock_mutex_lvb_get(&m, buf, sizeof buf, &len, &valid), ENOTSUP);
    DLT_ASSERT_ERR(dlock_lock_lvb(c, "lv/rl", buf, sizeof buf, &len, &valid), ENOTSUP);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    dlock_client_destroy(c);
    dlt_masters_cleanup(&ms);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_limits),
    DLT_TEST(test_single),
    DLT_TEST(test_handoff_and_break),
    DLT_TEST(test_caching),
    DLT_TEST(test_rwlock),
    DLT_TEST(test_cli),
    DLT_TEST(test_cluster),
    DLT_TEST(test_sentinel),
    DLT_TEST(test_redlock),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "lvb", tests);
}
