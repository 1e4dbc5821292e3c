/* labels: preload redis; timeout: 400 */
/* test_failopen.c -- what an unreachable server costs:
 * a non-blocking call no wait, a timed call its own bound, a program the
 * unreachable wait at most once per back-off period (the circuit breaker),
 * in the library, the LD_PRELOAD mode (real flock(1), python3, sqlite3 and
 * tests/preload/dlpl_counter.c) and `dlock exec`.
 *
 * Every scenario runs against two kinds of dead server: "down", a stopped
 * redis-server (its port refuses connections), and "hole", the fault
 * proxy (proxy.h) in DROP mode in front of the suite's server (connections
 * are accepted, requests never answered).  The programs of a scenario run
 * against both at once (sh_both), each kind on files of its own: they
 * share nothing but the CPUs (the host-wide outage record is one per
 * server URL), and the scenario takes one run's time, not two.  The
 * unreachable bound is 4 s
 * (FO_BOUND_MS); before the fix every call waited it, so each bound below
 * fails on the old code by a wide margin.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fixture.h"
#include "proxy.h"

#define FLOCK "/usr/bin/flock"
#define PYTHON "/usr/bin/python3"
#define SQLITE "/usr/bin/sqlite3"
#define FO_BOUND_MS 4000
#define NS 1000000000LL

static char dir[256], real_dir[PATH_MAX];
static char prelude[3 * PATH_MAX + 1024];

/* The two dead servers: [0] down (refuses), [1] hole (never answers). */
typedef struct fo_dead {
    const char *what;
    char url[256];  /* with unreachable_ms=FO_BOUND_MS */
    char base[160]; /* the same without parameters */
} fo_dead;

static dlt_redis down_srv;
static dlt_proxy *hole;
static fo_dead dead[2];

