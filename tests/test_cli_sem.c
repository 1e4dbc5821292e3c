/* labels: redis cli; timeout: 300 */
/* test_cli_sem.c -- `dlock status`, `dlock list` and `dlock break` on
 * semaphores, run as a real program (DLOCK_CLI, the built
 * binary) against the suite's real redis-server: a semaphore's value, its
 * waiters (host, pid, thread, place, since) and its units leased under
 * undo in the table and in --json; a name that is a lock and a semaphore
 * at once; list with both kinds, marked; break --sem (units taken back)
 * and --unlink, with their refusals; nothing of it where there is no
 * semaphore.
 *
 * The semaphores are made and waited on with the library, the waiters in
 * child processes; units leased under undo are written into the
 * semaphore's keys by hand (":semo" "u:SINCE:host:pid:tid", ":semu" the
 * lease's end), as the undo path writes them.
 */
#include "fixture.h"
#include "json.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
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

/* ============================================================ processes */

#define OUTMAX 65536
#define ARGMAX 32

typedef struct result {
    int code; /* exit code, 128 + signal, or -1 */
    char out[OUTMAX];
    char err[OUTMAX];
} result;

static result R; /* the last run */

/* Runs dlock with these arguments (NULL-terminated), stdin /dev/null, to
 * its end (20 s at most); its output in R.  Returns R.code. */
static int dl_v(const char *a, ...) {
    char *argv[ARGMAX];
    va_list ap;
    int n = 0, rc;
    argv[n++] = (char *)DLOCK_CLI;
    va_start(ap, a);
    for (; a != NULL && n < ARGMAX - 1; a = va_arg(ap, const char *)) argv[n++] = (char *)a;
    va_end(ap);
    argv[n] = NULL;
    memset(&R, 0, sizeof R);
    rc = dlt_run_capture(argv, R.out, R.err, OUTMAX, 20000);
    return R.code = rc;
}
#define dl(...) dl_v(__VA_ARGS__, (const char *)NULL)

#define SHOW_RUN() fprintf(stderr, "  [%s:%d] exit %d\n  stdout: %s\n  stderr: %s\n", __func__, __LINE__, R.code, R.out, R.err)
#define CHECK_CODE(expr, want)                                                                   \
    do {                                                                                          \
        int got_ = (expr);                                                                        \
        if (got_ != (want)) SHOW_RUN();                                                           \
        DLT_ASSERT_INT_EQ(got_, (want));                                                          \
    } while (0)

/* `dlock status --json NAME`, parsed; NULL if it failed. */
static jv *status_json(const char *name) {
    jv *x;
    if (dl("status", "--json", name) != 0) {
        SHOW_RUN();
        return NULL;
    }
    if ((x = jparse(R.out)) == NULL) fprintf(stderr, "  not JSON: %s\n", R.out);
    return x;
}

/* ============================================================ semaphores */

/* A child that waits in the semaphore arg and exits 0 once it took a
 * unit. */
static int waiter_run(void *arg) {
    dlock_sem_t s;
    if (dlock_sem_init(&s, (const char *)arg, 0, NULL) != 0) return 2;
    if (dlock_sem_wait(&s) != 0) return 3;
    return dlock_sem_destroy(&s) == 0 ? 0 : 4;
}

/* A unit of name leased under undo to who ("host:pid:tid") for lease_ms
 * more, since 2 s ago (server time), as the undo path writes it. */
static void fake_lease(const char *name, const char *tok, const char *who, long long lease_ms) {
    char ko[700], ku[700], rec[400];
    dlock_sem_info_t i;
    int no, nu, nr;
    CU_ASSERT_FATAL(dlock_sem_info(NULL, name, &i) == 0);
    no = snprintf(ko, sizeof ko, "dlock:{%s}:semo", name);
    nu = snprintf(ku, sizeof ku, "dlock:{%s}:semu", name);
    nr = snprintf(rec, sizeof rec, "u:%lld:%s", (long long)i.server_now_ms - 2000, who);
    CU_ASSERT(dlt_reply_int(dlt_redis_cmd(&dlt_server, "HSET %b %s %b", ko, (size_t)no, tok, rec, (size_t)nr)) == 1);
    CU_ASSERT(dlt_reply_int(dlt_redis_cmd(&dlt_server, "ZADD %b %lld %s", ku, (size_t)nu,
                                          (long long)i.server_now_ms + lease_ms, tok)) == 1);
}

