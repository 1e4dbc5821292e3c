/* labels: preload redis; timeout: 600 */
/* test_preload_reclock.c -- POSIX record locks under the LD_PRELOAD mode
 * (preload/range.c; docs/preload.md, "Record locks"), from the outside:
 * unmodified programs -- python3's fcntl module, the real sqlite3 and
 * tdbtool -- run with LD_PRELOAD=libdlock_preload.so against a real
 * redis-server.
 *
 * Two "hosts" on one machine are the same file under two roots
 * (DLOCK_ROOT=DIR/A and DIR/B) or two files that one rule maps to one
 * lock name (file:GLOB=NAME): the kernel never joins them, so every
 * exclusion between them is the server's range table.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fixture.h"
#include "proxy.h"

#define PY "/usr/bin/python3"
#define SQLITE "/usr/bin/sqlite3"
#define TDBTOOL "/usr/bin/tdbtool"

static char dir[256];
static char prelude[8192];

/* rl.py FILE OP...: record-lock requests on FILE, one line per request:
 *   set:TAG:T:START:LEN   F_SETLK (T r, w or u): "TAG 0" or "TAG ERRNO-NAME"
 *   setw:TAG:T:START:LEN  F_SETLKW
 *   get:TAG:T:START:LEN   F_GETLK: "TAG U", or "TAG R|W:START:LEN:PID"
 *   touch:NAME, wait:NAME a flag file in the scenario's folder
 *   oset, osetw, oget     the same with F_OFD_SETLK, F_OFD_SETLKW, F_OFD_GETLK
 *   file:PATH             the requests that follow are on PATH, opened anew
 *                         (a new open file description)
 *   close                 closes the current descriptor
 *   alarm:S               SIGALRM in S seconds, whose handler raises EINTR
 *   exec:PROG:ARG...      execv(PROG, [PROG, ARG...]), keeping the descriptor
 *   fork:TAG              a child tries F_SETLK of a write lock on 0..9
 *                         ("TAG 0" or the error), closes the descriptor and
 *                         exits; the parent waits for it
 *   sleep:S */
static const char rl_py[] =
    "import errno, fcntl, os, signal, struct, sys, time\n"
    "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)\n"
    "T = {'r': fcntl.F_RDLCK, 'w': fcntl.F_WRLCK, 'u': fcntl.F_UNLCK}\n"
    "C = {'set': fcntl.F_SETLK, 'setw': fcntl.F_SETLKW, 'get': fcntl.F_GETLK, 'oget': 36, 'oset': 37, 'osetw': 38}\n"
    "F = 'hhxxxxqqi4x'\n"
    "for a in sys.argv[2:]:\n"
    "    p = a.split(':')\n"
    "    if p[0] == 'file':\n"
    "        fd = os.open(p[1], os.O_RDWR | os.O_CREAT, 0o644)\n"
    "    elif p[0] == 'alarm':\n"
    "        def on_alarm(sig, frame): raise InterruptedError(errno.EINTR, 'alarm')\n"
    "        signal.signal(signal.SIGALRM, on_alarm)\n"
    "        signal.setitimer(signal.ITIMER_REAL, float(p[1]))\n"
    "    elif p[0] == 'exec':\n"
    "        os.set_inheritable(fd, True)\n"
    "        os.execv(p[1], p[1:])\n"
    "    elif p[0] == 'fork':\n"
    "        pid = os.fork()\n"
    "        if pid == 0:\n"
    "            try: fcntl.fcntl(fd, fcntl.F_SETLK, struct.pack(F, fcntl.F_WRLCK, 0, 0, 10, 0)); r = '0'\n"
    "            except OSError as e: r = errno.errorcode.get(e.errno, str(e.errno))\n"
    "            print(p[1], r, flush=True)\n"
    "            os.close(fd)\n"
    "            sys.exit(0)\n"
    "        os.waitpid(pid, 0)\n"
    "    elif p[0] == 'close':\n"
    "        os.close(fd)\n"
    "    elif p[0] == 'sleep':\n"
    "        time.sleep(float(p[1]))\n"
    "    elif p[0] == 'touch':\n"
    "        open('flag.' + p[1], 'w').close()\n"
    "    elif p[0] == 'wait':\n"
    "        t0 = time.time()\n"
    "        while not os.path.exists('flag.' + p[1]) and time.time() - t0 < 30: time.sleep(0.01)\n"
    "    else:\n"
    "        try:\n"
    "            r = fcntl.fcntl(fd, C[p[0]], struct.pack(F, T[p[2]], 0, int(p[3]), int(p[4]), 0))\n"
    "            if p[0] in ('get', 'oget'):\n"
    "                t, w, s, l, pid = struct.unpack(F, r)\n"
    "                out = 'U' if t == fcntl.F_UNLCK else '%s:%d:%d:%d' % ('R' if t == fcntl.F_RDLCK else 'W', s, l, pid)\n"
    "            else:\n"
    "                out = '0'\n"
    "        except OSError as e:\n"
    "            out = 'EDEADLK' if e.errno == errno.EDEADLK else errno.errorcode.get(e.errno, str(e.errno))\n"
    "        print(p[1], out, flush=True)\n";

