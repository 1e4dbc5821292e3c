/* labels: preload redis; timeout: 300 */
/* test_preload.c -- the LD_PRELOAD mode (preload/, docs/preload.md) from
 * the outside: unmodified programs -- the real flock(1) from util-linux,
 * and tests/preload/dlpl_counter.c and dlpl_lock.c -- run with
 * LD_PRELOAD=libdlock_preload.so against a real redis-server.
 *
 * Two "hosts" on one machine: the same lock file under two roots
 * (DLOCK_ROOT=DIR/A and DIR/B, as two mount points of one share), so the
 * kernel's own lock never joins them -- any exclusion between A and B is
 * the cluster lock's.  test_two_hosts_netns does the same from two network
 * namespaces joined by a veth pair, one of which runs the redis-server;
 * it needs root (and iproute2) and fails, loudly, without them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"

#define FLOCK "/usr/bin/flock"

static char dir[256];
static char prelude[4096];

static void setup_dir(void) {
    char cmd[1024];
    if (dir[0] != '\0') return;
    snprintf(dir, sizeof dir, "%s/dlpl-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        exit(1);
    }
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/A/locks' '%s/B/locks' '%s/plain'", dir, dir, dir);
    if (system(cmd) != 0) exit(1);
    /* Shell helpers every scenario starts with: A and B run a command as
     * one of the two "hosts"; now prints nanoseconds. */
    snprintf(prelude, sizeof prelude,
             "cd '%s' || exit 99\n"
             "SO='%s'\n"
             "A() { LD_PRELOAD=\"$SO\" DLOCK_ROOT='%s/A' DLOCK_MAP='file:locks/*.lock' \"$@\"; }\n"
             "B() { LD_PRELOAD=\"$SO\" DLOCK_ROOT='%s/B' DLOCK_MAP='file:locks/*.lock' \"$@\"; }\n"
             "now() { date +%%s%%N; }\n",
             dir, DLPL_SO, dir, dir);
}

/* Runs the prelude plus script in sh; its stdout (and stderr, when
 * err_too) goes to out.  Returns sh's exit status. */
static int sh(const char *script, char *out, size_t cap, int err_too) {
    char *full;
    FILE *p;
    setup_dir();
    if (asprintf(&full, "%s%s\n", prelude, script) < 0) return -1;
    {
        char path[512];
        FILE *f;
        snprintf(path, sizeof path, "%s/scenario.sh", dir);
        if ((f = fopen(path, "w")) == NULL) return -1;
        fputs(full, f);
        fclose(f);
        free(full);
        if (asprintf(&full, "sh '%s' %s", path, err_too ? "2>&1" : "") < 0) return -1;
    }
    p = popen(full, "r");
    free(full);
    if (p == NULL) return -1;
    return dlt_pclose_read(p, out, cap);
}

/* ------------------------------------------------------------- flock(1) */

static void test_flock_x_excludes_hosts(void) {
    char out[4096];
    long long a_out, b_in, b_start;
    int rc = sh("A " FLOCK " -x A/locks/job.lock sh -c 'echo A_in $(date +%s%N); sleep 1.5; echo A_out $(date +%s%N)' &\n"
                "sleep 0.4\n"
                "echo B_start $(now)\n"
                "B " FLOCK " -x B/locks/job.lock sh -c 'echo B_in $(date +%s%N)'\n"
                "echo B_rc $?\n"
                "wait\n",
                out, sizeof out, 1);
    DLT_ASSERT_INT_EQ(rc, 0);
    a_out = dlt_out_num(out, "A_out");
    b_in = dlt_out_num(out, "B_in");
    b_start = dlt_out_num(out, "B_start");
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "B_rc"), 0);
    CU_ASSERT(a_out > 0 && b_in > 0 && b_start > 0);
    /* B ran only after A was done, though it asked while A ran. */
    CU_ASSERT(b_in >= a_out);
    CU_ASSERT(b_in - b_start >= 800LL * 1000 * 1000);
    if (!(b_in >= a_out)) dlt_out_show(out);
}