static int fo_setup(void) {
    char cmd[1024];
    if (dir[0] == '\0') {
        snprintf(dir, sizeof dir, "%s/dlfo-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        if (mkdtemp(dir) == NULL || realpath(dir, real_dir) == NULL) return -1;
        snprintf(cmd, sizeof cmd, "mkdir -p '%s/locks'", dir);
        if (system(cmd) != 0) return -1;
        /* P runs a program under the preload; every file in locks/ is
         * mapped (by its path), and dlpl_counter's mutex too. */
        snprintf(prelude, sizeof prelude,
                 "cd '%s' || exit 99\n"
                 "P() { LD_PRELOAD='%s' DLOCK_MAP='file:%s/locks/*;mutex:counter_lock=fo/counter' \"$@\"; }\n"
                 "now() { date +%%s%%N; }\n",
                 real_dir, DLPL_SO, real_dir);
    }
    if (down_srv.port == 0) {
        if (dlt_redis_start(&down_srv, NULL) != 0) return -1;
    }
    if (down_srv.pid != 0 && dlt_redis_stop(&down_srv) != 0) return -1;
    if (hole == NULL && (hole = dlt_proxy_start(dlt_server.port)) == NULL) return -1;
    dlt_proxy_set(hole, DLT_PROXY_DROP, 0, NULL, 0);
    dlt_proxy_close_all(hole);
    dead[0].what = "down";
    snprintf(dead[0].base, sizeof dead[0].base, "redis://127.0.0.1:%d", down_srv.port);
    dead[1].what = "hole";
    snprintf(dead[1].base, sizeof dead[1].base, "%s", dlt_proxy_url(hole));
    for (int i = 0; i < 2; i++)
        snprintf(dead[i].url, sizeof dead[i].url, "%s?unreachable_ms=%d", dead[i].base, FO_BOUND_MS);
    return 0;
}

/* The dead server d comes back. */
static void fo_revive(int d) {
    if (d == 0) {
        CU_ASSERT_FATAL(dlt_redis_restart(&down_srv) == 0);
    } else {
        dlt_proxy_pass(hole);
    }
}

static void fo_cleanup(void) {
    char cmd[512];
    if (hole != NULL) dlt_proxy_stop(hole);
    hole = NULL;
    dlt_redis_cleanup(&down_srv);
    if (dir[0] == '\0') return;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    (void)!system(cmd);
}

/* Writes the prelude, DLOCK_URL=url, K=kind (the dead server's kind: the
 * scenario names its files after it) and script to a file of its own and
 * starts sh on it, its stderr joined to its stdout.  The stream, or NULL. */
static FILE *sh_start(const char *url, const char *kind, const char *script) {
    static int made;
    char path[512], *cmd;
    FILE *f, *p;
    snprintf(path, sizeof path, "%s/scenario-%d-%d.sh", dir, (int)getpid(), made++);
    if ((f = fopen(path, "w")) == NULL) return NULL;
    fprintf(f, "%sexport DLOCK_URL='%s'\nK='%s'\n%s\n", prelude, url, kind, script);
    fclose(f);
    if (asprintf(&cmd, "sh '%s' 2>&1", path) < 0) return NULL;
    p = popen(cmd, "r");
    free(cmd);
    return p;
}

/* Reads p to its end into out; sh's exit status. */
static int sh_end(FILE *p, char *out, size_t cap) {
    return dlt_pclose_read(p, out, cap);
}

static int sh(const char *url, const char *script, char *out, size_t cap) {
    FILE *p = sh_start(url, "down", script);
    if (p == NULL) return -1;
    return sh_end(p, out, cap);
}

/* The outputs of a scenario run against both dead servers. */
typedef struct fo_out {
    char text[2][8192];
    int rc[2];
} fo_out;

/* Runs script against both dead servers at once (dead[d].url, K set to
 * dead[d].what); o gets each run's output and sh's exit status (-1: not
 * started). */
static void sh_both(const char *script, fo_out *o) {
    FILE *p[2];
    for (int d = 0; d < 2; d++) p[d] = sh_start(dead[d].url, dead[d].what, script);
    for (int d = 0; d < 2; d++) {
        o->text[d][0] = '\0';
        o->rc[d] = p[d] != NULL ? sh_end(p[d], o->text[d], sizeof o->text[d]) : -1;
    }
}

/* The sanitizer build has no libdlock_preload.so (docs/preload.md): its
 * tests are skipped there, the library's and the CLI's run. */
#define NEED_PRELOAD()                                                        \
    do {                                                                      \
        if (DLPL_SO[0] == '\0') {                                             \
            printf("  (no libdlock_preload.so in this build: skipped)\n");    \
            return;                                                           \
        }                                                                     \
    } while (0)
#define LOCAL_ONLY "take the local lock only"

/* ------------------------------------------------------------ flock(1) */

/* flock -n costs no wait; flock -w 1 returns by its own bound (with the
 * local lock: open); closed refuses -n at once. */
static void test_flock_nb_and_w(void) {
    fo_out o;
    NEED_PRELOAD();
    CU_ASSERT_FATAL(fo_setup() == 0);
    sh_both("t0=$(now); P " FLOCK " -n locks/$K-f.lock echo RAN_NB; echo nb_rc $?; echo nb_ns $(( $(now) - t0 ))\n"
            "t0=$(now); P " FLOCK " -w 1 locks/$K-f.lock echo RAN_W; echo w_rc $?; echo w_ns $(( $(now) - t0 ))\n"
            "t0=$(now); DLOCK_ON_ERROR=closed P " FLOCK " -n locks/$K-f.lock echo RAN_CLOSED; echo cl_rc $?;"
            " echo cl_ns $(( $(now) - t0 ))\n",
            &o);
    for (int d = 0; d < 2; d++) {
        const char *out = o.text[d];
        int rc = o.rc[d];
        printf("  %s: flock -n %.2f s, -w 1 %.2f s, closed -n %.2f s\n", dead[d].what,
               (double)dlt_out_num(out, "nb_ns") / NS, (double)dlt_out_num(out, "w_ns") / NS,
               (double)dlt_out_num(out, "cl_ns") / NS);
        DLT_ASSERT_INT_EQ(rc, 0);
        DLT_ASSERT_INT_EQ(dlt_out_num(out, "nb_rc"), 0);
        CU_ASSERT(strstr(out, "RAN_NB") != NULL);
        /* one connection attempt (a refusal; a reply awaited 200 ms) */
        CU_ASSERT(dlt_out_num(out, "nb_ns") >= 0 && dlt_out_num(out, "nb_ns") < 2 * NS);
        /* fail-open: the local lock is free, so -w 1 runs the command, by
         * its bound (1 s + the keeper's 250 ms + margin) */
        DLT_ASSERT_INT_EQ(dlt_out_num(out, "w_rc"), 0);
        CU_ASSERT(strstr(out, "RAN_W") != NULL);
        CU_ASSERT(dlt_out_num(out, "w_ns") >= 0 && dlt_out_num(out, "w_ns") < 2500LL * 1000 * 1000);
        CU_ASSERT(dlt_out_num(out, "cl_rc") > 0 && dlt_out_num(out, "cl_rc") < 128);
        CU_ASSERT(strstr(out, "RAN_CLOSED") == NULL);
        CU_ASSERT(dlt_out_num(out, "cl_ns") >= 0 && dlt_out_num(out, "cl_ns") < 2 * NS);
        if (dlt_out_num(out, "nb_ns") >= 2 * NS || dlt_out_num(out, "w_ns") >= 2500LL * 1000 * 1000 ||
            dlt_out_num(out, "w_rc") != 0)
            dlt_out_show(out);
    }
}

/* flock -w 1 on a lock held locally (fail-open) times out by its bound. */
static void test_flock_w_local_conflict(void) {
    char out[8192];
    int rc;
    NEED_PRELOAD();
    CU_ASSERT_FATAL(fo_setup() == 0);
    rc = sh(dead[0].url,
            /* the holder pays the bound, then holds the local lock 3 s
             * from the moment the other flock starts: past the 2.5 s by
             * which that flock -w 1 must have given up */
            "rm -f locks/c.held\n"
            "P " FLOCK " locks/c.lock sh -c 'echo HOLDING; : > locks/c.held; sleep 3' &\n"
            "i=0; until [ -e locks/c.held ]; do i=$((i+1)); [ $i -lt 400 ] || exit 3; sleep 0.05; done\n"
            "t0=$(now); P " FLOCK " -w 1 locks/c.lock echo RAN_W; echo w_rc $?; echo w_ns $(( $(now) - t0 ))\n"
            "wait\n",
            out, sizeof out);
    DLT_ASSERT_INT_EQ(rc, 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "w_rc"), 1);
    CU_ASSERT(strstr(out, "RAN_W") == NULL);
    CU_ASSERT(dlt_out_num(out, "w_ns") >= 900LL * 1000 * 1000 && dlt_out_num(out, "w_ns") < 2500LL * 1000 * 1000);
    if (dlt_out_num(out, "w_rc") != 1) dlt_out_show(out);
}