static void setup_dir(void) {
    char cmd[1024], path[512];
    FILE *f;
    if (dir[0] != '\0') return;
    snprintf(dir, sizeof dir, "%s/dlrl-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        exit(1);
    }
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/A/locks' '%s/B/locks' '%s/s'", dir, dir, dir);
    if (system(cmd) != 0) exit(1);
    snprintf(path, sizeof path, "%s/rl.py", dir);
    if ((f = fopen(path, "w")) == NULL) exit(1);
    fputs(rl_py, f);
    fclose(f);
    /* A and B: the two "hosts" of one file (under their
     * roots, rule file:locks/ANY.lock); P: a program under the library with DLOCK_MAP from $MAP;
     * rows N TAG: the input of a sqlite3 writer of N rows; tx TAG: of one
     * that makes 100 write transactions, each adding one to s/counter
     * (read, some work, write back: overlapping transactions lose one). */
    snprintf(prelude, sizeof prelude,
             "cd '%s' || exit 99\n"
             "SO='%s'\n"
             "A() { LD_PRELOAD=\"$SO\" DLOCK_ROOT='%s/A' DLOCK_MAP='file:locks/*.lock' \"$@\"; }\n"
             "B() { LD_PRELOAD=\"$SO\" DLOCK_ROOT='%s/B' DLOCK_MAP='file:locks/*.lock' \"$@\"; }\n"
             "P() { LD_PRELOAD=\"$SO\" DLOCK_MAP=\"$MAP\" \"$@\"; }\n"
             "rl() { timeout 60 " PY " '%s/rl.py' \"$@\"; }\n"
             "now() { date +%%s%%N; }\n"
             "tx() { i=0; echo '.timeout 20000'; while [ $i -lt 100 ]; do\n"
             "  echo \"BEGIN IMMEDIATE; CREATE TEMP TABLE v AS SELECT CAST(readfile('s/counter') AS INTEGER) AS n;\"\n"
             "  echo \"SELECT count(*) FROM generate_series(1, 20000);\"\n"
             "  echo \"SELECT writefile('s/counter', (SELECT n + 1 FROM v)); DROP TABLE v;\"\n"
             "  echo \"INSERT INTO t VALUES('$1', $i); COMMIT;\"; i=$((i+1)); done; }\n"
             "rows() { i=0; echo '.timeout 5000'\n"
             "  while [ $i -lt $1 ]; do echo \"INSERT INTO t VALUES('$2',$i);\"; i=$((i+1)); done; }\n",
             dir, DLPL_SO, dir, dir, dir);
}

static int sh(const char *script, char *out, size_t cap) {
    setup_dir();
    return dlt_sh_scenario(dir, prelude, script, out, cap);
}

/* Does out have the line `line`? */
static int has(const char *out, const char *line) {
    size_t n = strlen(line);
    const char *p = out;
    while ((p = strstr(p, line)) != NULL) {
        if ((p == out || p[-1] == '\n') && (p[n] == '\n' || p[n] == '\0')) return 1;
        p += n;
    }
    return 0;
}

/* Asserts the scenario's exit status 0 and each line of want (NULL-ended)
 * in its output; shows the output when one is missing. */
static void check_lines(const char *out, int rc, const char *const want[]) {
    char msg[160];
    int bad = 0;
    size_t i;
    DLT_ASSERT_INT_EQ(rc, 0);
    for (i = 0; want[i] != NULL; i++) {
        if (has(out, want[i])) continue;
        fprintf(stderr, "  missing: %s\n", want[i]);
        snprintf(msg, sizeof msg, "missing line: %s", want[i]);
        CU_assertImplementation(CU_FALSE, __LINE__, msg, __FILE__, __func__, CU_FALSE);
        bad = 1;
    }
    if (bad || rc != 0) dlt_out_show(out);
}

/* Runs script with the flag files cleared first, then check_lines. */
static void expect_lines(const char *script, const char *const want[], char *out, size_t cap) {
    char full[4096];
    CU_ASSERT_FATAL(snprintf(full, sizeof full, "rm -f flag.*\n%s", script) < (int)sizeof full);
    check_lines(out, sh(full, out, cap), want);
}

/* ------------------------------------------------------------ byte ranges */

