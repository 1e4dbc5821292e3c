/* labels: preload redis; timeout: 300 */
/* test_preload_lazy.c -- what the LD_PRELOAD mode costs a process that
 * takes no mapped lock, and what it says (docs/preload.md, "What a process
 * pays"): libdlock_preload.so is a thin interposer that loads its
 * implementation (libdlock_preload_impl.so, with libdlock, hiredis and
 * OpenSSL) only at the first mapped lock.  Real processes, read from the
 * outside: their /proc/PID/maps and /proc/PID/task, the server's count of
 * connections, their stdout, stderr and exit status beside the same run
 * without the library.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "fixture.h"

#define FLOCK "/usr/bin/flock"

static char dir[256];
static char prelude[2048];

static void setup_dir(void) {
    char cmd[4096];
    if (dir[0] != '\0') return;
    snprintf(dir, sizeof dir, "%s/dlpl-lazy-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        exit(1);
    }
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/m' '%s/plain' '%s/lonely' && cp '%s' '%s/lonely/'", dir, dir, dir,
             DLPL_SO, dir);
    if (system(cmd) != 0) exit(1);
    snprintf(prelude, sizeof prelude,
             "cd '%s' || exit 99\n"
             "SO='%s'\n"
             "LONELY=\"$PWD/lonely/$(basename \"$SO\")\"\n"
             "COUNTER='%s'\n"
             "LOADRACE='%s'\n"
             "FORKMAKE='%s'\n",
             dir, DLPL_SO, DLPL_COUNTER, DLPL_LOADRACE, DLPL_FORKMAKE);
}

/* Runs the prelude plus script in sh, stdout and stderr into out; sh's
 * exit status. */
static int sh(const char *script, char *out, size_t cap) {
    setup_dir();
    return dlt_sh_scenario(dir, prelude, script, out, cap);
}

/* The server's total_connections_received. */
static long long connections(void) {
    redisReply *r = dlt_redis_cmd(&dlt_server, "INFO stats");
    const char *p;
    long long n = -1;
    if (r != NULL && r->type == REDIS_REPLY_STRING && (p = strstr(r->str, "total_connections_received:")) != NULL)
        n = strtoll(p + strlen("total_connections_received:"), NULL, 10);
    if (r != NULL) freeReplyObject(r);
    return n;
}

/* The maps of what ran: none of the implementation, libdlock, hiredis or
 * OpenSSL; the thin object itself, yes (else nothing was preloaded). */
static void assert_thin_only(const char *out) {
    CU_ASSERT(strstr(out, "libdlock_preload.so") != NULL);
    CU_ASSERT(strstr(out, "libdlock_preload_impl") == NULL);
    CU_ASSERT(strstr(out, "libdlock.so") == NULL);
    CU_ASSERT(strstr(out, "libhiredis") == NULL);
    CU_ASSERT(strstr(out, "libcrypto") == NULL);
    CU_ASSERT(strstr(out, "libssl") == NULL);
}

/* Unconfigured, a map that matches nothing the process locks, and rules
 * of every kind that it never uses: the process -- cat, a shell, and
 * flock(1) holding a lock on an unmapped file -- has the thin object
 * alone, one thread, and the server hears nothing. */
static void test_nothing_loaded_without_mapped_lock(void) {
    static const char *maps[] = { "", "file:$PWD/m/*", "mutex:no_such_mutex;sem:/no-such-*;file:$PWD/m/*.lock" };
    char script[2048], out[65536];
    long long before = connections(), step = connections() - before; /* asking makes one */
    size_t i;
    for (i = 0; i < sizeof maps / sizeof maps[0]; i++) {
        snprintf(script, sizeof script,
                 "export DLOCK_MAP=\"%s\" LD_PRELOAD=\"$SO\"\n"
                 "cat /proc/self/maps\n"
                 "sh -c 'echo sh_tasks $(ls /proc/$$/task | wc -l)'\n"
                 FLOCK " -n plain/x.lock sh -c 'cat /proc/$PPID/maps; echo flock_tasks $(ls /proc/$PPID/task | wc -l)'\n"
                 "echo flock_rc $?\n",
                 maps[i]);
        DLT_ASSERT_INT_EQ(sh(script, out, sizeof out), 0);
        assert_thin_only(out);
        CU_ASSERT(strstr(out, "sh_tasks 1\n") != NULL);
        CU_ASSERT(strstr(out, "flock_tasks 1\n") != NULL);
        CU_ASSERT(strstr(out, "flock_rc 0\n") != NULL);
        CU_ASSERT(strstr(out, "dlock: ") == NULL);
        if (strstr(out, "libdlock_preload_impl") != NULL || strstr(out, "flock_tasks 1\n") == NULL) dlt_out_show(out);
    }
    DLT_ASSERT_INT_EQ(connections(), before + 2 * step);
}

/* The same for libdlock: loaded into a process that never calls it (a
 * shell, preloading it), it starts no thread, opens no connection and
 * says nothing -- it has no constructor. */
