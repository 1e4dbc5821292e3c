/* labels: preload redis; timeout: 240 */
/* test_keeper.c -- what happens to a program whose mapped file lock is
 * lost (DLOCK_ON_LOST, docs/preload.md): its lease ended (the server's key
 * deleted, as `dlock break` or a failover would), or its keeper process
 * was killed with SIGKILL.  The real flock(1) under libdlock_preload.so,
 * a real redis-server, each scenario a shell script run in a session and
 * process group of its own -- the "CI step" around the program, which
 * must survive and see the program's death status.
 */
#include <errno.h>
#include <signal.h>
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
    snprintf(dir, sizeof dir, "%s/dlkp-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        exit(1);
    }
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/A/locks'", dir);
    if (system(cmd) != 0) exit(1);
    /* $A runs a program as the preloaded "host" (env execs it: $! is its
     * pid); keeper_of P prints the
     * keeper processes whose parent is P; gone P says whether P has ended
     * (no process, or a zombie its new parent has not reaped yet); now
     * prints nanoseconds. */
    snprintf(prelude, sizeof prelude,
             "cd '%s' || exit 99\n"
             "echo $$ > pgid\n"
             "SO='%s'\n"
             "A=\"env LD_PRELOAD=$SO DLOCK_ROOT=%s/A DLOCK_MAP=file:locks/*.lock\"\n"
             "keeper_of() { for d in /proc/[0-9]*; do\n"
             "  { read -r _ _ _ pp _ < $d/stat; } 2>/dev/null || continue\n"
             "  [ \"$pp\" = \"$1\" ] && { tr '\\0' ' ' <$d/cmdline; } 2>/dev/null | grep -q -- --dlock-keeper && echo ${d#/proc/}; done; }\n"
             "gone() { s=; { read -r _ _ s _ < /proc/$1/stat; } 2>/dev/null; [ -z \"$s\" ] || [ \"$s\" = Z ]; }\n"
             "now() { date +%%s%%N; }\n"
             "wait_keeper() { i=0; K=; while [ -z \"$K\" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); K=$(keeper_of $1); done; }\n",
             dir, DLPL_SO, dir);
}

/* Runs the prelude plus script with `setsid -w sh` (a session and process
 * group of its own); stdout and stderr go to out.  Afterwards whatever is
 * left in that process group (a job the fix failed to stop) is killed.
 * Returns sh's exit status, 128+N if a signal killed it. */
static int sh(const char *script, char *out, size_t cap) {
    char path[512], *full;
    FILE *f, *p;
    int st;
    long pg = 0;
    setup_dir();
    snprintf(path, sizeof path, "%s/scenario.sh", dir);
    if ((f = fopen(path, "w")) == NULL) return -1;
    fprintf(f, "%s%s\n", prelude, script);
    fclose(f);
    if (asprintf(&full, "setsid -w sh '%s' 2>&1", path) < 0) return -1;
    p = popen(full, "r");
    free(full);
    if (p == NULL) return -1;
    st = dlt_pclose_read(p, out, cap);
    snprintf(path, sizeof path, "%s/pgid", dir);
    if ((f = fopen(path, "r")) != NULL) {
        if (fscanf(f, "%ld", &pg) == 1 && pg > 1 && pg != (long)getpgrp()) kill((pid_t)-pg, SIGKILL);
        fclose(f);
    }
    return st;
}

/* ------------------------------------------------ point 4: lost lease */

/* The lease ends (the server's key is deleted): with DLOCK_ON_LOST=abort
 * the program (flock) and the job it started die of SIGABRT; the script
 * around them, in the same process group, runs on and sees the status. */
static void test_lost_lease_abort_stops_program_only(void) {
    char script[4096], out[8192];
    int rc;
    snprintf(script, sizeof script,
             "DLOCK_ON_LOST=abort $A " FLOCK " -x A/locks/lease.lock sh -c 'sleep 20 & echo $! > child.pid; wait' & P=$!\n"
             "wait_keeper $P\n"
             "i=0; while [ ! -s child.pid ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done\n"
             "redis-cli -p %d del 'dlock:{locks/lease.lock}' >/dev/null\n"
             "wait $P; echo prog_rc $?\n"
             "sleep 0.3\n"
             "if gone $(cat child.pid); then echo child_gone 1; else echo child_gone 0; kill $(cat child.pid); fi\n"
             "echo script_alive 1\n",
             dlt_server.port);
    rc = sh(script, out, sizeof out);
    DLT_ASSERT_INT_EQ(rc, 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "script_alive"), 1);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "prog_rc"), 128 + SIGABRT);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "child_gone"), 1);
    CU_ASSERT(strstr(out, "DLOCK_ON_LOST=abort") != NULL);
    if (rc != 0 || dlt_out_num(out, "child_gone") != 1) dlt_out_show(out);
}

/* The shell idiom: flock(1) takes the lock on the subshell's descriptor 9
 * and exits; the subshell and its job hold it.  A lost lease stops those
 * holders -- not the script that started the subshell. */