/* Disjoint ranges of one file do not exclude each other across hosts;
 * overlapping ones do as POSIX says (read with read, nothing with write);
 * F_GETLK reports the remote lock's own range, with l_pid -1. */
static void test_ranges_across_hosts(void) {
    static const char *const want[] = {
        "a1 0",
        "a2 0",
        "b1 0", /* 10..19 beside A's 0..9 */
        "b2 EAGAIN", /* 5..14 meets A's write */
        "b3 0", /* read beside A's read */
        "b4 EAGAIN", /* write on A's read */
        "b5 W:0:10:-1",
        "b6 U",
        "b7 U",
        "b8 W:0:10:-1",
        "c1 0", /* A's locks went with it */
        NULL,
    };
    char out[8192];
    expect_lines("A rl A/locks/r.lock set:a1:w:0:10 set:a2:r:20:10 touch:A wait:B &\n"
                 "B rl B/locks/r.lock wait:A set:b1:w:10:10 set:b2:w:5:10 set:b3:r:20:5 set:b4:w:25:1 "
                 "get:b5:w:0:100 get:b6:r:20:10 get:b7:w:40:5 get:b8:r:0:1 touch:B\n"
                 "wait\n"
                 "B rl B/locks/r.lock set:c1:w:0:100\n",
                 want, out, sizeof out);
}

/* An upgrade that fails keeps the read lock (atomic: the range is never
 * let go); a partial upgrade, an unlock in the middle (split) and a
 * relock of the hole (merge) leave exactly the ranges POSIX says. */
static void test_upgrade_split_merge(void) {
    static const char *const want[] = {
        "a1 0",
        "b1 0",
        "a2 EAGAIN", /* B reads 50..59 */
        "b2 R:0:100:-1", /* ...and A still holds its read lock */
        "a3 0", /* 0..49 now write, 50..99 still read */
        "b3 W:0:50:-1",
        "b3r 0",
        "b3w EAGAIN",
        "a4 0", /* split: write 0..9 and 20..49 */
        "b4 0", /* the hole */
        "b4a EAGAIN",
        "b4b EAGAIN",
        "a5 0", /* merged again: write 0..49 */
        "b5 W:0:50:-1",
        NULL,
    };
    char out[8192];
    expect_lines("A rl A/locks/u.lock set:a1:r:0:100 touch:A1 wait:B1 set:a2:w:0:100 touch:A2 wait:B2 "
                 "set:a3:w:0:50 touch:A3 wait:B3 set:a4:u:10:10 touch:A4 wait:B4 set:a5:w:10:10 touch:A5 wait:B5 &\n"
                 "B rl B/locks/u.lock wait:A1 set:b1:r:50:10 touch:B1 wait:A2 get:b2:w:0:10 set:b2u:u:50:10 touch:B2 "
                 "wait:A3 get:b3:w:0:100 set:b3r:r:60:10 set:b3w:w:49:1 set:b3u:u:60:10 touch:B3 wait:A4 "
                 "set:b4:w:10:10 set:b4a:w:9:1 set:b4b:w:20:1 set:b4u:u:10:10 touch:B4 wait:A5 get:b5:r:0:50 touch:B5\n"
                 "wait\n",
                 want, out, sizeof out);
}

/* OFD locks keep their ranges too, per open file description: disjoint
 * ranges at once across hosts, a conflict refused, F_OFD_GETLK sees the
 * remote range; two descriptions of one process exclude each other; the
 * close of the description's descriptor frees its ranges. */
static void test_ofd_ranges(void) {
    static const char *const want[] = {
        "a1 0",
        "a2 EAGAIN", /* another description of the same process */
        "a3 0",
        "b1 0", /* beside A's 0..9 */
        "b2 EAGAIN",
        "b3 W:0:10:-1",
        "b4 EAGAIN", /* a POSIX lock meets an OFD lock */
        "b5 0", /* A's second description was closed */
        "b6 EAGAIN", /* its first is still open */
        NULL,
    };
    char out[8192];
    expect_lines("A rl A/locks/o.lock oset:a1:w:0:10 file:A/locks/o.lock oset:a2:w:5:1 oset:a3:w:20:5 touch:A1 wait:B1 "
                 "close touch:A2 wait:B2 &\n"
                 "B rl B/locks/o.lock wait:A1 oset:b1:w:10:10 oset:b2:w:5:1 oget:b3:r:0:100 set:b4:r:0:1 touch:B1 wait:A2 "
                 "oset:b5:w:20:5 oset:b6:w:0:10 touch:B2\n"
                 "wait\n",
                 want, out, sizeof out);
}