/* ============================================================ the tests */

/* A name with no semaphore: status as before, "semaphore": null. */
static void test_status_no_sem(void) {
    jv *st = status_json("plain");
    CU_ASSERT_FATAL(st != NULL);
    CU_ASSERT_STRING_EQUAL(jtext(jget(st, "state")), "free");
    CU_ASSERT_STRING_EQUAL(jtext(jget(st, "kind")), "lock");
    CU_ASSERT(jis(jget(st, "semaphore"), J_NULL));
    jfree(st);
    CHECK_CODE(dl("status", "plain"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.out, "free"));
    CU_ASSERT_PTR_NULL(strstr(R.out, "semaphore"));
}

/* A semaphore the server lost (FLUSHALL), made again by an object open
 * on it with the value it was opened with: status says when, in the
 * table ("remade") and in the JSON (remade_ms, remade); one never lost
 * says nothing of it (null). */
static void test_status_remade(void) {
    dlock_sem_info_t i;
    dlock_sem_t s;
    jv *st, *sm;
    int v = -1;
    DLT_ASSERT_ERR(dlock_sem_init(&s, "rm", 4, NULL), 0);
    st = status_json("rm");
    CU_ASSERT_FATAL(st != NULL);
    sm = jget(st, "semaphore");
    CU_ASSERT(jis(jget(sm, "remade_ms"), J_NULL));
    CU_ASSERT(jis(jget(sm, "remade"), J_NULL));
    jfree(st);
    CHECK_CODE(dl("status", "rm"), 0);
    CU_ASSERT_PTR_NULL(strstr(R.out, "remade"));
    freeReplyObject(dlt_redis_cmd(&dlt_server, "FLUSHALL"));
    DLT_ASSERT_ERR(dlock_sem_getvalue(&s, &v), 0);
    DLT_ASSERT_INT_EQ(v, 4);
    DLT_ASSERT_ERR(dlock_sem_info(NULL, "rm", &i), 0);
    CU_ASSERT_FATAL(i.remade_ms > 0);
    st = status_json("rm");
    CU_ASSERT_FATAL(st != NULL);
    sm = jget(st, "semaphore");
    DLT_ASSERT_INT_EQ(jnum(jget(sm, "value")), 4);
    DLT_ASSERT_INT_EQ(jnum(jget(sm, "remade_ms")), i.remade_ms);
    CU_ASSERT(jtext(jget(sm, "remade")) != NULL && strlen(jtext(jget(sm, "remade"))) >= 19);
    jfree(st);
    CHECK_CODE(dl("status", "rm"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.out, "remade"));
    CU_ASSERT_PTR_NOT_NULL(strstr(R.out, "after the server lost it"));
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
}

/* A semaphore with a waiter in another process and a leased unit: the
 * table and the JSON name them. */
