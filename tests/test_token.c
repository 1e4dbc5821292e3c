/* labels: redis; timeout: 120 */
/* test_token.c -- owner tokens and their random source, against the
 * suite's real redis-server: dlock's own OpenSSL library context, set up
 * in a short-lived thread when a client is made.  Every thread has its own
 * token (and each hold its own, on the server); a fork child draws bytes
 * and tokens its parent never draws, whether it forks after the set-up or
 * while the set-up thread runs (then it neither hangs nor shares the
 * parent's state); the set-up thread is gone once the client is destroyed,
 * and a process that exits while it runs exits cleanly (under ASan: with
 * no leak).  A caller that would wait for the set-up does one of its two
 * parts (dlock__random_help; the configuration first, as a first token
 * does: dlock__random_help_conf), with a fork or an exit meanwhile as safe;
 * the renewal thread a first token starts ahead of the first hold renews
 * that hold in time; the set-up thread runs bound to a CPU other than its
 * starter's when the process may use two.
 *
 * The tests that need a process whose random source is not set up yet run
 * in children forked from this process before anything here sets it up:
 * they come first, and each child checks that it starts without one.
 */
#include "fixture.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dlock.h>

#include "base/base.h"
#include "core/core.h"

#define NTHREADS 8
#define RAW 16

/* ------------------------------------------------------------ helpers */