/* F_SETLKW that would close a cycle across hosts fails with EDEADLK, as
 * the kernel's does on one host; the other waiter then gets its lock. */
static void test_edeadlk_across_hosts(void) {
    static const char *const want[] = {
        "a1 0",
        "b1 0",
        "b2 EDEADLK",
        "a2 0",
        NULL,
    };
    char out[8192];
    expect_lines("A rl A/locks/d.lock set:a1:w:0:1 touch:A1 wait:B1 setw:a2:w:1:1 &\n"
                 "B rl B/locks/d.lock wait:A1 set:b1:w:1:1 touch:B1 sleep:0.5 setw:b2:w:0:1\n"
                 "wait\n",
                 want, out, sizeof out);
}

/* A cycle through two files -- A holds x and waits for y, B holds y and
 * waits for x -- fails the request that closed it (B's, which came last)
 * with EDEADLK; A then gets y when B exits. */
static void test_edeadlk_two_files(void) {
    static const char *const want[] = {
        "a1 0",
        "b1 0",
        "b2 EDEADLK",
        "a2 0",
        NULL,
    };
    char out[8192];
    expect_lines("A rl A/locks/x.lock set:a1:w:0:1 touch:A1 wait:B1 file:A/locks/y.lock setw:a2:w:0:1 &\n"
                 "B rl B/locks/y.lock wait:A1 set:b1:w:0:1 touch:B1 sleep:0.5 file:B/locks/x.lock setw:b2:w:0:1\n"
                 "wait\n",
                 want, out, sizeof out);
}

/* A signal whose handler does not restart system calls ends an F_SETLKW
 * that waits for another host with EINTR, as the kernel's does (after
 * the alarm's second, not before); the holder is untouched. */
static void test_setlkw_eintr(void) {
    static const char *const want[] = {
        "a1 0",
        "b1 EINTR",
        "b2 EAGAIN", /* A still holds it */
        "a2 U",
        NULL,
    };
    char out[8192];
    expect_lines("A rl A/locks/i.lock set:a1:w:0:1 touch:A1 wait:B1 get:a2:w:0:1 &\n"
                 "B rl B/locks/i.lock wait:A1 alarm:1 setw:b1:w:0:1 touch:B1 set:b2:w:0:1 &\n"
                 "t0=$(now); wait; echo ms $(( ($(now) - t0) / 1000000 ))\n",
                 want, out, sizeof out);
    CU_ASSERT(dlt_out_num(out, "ms") >= 900 && dlt_out_num(out, "ms") < 10000);
}

/* A POSIX record lock survives exec in the kernel, and on the server:
 * the program exec'd (sleep, under the library too) takes the ranges
 * over and renews them past their lease (10 s), and they go when it
 * exits. */
static void test_exec_keeps_ranges(void) {
    static const char *const want[] = {
        "a1 0",
        "b1 W:0:10:-1", /* 12 s later: renewed by the exec'd program */
        "b2 0", /* gone with it */
        NULL,
    };
    char out[8192];
    expect_lines("A rl A/locks/e.lock set:a1:w:0:10 touch:A1 exec:/bin/sleep:13 &\n"
                 "B rl B/locks/e.lock wait:A1 sleep:12 get:b1:w:0:10\n"
                 "wait\n"
                 "B rl B/locks/e.lock set:b2:w:0:10\n",
                 want, out, sizeof out);
}

/* fork: the child holds none of its parent's record locks (it is refused
 * the parent's range, as by the kernel), and its close of the inherited
 * descriptor and its exit leave the parent's ranges where they are. */
static void test_fork_child_owns_nothing(void) {
    static const char *const want[] = {
        "a1 0",
        "a2 EAGAIN",
        "b1 W:0:10:-1",
        NULL,
    };
    char out[8192];
    expect_lines("A rl A/locks/f.lock set:a1:w:0:10 fork:a2 touch:A1 wait:B1 &\n"
                 "B rl B/locks/f.lock wait:A1 get:b1:w:0:10 touch:B1\n"
                 "wait\n",
                 want, out, sizeof out);
}

/* Waits up to 20 s for the scenario's flag file NAME: 1, or 0. */
static int flag_wait(const char *name) {
    char path[512];
    double t0 = dlt_now();
    snprintf(path, sizeof path, "%s/flag.%s", dir, name);
    while (access(path, F_OK) != 0) {
        if (dlt_now() - t0 > 20.0) return 0;
        dlt_sleep_ms(10);
    }
    return 1;
}

static void flag_touch(const char *name) {
    char path[512];
    FILE *f;
    snprintf(path, sizeof path, "%s/flag.%s", dir, name);
    if ((f = fopen(path, "w")) != NULL) fclose(f);
}