/* --------------------------------------------------- python3, sqlite3 */

static const char py_loop[] = "P timeout 60 " PYTHON " -c 'import fcntl,sys\n"
                              "f=open(sys.argv[1],\"w\")\n"
                              "n=0\n"
                              "for i in range(20):\n"
                              "    fcntl.lockf(f,fcntl.LOCK_EX); fcntl.lockf(f,fcntl.LOCK_UN); n+=1\n"
                              "print(\"pairs\",n)' locks/$K-py.lock\n";

/* 20 lockf lock/unlock pairs pay the unreachable wait once, and say so
 * once. */
static void test_python_lockf_loop(void) {
    char script[2048];
    fo_out o;
    NEED_PRELOAD();
    CU_ASSERT_FATAL(fo_setup() == 0);
    snprintf(script, sizeof script, "t0=$(now)\n%secho py_rc $?; echo py_ns $(( $(now) - t0 ))\n", py_loop);
    sh_both(script, &o);
    for (int d = 0; d < 2; d++) {
        const char *out = o.text[d];
        int rc = o.rc[d];
        printf("  %s: 20 lockf pairs in %.2f s\n", dead[d].what, (double)dlt_out_num(out, "py_ns") / NS);
        DLT_ASSERT_INT_EQ(rc, 0);
        DLT_ASSERT_INT_EQ(dlt_out_num(out, "py_rc"), 0);
        DLT_ASSERT_INT_EQ(dlt_out_num(out, "pairs"), 20);
        /* one bound (4 s), not 20; well below two */
        CU_ASSERT(dlt_out_num(out, "py_ns") > 0 && dlt_out_num(out, "py_ns") < 7LL * NS);
        DLT_ASSERT_INT_EQ(dlt_out_count(out, LOCAL_ONLY), 1);
        DLT_ASSERT_INT_EQ(dlt_out_count(out, "dlock: "), 1);
        if (dlt_out_num(out, "py_ns") >= 7LL * NS || dlt_out_count(out, "dlock: ") != 1) dlt_out_show(out);
    }
}

/* DLOCK_ON_ERROR=closed: every lock fails (ENOLCK), and only the first
 * waits for the server. */
static void test_python_closed_fails_fast(void) {
    fo_out o;
    NEED_PRELOAD();
    CU_ASSERT_FATAL(fo_setup() == 0);
    sh_both("t0=$(now)\n"
            "DLOCK_ON_ERROR=closed P timeout 60 " PYTHON " -c 'import fcntl,sys,errno\n"
            "f=open(sys.argv[1],\"w\")\n"
            "bad=0\n"
            "for i in range(10):\n"
            "    try:\n"
            "        fcntl.lockf(f,fcntl.LOCK_EX)\n"
            "    except OSError as e:\n"
            "        bad+=e.errno==errno.ENOLCK\n"
            "print(\"enolck\",bad)' locks/$K-cl.lock\n"
            "echo py_rc $?; echo py_ns $(( $(now) - t0 ))\n",
            &o);
    for (int d = 0; d < 2; d++) {
        const char *out = o.text[d];
        int rc = o.rc[d];
        printf("  %s: 10 refused lockf in %.2f s\n", dead[d].what, (double)dlt_out_num(out, "py_ns") / NS);
        DLT_ASSERT_INT_EQ(rc, 0);
        DLT_ASSERT_INT_EQ(dlt_out_num(out, "enolck"), 10);
        CU_ASSERT(dlt_out_num(out, "py_ns") > 0 && dlt_out_num(out, "py_ns") < 7LL * NS);
        DLT_ASSERT_INT_EQ(dlt_out_count(out, "DLOCK_ON_ERROR=closed"), 1);
        if (dlt_out_num(out, "py_ns") >= 7LL * NS) dlt_out_show(out);
    }
}