static void test_flock_s_shares_x_waits(void) {
    char out[4096];
    int rc = sh("A " FLOCK " -s A/locks/job.lock sleep 1.5 &\n"
                "sleep 0.4\n"
                "B " FLOCK " -s -n B/locks/job.lock true; echo shared_nb $?\n"
                "B " FLOCK " -x -n B/locks/job.lock true; echo excl_nb $?\n"
                "B " FLOCK " -n -E 42 B/locks/job.lock true; echo excl_E $?\n"
                "wait\n"
                "B " FLOCK " -x -n B/locks/job.lock true; echo excl_after $?\n",
                out, sizeof out, 1);
    DLT_ASSERT_INT_EQ(rc, 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "shared_nb"), 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "excl_nb"), 1);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "excl_E"), 42);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "excl_after"), 0);
}

static void test_flock_x_blocks_s(void) {
    char out[4096];
    int rc = sh("A " FLOCK " -x A/locks/job.lock sleep 1.2 &\n"
                "sleep 0.4\n"
                "B " FLOCK " -s -n B/locks/job.lock true; echo shared_nb $?\n"
                "echo s_start $(now)\n"
                "B " FLOCK " -s B/locks/job.lock true; echo s_rc $?; echo s_end $(now)\n"
                "wait\n",
                out, sizeof out, 1);
    DLT_ASSERT_INT_EQ(rc, 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "shared_nb"), 1);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "s_rc"), 0);
    CU_ASSERT(dlt_out_num(out, "s_end") - dlt_out_num(out, "s_start") >= 500LL * 1000 * 1000);
}

static void test_flock_w_times_out(void) {
    char out[4096];
    long long waited;
    int rc = sh("A " FLOCK " A/locks/job.lock sleep 3 &\n"
                "sleep 0.4\n"
                "t0=$(now); B " FLOCK " -w 1 B/locks/job.lock echo RAN; echo w_rc $?; echo w_ns $(( $(now) - t0 ))\n"
                "t0=$(now); B " FLOCK " -w 0.5 -E 7 B/locks/job.lock echo RAN; echo w2_rc $?\n"
                "wait\n",
                out, sizeof out, 1);
    DLT_ASSERT_INT_EQ(rc, 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "w_rc"), 1);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "w2_rc"), 7);
    CU_ASSERT(strstr(out, "RAN") == NULL);
    waited = dlt_out_num(out, "w_ns");
    CU_ASSERT(waited >= 900LL * 1000 * 1000 && waited < 3000LL * 1000 * 1000);
    if (!(waited >= 900LL * 1000 * 1000 && waited < 3000LL * 1000 * 1000)) dlt_out_show(out);
}

/* Nested shared locks: host A holds L shared, and its
 * command takes L shared again from another process; host B asks for L
 * exclusive in between.  Linux flock(2) grants a shared lock while only
 * shared locks are held, whoever waits: the inner reader gets in at once,
 * A finishes, then B gets its exclusive lock.  (Writers first would queue
 * the inner reader behind B, which waits for the outer reader: A would
 * hang for ever; timeout(1) bounds it here.)  While B waits, a shared
 * flock -n from B's host gets in too, and so does an fcntl read lock
 * (F_SETLK) while an F_SETLKW write lock waits for another reader. */