static void test_library_loaded_never_called(void) {
    char script[1024], out[8192];
    long long before = connections(), step = connections() - before;
    snprintf(script, sizeof script,
             "LD_PRELOAD='%s' sh -c 'grep -c libdlock.so /proc/$$/maps; echo tasks $(ls /proc/$$/task | wc -l)'\n",
             DLOCK_LIB);
    DLT_ASSERT_INT_EQ(sh(script, out, sizeof out), 0);
    CU_ASSERT(strstr(out, "tasks 1\n") != NULL);
    CU_ASSERT(atoi(out) > 0); /* it was loaded: its lines in the maps */
    CU_ASSERT(strstr(out, "dlock") == NULL);
    DLT_ASSERT_INT_EQ(connections(), before + 2 * step);
}

/* The other side, so that the test above can fail: a mapped flock loads
 * the implementation and its libraries, and talks to the server. */
static void test_mapped_lock_loads_implementation(void) {
    char out[65536];
    long long before = connections();
    DLT_ASSERT_INT_EQ(sh("export DLOCK_MAP=\"file:$PWD/m/*\" LD_PRELOAD=\"$SO\"\n"
                         FLOCK " -n m/x.lock sh -c 'cat /proc/$PPID/maps'\n"
                         "echo flock_rc $?\n",
                         out, sizeof out),
                      0);
    CU_ASSERT(strstr(out, "flock_rc 0\n") != NULL);
    CU_ASSERT(strstr(out, "libdlock_preload_impl.so") != NULL);
    CU_ASSERT(strstr(out, "libdlock.so") != NULL);
    CU_ASSERT(strstr(out, "libcrypto") != NULL);
    CU_ASSERT(strstr(out, "dlock: ") == NULL);
    CU_ASSERT(connections() > before);
}

/* A program's stdout, stderr and exit status under the library are those
 * it has without it, when no mapped lock fails: unconfigured, an empty
 * map, a map file of comments, a map that matches nothing it locks, and
 * DLOCK_ON_ERROR=closed without a map (nothing is mapped, so nothing is
 * refused).  Programs: a shell that writes both and exits 3, flock(1) on
 * an unmapped file, dlpl_counter (mutexes).  With DLOCK_VERBOSE=1, the
 * unconfigured library says one line per program. */
static void test_silent_unless_asked(void) {
    static const char *envs[] = {
        "",
        "DLOCK_MAP=';;;;'",
        "DLOCK_MAP_FILE=\"$PWD/comments.map\"",
        "DLOCK_MAP=\"file:$PWD/m/*;mutex:no_such_mutex\"",
        "DLOCK_ON_ERROR=closed",
    };
    char script[4096], out[8192];
    size_t i;
    for (i = 0; i < sizeof envs / sizeof envs[0]; i++) {
        snprintf(script, sizeof script,
                 "printf '# nothing mapped yet\\n\\n   \\n' > comments.map\n"
                 "run() {\n"
                 "  sh -c 'echo out; echo err >&2; exit 3'; echo \"sh $?\"\n"
                 "  " FLOCK " plain/y.lock sh -c 'echo locked'; echo \"flock $?\"\n"
                 "  " FLOCK " -n plain/y.lock " FLOCK " -n plain/y.lock true; echo \"busy $?\"\n"
                 "  rm -f plain/c; \"$COUNTER\" plain/c 5; echo \"counter $? $(cat plain/c)\"\n"
                 "}\n"
                 "run > without.out 2> without.err\n"
                 "(export %s LD_PRELOAD=\"$SO\"; run > with.out 2> with.err)\n"
                 "cmp without.out with.out && cmp without.err with.err && echo same\n"
                 "cat with.out with.err\n",
                 envs[i]);
        DLT_ASSERT_INT_EQ(sh(script, out, sizeof out), 0);
        CU_ASSERT(strstr(out, "same\n") != NULL);
        CU_ASSERT(strstr(out, "sh 3\n") != NULL && strstr(out, "flock 0\n") != NULL);
        CU_ASSERT(strstr(out, "busy 1\n") != NULL && strstr(out, "counter 0 5\n") != NULL);
        CU_ASSERT(strstr(out, "dlock: ") == NULL);
        if (strstr(out, "same\n") == NULL) dlt_out_show(out);
    }
    DLT_ASSERT_INT_EQ(sh("export DLOCK_VERBOSE=1 LD_PRELOAD=\"$SO\"\n"
                         "sh -c 'echo out'\n"
                         "\"$COUNTER\" plain/c 1\n",
                         out, sizeof out),
                      0);
    DLT_ASSERT_INT_EQ(dlt_out_count(out, "dlock: "), 2);
    CU_ASSERT(strstr(out, "neither DLOCK_MAP nor DLOCK_MAP_FILE is set") != NULL);
}