static void test_status_sem(void) {
    char host[256], txt[512];
    dlock_sem_t s;
    dlt_task t;
    jv *st, *sm, *w, *u;
    gethostname(host, sizeof host);
    host[sizeof host - 1] = '\0';
    DLT_ASSERT_ERR(dlock_sem_init(&s, "q", 0, NULL), 0);
    if (dlt_task_start(&t, DLT_PROC, waiter_run, "q") != 0) return;
    CU_ASSERT_FATAL(dlt_sem_wait_waiters("q", 1, 10000));
    fake_lease("q", "tokA", "web1:4242:4343", 60000);

    st = status_json("q");
    CU_ASSERT_FATAL(st != NULL);
    CU_ASSERT_STRING_EQUAL(jtext(jget(st, "kind")), "semaphore");
    CU_ASSERT_STRING_EQUAL(jtext(jget(st, "state")), "free"); /* the lock's fields are there too */
    sm = jget(st, "semaphore");
    CU_ASSERT_FATAL(jis(sm, J_OBJ));
    CU_ASSERT_STRING_EQUAL(jtext(jget(sm, "name")), "q");
    CU_ASSERT_STRING_EQUAL(jtext(jget(sm, "kind")), "semaphore");
    CU_ASSERT(jis(jget(sm, "exists"), J_BOOL) && jget(sm, "exists")->b);
    DLT_ASSERT_INT_EQ(jnum(jget(sm, "value")), 0);
    DLT_ASSERT_INT_EQ(jnum(jget(sm, "waiting")), 1);
    DLT_ASSERT_INT_EQ(jnum(jget(sm, "leased")), 1);
    w = jget(sm, "waiters");
    CU_ASSERT_FATAL(jis(w, J_ARR) && w->n == 1);
    CU_ASSERT_STRING_EQUAL(jtext(jget(w->v[0], "host")), host);
    DLT_ASSERT_INT_EQ(jnum(jget(w->v[0], "pid")), t.pid);
    DLT_ASSERT_INT_EQ(jnum(jget(w->v[0], "tid")), t.pid);
    DLT_ASSERT_INT_EQ(jnum(jget(w->v[0], "place")), 0);
    CU_ASSERT(jis(jget(w->v[0], "handed"), J_BOOL) && !jget(w->v[0], "handed")->b);
    CU_ASSERT(jnum(jget(w->v[0], "waited_ms")) >= 0 && jnum(jget(w->v[0], "waited_ms")) < 20000);
    DLT_ASSERT_INT_EQ(jnum(jget(w->v[0], "waited_ms")),
                      jnum(jget(sm, "server_time_ms")) - jnum(jget(w->v[0], "since_ms")));
    CU_ASSERT(strlen(jtext(jget(w->v[0], "since"))) == 24);
    u = jget(sm, "units");
    CU_ASSERT_FATAL(jis(u, J_ARR) && u->n == 1);
    CU_ASSERT_STRING_EQUAL(jtext(jget(u->v[0], "host")), "web1");
    DLT_ASSERT_INT_EQ(jnum(jget(u->v[0], "pid")), 4242);
    DLT_ASSERT_INT_EQ(jnum(jget(u->v[0], "tid")), 4343);
    CU_ASSERT(jnum(jget(u->v[0], "lease_left_ms")) > 40000 && jnum(jget(u->v[0], "lease_left_ms")) <= 60000);
    CU_ASSERT(jnum(jget(u->v[0], "held_ms")) >= 2000 && jnum(jget(u->v[0], "held_ms")) < 20000);
    jfree(st);

    /* The table: the semaphore alone (the lock has nothing to show). */
    CHECK_CODE(dl("status", "q"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.out, "kind             semaphore"));
    CU_ASSERT_PTR_NOT_NULL(strstr(R.out, "value            0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(R.out, "waiting          1"));
    snprintf(txt, sizeof txt, "waiter 1         %s, pid %d, thread %d, waiting since", host, (int)t.pid, (int)t.pid);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.out, txt));
    CU_ASSERT_PTR_NOT_NULL(strstr(R.out, "leased unit      web1, pid 4242, thread 4343, taken"));
    CU_ASSERT_PTR_NOT_NULL(strstr(R.out, "lease left"));
    CU_ASSERT_PTR_NULL(strstr(R.out, "state"));

    DLT_ASSERT_ERR(dlock_sem_post(&s), 0);
    DLT_ASSERT_INT_EQ(dlt_task_join(&t, DLT_JOIN_MS), 0);
    st = status_json("q");
    DLT_ASSERT_INT_EQ(jnum(jget(jget(st, "semaphore"), "waiting")), 0);
    CU_ASSERT(jis(jget(jget(st, "semaphore"), "waiters"), J_ARR) && jget(jget(st, "semaphore"), "waiters")->n == 0);
    jfree(st);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
}