static void test_flock_nested_shared_with_x_waiting(void) {
    char out[8192];
    long long x_start, a_end, inner_in, x_in;
    int rc = sh("A timeout 15 " FLOCK " -s A/locks/nest.lock sh -c 'sleep 1;"
                " " FLOCK " -s A/locks/nest.lock sh -c \"echo inner_in \\$(date +%s%N)\"; echo inner_rc $?' & AP=$!\n"
                "sleep 0.4\n"
                "echo x_start $(now)\n"
                "B timeout 30 " FLOCK " -x B/locks/nest.lock sh -c 'echo X_in $(date +%s%N)' & XP=$!\n"
                "sleep 0.3\n"
                "B " FLOCK " -s -n B/locks/nest.lock true; echo s_nb $?\n"
                "wait $AP; echo a_rc $?; echo a_end $(now)\n"
                "wait $XP; echo x_rc $?\n"
                "A " DLPL_LOCK " r A/locks/nrec.lock 1500 >/dev/null &\n"
                "sleep 0.4\n"
                "B timeout 30 " DLPL_LOCK " ww B/locks/nrec.lock >/dev/null & WP=$!\n"
                "sleep 0.4\n"
                "A " DLPL_LOCK " r A/locks/nrec.lock >/dev/null; echo rd_while_w_waits $?\n"
                "wait $WP; echo ww $?\n"
                "wait\n",
                out, sizeof out, 1);
    DLT_ASSERT_INT_EQ(rc, 0);
    x_start = dlt_out_num(out, "x_start");
    a_end = dlt_out_num(out, "a_end");
    inner_in = dlt_out_num(out, "inner_in");
    x_in = dlt_out_num(out, "X_in");
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "a_rc"), 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "inner_rc"), 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "s_nb"), 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "x_rc"), 0);
    CU_ASSERT(x_start > 0 && a_end > 0 && inner_in > 0 && x_in > 0);
    /* A is done within a few seconds (nominally 0.6 s after B asked)... */
    CU_ASSERT(a_end - x_start < 8000LL * 1000 * 1000);
    /* ...and B had its exclusive lock only after A's inner reader. */
    CU_ASSERT(x_in > inner_in);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "rd_while_w_waits"), 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "ww"), 0);
    if (dlt_out_num(out, "a_rc") != 0 || !(x_in > inner_in) || dlt_out_num(out, "rd_while_w_waits") != 0)
        dlt_out_show(out);
}

/* The shell idiom: the lock lives on descriptor 9 of the subshell, taken
 * and dropped (-u) by two separate flock processes. */
static void test_flock_u_fd_idiom(void) {
    char out[4096];
    int rc = sh("( A " FLOCK " -x 9; echo locked; sleep 1; A " FLOCK " -u 9; echo unlocked; sleep 1.5 ) 9>A/locks/job.lock &\n"
                "sleep 0.5\n"
                "B " FLOCK " -n B/locks/job.lock true; echo while_held $?\n"
                "sleep 1.0\n"
                "B " FLOCK " -n B/locks/job.lock true; echo after_u $?\n"
                "wait\n",
                out, sizeof out, 1);
    DLT_ASSERT_INT_EQ(rc, 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "while_held"), 1);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "after_u"), 0);
    if (dlt_out_num(out, "after_u") != 0) dlt_out_show(out);
}

/* Without -o the command's background child inherits the descriptor and
 * with it the lock; with -o it does not. */
static void test_flock_o_and_inheritance(void) {
    char out[4096];
    int rc = sh("A " FLOCK " -o A/locks/job.lock sh -c 'sleep 2 >/dev/null 2>&1 &'\n"
                "B " FLOCK " -n B/locks/job.lock true; echo with_o $?\n"
                "A " FLOCK " A/locks/job.lock sh -c 'sleep 2 >/dev/null 2>&1 &'\n"
                "B " FLOCK " -n B/locks/job.lock true; echo without_o $?\n"
                "sleep 2.5\n"
                "B " FLOCK " -n B/locks/job.lock true; echo later $?\n",
                out, sizeof out, 1);
    DLT_ASSERT_INT_EQ(rc, 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "with_o"), 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "without_o"), 1);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "later"), 0);
}

/* ------------------------------------------------------- fcntl, lockf */