/* The implementation cannot be loaded (the thin object alone in a
 * folder): the first mapped lock says so, once, and DLOCK_ON_ERROR
 * decides as for an unreachable server -- open, the kernel lock or the
 * real mutex alone; closed, ENOLCK.  A process that takes no mapped lock
 * never notices. */
static void test_implementation_missing(void) {
    char out[8192];
    DLT_ASSERT_INT_EQ(sh("export DLOCK_MAP=\"file:$PWD/m/*;mutex:counter_lock\" LD_PRELOAD=\"$LONELY\"\n"
                         FLOCK " -n plain/z.lock true; echo unmapped $?\n"
                         FLOCK " -n m/z.lock true; echo open $?\n"
                         "rm -f plain/c; \"$COUNTER\" plain/c 5; echo counter $? $(cat plain/c)\n"
                         "DLOCK_ON_ERROR=closed " FLOCK " -n m/z.lock true; echo closed $?\n",
                         out, sizeof out),
                      0);
    CU_ASSERT(strstr(out, "unmapped 0\n") != NULL);
    CU_ASSERT(strstr(out, "open 0\n") != NULL);
    CU_ASSERT(strstr(out, "counter 0 5\n") != NULL);
    CU_ASSERT(strstr(out, "closed ") != NULL && strstr(out, "closed 0\n") == NULL);
    CU_ASSERT(strstr(out, "No locks available") != NULL);
    /* one line per program that took a mapped lock: flock, the counter,
     * the refused flock */
    DLT_ASSERT_INT_EQ(dlt_out_count(out, "cannot load libdlock_preload_impl.so"), 3);
    DLT_ASSERT_INT_EQ(dlt_out_count(out, "dlock: "), 3);
    if (dlt_out_count(out, "dlock: ") != 3) dlt_out_show(out);
}

/* The load under pressure: four threads make the program's first lock of
 * a mapped mutex at once while a fifth forks children that lock it too
 * and a 1 ms timer's handler makes hooked calls.  Each thread then counts
 * under the lock: the count comes out exact, every child exits 0, and
 * nothing hangs (the whole program within the test's bound). */
static void test_load_races_threads_fork_signals(void) {
    char out[8192];
    int i;
    for (i = 0; i < 5; i++) {
        DLT_ASSERT_INT_EQ(sh("DLOCK_MAP='mutex:race_lock' LD_PRELOAD=\"$SO\" timeout 60 \"$LOADRACE\" 25\n"
                             "echo rc $?\n",
                             out, sizeof out),
                          0);
        CU_ASSERT(strstr(out, "counter 100 forks 5 signals ") != NULL);
        CU_ASSERT(strstr(out, "rc 0\n") != NULL);
        CU_ASSERT(strstr(out, "dlock: ") == NULL);
        if (strstr(out, "counter 100 forks 5") == NULL || strstr(out, "rc 0\n") == NULL) {
            dlt_out_show(out);
            break;
        }
    }
}

/* A fork while another thread is in its first lock of a mapped mutex,
 * where the implementation makes the mutex's dlock side (dlpl_forkmake
 * holds that thread there, writing DLOCK_LOCK_DELAY_MS's complaint to a
 * full stderr): the fork waits for the making to end, so the child, which
 * locks the mutex too, inherits it done and exits 0 instead of waiting
 * forever for a thread it does not have (its alarm would kill it). */
static void test_fork_while_mutex_made(void) {
    char out[8192];
    DLT_ASSERT_INT_EQ(sh("DLOCK_MAP='mutex:fork_lock' DLOCK_LOCK_DELAY_MS=soon LD_PRELOAD=\"$SO\" "
                         "timeout 60 \"$FORKMAKE\"\n"
                         "echo rc $?\n",
                         out, sizeof out),
                      0);
    CU_ASSERT(strstr(out, "DLOCK_LOCK_DELAY_MS 'soon' is not a number") != NULL);
    CU_ASSERT(strstr(out, "child exit 0\n") != NULL);
    CU_ASSERT(strstr(out, "parent locked 1\n") != NULL);
    CU_ASSERT(strstr(out, "rc 0\n") != NULL);
    if (strstr(out, "child exit 0\n") == NULL || strstr(out, "rc 0\n") == NULL) dlt_out_show(out);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_nothing_loaded_without_mapped_lock),
    DLT_TEST(test_library_loaded_never_called),
    DLT_TEST(test_mapped_lock_loads_implementation),
    DLT_TEST(test_silent_unless_asked),
    DLT_TEST(test_implementation_missing),
    DLT_TEST(test_load_races_threads_fork_signals),
    DLT_TEST(test_fork_while_mutex_made),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    int rc;
    if (access(FLOCK, X_OK) != 0) {
        fprintf(stderr, "test_preload_lazy: %s is missing (Debian package util-linux)\n", FLOCK);
        return 1;
    }
    rc = dlt_main(argc, argv, "preload_lazy", tests);
    dlt_rm_tree(dir);
    return rc;
}