/* A name that is a held lock and a semaphore: both shown, lock first. */
static void test_status_both(void) {
    dlock_sem_t s;
    dlock_mutex_t m;
    jv *st;
    char *lock_at, *sem_at;
    DLT_ASSERT_ERR(dlock_sem_init(&s, "both", 3, NULL), 0);
    DLT_ASSERT_ERR(dlt_mutex_make(&m, "both", 0, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    st = status_json("both");
    CU_ASSERT_FATAL(st != NULL);
    CU_ASSERT_STRING_EQUAL(jtext(jget(st, "kind")), "lock+semaphore");
    CU_ASSERT_STRING_EQUAL(jtext(jget(st, "state")), "exclusive");
    DLT_ASSERT_INT_EQ(jnum(jget(jget(st, "holder"), "pid")), getpid());
    DLT_ASSERT_INT_EQ(jnum(jget(jget(st, "semaphore"), "value")), 3);
    jfree(st);
    CHECK_CODE(dl("status", "both"), 0);
    lock_at = strstr(R.out, "state            exclusive");
    sem_at = strstr(R.out, "kind             semaphore");
    CU_ASSERT(lock_at != NULL && sem_at != NULL && lock_at < sem_at);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.out, "value            3"));
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
}

/* list: locks and semaphores, each marked with its kind. */
static void test_list_kinds(void) {
    dlock_sem_t a, b;
    dlock_mutex_t m;
    jv *l;
    CHECK_CODE(dl("list", "--json"), 0);
    CU_ASSERT_STRING_EQUAL(R.out, "[]\n");
    CHECK_CODE(dl("list"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.out, "no lock is held, no semaphore exists"));
    DLT_ASSERT_ERR(dlock_sem_init(&a, "j/a", 2, NULL), 0);
    DLT_ASSERT_ERR(dlock_sem_init(&b, "j/c", 0, NULL), 0);
    DLT_ASSERT_ERR(dlt_mutex_make(&m, "j/b", 0, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);

    CHECK_CODE(dl("list", "--json", "j/*"), 0);
    l = jparse(R.out);
    CU_ASSERT_FATAL(jis(l, J_ARR));
    DLT_ASSERT_INT_EQ(l->n, 3);
    if (l->n == 3) {
        CU_ASSERT_STRING_EQUAL(jtext(jget(l->v[0], "name")), "j/a");
        CU_ASSERT_STRING_EQUAL(jtext(jget(l->v[0], "kind")), "semaphore");
        DLT_ASSERT_INT_EQ(jnum(jget(l->v[0], "value")), 2);
        CU_ASSERT_STRING_EQUAL(jtext(jget(l->v[1], "name")), "j/b");
        CU_ASSERT_STRING_EQUAL(jtext(jget(l->v[1], "kind")), "lock");
        CU_ASSERT_STRING_EQUAL(jtext(jget(l->v[1], "state")), "exclusive");
        CU_ASSERT_STRING_EQUAL(jtext(jget(l->v[2], "name")), "j/c");
        CU_ASSERT_STRING_EQUAL(jtext(jget(l->v[2], "kind")), "semaphore");
        DLT_ASSERT_INT_EQ(jnum(jget(l->v[2], "value")), 0);
    }
    jfree(l);
    CHECK_CODE(dl("list", "--json", "j/c"), 0);
    l = jparse(R.out);
    CU_ASSERT(jis(l, J_ARR) && l->n == 1);
    jfree(l);

    /* The tables: the locks', then the semaphores'. */
    CHECK_CODE(dl("list", "j/*"), 0);
    {
        char *locks = strstr(R.out, "NAME  STATE"), *sems = strstr(R.out, "NAME  KIND       VALUE  WAITING  LEASED");
        CU_ASSERT(locks != NULL && sems != NULL && locks < sems);
        CU_ASSERT_PTR_NOT_NULL(strstr(R.out, "\nj/a   semaphore  2      0        0"));
        CU_ASSERT_PTR_NOT_NULL(strstr(R.out, "\nj/c   semaphore  0      0        0"));
    }
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    CHECK_CODE(dl("list", "j/*"), 0);
    CU_ASSERT_PTR_NULL(strstr(R.out, "STATE")); /* no lock held: the semaphores' table alone */
    CU_ASSERT_PTR_NOT_NULL(strstr(R.out, "j/a"));
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_sem_destroy(&a), 0);
    DLT_ASSERT_ERR(dlock_sem_destroy(&b), 0);
}