static void test_fcntl_and_lockf(void) {
    char out[8192];
    int rc = sh("A " DLPL_LOCK " w A/locks/rec.lock 1500 >/dev/null &\n"
                "sleep 0.5\n"
                "B " DLPL_LOCK " w B/locks/rec.lock >/dev/null; echo w_nb $?\n"
                "B " DLPL_LOCK " r B/locks/rec.lock >/dev/null; echo r_nb $?\n"
                "B " DLPL_LOCK " lockf B/locks/rec.lock >/dev/null; echo tlock $?\n"
                "B " DLPL_LOCK " test B/locks/rec.lock >/dev/null; echo test $?\n"
                "B " DLPL_LOCK " getlk B/locks/rec.lock\n"
                "t0=$(now); B " DLPL_LOCK " ww B/locks/rec.lock >/dev/null; echo ww $?; echo ww_ns $(( $(now) - t0 ))\n"
                "wait\n"
                "A " DLPL_LOCK " r A/locks/rec.lock 1200 >/dev/null &\n"
                "sleep 0.5\n"
                "B " DLPL_LOCK " r B/locks/rec.lock >/dev/null; echo rr $?\n"
                "B " DLPL_LOCK " w B/locks/rec.lock >/dev/null; echo rw $?\n"
                "wait\n"
                "A " DLPL_LOCK " ofd A/locks/rec.lock 1200 >/dev/null &\n"
                "sleep 0.5\n"
                "B " DLPL_LOCK " ofd B/locks/rec.lock >/dev/null; echo ofd $?\n"
                "wait\n"
                "A " DLPL_LOCK " wclose A/locks/rec.lock 2000 >/dev/null &\n"
                "sleep 0.5\n"
                "B " DLPL_LOCK " w B/locks/rec.lock >/dev/null; echo before_close $?\n"
                "sleep 1.0\n"
                "B " DLPL_LOCK " w B/locks/rec.lock >/dev/null; echo after_close $?\n"
                "wait\n"
                "B " DLPL_LOCK " getlk B/locks/rec.lock\n",
                out, sizeof out, 1);
    DLT_ASSERT_INT_EQ(rc, 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "w_nb"), 1);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "r_nb"), 1);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "tlock"), 1);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "test"), 1);
    CU_ASSERT(strstr(out, "F_WRLCK pid=-1") != NULL);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "ww"), 0);
    CU_ASSERT(dlt_out_num(out, "ww_ns") >= 500LL * 1000 * 1000);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "rr"), 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "rw"), 1);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "ofd"), 1);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "before_close"), 1);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "after_close"), 0);
    CU_ASSERT(strstr(out, "F_UNLCK") != NULL);
    if (dlt_out_num(out, "after_close") != 0 || strstr(out, "F_WRLCK pid=-1") == NULL) dlt_out_show(out);
}

/* ------------------------------------------------------------- mutexes */

static void test_mapped_mutex_counts_exactly(void) {
    char out[4096];
    int rc = sh("echo 0 > plain/counter\n"
                "M='mutex:counter_lock=test/counter'\n"
                "LD_PRELOAD=\"$SO\" DLOCK_MAP=\"$M\" " DLPL_COUNTER " plain/counter 150 & p1=$!\n"
                "LD_PRELOAD=\"$SO\" DLOCK_MAP=\"$M\" " DLPL_COUNTER " plain/counter 150 & p2=$!\n"
                "wait $p1; echo rc1 $?; wait $p2; echo rc2 $?\n"
                "echo counter $(cat plain/counter)\n",
                out, sizeof out, 1);
    DLT_ASSERT_INT_EQ(rc, 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "rc1"), 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "rc2"), 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "counter"), 300);
    /* It went through the server: the lock's fence key exists. */
    {
        redisReply *r = dlt_redis_cmd(&dlt_server, "EXISTS dlock:{test/counter}:fence");
        CU_ASSERT(r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
        if (r) freeReplyObject(r);
    }
    if (dlt_out_num(out, "counter") != 300) dlt_out_show(out);
}

/* DLOCK_LOCK_DELAY_MS: a mapped mutex's holds carry the lock-delay (its
 * hash says ld, and the marker is there while it is held); a bad value is
 * said once and the program runs all the same. */