/* An unlock that did not reach the server (stopped) is sent again later
 * -- but before the same range's next lock, never after it: once the
 * server is back, A locks the range again and, past a renewal pass,
 * another host still finds it held.  (B holds a disjoint range first, so
 * that A is not alone on the file and keeps no cache: A's locks and
 * unlocks are the server's, and its unlock during the outage is owed.) */
static void test_unlock_owed_never_after_relock(void) {
    static const char *const want[] = {
        "b0 0",
        "a1 0",
        "a2 0", /* the kernel's unlock: the server's part is owed */
        "a3 0",
        "b3 W:0:10:-1",
        NULL,
    };
    char path[512], out[8192];
    FILE *f, *p;
    setup_dir();
    snprintf(path, sizeof path, "%s/scenario.sh", dir);
    CU_ASSERT_FATAL((f = fopen(path, "w")) != NULL);
    fprintf(f, "%srm -f flag.*\n"
               "A rl A/locks/s.lock wait:B0 set:a1:w:0:10 touch:A1 wait:S1 set:a2:u:0:10 touch:A2 wait:S2 "
               "set:a3:w:0:10 sleep:3.5 touch:A3 wait:B3 &\n"
               "B rl B/locks/s.lock set:b0:r:100:110 touch:B0 wait:A3 get:b3:w:0:10 touch:B3\n"
               "wait\n",
            prelude);
    fclose(f);
    snprintf(path, sizeof path, "sh '%s/scenario.sh' 2>&1", dir);
    CU_ASSERT_FATAL((p = popen(path, "r")) != NULL);
    CU_ASSERT(flag_wait("A1"));
    CU_ASSERT(dlt_redis_stop(&dlt_server) == 0);
    flag_touch("S1");
    CU_ASSERT(flag_wait("A2"));
    CU_ASSERT(dlt_redis_restart(&dlt_server) == 0);
    flag_touch("S2");
    check_lines(out, dlt_pclose_read(p, out, sizeof out), want);
}

/* ---------------------------------------------------------------- the cache */

/* A process alone on a file keeps the table's cache: 100 locks and
 * unlocks of a range cost no round trip.  Another host that asks meets
 * the cache, which is given back as the ranges the process holds: a
 * disjoint range is granted at once (F_SETLK, no EAGAIN), an overlapping
 * one refused, and F_GETLK sees the holder's own range. */
static void test_cache(void) {
    static const char *const want[] = {
        "l100 0",
        "a1 0",
        "b1 0",
        "b2 EAGAIN",
        "b3 W:0:10:-1",
        NULL,
    };
    char out[16384];
    expect_lines("calls() { redis-cli -u \"$DLOCK_URL\" info commandstats |"
                 " sed -n 's/^cmdstat_evalsha:calls=\\([0-9]*\\).*/\\1/p'; }\n"
                 "L=; i=1; while [ $i -le 100 ]; do L=\"$L set:l$i:w:0:10 set:u$i:u:0:10\"; i=$((i+1)); done\n"
                 "A rl A/locks/k.lock $L set:a1:w:0:10 touch:A wait:B &\n"
                 "while [ ! -e flag.A ]; do sleep 0.02; done\n"
                 "echo evalsha $(calls)\n"
                 "B rl B/locks/k.lock set:b1:w:20:10 set:b2:w:5:1 get:b3:w:0:100 touch:B\n"
                 "wait\n",
                 want, out, sizeof out);
    /* the first lock, and a renewal or two: not one per call (202 calls) */
    CU_ASSERT(dlt_out_num(out, "evalsha") >= 1 && dlt_out_num(out, "evalsha") <= 5);
    printf("  100 locks and unlocks alone on a file: %lld requests\n", dlt_out_num(out, "evalsha"));
    if (dlt_out_num(out, "evalsha") < 1 || dlt_out_num(out, "evalsha") > 5) dlt_out_show(out);
}

/* ------------------------------------------------ dlock status, list, break */

/* `dlock status` shows a file's ranges (holder, range, type), `dlock
 * list` its table, and `dlock break --ranges` clears them: the other host
 * then gets the range, and the owner learns at its next renewal that it
 * lost its record locks. */