/* break --sem takes back the units leased under undo; --unlink removes
 * the semaphore; both refuse what is not there, and want --force off a
 * terminal. */
static void test_break_sem(void) {
    dlock_sem_t s;
    dlock_sem_info_t i;
    jv *b, *st;
    int v = -1;
    CHECK_CODE(dl("break", "--force", "--sem", "bs"), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, "no semaphore 'bs'"));
    CHECK_CODE(dl("break", "--force", "--unlink", "bs"), 1);
    CHECK_CODE(dl("break", "--force", "--sem", "--reset", "bs"), 64);
    CHECK_CODE(dl("status", "--sem", "bs"), 64); /* a break option */

    DLT_ASSERT_ERR(dlock_sem_init(&s, "bs", 1, NULL), 0);
    fake_lease("bs", "tokA", "web1:11:12", 60000);
    fake_lease("bs", "tokB", "web2:21:22", 60000);
    CHECK_CODE(dl("break", "--sem", "bs"), 64); /* not a terminal: refused */
    DLT_ASSERT_ERR(dlock_sem_info(NULL, "bs", &i), 0);
    DLT_ASSERT_INT_EQ(i.leased, 2);
    CHECK_CODE(dl("break", "--force", "--sem", "--json", "bs"), 0);
    b = jparse(R.out);
    CU_ASSERT_FATAL(b != NULL);
    CU_ASSERT_STRING_EQUAL(jtext(jget(b, "kind")), "semaphore");
    CU_ASSERT_STRING_EQUAL(jtext(jget(b, "how")), "takeback");
    DLT_ASSERT_INT_EQ(jnum(jget(b, "taken_back")), 2);
    DLT_ASSERT_INT_EQ(jnum(jget(jget(b, "before"), "leased")), 2);
    jfree(b);
    DLT_ASSERT_ERR(dlock_sem_getvalue(&s, &v), 0);
    DLT_ASSERT_INT_EQ(v, 3);
    st = status_json("bs");
    DLT_ASSERT_INT_EQ(jnum(jget(jget(st, "semaphore"), "leased")), 0);
    jfree(st);
    CHECK_CODE(dl("break", "-f", "--sem", "bs"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.out, "nothing taken back"));

    /* A lock break of the name says how to reach the semaphore. */
    CHECK_CODE(dl("break", "-f", "bs"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.out, "was not held"));
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, "--unlink"));

    CHECK_CODE(dl("break", "-f", "--unlink", "bs"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.out, "removed the semaphore 'bs'"));
    st = status_json("bs");
    CU_ASSERT(jis(jget(st, "semaphore"), J_NULL));
    jfree(st);
    CHECK_CODE(dl("break", "-f", "--unlink", "bs"), 1);
    CHECK_CODE(dl("list", "--json"), 0);
    CU_ASSERT_STRING_EQUAL(R.out, "[]\n");
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_status_no_sem),
    DLT_TEST(test_status_sem),
    DLT_TEST(test_status_remade),
    DLT_TEST(test_status_both),
    DLT_TEST(test_list_kinds),
    DLT_TEST(test_break_sem),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "cli_sem", tests);
}