static void test_mapped_mutex_lock_delay(void) {
    char out[4096];
    int rc = sh("echo 0 > plain/counter\n"
                "M='mutex:counter_lock=test/ld'\n"
                "LD_PRELOAD=\"$SO\" DLOCK_MAP=\"$M\" DLOCK_LOCK_DELAY_MS=700 " DLPL_COUNTER " plain/counter 5000 & p=$!\n"
                "seen=none; i=0\n"
                "while [ $i -lt 300 ]; do\n"
                "  v=$(redis-cli -u \"$DLOCK_URL\" HGET 'dlock:{test/ld}' ld)\n"
                "  if [ \"$v\" = 700 ]; then seen=$v; break; fi\n"
                "  i=$((i + 1)); sleep 0.01\n"
                "done\n"
                "kill -9 $p; wait $p 2>/dev/null\n"
                "echo seen $seen\n"
                "LD_PRELOAD=\"$SO\" DLOCK_MAP=\"$M\" DLOCK_LOCK_DELAY_MS=abc " DLPL_COUNTER " plain/counter 2 2>plain/err\n"
                "echo bad_rc $?; echo said $(grep -c \"DLOCK_LOCK_DELAY_MS 'abc'\" plain/err)\n"
                /* a mapped file lock: its keeper's hold has the delay too */
                "(export DLOCK_LOCK_DELAY_MS=900; A " FLOCK " -x A/locks/ld.lock sleep 1.5) & p=$!\n"
                "seen=none; i=0\n"
                "while [ $i -lt 100 ]; do\n"
                "  k=$(redis-cli -u \"$DLOCK_URL\" --scan --pattern '*ld.lock}')\n"
                "  if [ -n \"$k\" ] && [ \"$(redis-cli -u \"$DLOCK_URL\" HGET \"$k\" ld)\" = 900 ]; then seen=900; break; fi\n"
                "  i=$((i + 1)); sleep 0.02\n"
                "done\n"
                "wait $p; echo flock_seen $seen\n",
                out, sizeof out, 1);
    DLT_ASSERT_INT_EQ(rc, 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "seen"), 700);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "bad_rc"), 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "flock_seen"), 900);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "said"), 1);
    if (dlt_out_num(out, "seen") != 700 || dlt_out_num(out, "said") != 1) dlt_out_show(out);
}

/* ------------------------------------------------------ unmapped locks */

static void test_unmapped_locks_stay_local(void) {
    char out[4096];
    long long calls;
    int rc = sh("echo 0 > plain/counter\n"
                "P() { LD_PRELOAD=\"$SO\" DLOCK_MAP='file:/nonexistent/*.lock;mutex:no_such_symbol' \"$@\"; }\n"
                /* an unmapped flock keeps the kernel's semantics: local exclusion */
                "P " FLOCK " plain/x.lock sleep 1 &\n"
                "sleep 0.4\n"
                "P " FLOCK " -n plain/x.lock true; echo local_nb $?\n"
                "wait\n"
                "P " FLOCK " -n plain/x.lock true; echo local_after $?\n"
                "P " DLPL_LOCK " w plain/y.lock >/dev/null; echo fcntl $?\n"
                "P " DLPL_COUNTER " plain/counter 20; echo counter_rc $?\n",
                out, sizeof out, 1);
    DLT_ASSERT_INT_EQ(rc, 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "local_nb"), 1);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "local_after"), 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "fcntl"), 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "counter_rc"), 0);
    CU_ASSERT(strstr(out, "dlock:") == NULL); /* nothing to say */
    /* ...and nothing reached the server. */
    calls = dlt_redis_total_calls(&dlt_server) - dlt_redis_cmdstat(&dlt_server, "config|resetstat");
    DLT_ASSERT_INT_EQ(calls, 0);
    if (calls != 0) {
        redisReply *r = dlt_redis_cmd(&dlt_server, "INFO commandstats");
        if (r && r->type == REDIS_REPLY_STRING) fprintf(stderr, "%s\n", r->str);
        if (r) freeReplyObject(r);
    }
    if (strstr(out, "dlock:") != NULL) dlt_out_show(out);
}

/* ------------------------------------------------- bad configurations */