/* One INSERT into a mapped database (40 s before: 8 lock calls). */
static void test_sqlite_insert(void) {
    fo_out o;
    NEED_PRELOAD();
    CU_ASSERT_FATAL(fo_setup() == 0);
    sh_both("rm -f locks/$K-t.db; " SQLITE " locks/$K-t.db 'create table t(x)' || exit 3\n"
            "t0=$(now); P timeout 60 " SQLITE " locks/$K-t.db 'insert into t values(42)'; echo sq_rc $?;"
            " echo sq_ns $(( $(now) - t0 ))\n"
            "echo rows $(" SQLITE " locks/$K-t.db 'select count(*) from t where x=42')\n",
            &o);
    for (int d = 0; d < 2; d++) {
        const char *out = o.text[d];
        int rc = o.rc[d];
        printf("  %s: sqlite3 INSERT in %.2f s\n", dead[d].what, (double)dlt_out_num(out, "sq_ns") / NS);
        DLT_ASSERT_INT_EQ(rc, 0);
        DLT_ASSERT_INT_EQ(dlt_out_num(out, "sq_rc"), 0);
        DLT_ASSERT_INT_EQ(dlt_out_num(out, "rows"), 1);
        CU_ASSERT(dlt_out_num(out, "sq_ns") > 0 && dlt_out_num(out, "sq_ns") < 7LL * NS);
        DLT_ASSERT_INT_EQ(dlt_out_count(out, LOCAL_ONLY), 1);
        if (dlt_out_num(out, "sq_ns") >= 7LL * NS || dlt_out_num(out, "sq_rc") != 0) dlt_out_show(out);
    }
}

/* ------------------------------------------------------- mapped mutex */

static void test_mapped_mutex_pays_once(void) {
    fo_out o;
    NEED_PRELOAD();
    CU_ASSERT_FATAL(fo_setup() == 0);
    sh_both("rm -f locks/$K-counter\n"
            "t0=$(now); P timeout 60 " DLPL_COUNTER " locks/$K-counter 30; echo ctr_rc $?;"
            " echo ctr_ns $(( $(now) - t0 )); echo value $(cat locks/$K-counter)\n",
            &o);
    for (int d = 0; d < 2; d++) {
        const char *out = o.text[d];
        int rc = o.rc[d];
        printf("  %s: 30 mapped mutex locks in %.2f s\n", dead[d].what, (double)dlt_out_num(out, "ctr_ns") / NS);
        DLT_ASSERT_INT_EQ(rc, 0);
        DLT_ASSERT_INT_EQ(dlt_out_num(out, "ctr_rc"), 0);
        DLT_ASSERT_INT_EQ(dlt_out_num(out, "value"), 30);
        CU_ASSERT(dlt_out_num(out, "ctr_ns") > 0 && dlt_out_num(out, "ctr_ns") < 7LL * NS);
        DLT_ASSERT_INT_EQ(dlt_out_count(out, LOCAL_ONLY), 1);
        if (dlt_out_num(out, "ctr_ns") >= 7LL * NS) dlt_out_show(out);
    }
}

/* pthread_mutex_timedlock on a mapped mutex (tests/preload/dlpl_handoff.c
 * "try": a deadline of 1 s, shorter than the bound) keeps its own bound;
 * then fail-open takes the free local mutex (0), as flock -w takes the
 * free local lock, and says so once; closed gives ETIMEDOUT.  Before, open
 * gave ETIMEDOUT too: a free mutex never taken while the server is away. */
static void test_mapped_mutex_timedlock(void) {
    fo_out o;
    NEED_PRELOAD();
    CU_ASSERT_FATAL(fo_setup() == 0);
    sh_both("H() { LD_PRELOAD='" DLPL_SO "' DLOCK_MAP='mutex:handoff_lock=fo/handoff' timeout 60 '" DLPL_HANDOFF
            "' try 1000; }\n"
            "t0=$(now); H; echo open_ns $(( $(now) - t0 ))\n"
            "DLOCK_ON_ERROR=closed H | sed 's/^try_/closed_/'\n",
            &o);
    for (int d = 0; d < 2; d++) {
        const char *out = o.text[d];
        int rc = o.rc[d];
        printf("  %s: a 1 s timedlock of a mapped mutex in %.2f s\n", dead[d].what,
               (double)dlt_out_num(out, "open_ns") / NS);
        DLT_ASSERT_INT_EQ(rc, 0);
        DLT_ASSERT_ERR(dlt_out_num(out, "try_lock"), 0);
        DLT_ASSERT_INT_EQ(dlt_out_num(out, "try_unlock"), 0);
        CU_ASSERT(dlt_out_num(out, "open_ns") >= NS - NS / 10 && dlt_out_num(out, "open_ns") < 3LL * NS);
        DLT_ASSERT_INT_EQ(dlt_out_count(out, LOCAL_ONLY), 1);
        DLT_ASSERT_ERR(dlt_out_num(out, "closed_lock"), ETIMEDOUT);
        if (dlt_out_num(out, "try_lock") != 0 || dlt_out_num(out, "closed_lock") != ETIMEDOUT) dlt_out_show(out);
    }
}

/* ------------------------------------------------- the server comes back */