static void test_cli_ranges(void) {
    static const char *const want[] = {
        "keeps the cache", /* A alone on the file */
        "b1 EAGAIN", /* A's write (its cache given back), before the break */
        "holds write bytes 0-9",
        "holds read bytes 20-29",
        "list locks/c.lock#fcntl 1 2",
        "cleared the record locks of 1 owner",
        "b2 0", /* after it */
        "\"record_locks\":[{\"owner\"", /* B's, now */
        "\"start\":0,\"end\":9,\"type\":\"write\"",
        "lost 1",
        NULL,
    };
    char out[8192];
    expect_lines("A rl A/locks/c.lock set:a1:w:0:10 set:a2:r:20:10 touch:A wait:S sleep:3 >outA 2>errA &\n"
                 "while [ ! -e flag.A ]; do sleep 0.02; done\n"
                 "'" DLOCK_CLI "' status locks/c.lock | grep -o 'keeps the cache'\n"
                 "B rl B/locks/c.lock set:b1:w:0:10\n"
                 "'" DLOCK_CLI "' status locks/c.lock | grep -o 'holds [a-z]* bytes [0-9EOF-]*'\n"
                 "'" DLOCK_CLI "' list 'locks/*' | awk '$2 == \"record\" { print \"list\", $1, $4, $5 }'\n"
                 "'" DLOCK_CLI "' break --force --ranges locks/c.lock | grep -o 'cleared the record locks of 1 owner'\n"
                 "B rl B/locks/c.lock set:b2:w:0:10 touch:B wait:S &\n"
                 "while [ ! -e flag.B ]; do sleep 0.02; done\n"
                 "'" DLOCK_CLI "' status --json locks/c.lock | grep -o '\"record_locks\":\\[{\"owner\"'\n"
                 "'" DLOCK_CLI "' status --json locks/c.lock | grep -o '\"start\":0,\"end\":9,\"type\":\"write\"'\n"
                 "touch flag.S; wait\n"
                 "echo lost $(grep -c 'record locks of this process were lost' errA)\n",
                 want, out, sizeof out);
}

/* A lock whose answer comes after the one-attempt bound (F_SETLK: 200
 * ms) was granted on the server all the same; the process, told nothing,
 * took the kernel's lock alone (DLOCK_ON_ERROR=open).  Its unlock then
 * reaches the server too, so the other host gets the range at once, as
 * on one host -- not EAGAIN until the lease runs out. */
static void test_late_answer_leaves_no_range(void) {
    static const char *const want[] = {
        "a0 U",
        "a1 0",
        "a2 0",
        "b1 0",
        NULL,
    };
    char path[512], out[8192];
    dlt_proxy *px;
    FILE *f, *p;
    setup_dir();
    CU_ASSERT_FATAL((px = dlt_proxy_start(dlt_server.port)) != NULL);
    snprintf(path, sizeof path, "%s/scenario.sh", dir);
    CU_ASSERT_FATAL((f = fopen(path, "w")) != NULL);
    fprintf(f, "%srm -f flag.*\n"
               "( export DLOCK_URL='%s'; A rl A/locks/q.lock get:a0:w:50:1 touch:A0 wait:S0 set:a1:w:0:10 touch:A1 "
               "wait:S1 set:a2:u:0:10 touch:A2 wait:B1 ) &\n"
               "B rl B/locks/q.lock wait:A2 set:b1:w:0:10 touch:B1\n"
               "wait\n",
            prelude, dlt_proxy_url(px));
    fclose(f);
    snprintf(path, sizeof path, "sh '%s/scenario.sh' 2>&1", dir);
    CU_ASSERT_FATAL((p = popen(path, "r")) != NULL);
    CU_ASSERT(flag_wait("A0")); /* A's connection made, the script known */
    dlt_proxy_set(px, DLT_PROXY_DELAY, 600, NULL, 0);
    flag_touch("S0");
    CU_ASSERT(flag_wait("A1"));
    dlt_sleep_ms(700); /* the late answer has come */
    dlt_proxy_pass(px);
    dlt_sleep_ms(600); /* and the program's breaker asks the server again */
    flag_touch("S1");
    check_lines(out, dlt_pclose_read(p, out, sizeof out), want);
    dlt_proxy_stop(px);
}

/* ---------------------------------------------------------------- sqlite3 */

/* Two sqlite3 writers, 200 rows each, into one mapped database: 400
 * rows, both exit 0, nothing on stderr -- as without the library.  url:
 * DLOCK_URL (NULL: the suite's server). */