static void test_bad_map_never_crashes(void) {
    static const char *maps[] = {
        "bogus", "file:", "mutex:", "mutex:=x", "file:/a/*=", "file:relative/*.lock", "file",
        "mutex:1abc", "mutex:a b", "=", "file:/x=" /* empty name */, "\xff\xfe\x01;file:\xc3(",
        /* globs fnmatch would misread (test_misread_globs_refused) */
        "file:/srv/x/**", "file:/a/[b/c]", "file:/a/[bc", "file:/a/b\\", "file:/a/{b,c}.lock", "sem:/x[",
        "sem:/j-{a,b}", "file:/tmp/*;sem:/x\\",
        NULL,
    };
    char script[2048], out[4096];
    int i, rc;
    for (i = 0; maps[i] != NULL; i++) {
        snprintf(script, sizeof script,
                 "export DLOCK_MAP='%s'\n"
                 "LD_PRELOAD=\"$SO\" " FLOCK " -n plain/bad.lock true; echo flock $?\n"
                 "LD_PRELOAD=\"$SO\" " DLPL_COUNTER " plain/counter 3; echo counter $?\n",
                 maps[i]);
        rc = sh(script, out, sizeof out, 1);
        DLT_ASSERT_INT_EQ(rc, 0);
        DLT_ASSERT_INT_EQ(dlt_out_num(out, "flock"), 0);
        DLT_ASSERT_INT_EQ(dlt_out_num(out, "counter"), 0);
        /* one clear line per program: flock, the true it runs, the counter */
        DLT_ASSERT_INT_EQ(dlt_out_count(out, "dlock: "), 3);
        if (dlt_out_count(out, "dlock: ") != 3) dlt_out_show(out);
    }
    /* A 100 KiB map, a bad URL, bad policies.  The URL is the
     * implementation's to read, at the first mapped lock: flock's (its
     * `true` takes none and says nothing). */
    rc = sh("export DLOCK_MAP=\"file:$(head -c 100000 /dev/zero | tr '\\0' a)\"\n"
            "LD_PRELOAD=\"$SO\" " FLOCK " -n plain/bad.lock true; echo long $?\n"
            "DLOCK_URL='redis://[::1' DLOCK_MAP=\"file:$PWD/plain/*\" LD_PRELOAD=\"$SO\" " FLOCK " -n plain/bad.lock true; echo url $?\n"
            "DLOCK_ON_LOST=sometimes DLOCK_MAP='file:/tmp/*' LD_PRELOAD=\"$SO\" " FLOCK " -n plain/bad.lock true; echo lost $?\n"
            "DLOCK_ON_ERROR=closed DLOCK_MAP='bogus' LD_PRELOAD=\"$SO\" " FLOCK " -n plain/bad.lock true; echo closed $?\n",
            out, sizeof out, 1);
    DLT_ASSERT_INT_EQ(rc, 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "long"), 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "url"), 0);
    /* an unknown DLOCK_ON_LOST is a bad configuration; closed refuses */
    CU_ASSERT(dlt_out_num(out, "lost") == 0);
    CU_ASSERT(dlt_out_num(out, "closed") > 0 && dlt_out_num(out, "closed") < 128);
    CU_ASSERT(strstr(out, "No locks available") != NULL);
    CU_ASSERT(strstr(out, "DLOCK_URL: ") != NULL);
    /* 2 x (flock, true) + the bad URL's flock + the refused flock */
    DLT_ASSERT_INT_EQ(dlt_out_count(out, "dlock: "), 6);
    if (dlt_out_count(out, "dlock: ") != 6) dlt_out_show(out);
}

/* A glob that fnmatch(3) would read otherwise than it says is refused at
 * start-up with one line that says why, naming the rule: `**` in a file:
 * glob (it would stay inside one path component), a bracket expression
 * holding '/', an unclosed '[', a trailing '\', a brace list; nothing is
 * mapped then (the flock of a path the map names is local, the server
 * hears nothing).  A class such as [[:alpha:]], an escaped bracket, and
 * `**` in a sem: glob (semaphore names have no '/' to cross) are taken. */