/* The threads of this process (/proc/self/task), or -1. */
static int threads_now(void) {
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    int n = 0;
    if (d == NULL) return -1;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

/* Waits up to ms for this process to have `want` threads: 1 if it has. */
static int threads_become(int want, int ms) {
    double end = dlt_now() + ms / 1000.0;
    while (threads_now() != want) {
        if (dlt_now() > end) return 0;
        dlt_sleep_ms(1);
    }
    return 1;
}

static int write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* A fork child's draw and identity, read back by its parent: RAW bytes of
 * dlock__random, then its token (DLOCK__TOKEN_HEX). */
struct drawn {
    unsigned char raw[RAW];
    char token[DLOCK__TOKEN_HEX + 1];
};

/* In a fork child: draws, sends what it drew on fd, and _exits 0 (or the
 * failed check's code).  alarm: a child that hangs on a lock it inherited
 * taken dies of SIGALRM, which its parent sees. */
static void child_draw(int fd) {
    struct drawn d;
    dlock__thread *t;
    int err = 0;
    alarm(10);
    if (dlock__random_thread_live()) _exit(5); /* the parent's set-up thread is not this process's */
    memset(&d, 0, sizeof d);
    if (dlock__random(d.raw, RAW) != 0) _exit(2);
    if ((t = dlock__self(&err)) == NULL) _exit(3);
    memcpy(d.token, t->token, sizeof d.token);
    _exit(write_all(fd, &d, sizeof d) == 0 ? 0 : 4);
}

/* Forks a child that draws (child_draw); the parent draws too, after the
 * fork, and both draws and identities must differ.  In the parent. */
static int fork_and_compare(void) {
    struct drawn mine, theirs;
    dlock__thread *t;
    int fds[2], err = 0, st;
    pid_t pid;
    DLT_CKT(pipe(fds) == 0);
    fflush(NULL);
    if ((pid = fork()) == 0) {
        close(fds[0]);
        child_draw(fds[1]);
    }
    DLT_CKT(pid > 0);
    close(fds[1]);
    DLT_CK(dlock__random(mine.raw, RAW), 0);
    DLT_CKT((t = dlock__self(&err)) != NULL);
    memcpy(mine.token, t->token, sizeof mine.token);
    DLT_CK(dlt_pipe_read(fds[0], &theirs, sizeof theirs, 10000), 0);
    close(fds[0]);
    st = dlt_wait(pid, 10000);
    DLT_CK(st, 0);
    DLT_CKT(memcmp(mine.raw, theirs.raw, RAW) != 0); /* the child's DRBG is not a copy of ours */
    DLT_CKT(strlen(theirs.token) == DLOCK__TOKEN_HEX);
    DLT_CKT(strcmp(mine.token, theirs.token) != 0);
    return 0;
}

/* ------------------------------------------------ fresh processes first */

/* A fork while the set-up thread may be anywhere in its work (just made,
 * inside OpenSSL, letting go): the child draws at once and must not hang,
 * and draws what the parent does not; then the parent's thread is joined
 * (its count of threads back to one).  arg: microseconds between the
 * set-up's start and the fork. */
static int fork_during_setup(void *arg) {
    unsigned us = *(unsigned *)arg;
    DLT_CK(dlock__random_ready(), 0); /* a process that never drew */
    DLT_CK(threads_now(), 1);
    dlock__random_prepare();
    if (us > 0) usleep(us);
    if (fork_and_compare() != 0) return 1;
    dlock__random_settle();
    DLT_CK(dlock__random_thread_live(), 0);
    DLT_CK(threads_become(1, 1000), 1);
    return 0;
}

static void test_fork_while_the_setup_runs(void) {
    static const unsigned delays[] = { 0, 0, 50, 200, 400, 700, 1000, 2000 };
    size_t i;
    for (i = 0; i < sizeof delays / sizeof delays[0]; i++) {
        unsigned us = delays[i];
        DLT_ASSERT_INT_EQ(dlt_wait(dlt_spawn(fork_during_setup, &us), 30000), 0);
    }
}

/* A caller that would wait for the set-up helps (dlock__random_help):
 * it takes the DRBG's part if the set-up thread has not begun it, else
 * the configuration's; or, as a first token's wait does, it loads the
 * configuration first (dlock__random_help_conf), then takes the DRBG's
 * part if it is still free. */
struct help_case {
    unsigned us;   /* between the set-up's start and the help's, then the fork's */
    int conf;      /* the configuration first */
    int part;      /* what dlock__random_help did */
    int conf_part; /* what dlock__random_help_conf did */
};

static void *help_main(void *arg) {
    struct help_case *h = arg;
    if (h->conf) h->conf_part = dlock__random_help_conf();
    h->part = dlock__random_help();
    return NULL;
}

/* A fork while a thread helps the set-up (in either part: the help starts
 * at once, before the set-up thread has begun, or after it has; with the
 * configuration first or not) must not hang the child nor share the
 * parent's state; the help's part is done when it returns, the set-up
 * when the set-up thread has ended.  arg: a struct help_case. */
static int fork_during_help(void *arg) {
    struct help_case h = *(struct help_case *)arg;
    pthread_t th;
    h.part = h.conf_part = -1;
    DLT_CK(dlock__random_ready(), 0);
    DLT_CK(threads_now(), 1);
    dlock__random_prepare();
    if (h.us > 0) usleep(h.us);
    DLT_CK(pthread_create(&th, NULL, help_main, &h), 0);
    if (h.us > 0) usleep(h.us);
    if (fork_and_compare() != 0) return 1;
    DLT_CK(pthread_join(th, NULL), 0);
    /* The configuration loaded first, the help takes the DRBG's part or
     * nothing, never the configuration's. */
    DLT_CKT(h.part >= 0 && h.part <= (h.conf ? 1 : 2));
    if (h.conf) DLT_CKT(h.conf_part == 0 || h.conf_part == 2);
    dlock__random_settle();
    DLT_CK(dlock__random_ready(), 1);
    DLT_CK(dlock__random_help(), 0); /* nothing left */
    DLT_CK(threads_become(1, 1000), 1);
    return 0;
}

static void test_fork_while_a_caller_helps(void) {
    static const unsigned delays[] = { 0, 0, 0, 100, 300, 600, 1000 };
    size_t i;
    int conf;
    for (conf = 0; conf <= 1; conf++)
        for (i = 0; i < sizeof delays / sizeof delays[0]; i++) {
            struct help_case h = { .us = delays[i], .conf = conf };
            DLT_ASSERT_INT_EQ(dlt_wait(dlt_spawn(fork_during_help, &h), 30000), 0);
        }
}

/* A first token's caller loads the configuration at once, whether or not
 * the set-up thread has begun (it returns when it is loaded); after it,
 * nothing of it is left, and the help that follows takes the DRBG's part
 * (if the thread has not begun it) or nothing; the source is then ready
 * to draw, and the thread ends. */
static int conf_first(void *arg) {
    unsigned char b[RAW];
    int conf, part;
    (void)arg;
    DLT_CK(dlock__random_ready(), 0);
    dlock__random_prepare();
    conf = dlock__random_help_conf();
    DLT_CKT(conf == 2 || dlock__random_ready()); /* (0: the thread had set up already) */
    DLT_CK(dlock__random_help_conf(), 0);        /* loaded */
    part = dlock__random_help();
    DLT_CKT(part == 0 || part == 1);
    if (part == 1) DLT_CK(dlock__random_ready(), 1);
    DLT_CK(dlock__random(b, RAW), 0);
    DLT_CK(dlock__random_ready(), 1);
    DLT_CK(dlock__random_help_conf(), 0); /* set up: nothing to help with */
    dlock__random_settle();
    DLT_CK(threads_become(1, 1000), 1);
    return 0;
}

static void test_a_caller_loads_the_configuration_first(void) {
    int i;
    for (i = 0; i < 4; i++) DLT_ASSERT_INT_EQ(dlt_wait(dlt_spawn(conf_first, NULL), 30000), 0);
}

/* The help's DRBG part, when the set-up thread has not begun: done on the
 * helping thread, which then draws at once; the set-up thread, when it
 * begins, loads the configuration (or finds it loaded) and ends. */
static int help_takes_the_drbg(void *arg) {
    unsigned char b[RAW];
    (void)arg;
    DLT_CK(dlock__random_ready(), 0);
    dlock__random_prepare();
    /* The set-up thread has just been made; this call comes first unless
     * it already runs, which a wait of about a thread's start would show. */
    int part = dlock__random_help();
    DLT_CKT(part == 1 || part == 2);
    if (part == 1) DLT_CK(dlock__random_ready(), 1);
    DLT_CK(dlock__random(b, RAW), 0);
    DLT_CK(dlock__random_ready(), 1);
    dlock__random_settle();
    DLT_CK(threads_become(1, 1000), 1);
    return 0;
}

static void test_a_caller_helps_the_setup(void) {
    int i;
    for (i = 0; i < 4; i++) DLT_ASSERT_INT_EQ(dlt_wait(dlt_spawn(help_takes_the_drbg, NULL), 30000), 0);
}

/* With two CPUs or more allowed, the set-up thread is bound to one other
 * than the one its starter ran on; with one allowed it is not bound, and
 * the set-up still ends. */
static int setup_beside(void *arg) {
    unsigned char b[RAW];
    cpu_set_t allowed;
    int one = arg != NULL, starter = -2, cpu;
    DLT_CK(dlock__random_ready(), 0);
    DLT_CK(sched_getaffinity(0, sizeof allowed, &allowed), 0);
    if (one) {
        int first = 0;
        while (!CPU_ISSET(first, &allowed)) first++;
        CPU_ZERO(&allowed);
        CPU_SET(first, &allowed);
        DLT_CK(sched_setaffinity(0, sizeof allowed, &allowed), 0);
    }
    dlock__random_prepare();
    cpu = dlock__random_thread_cpu(&starter);
    DLT_CKT(starter >= 0);
    if (CPU_COUNT(&allowed) < 2) {
        DLT_CK(cpu, -1);
    } else {
        DLT_CKT(cpu >= 0 && cpu != starter && CPU_ISSET(cpu, &allowed));
    }
    DLT_CK(dlock__random(b, RAW), 0);
    dlock__random_settle();
    DLT_CK(threads_become(1, 1000), 1);
    return 0;
}

static void test_setup_thread_beside_its_starter(void) {
    DLT_ASSERT_INT_EQ(dlt_wait(dlt_spawn(setup_beside, NULL), 30000), 0);
    DLT_ASSERT_INT_EQ(dlt_wait(dlt_spawn(setup_beside, "one"), 30000), 0);
}

/* The renewal thread started ahead of a first hold, as a first token's
 * wait starts it (dlock__renew_ahead), renews that hold in time: one of
 * the default lease (due a third of a lease after its acquire, after the
 * thread's first tick: it does not wake the thread) and one of a short
 * lease (due before that tick: it wakes the thread).  The short lease,
 * SHORT_MS, ends before that first tick (a sixth of the default lease),
 * so a hold the thread was not woken for is lost; and it leaves each
 * renewal two thirds of itself (some 790 ms) before it runs out: the test
 * assumes that the renewal thread and the server get the CPU within that
 * time, which a loaded 2-core machine gives (not within a 300 ms lease's
 * 195 ms, now and then). */
#define SHORT_MS 1200u
_Static_assert(SHORT_MS < DLOCK_LEASE_DEFAULT_MS / 6, "the short hold must end before the thread's first tick");
static int renewed_by_a_thread_started_ahead(void *arg) {
    struct dlock_client *c;
    dlock_mutexattr_t a;
    dlock_mutex_t dflt, shrt;
    int err = 0, running;
    (void)arg;
    DLT_CKT((c = dlock_client_default(&err)) != NULL);
    dlock__renew_ahead(c);
    pthread_mutex_lock(&c->mu);
    running = c->renew_running && c->held == NULL;
    pthread_mutex_unlock(&c->mu);
    DLT_CK(running, 1);
    DLT_CK(dlock_mutexattr_init(&a), 0);
    DLT_CK(dlock_mutexattr_setlease(&a, SHORT_MS), 0);
    DLT_CK(dlock_mutex_init(&shrt, "token/ahead/short", &a), 0);
    DLT_CK(dlock_mutex_init(&dflt, "token/ahead/default", NULL), 0);
    DLT_CK(dlock_mutex_lock(&dflt), 0);
    DLT_CK(dlock_mutex_lock(&shrt), 0);
    dlt_sleep_ms(DLOCK_LEASE_DEFAULT_MS / 3 + 400);
    DLT_CK(dlock_mutex_holds(&shrt), 1);
    DLT_CK(dlock_mutex_holds(&dflt), 1);
    DLT_CKT(dlt_key_pttl("token/ahead/short") > 0);
    /* Not renewed, it would have less than two thirds of a lease left. */
    DLT_CKT(dlt_key_pttl("token/ahead/default") > (long long)DLOCK_LEASE_DEFAULT_MS * 3 / 4);
    DLT_CK(dlock_mutex_unlock(&shrt), 0);
    DLT_CK(dlock_mutex_unlock(&dflt), 0);
    DLT_CK(dlock_mutex_destroy(&shrt), 0);
    DLT_CK(dlock_mutex_destroy(&dflt), 0);
    DLT_CK(dlock_mutexattr_destroy(&a), 0);
    exit(0);
}

static void test_renewal_thread_started_ahead_renews(void) {
    DLT_ASSERT_INT_EQ(dlt_wait(dlt_spawn(renewed_by_a_thread_started_ahead, NULL), 30000), 0);
}

/* A client made and destroyed, no lock taken: the set-up thread it
 * started is gone with it. */
static int client_leaves_no_thread(void *arg) {
    dlock_client_t *c;
    (void)arg;
    DLT_CK(dlock__random_ready(), 0);
    DLT_CK(threads_now(), 1);
    DLT_CK(dlock_client_create(&c, NULL), 0);
    DLT_CK(dlock__random_thread_live(), 1);
    DLT_CK(dlock_client_destroy(c), 0);
    DLT_CK(dlock__random_thread_live(), 0); /* joined */
    DLT_CK(dlock__random_ready(), 1);       /* (it did set up before it went) */
    DLT_CK(threads_become(1, 1000), 1);
    return 0;
}

static void test_client_destroy_leaves_no_thread(void) {
    DLT_ASSERT_INT_EQ(dlt_wait(dlt_spawn(client_leaves_no_thread, NULL), 30000), 0);
}

/* exit() at once after making a client: the exit handlers run while the
 * set-up thread may still be inside OpenSSL (OpenSSL's own handler frees
 * its state): no crash, and under ASan no leak (LeakSanitizer runs at
 * exit and makes the status nonzero). */
static int exit_while_setting_up(void *arg) {
    dlock_client_t *c;
    (void)arg;
    DLT_CK(dlock__random_ready(), 0);
    DLT_CK(dlock_client_create(&c, NULL), 0);
    exit(0);
}

/* The same in a process that never used OpenSSL before (this program run
 * again: EXIT_EARLY), where it is dlock that initialises OpenSSL, and so
 * orders its exit handler against OpenSSL's. */
#define EXIT_EARLY "--exit-while-setting-up"

static void test_exit_while_the_setup_runs(void) {
    int i, st;
    pid_t pid;
    for (i = 0; i < 4; i++) DLT_ASSERT_INT_EQ(dlt_wait(dlt_spawn(exit_while_setting_up, NULL), 30000), 0);
    for (i = 0; i < 60; i++) {
        fflush(NULL);
        if ((pid = fork()) == 0) {
            execl("/proc/self/exe", "test_token", EXIT_EARLY, (char *)NULL);
            _exit(127);
        }
        CU_ASSERT_FATAL(pid > 0);
        st = dlt_wait_raw(pid, 30000);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            fprintf(stderr, "run %d: status 0x%x (signal %d)\n", i, st, WIFSIGNALED(st) ? WTERMSIG(st) : 0);
        CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
}

/* exit() while another thread helps the set-up (in either part, or
 * done; with the configuration first or not): the exit handlers wait for
 * that part before OpenSSL's frees its state; no crash and, under ASan,
 * no leak.  EXIT_HELPING runs it in a process that never used OpenSSL
 * before (this program run again; "conf": the configuration first). */
#define EXIT_HELPING "--exit-while-helping"

static void *help_then_stay(void *arg) {
    if (arg != NULL) (void)dlock__random_help_conf();
    (void)dlock__random_help();
    for (;;) pause();
    return NULL;
}

static int exit_while_helping(unsigned us, int conf) {
    static int yes;
    pthread_t th;
    dlock__random_prepare();
    if (pthread_create(&th, NULL, help_then_stay, conf ? &yes : NULL) != 0) return 3;
    if (us > 0) usleep(us);
    exit(0);
}

static void test_exit_while_a_caller_helps(void) {
    static const char *const delays[] = { "0", "0", "150", "300", "600" };
    int i, st;
    pid_t pid;
    for (i = 0; i < 20; i++) {
        fflush(NULL);
        if ((pid = fork()) == 0) {
            execl("/proc/self/exe", "test_token", EXIT_HELPING, delays[i % 5], i % 2 ? "conf" : "-", (char *)NULL);
            _exit(127);
        }
        CU_ASSERT_FATAL(pid > 0);
        st = dlt_wait_raw(pid, 30000);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            fprintf(stderr, "run %d: status 0x%x (signal %d)\n", i, st, WIFSIGNALED(st) ? WTERMSIG(st) : 0);
        CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
}

/* A fresh process's first lock waits for the set-up it started (or does
 * it): it is held, with a token, and released. */
static int first_lock(void *arg) {
    dlock_mutex_t m;
    (void)arg;
    DLT_CK(dlock__random_ready(), 0);
    DLT_CK(dlock_mutex_init(&m, "token/first", NULL), 0);
    DLT_CK(dlock_mutex_lock(&m), 0);
    DLT_CK(dlock_mutex_holds(&m), 1);
    DLT_CKT(dlock_mutex_fence(&m) > 0);
    DLT_CK(dlt_key_exists("token/first"), 1);
    DLT_CK(dlock_mutex_unlock(&m), 0);
    DLT_CK(dlt_key_exists("token/first"), 0);
    DLT_CK(dlock_mutex_destroy(&m), 0);
    exit(0);
}

static void test_first_lock_of_a_fresh_process(void) {
    DLT_ASSERT_INT_EQ(dlt_wait(dlt_spawn(first_lock, NULL), 30000), 0);
}

/* ---------------------------------------------------------- set up here */

/* Threads of one process: NTHREADS distinct 128-bit tokens. */
static void *self_token(void *arg) {
    int err = 0;
    dlock__thread *t = dlock__self(&err);
    if (t != NULL) memcpy(arg, t->token, DLOCK__TOKEN_HEX + 1);
    return NULL;
}

static void test_every_thread_its_own_token(void) {
    char tok[NTHREADS][DLOCK__TOKEN_HEX + 1];
    pthread_t th[NTHREADS];
    int i, j;
    memset(tok, 0, sizeof tok);
    for (i = 0; i < NTHREADS; i++) CU_ASSERT_FATAL(pthread_create(&th[i], NULL, self_token, tok[i]) == 0);
    for (i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
    for (i = 0; i < NTHREADS; i++) {
        DLT_ASSERT_INT_EQ(strlen(tok[i]), DLOCK__TOKEN_HEX);
        DLT_ASSERT_INT_EQ(strspn(tok[i], "0123456789abcdef"), DLOCK__TOKEN_HEX);
        for (j = 0; j < i; j++) CU_ASSERT(strcmp(tok[i], tok[j]) != 0);
    }
}

/* The tokens the server keeps: two threads, one lock each, both held at
 * once -- and a second hold of one thread's -- each under its own token
 * (the first word of the lock key's value). */
struct holder {
    dlock_mutex_t m;
    int locked, go, rc;
};

static void *hold_until_told(void *arg) {
    struct holder *h = arg;
    h->rc = dlock_mutex_lock(&h->m);
    dlt_flag_set(&h->locked, 1);
    dlt_flag_wait(&h->go, 1, 10000);
    if (h->rc == 0) dlock_mutex_unlock(&h->m);
    return NULL;
}

/* The token the server has for name's hold ("" if none). */
static void server_token(const char *name, char *out, size_t cap) {
    char key[600];
    redisReply *r;
    dlt_lock_key(name, key, sizeof key);
    out[0] = '\0';
    r = dlt_redis_cmd(&dlt_server, "HGET %s owner", key);
    if (r == NULL || r->type != REDIS_REPLY_STRING) {
        if (r != NULL) freeReplyObject(r);
        r = dlt_redis_cmd(&dlt_server, "GET %s", key);
    }
    if (r != NULL && r->type == REDIS_REPLY_STRING) snprintf(out, cap, "%.*s", (int)strcspn(r->str, " "), r->str);
    if (r != NULL) freeReplyObject(r);
}

static void test_every_hold_its_own_token_on_the_server(void) {
    struct holder h[2];
    pthread_t th[2];
    char t0[128], t1[128], again[128];
    int i;
    memset(h, 0, sizeof h);
    CU_ASSERT_FATAL(dlock_mutex_init(&h[0].m, "token/a", NULL) == 0);
    CU_ASSERT_FATAL(dlock_mutex_init(&h[1].m, "token/b", NULL) == 0);
    for (i = 0; i < 2; i++) CU_ASSERT_FATAL(pthread_create(&th[i], NULL, hold_until_told, &h[i]) == 0);
    for (i = 0; i < 2; i++) CU_ASSERT(dlt_flag_wait(&h[i].locked, 1, 10000));
    DLT_ASSERT_ERR(h[0].rc, 0);
    DLT_ASSERT_ERR(h[1].rc, 0);
    server_token("token/a", t0, sizeof t0);
    server_token("token/b", t1, sizeof t1);
    DLT_ASSERT_INT_EQ(strlen(t0), DLOCK__OWNER_LEN);
    DLT_ASSERT_INT_EQ(strlen(t1), DLOCK__OWNER_LEN);
    CU_ASSERT(strcmp(t0, t1) != 0);
    for (i = 0; i < 2; i++) dlt_flag_set(&h[i].go, 1);
    for (i = 0; i < 2; i++) pthread_join(th[i], NULL);
    /* The same mutex again, from this thread: yet another token. */
    DLT_ASSERT_ERR(dlock_mutex_lock(&h[0].m), 0);
    server_token("token/a", again, sizeof again);
    DLT_ASSERT_INT_EQ(strlen(again), DLOCK__OWNER_LEN);
    CU_ASSERT(strcmp(again, t0) != 0 && strcmp(again, t1) != 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&h[0].m), 0);
    for (i = 0; i < 2; i++) DLT_ASSERT_ERR(dlock_mutex_destroy(&h[i].m), 0);
}

/* Forks after the set-up: each child's draws and token are its own. */
static void test_fork_after_the_setup(void) {
    unsigned char b[RAW];
    int i;
    CU_ASSERT_FATAL(dlock__random(b, RAW) == 0);
    CU_ASSERT(dlock__random_ready());
    for (i = 0; i < 3; i++) DLT_ASSERT_INT_EQ(fork_and_compare(), 0);
}

static const struct dlt_test tests[] = {
    /* fresh processes (forked before this one draws) */
    DLT_TEST(test_fork_while_the_setup_runs),
    DLT_TEST(test_client_destroy_leaves_no_thread),
    DLT_TEST(test_exit_while_the_setup_runs),
    DLT_TEST(test_fork_while_a_caller_helps),
    DLT_TEST(test_exit_while_a_caller_helps),
    DLT_TEST(test_a_caller_helps_the_setup),
    DLT_TEST(test_a_caller_loads_the_configuration_first),
    DLT_TEST(test_setup_thread_beside_its_starter),
    DLT_TEST(test_first_lock_of_a_fresh_process),
    DLT_TEST(test_renewal_thread_started_ahead_renews),
    /* this process */
    DLT_TEST(test_every_thread_its_own_token),
    DLT_TEST(test_every_hold_its_own_token_on_the_server),
    DLT_TEST(test_fork_after_the_setup),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], EXIT_EARLY) == 0) { /* test_exit_while_the_setup_runs */
        dlock_client_t *c;
        if (dlock_client_create(&c, NULL) != 0) return 3;
        exit(0);
    }
    if (argc == 4 && strcmp(argv[1], EXIT_HELPING) == 0) /* test_exit_while_a_caller_helps */
        return exit_while_helping((unsigned)atoi(argv[2]), strcmp(argv[3], "conf") == 0);
    return dlt_main(argc, argv, "token", tests);
}