static void sqlite_pair(const char *mode, const char *url) {
    char script[4096], out[16384];
    int rc, bad = 0, run;
    for (run = 0; run < 2; run++) {
        snprintf(script, sizeof script,
                 "%s%s%s"
                 "rm -rf db && mkdir db && " SQLITE " db/x.db 'PRAGMA journal_mode=%s; CREATE TABLE t(a, b);' >/dev/null || exit 2\n"
                 "MAP=\"file:$PWD/db/*\"\n"
                 "t0=$(now)\n"
                 "rows 200 A %s | P " SQLITE " db/x.db >/dev/null 2>errA & PA=$!\n"
                 "rows 200 B %s | P " SQLITE " db/x.db >/dev/null 2>errB & PB=$!\n"
                 "wait $PA; echo rcA $?\n"
                 "wait $PB; echo rcB $?\n"
                 "echo ms $(( ($(now) - t0) / 1000000 ))\n"
                 "echo rows $(" SQLITE " db/x.db 'SELECT count(*) FROM t')\n"
                 "echo errs $(grep -v '^dlock: ' errA errB | wc -l)\n"
                 "grep -h '' errA errB | head -5\n",
                 url ? "export DLOCK_URL='" : "", url ? url : "", url ? "'\n" : "", mode[0] == 'w' ? "WAL" : "DELETE",
                 mode, mode);
        rc = sh(script, out, sizeof out);
        DLT_ASSERT_INT_EQ(rc, 0);
        DLT_ASSERT_INT_EQ(dlt_out_num(out, "rcA"), 0);
        DLT_ASSERT_INT_EQ(dlt_out_num(out, "rcB"), 0);
        DLT_ASSERT_INT_EQ(dlt_out_num(out, "rows"), 400);
        DLT_ASSERT_INT_EQ(dlt_out_num(out, "errs"), 0);
        if (dlt_out_num(out, "rows") != 400 || dlt_out_num(out, "errs") != 0 || rc != 0) bad = 1;
        printf("  sqlite3 %s%s, 2 x 200 rows: %lld ms\n", mode, url ? " (server down)" : "", dlt_out_num(out, "ms"));
    }
    if (bad) dlt_out_show(out);
}

static void test_sqlite_rollback(void) {
    sqlite_pair("rollback", NULL);
}

static void test_sqlite_wal(void) {
    sqlite_pair("wal", NULL);
}

/* Server down, DLOCK_ON_ERROR=open (the default): the writers behave as
 * without the library (no "disk I/O error"). */
static void test_sqlite_server_down(void) {
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", dlt_free_port());
    sqlite_pair("rollback", url);
    sqlite_pair("wal", url);
}

/* Two "hosts" whose sqlite3 writers use different databases that one
 * rule maps to one lock name: only the server can exclude them.  Each
 * transaction (BEGIN IMMEDIATE: a write lock on SQLite's reserved byte)
 * reads a counter file, burns some time and writes it back plus one: an
 * overlap of two transactions loses an increment. */
static void test_sqlite_two_dbs_one_name(void) {
    char out[16384];
    int rc;
    rc = sh("rm -rf s && mkdir s && echo 0 > s/counter || exit 2\n"
            "for h in a b; do " SQLITE " s/$h.db 'CREATE TABLE t(a, b);' || exit 2; done\n"
            "MAP=\"file:$PWD/s/*.db=shared/db\"\n"

            "tx a | P " SQLITE " s/a.db >/dev/null 2>erra & PA=$!\n"
            "tx b | P " SQLITE " s/b.db >/dev/null 2>errb & PB=$!\n"
            "wait $PA; echo rca $?\n"
            "wait $PB; echo rcb $?\n"
            "echo counter $(cat s/counter)\n"
            "echo errs $(grep -v '^dlock: ' erra errb | wc -l)\n",
            out, sizeof out);
    DLT_ASSERT_INT_EQ(rc, 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "rca"), 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "rcb"), 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "counter"), 200);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "errs"), 0);
    if (dlt_out_num(out, "counter") != 200 || rc != 0) dlt_out_show(out);
}

/* The same from two network namespaces joined by a veth pair, the
 * redis-server in one of them: two real "hosts" whose sqlite3 writers
 * use different databases that one rule maps to one lock name. */
static void test_sqlite_two_hosts_netns(void) {
    char setup[4096], script[8192], out[16384];
    int rc;
    if (!dlt_netns_ok("test_sqlite_two_hosts_netns", NULL)) return;
    CU_ASSERT_FATAL(dlt_netns_setup(setup, sizeof setup, "dlrl", 214, 6391, "\"$PWD/net\"") == 0);
    snprintf(script, sizeof script,
             "%s"
             "rm -rf s && mkdir s && echo 0 > s/counter || exit 2\n"
             "for h in a b; do " SQLITE " s/$h.db 'CREATE TABLE t(a, b);' || exit 2; done\n"
             "H() { h=$1; shift; ip netns exec $ns$h env DLOCK_URL=redis://$SRV:$PORT LD_PRELOAD=\"$SO\""
             " DLOCK_MAP=\"file:$PWD/s/*.db=shared/db\" \"$@\"; }\n"
             "tx a | H a " SQLITE " s/a.db >/dev/null 2>erra & PA=$!\n"
             "tx b | H b " SQLITE " s/b.db >/dev/null 2>errb & PB=$!\n"
             "wait $PA; echo rca $?\n"
             "wait $PB; echo rcb $?\n"
             "echo counter $(cat s/counter)\n"
             "echo errs $(grep -v '^dlock: ' erra errb | wc -l)\n"
             "echo evalsha $(ip netns exec $NA redis-cli -h $SRV -p $PORT info commandstats | grep -c cmdstat_evalsha)\n",
             setup);
    rc = sh(script, out, sizeof out);
    DLT_ASSERT_INT_EQ(rc, 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "rca"), 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "rcb"), 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "counter"), 200);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "errs"), 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "evalsha"), 1); /* the writers asked the server in the other namespace */
    if (dlt_out_num(out, "counter") != 200 || rc != 0) dlt_out_show(out);
    {
        char chk[128];
        snprintf(chk, sizeof chk, "ip netns list | grep -q dlrl%ld", (long)getpid());
        CU_ASSERT(system(chk) != 0); /* the namespaces are gone */
    }
}