static void test_misread_globs_refused(void) {
    static const struct {
        const char *map, *why;
    } bad[] = {
        { "file:$PWD/A/**", "'**' would match within one path component only" },
        { "file:$PWD/A/[l/]ocks/*", "a bracket expression holds '/'" },
        { "file:$PWD/A/[locks/*", "'[' is not closed" },
        { "file:$PWD/A/locks/\\\\", "lone '\\'" },
        { "file:$PWD/A/locks/{job,x}.lock", "'{a,b}' is not expanded" },
    };
    char script[2048], out[4096];
    size_t i;
    int rc;
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(script, sizeof script,
                 "export DLOCK_MAP=\"%s\"\n"
                 "LD_PRELOAD=\"$SO\" " FLOCK " -n A/locks/job.lock true; echo flock $?\n",
                 bad[i].map);
        rc = sh(script, out, sizeof out, 1);
        if (rc != 0 || strstr(out, bad[i].why) == NULL || dlt_out_count(out, "dlock: ") != 2) dlt_out_show(out);
        DLT_ASSERT_INT_EQ(rc, 0);
        DLT_ASSERT_INT_EQ(dlt_out_num(out, "flock"), 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(out, bad[i].why));
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "DLOCK_MAP rule 1: glob"));
        DLT_ASSERT_INT_EQ(dlt_out_count(out, "dlock: "), 2); /* flock, and the true it runs */
    }
    DLT_ASSERT_INT_EQ(dlt_redis_keys_count(&dlt_server, "*job.lock*"), 0);
    /* the same from a map file, its line named */
    rc = sh("printf '# jobs\\nfile:%s/A/locks/*.lock\\nfile:%s/A/**\\n' \"$PWD\" \"$PWD\" > misread.map\n"
            "DLOCK_MAP_FILE=\"$PWD/misread.map\" LD_PRELOAD=\"$SO\" " FLOCK " -n A/locks/job.lock true; echo flock $?\n",
            out, sizeof out, 1);
    if (rc != 0 || strstr(out, "DLOCK_MAP_FILE rule 3: glob") == NULL) dlt_out_show(out);
    DLT_ASSERT_INT_EQ(rc, 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "flock"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "DLOCK_MAP_FILE rule 3: glob"));
    DLT_ASSERT_INT_EQ(dlt_out_count(out, "dlock: "), 2);
    DLT_ASSERT_INT_EQ(dlt_redis_keys_count(&dlt_server, "*job.lock*"), 0);
    rc = sh("export DLOCK_MAP=\"file:$PWD/A/[[:alpha:]]ocks/*.lock;file:$PWD/A/\\[x;sem:/j-**\"\n"
            "LD_PRELOAD=\"$SO\" " FLOCK " -n A/locks/job.lock true; echo flock $?\n",
            out, sizeof out, 1);
    if (rc != 0 || dlt_out_count(out, "dlock: ") != 0) dlt_out_show(out);
    DLT_ASSERT_INT_EQ(rc, 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "flock"), 0);
    DLT_ASSERT_INT_EQ(dlt_out_count(out, "dlock: "), 0);
}

/* The server cannot be reached: open runs on with the local lock (one
 * line), closed refuses the lock (ENOLCK). */
static void test_unreachable_server_policy(void) {
    char out[4096];
    int rc = sh("export DLOCK_URL='redis://127.0.0.1:1?unreachable_ms=300&connect_timeout_ms=100'\n"
                "A " FLOCK " -n A/locks/job.lock echo RAN_OPEN; echo open $?\n"
                "DLOCK_ON_ERROR=closed A " FLOCK " -n A/locks/job.lock echo RAN_CLOSED; echo closed $?\n",
                out, sizeof out, 1);
    DLT_ASSERT_INT_EQ(rc, 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "open"), 0);
    CU_ASSERT(strstr(out, "RAN_OPEN") != NULL);
    CU_ASSERT(strstr(out, "RAN_CLOSED") == NULL);
    CU_ASSERT(dlt_out_num(out, "closed") > 0);
    CU_ASSERT(strstr(out, "local lock only") != NULL);
    if (strstr(out, "RAN_OPEN") == NULL) dlt_out_show(out);
}