/* A program that locks in a loop pays the bound once while the server is
 * dead, runs on local-only, and notices the server's return within a few
 * seconds: its locks are cluster-wide again (its record-lock range table
 * is on the server). */
static void test_server_return_noticed(void) {
    char out[8192], key[2][PATH_MAX + 64];
    double t_back, seen[2] = { -1, -1 };
    FILE *p[2];
    int d;
    NEED_PRELOAD();
    CU_ASSERT_FATAL(fo_setup() == 0);
    for (d = 0; d < 2; d++) {
        snprintf(key[d], sizeof key[d], "dlock:{%s/locks/%s-back.lock#fcntl}:rl", real_dir, dead[d].what);
        p[d] = sh_start(dead[d].url, dead[d].what,
                        "P timeout 60 " PYTHON " -c 'import fcntl,sys,time\n"
                        "f=open(sys.argv[1],\"w\")\n"
                        "t0=time.time(); n=0; early=-1\n"
                        "while time.time()-t0<16:\n"
                        "    fcntl.lockf(f,fcntl.LOCK_EX); n+=1; time.sleep(0.3)\n"
                        "    fcntl.lockf(f,fcntl.LOCK_UN); time.sleep(0.05)\n"
                        "    if early<0 and time.time()-t0>=7: early=n\n"
                        "print(\"early\",early); print(\"locks\",n)' locks/$K-back.lock\n"
                        "echo py_rc $?\n");
        CU_ASSERT_FATAL(p[d] != NULL);
    }
    dlt_sleep_ms(8000);
    fo_revive(0);
    fo_revive(1);
    t_back = dlt_now();
    while (dlt_now() - t_back < 6.0 && (seen[0] < 0 || seen[1] < 0)) {
        for (d = 0; d < 2; d++) {
            redisReply *r = seen[d] < 0 ? dlt_redis_cmd(d == 0 ? &down_srv : &dlt_server, "EXISTS %s", key[d]) : NULL;
            if (r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer == 1) seen[d] = dlt_now() - t_back;
            if (r) freeReplyObject(r);
        }
        dlt_sleep_ms(20);
    }
    for (d = 0; d < 2; d++) {
        int rc = sh_end(p[d], out, sizeof out);
        printf("  %s: %lld locks in the first 7 s; cluster-wide again %.2f s after the server came back\n",
               dead[d].what, dlt_out_num(out, "early"), seen[d]);
        DLT_ASSERT_INT_EQ(rc, 0);
        DLT_ASSERT_INT_EQ(dlt_out_num(out, "py_rc"), 0);
        /* one bound (4 s) paid, then ~0.35 s a lock: not one lock per bound */
        CU_ASSERT(dlt_out_num(out, "early") >= 4);
        CU_ASSERT(seen[d] >= 0 && seen[d] < 4.0);
        DLT_ASSERT_INT_EQ(dlt_out_count(out, LOCAL_ONLY), 1);
        DLT_ASSERT_INT_EQ(dlt_out_count(out, "cluster-wide again"), 1);
        if (seen[d] < 0 || dlt_out_num(out, "early") < 4) dlt_out_show(out);
    }
    CU_ASSERT(dlt_redis_stop(&down_srv) == 0);
}

/* A lock taken while the server answered, released after the server died
 * and after another lock opened the breaker: the release makes one
 * attempt (the lease runs out on the server), not a whole bound. */
static void test_unlock_after_outage(void) {
    char out[2][8192], line[512], flag[2][PATH_MAX + 32];
    size_t n[2] = { 0, 0 };
    FILE *p[2];
    int d;
    NEED_PRELOAD();
    CU_ASSERT_FATAL(fo_setup() == 0);
    fo_revive(0);
    fo_revive(1);
    for (d = 0; d < 2; d++) {
        int locked = 0;
        snprintf(flag[d], sizeof flag[d], "%s/locks/%s-dead.flag", real_dir, dead[d].what);
        unlink(flag[d]);
        p[d] = sh_start(dead[d].url, dead[d].what,
                        "P timeout 60 " PYTHON " -c 'import fcntl,sys,time,os\n"
                        "f=open(sys.argv[1],\"w\"); g=open(sys.argv[2],\"w\")\n"
                        "fcntl.lockf(f,fcntl.LOCK_EX)\n"
                        "print(\"locked\",1,flush=True)\n"
                        "while not os.path.exists(sys.argv[3]): time.sleep(0.02)\n"
                        "t=time.time(); fcntl.lockf(g,fcntl.LOCK_EX)\n"
                        "print(\"second_ms\",int((time.time()-t)*1000))\n"
                        "t=time.time(); fcntl.lockf(f,fcntl.LOCK_UN)\n"
                        "print(\"unlock_ms\",int((time.time()-t)*1000))'"
                        " locks/$K-u1.lock locks/$K-u2.lock locks/$K-dead.flag\n"
                        "echo py_rc $?\n");
        CU_ASSERT_FATAL(p[d] != NULL);
        /* "locked": the first lock is held cluster-wide */
        while (fgets(line, sizeof line, p[d]) != NULL) {
            n[d] += (size_t)snprintf(out[d] + n[d], sizeof out[d] - n[d], "%s", line);
            if (strncmp(line, "locked", 6) == 0) {
                locked = 1;
                break;
            }
        }
        CU_ASSERT(locked);
    }
    CU_ASSERT(dlt_redis_stop(&down_srv) == 0);
    dlt_proxy_set(hole, DLT_PROXY_DROP, 0, NULL, 0);
    dlt_proxy_close_all(hole);
    for (d = 0; d < 2; d++) {
        FILE *f = fopen(flag[d], "w");
        CU_ASSERT(f != NULL);
        if (f) fclose(f);
    }
    for (d = 0; d < 2; d++) {
        const char *o = out[d];
        int rc = sh_end(p[d], out[d] + n[d], sizeof out[d] - n[d]);
        printf("  %s: unlock after the outage: %lld ms\n", dead[d].what, dlt_out_num(o, "unlock_ms"));
        DLT_ASSERT_INT_EQ(rc, 0);
        DLT_ASSERT_INT_EQ(dlt_out_num(o, "py_rc"), 0);
        CU_ASSERT(dlt_out_num(o, "unlock_ms") >= 0 && dlt_out_num(o, "unlock_ms") < 1500);
        if (dlt_out_num(o, "unlock_ms") < 0 || dlt_out_num(o, "unlock_ms") >= 1500) dlt_out_show(o);
    }
}