/* ---------------------------------------------------------------- tdbtool */

/* Two tdbtool processes store 200 records each into one mapped tdb (its
 * chain and free-list locks are F_SETLKW of one byte each): 400 records,
 * an intact database, nothing on stderr (no false EDEADLK), and well
 * under 1.5 s (about 0.1 s; without the library 0.01 s; with a keeper
 * process asked at every lock call, 2.5 to 8 s). */
static void test_tdbtool_pair(void) {
    char out[8192];
    int rc;
    rc = sh("rm -f s/x.tdb && echo 'create s/x.tdb' | " TDBTOOL " >/dev/null || exit 2\n"
            "MAP=\"file:$PWD/s/*.tdb\"\n"
            "gen() { i=0; while [ $i -lt 200 ]; do echo \"store $1$i v$i\"; i=$((i+1)); done; }\n"
            "t0=$(now)\n"
            "gen a | P " TDBTOOL " s/x.tdb >/dev/null 2>erra & PA=$!\n"
            "gen b | P " TDBTOOL " s/x.tdb >/dev/null 2>errb & PB=$!\n"
            "wait $PA; echo rca $?\n"
            "wait $PB; echo rcb $?\n"
            "echo ms $(( ($(now) - t0) / 1000000 ))\n"
            "echo keys $(" TDBTOOL " s/x.tdb keys | grep -c '^key')\n"
            "echo check | " TDBTOOL " s/x.tdb | grep -c 'integrity is OK' | sed 's/^/ok /'\n"
            "echo errs $(grep -v '^dlock: ' erra errb | wc -l)\n"
            "grep -h '' erra errb | head -5\n",
            out, sizeof out);
    DLT_ASSERT_INT_EQ(rc, 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "rca"), 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "rcb"), 0);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "keys"), 400);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "ok"), 1);
    DLT_ASSERT_INT_EQ(dlt_out_num(out, "errs"), 0);
    CU_ASSERT(dlt_out_num(out, "ms") >= 0 && dlt_out_num(out, "ms") < 1500);
    printf("  tdbtool, 2 x 200 stores: %lld ms\n", dlt_out_num(out, "ms"));
    if (dlt_out_num(out, "keys") != 400 || dlt_out_num(out, "errs") != 0 || rc != 0) dlt_out_show(out);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_ranges_across_hosts),
    DLT_TEST(test_upgrade_split_merge),
    DLT_TEST(test_ofd_ranges),
    DLT_TEST(test_edeadlk_across_hosts),
    DLT_TEST(test_edeadlk_two_files),
    DLT_TEST(test_setlkw_eintr),
    DLT_TEST(test_exec_keeps_ranges),
    DLT_TEST(test_fork_child_owns_nothing),
    DLT_TEST(test_unlock_owed_never_after_relock),
    DLT_TEST(test_late_answer_leaves_no_range),
    DLT_TEST(test_cache),
    DLT_TEST(test_cli_ranges),
    DLT_TEST(test_sqlite_rollback),
    DLT_TEST(test_sqlite_wal),
    DLT_TEST(test_sqlite_server_down),
    DLT_TEST(test_sqlite_two_dbs_one_name),
    DLT_TEST(test_sqlite_two_hosts_netns),
    DLT_TEST(test_tdbtool_pair),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    int rc;
    const char *need[] = { PY, SQLITE, TDBTOOL, NULL };
    size_t i;
    for (i = 0; need[i] != NULL; i++) {
        if (access(need[i], X_OK) != 0) {
            fprintf(stderr, "test_preload_reclock: %s is missing (Debian packages python3, sqlite3, tdb-tools)\n",
                    need[i]);
            return 1;
        }
    }
    rc = dlt_main(argc, argv, "preload_reclock", tests);
    dlt_rm_tree(dir);
    return rc;
}