/* ------------------------------------------------ two network namespaces */

static void test_two_hosts_netns(void) {
    char setup[4096], script[8192], out[8192];
    int rc;
    if (!dlt_netns_ok("test_two_hosts_netns", NULL)) return;
    CU_ASSERT_FATAL(dlt_netns_setup(setup, sizeof setup, "dlpl", 213, 6390, "\"$PWD/net\"") == 0);
    snprintf(script, sizeof script,
             "%s"
             "mkdir -p net/A/locks net/B/locks\n"
             "H() { h=$1; shift; ip netns exec $ns$h env DLOCK_URL=redis://$SRV:$PORT LD_PRELOAD=\"$SO\""
             " DLOCK_ROOT=\"$PWD/net/$(echo $h | tr ab AB)\" DLOCK_MAP='file:locks/*.lock' \"$@\"; }\n"
             "H a " FLOCK " net/A/locks/nightly.lock sh -c 'echo A_in $(date +%%s%%N); sleep 2.5; echo A_out $(date +%%s%%N)' & AP=$!\n"
             "sleep 0.4\n"
             "H b " FLOCK " -n net/B/locks/nightly.lock true; echo b_nb $?\n"
             "t0=$(now); H b " FLOCK " -w 1 net/B/locks/nightly.lock true; echo b_w $?; echo b_w_ns $(( $(now) - t0 ))\n"
             "H b " FLOCK " net/B/locks/nightly.lock sh -c 'echo B_in $(date +%%s%%N)'; echo b_rc $?\n"
             "wait $AP\n"
             "echo evalsha $(ip netns exec $NA redis-cli -h $SRV -p $PORT info commandstats | grep -c cmdstat_evalsha)\n",
             setup);
    rc = sh(script, out, sizeof out, 1);
    DLT_ASSERT_INT_EQ(rc, 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "b_nb"), 1);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "b_w"), 1);
    CU_ASSERT(dlt_out_num(out, "b_w_ns") >= 900LL * 1000 * 1000 && dlt_out_num(out, "b_w_ns") < 3000LL * 1000 * 1000);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "b_rc"), 0);
    CU_ASSERT(dlt_out_num(out, "B_in") >= dlt_out_num(out, "A_out") && dlt_out_num(out, "A_out") > 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "evalsha"), 1);
    if (rc != 0 || dlt_out_num(out, "B_in") < dlt_out_num(out, "A_out")) dlt_out_show(out);
    {
        char chk[128];
        snprintf(chk, sizeof chk, "ip netns list | grep -q dlpl%ld", (long)getpid());
        CU_ASSERT(system(chk) != 0); /* the namespaces are gone */
    }
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_flock_x_excludes_hosts),
    DLT_TEST(test_flock_s_shares_x_waits),
    DLT_TEST(test_flock_x_blocks_s),
    DLT_TEST(test_flock_w_times_out),
    DLT_TEST(test_flock_nested_shared_with_x_waiting),
    DLT_TEST(test_flock_u_fd_idiom),
    DLT_TEST(test_flock_o_and_inheritance),
    DLT_TEST(test_fcntl_and_lockf),
    DLT_TEST(test_mapped_mutex_counts_exactly),
    DLT_TEST(test_mapped_mutex_lock_delay),
    DLT_TEST(test_unmapped_locks_stay_local),
    DLT_TEST(test_bad_map_never_crashes),
    DLT_TEST(test_misread_globs_refused),
    DLT_TEST(test_unreachable_server_policy),
    DLT_TEST(test_two_hosts_netns),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    int rc;
    if (access(FLOCK, X_OK) != 0) {
        fprintf(stderr, "test_preload: %s is missing (Debian package util-linux)\n", FLOCK);
        return 1;
    }
    rc = dlt_main(argc, argv, "preload", tests);
    dlt_rm_tree(dir);
    return rc;
}