/* ------------------------------------------------------------ library */

/* The library's tests run on both dead servers at once, one thread each
 * (a worker: DLT_CK checks, no CUnit).  What a thread and the test share:
 * the dead server's index and, for the breaker, the server's return,
 * which the test makes once the thread has paid the bound. */
typedef struct fo_lib {
    int d;
    int paid;    /* the thread: the bound paid, the open breaker seen */
    int revived; /* the test: the server is back, since `back` */
    double back;
} fo_lib;

static dlock_client_t *fo_client(const char *base, unsigned breaker_ms) {
    dlock_config_t cfg;
    dlock_client_t *c = NULL;
    dlock_config_init(&cfg);
    cfg.url = base;
    cfg.unreachable_ms = FO_BOUND_MS;
    cfg.breaker_ms = breaker_ms;
    if (dlock_client_create(&c, &cfg) != 0) fprintf(stderr, "  client_create: %s\n", dlock_last_error());
    return c;
}

/* Starts fn on a thread per dead server, then, for a test whose threads
 * wait for the server's return (revive), revives each server once its
 * thread has paid the bound; asserts that both threads returned 0. */
static void fo_lib_run(int (*fn)(void *), int revive) {
    fo_lib l[2];
    dlt_task t[2];
    int d;
    memset(l, 0, sizeof l);
    for (d = 0; d < 2; d++) {
        l[d].d = d;
        if (dlt_task_start(&t[d], DLT_THREAD, fn, &l[d]) != 0) l[d].d = -1;
    }
    for (d = 0; d < 2 && revive; d++) {
        if (l[d].d < 0) continue;
        (void)dlt_flag_wait(&l[d].paid, 1, 25000);
        /* not fatal: the thread waits for `revived` */
        if (d == 0) {
            CU_ASSERT(dlt_redis_restart(&down_srv) == 0);
        } else {
            dlt_proxy_pass(hole);
        }
        l[d].back = dlt_now();
        dlt_flag_set(&l[d].revived, 1);
    }
    for (d = 0; d < 2; d++)
        if (l[d].d >= 0) DLT_ASSERT_INT_EQ(dlt_task_join(&t[d], DLT_JOIN_MS), 0);
}

/* trylock, tryrdlock, trywrlock and a timed call whose deadline has
 * passed make one attempt; a timed call returns by its deadline. */