static void test_lost_lease_abort_program_gone(void) {
    char script[4096], out[8192];
    int rc;
    snprintf(script, sizeof script,
             "( DLOCK_ON_LOST=abort $A " FLOCK " -x 9; echo locked > locked; sleep 20; echo NOT_REACHED ) 9>A/locks/fd.lock & S=$!\n"
             "i=0; while [ ! -s locked ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done\n"
             "sleep 0.3\n"
             "redis-cli -p %d del 'dlock:{locks/fd.lock}' >/dev/null\n"
             "wait $S; echo sub_rc $?\n"
             "echo script_alive 1\n",
             dlt_server.port);
    rc = sh(script, out, sizeof out);
    DLT_ASSERT_INT_EQ(rc, 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "script_alive"), 1);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "sub_rc"), 128 + SIGABRT);
    CU_ASSERT(strstr(out, "NOT_REACHED") == NULL);
    if (rc != 0 || dlt_out_num(out, "sub_rc") != 128 + SIGABRT) dlt_out_show(out);
}

/* --------------------------------------------- point 8: killed keeper */

/* `dlock status` names the program (flock's pid), not its keeper; a
 * keeper killed with SIGKILL is reported by the program within a second or
 * two (DLOCK_ON_LOST=warn), and the program runs on. */
static void test_killed_keeper_warns_and_status_names_program(void) {
    char script[4096], out[8192];
    int rc;
    long long warned;
    snprintf(script, sizeof script,
             /* its stdout not the scenario's, which is read to its end: the
              * sleep that outlives flock (killed below) would hold it open
              * for its 20 s; the process group's leftovers are killed once
              * the scenario has ended */
             "$A " FLOCK " -x A/locks/kw.lock sleep 20 >/dev/null 2>err.txt & P=$!\n"
             "wait_keeper $P\n"
             "echo prog $P; echo keeper $K\n"
             /* the keeper may still be taking the lock */
             "i=0; until '%s' status locks/kw.lock > status.txt 2>&1 && grep -q exclusive status.txt"
             " || [ $i -gt 100 ]; do sleep 0.05; i=$((i+1)); done\n"
             "grep -q \"pid $P, thread $P\" status.txt && echo status_names_program 1\n"
             "grep -q \"pid $K,\" status.txt && echo status_names_keeper 1\n"
             "t0=$(now); kill -9 $K\n"
             "i=0; until grep -q 'keeper process' err.txt || [ $i -gt 100 ]; do sleep 0.05; i=$((i+1)); done\n"
             "echo warned_ns $(( $(now) - t0 ))\n"
             "gone $P && echo prog_alive 0 || echo prog_alive 1\n"
             "kill $P; wait $P\n"
             "cat status.txt err.txt\n",
             DLOCK_CLI);
    rc = sh(script, out, sizeof out);
    DLT_ASSERT_INT_EQ(rc, 0);
    CU_ASSERT(dlt_out_num(out, "keeper") > 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "status_names_program"), 1);
    CU_ASSERT(dlt_out_num(out, "status_names_keeper") == -1);
    warned = dlt_out_num(out, "warned_ns");
    CU_ASSERT(warned > 0 && warned < 2500LL * 1000 * 1000);
    CU_ASSERT(strstr(out, "DLOCK_ON_LOST=warn") != NULL);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "prog_alive"), 1);
    if (rc != 0 || dlt_out_num(out, "status_names_program") != 1 || !(warned > 0 && warned < 2500LL * 1000 * 1000))
        dlt_out_show(out);
}

/* The same with DLOCK_ON_LOST=abort: the program and its job die, the
 * script around them does not. */
static void test_killed_keeper_abort(void) {
    char out[8192];
    int rc = sh("DLOCK_ON_LOST=abort $A " FLOCK " -x A/locks/ka.lock sh -c 'sleep 20 & echo $! > child.pid; wait' & P=$!\n"
                "wait_keeper $P\n"
                "i=0; while [ ! -s child.pid ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done\n"
                "t0=$(now); kill -9 $K\n"
                "wait $P; echo prog_rc $?; echo died_ns $(( $(now) - t0 ))\n"
                "sleep 0.3\n"
                "if gone $(cat child.pid); then echo child_gone 1; else echo child_gone 0; kill $(cat child.pid); fi\n"
                "echo script_alive 1\n",
                out, sizeof out);
    DLT_ASSERT_INT_EQ(rc, 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "script_alive"), 1);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "prog_rc"), 128 + SIGABRT);
    CU_ASSERT(dlt_out_num(out, "died_ns") > 0 && dlt_out_num(out, "died_ns") < 5000LL * 1000 * 1000);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "child_gone"), 1);
    if (rc != 0 || dlt_out_num(out, "prog_rc") != 128 + SIGABRT || dlt_out_num(out, "child_gone") != 1)
        dlt_out_show(out);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_lost_lease_abort_stops_program_only),
    DLT_TEST(test_lost_lease_abort_program_gone),
    DLT_TEST(test_killed_keeper_warns_and_status_names_program),
    DLT_TEST(test_killed_keeper_abort),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    int rc;
    if (access(FLOCK, X_OK) != 0) {
        fprintf(stderr, "test_keeper: %s is missing (Debian package util-linux)\n", FLOCK);
        return 1;
    }
    rc = dlt_main(argc, argv, "keeper", tests);
    dlt_rm_tree(dir);
    return rc;
}