static int lib_try_run(void *arg) {
    const fo_lib *l = arg;
    const fo_dead *dd = &dead[l->d];
    dlock_client_t *c = fo_client(dd->base, 0);
    dlock_mutexattr_t a;
    dlock_mutex_t m;
    dlock_rwlock_t rw;
    struct timespec ts;
    double t0, took;
    int rc;
    DLT_CKT(c != NULL);
    dlock_mutexattr_init(&a);
    dlock_mutexattr_setclient(&a, c);
    DLT_CK(dlock_mutex_init(&m, "fo/lib", &a), 0);
    DLT_CK(dlock_rwlock_init(&rw, "fo/librw", &a), 0);

    t0 = dlt_now();
    DLT_CK(dlock_mutex_trylock(&m), ENOLCK);
    took = dlt_now() - t0;
    printf("  %s: trylock ENOLCK after %.3f s: %s\n", dd->what, took, dlock_last_error());
    DLT_CKT(took < 1.5);
    t0 = dlt_now();
    DLT_CK(dlock_rwlock_tryrdlock(&rw), ENOLCK);
    DLT_CK(dlock_rwlock_trywrlock(&rw), ENOLCK);
    DLT_CK(dlock_rwlock_xlock(&rw, 0, DLOCK_F_TRY, CLOCK_MONOTONIC, NULL), ENOLCK);
    took = dlt_now() - t0;
    DLT_CKT(took < 3 * 1.5);
    /* a deadline already past: one attempt */
    ts = dlt_abs_in(CLOCK_REALTIME, -1000);
    t0 = dlt_now();
    rc = dlock_mutex_timedlock(&m, &ts);
    took = dlt_now() - t0;
    DLT_CKT(rc == ENOLCK || rc == ETIMEDOUT);
    DLT_CKT(took < 1.5);
    /* the caller's deadline (1 s) wins over the bound (4 s) */
    ts = dlt_abs_in(CLOCK_MONOTONIC, 1000);
    t0 = dlt_now();
    rc = dlock_mutex_clocklock(&m, CLOCK_MONOTONIC, &ts);
    took = dlt_now() - t0;
    printf("  %s: clocklock(+1 s) %s after %.3f s\n", dd->what, dlt_errno_name(rc), took);
    DLT_CKT(rc == ETIMEDOUT || rc == ENOLCK);
    DLT_CKT(took >= 0.9 && took < 2.0);
    ts = dlt_abs_in(CLOCK_MONOTONIC, 1000);
    t0 = dlt_now();
    rc = dlock_rwlock_xlock(&rw, 1, DLOCK_F_TRY, CLOCK_MONOTONIC, &ts);
    took = dlt_now() - t0;
    DLT_CKT(rc == ETIMEDOUT || rc == ENOLCK);
    DLT_CKT(took < 2.0);
    DLT_CK(dlock_mutex_holds(&m), 0);
    DLT_CK(dlock_rwlock_destroy(&rw), 0);
    DLT_CK(dlock_mutex_destroy(&m), 0);
    DLT_CK(dlock_client_destroy(c), 0);
    return 0;
}

static void test_library_try_no_wait(void) {
    CU_ASSERT_FATAL(fo_setup() == 0);
    fo_lib_run(lib_try_run, 0);
}

/* breaker_ms: a lock pays the bound once; the next calls fail at once;
 * the server's return is noticed within about a second of a call. */
static int lib_breaker_run(void *arg) {
    fo_lib *l = arg;
    const fo_dead *dd = &dead[l->d];
    dlock_client_t *c = fo_client(dd->base, 60000);
    dlock_mutexattr_t a;
    dlock_mutex_t m;
    dlock_lock_info_t info;
    double t0, took;
    int rc, i;
    DLT_CKT(c != NULL);
    dlock_mutexattr_init(&a);
    dlock_mutexattr_setclient(&a, c);
    DLT_CK(dlock_mutex_init(&m, "fo/breaker", &a), 0);
    t0 = dlt_now();
    DLT_CK(dlock_mutex_lock(&m), ENOLCK);
    took = dlt_now() - t0;
    DLT_CKT(took >= FO_BOUND_MS / 1000.0 - 0.5);
    t0 = dlt_now();
    for (i = 0; i < 10; i++) DLT_CK(dlock_mutex_lock(&m), ENOLCK);
    took = dlt_now() - t0;
    printf("  %s: 10 locks with the breaker open: %.3f s: %s\n", dd->what, took, dlock_last_error());
    DLT_CKT(took < 2.5); /* at most two probes of one attempt */
    t0 = dlt_now();
    DLT_CK(dlock_lock_info(c, "fo/breaker", &info), ENOLCK);
    DLT_CKT(dlt_now() - t0 < 1.5);
    dlt_flag_set(&l->paid, 1);
    DLT_CKT(dlt_flag_wait(&l->revived, 1, 60000));
    do {
        rc = dlock_mutex_lock(&m);
        if (rc != 0) dlt_sleep_ms(50);
    } while (rc != 0 && dlt_now() - l->back < 8.0);
    took = dlt_now() - l->back;
    printf("  %s: locked %.2f s after the server came back\n", dd->what, took);
    DLT_CK(rc, 0);
    DLT_CKT(took < 3.0);
    DLT_CKT(dlt_key_exists("fo/breaker") == 1 || l->d == 0);
    DLT_CK(dlock_mutex_unlock(&m), 0);
    DLT_CK(dlock_mutex_destroy(&m), 0);
    DLT_CK(dlock_client_destroy(c), 0);
    return 0;
}

/* The breaker on both dead servers; then the default (off) keeps waiting
 * the bound on every lock, and the URL parameter turns it on. */
static void test_library_breaker(void) {
    CU_ASSERT_FATAL(fo_setup() == 0);
    fo_lib_run(lib_breaker_run, 1);
    CU_ASSERT(dlt_redis_stop(&down_srv) == 0);
    /* off (the default): every lock waits the bound, as before */
    {
        char url[300];
        dlock_client_t *c;
        dlock_mutexattr_t a;
        dlock_mutex_t m;
        double t0;
        CU_ASSERT_FATAL(fo_setup() == 0);
        snprintf(url, sizeof url, "%s?unreachable_ms=1000", dead[0].base);
        CU_ASSERT_FATAL(dlt_client_make(&c, url, 0) == 0);
        dlock_mutexattr_init(&a);
        dlock_mutexattr_setclient(&a, c);
        DLT_ASSERT_ERR(dlock_mutex_init(&m, "fo/nobreaker", &a), 0);
        DLT_ASSERT_ERR(dlock_mutex_lock(&m), ENOLCK);
        t0 = dlt_now();
        DLT_ASSERT_ERR(dlock_mutex_lock(&m), ENOLCK);
        CU_ASSERT(dlt_now() - t0 >= 0.8);
        DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
        DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    }
    /* the URL parameter */
    {
        char url[300];
        dlock_client_t *c;
        dlock_mutexattr_t a;
        dlock_mutex_t m;
        double t0;
        snprintf(url, sizeof url, "%s?unreachable_ms=1000&breaker_ms=30000", dead[0].base);
        CU_ASSERT_FATAL(dlt_client_make(&c, url, 0) == 0);
        dlock_mutexattr_init(&a);
        dlock_mutexattr_setclient(&a, c);
        DLT_ASSERT_ERR(dlock_mutex_init(&m, "fo/urlbreaker", &a), 0);
        DLT_ASSERT_ERR(dlock_mutex_lock(&m), ENOLCK);
        t0 = dlt_now();
        DLT_ASSERT_ERR(dlock_mutex_lock(&m), ENOLCK);
        CU_ASSERT(dlt_now() - t0 < 0.5);
        CU_ASSERT(strstr(dlock_last_error(), "breaker") != NULL);
        DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
        DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
        snprintf(url, sizeof url, "%s?breaker_ms=x", dead[0].base);
        DLT_ASSERT_ERR(dlt_client_make(&c, url, 0), EINVAL);
    }
}

/* ----------------------------------------------------------- dlock exec */

static void test_exec_n_at_once(void) {
    fo_out o;
    CU_ASSERT_FATAL(fo_setup() == 0);
    sh_both("t0=$(now); " DLOCK_CLI " --url \"$DLOCK_URL\" exec -n fo/exec echo RAN; echo n_rc $?;"
            " echo n_ns $(( $(now) - t0 ))\n"
            "t0=$(now); " DLOCK_CLI " --url \"$DLOCK_URL\" exec -w 1 fo/exec echo RAN; echo w_rc $?;"
            " echo w_ns $(( $(now) - t0 ))\n",
            &o);
    for (int d = 0; d < 2; d++) {
        const char *out = o.text[d];
        int rc = o.rc[d];
        printf("  %s: exec -n %.2f s, -w 1 %.2f s\n", dead[d].what, (double)dlt_out_num(out, "n_ns") / NS,
               (double)dlt_out_num(out, "w_ns") / NS);
        DLT_ASSERT_INT_EQ(rc, 0);
        DLT_ASSERT_INT_EQ(dlt_out_num(out, "n_rc"), 69);
        /* down: at once.  hole: the request went out, so it may have been
         * granted: the renewal thread releases it (an orphan), and exit
         * waits for that round trip, a command timeout (2 s) at most */
        CU_ASSERT(dlt_out_num(out, "n_ns") >= 0 && dlt_out_num(out, "n_ns") < (d == 0 ? 2 : 3) * NS);
        CU_ASSERT(dlt_out_num(out, "w_rc") == 69 || dlt_out_num(out, "w_rc") == 1);
        CU_ASSERT(dlt_out_num(out, "w_ns") >= 0 && dlt_out_num(out, "w_ns") < (d == 0 ? 2500LL : 3500LL) * 1000 * 1000);
        CU_ASSERT(strstr(out, "RAN") == NULL);
        if (dlt_out_num(out, "n_ns") >= (d == 0 ? 2 : 3) * NS) dlt_out_show(out);
    }
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_flock_nb_and_w),
    DLT_TEST(test_flock_w_local_conflict),
    DLT_TEST(test_python_lockf_loop),
    DLT_TEST(test_python_closed_fails_fast),
    DLT_TEST(test_sqlite_insert),
    DLT_TEST(test_mapped_mutex_pays_once),
    DLT_TEST(test_mapped_mutex_timedlock),
    DLT_TEST(test_server_return_noticed),
    DLT_TEST(test_unlock_after_outage),
    DLT_TEST(test_library_try_no_wait),
    DLT_TEST(test_library_breaker),
    DLT_TEST(test_exec_n_at_once),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    const char *need[] = { FLOCK, PYTHON, SQLITE };
    int rc;
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) {
        if (access(need[i], X_OK) != 0) {
            fprintf(stderr, "test_failopen: %s is missing (scripts/deps installs it)\n", need[i]);
            return 1;
        }
    }
    rc = dlt_main(argc, argv, "failopen", tests);
    fo_cleanup();
    return rc;
}
