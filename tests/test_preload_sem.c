/* labels: preload redis; timeout: 300 */
/* test_preload_sem.c -- POSIX named semaphores of an unmodified program
 * (tests/preload/dlpl_sem.c) under libdlock_preload.so with `sem:` rules,
 * against the suite's real redis-server: K units shared by processes of
 * two "hosts" (two local semaphore names that one rule maps to one
 * cluster semaphore, so the kernel never joins them), sem_* results and
 * errno as glibc's, unmatched and unnamed semaphores local and unseen by
 * the server, an unreachable server in fail-open and fail-closed mode;
 * and the same bound between two network namespaces joined by a veth
 * pair, the redis-server in one of them (test_sem_two_hosts_netns: needs
 * root and ip(8), and fails without them).  With tests/preload/dlpl_semx.c
 * (PROGX): a signal handler ends a mapped wait with EINTR as glibc's
 * (unless SA_RESTART, for sem_wait), sem_open without O_CREAT of a name
 * that exists nowhere is ENOENT and finds one only the server has, and a
 * `sem+undo:` rule's unit taken by a process killed with SIGKILL comes
 * back, where a `sem:` rule's is lost.
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
    snprintf(dir, sizeof dir, "%s/dlps-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        exit(1);
    }
    snprintf(tag, sizeof tag, "dlps%d", (int)getpid());
    /* P runs the helper under the library; T is this run's name tag. */
    snprintf(prelude, sizeof prelude,
             "cd '%s' || exit 99\n"
             "SO='%s'\nPROG='%s'\nPROGX='%s'\nT='%s'\n"
             "P() { LD_PRELOAD=\"$SO\" \"$@\"; }\n",
             dir, DLPL_SO, DLPL_SEM, DLPL_SEMX, tag);
}

static void cleanup_dir(void) {
    char cmd[512];
    if (dir[0] == '\0') return;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'; rm -f /dev/shm/sem.%s*", dir, tag);
    (void)!system(cmd);
}

/* Runs the prelude plus script in sh; stdout and stderr to out.  Returns
 * sh's exit status. */
static int sh(const char *script, char *out, size_t cap) {
    setup_dir();
    return dlt_sh_scenario(dir, prelude, script, out, cap);
}

/* The largest "peak N" in out. */
static int max_peak(const char *out) {
    int m = -1, v;
    const char *p = out;
    while ((p = strstr(p, "peak ")) != NULL) {
        v = atoi(p + 5);
        if (v > m) m = v;
        p += 5;
    }
    return m;
}

/* The cluster semaphore's value, read through the library. */
static int cluster_value(const char *name) {
    dlock_sem_t s;
    int v = -100;
    if (dlock_sem_init(&s, name, 0, NULL) != 0) return -101;
    if (dlock_sem_getvalue(&s, &v) != 0) v = -102;
    dlock_sem_destroy(&s);
    return v;
}

/* Three processes on each "host", K = 2: /T-A and /T-B are two local
 * semaphores (the kernel never joins them), one rule maps both to the
 * cluster semaphore "pool": never more than 2 inside, all 120 entries
 * made, the value 2 again at the end.  Without the library the same run
 * lets up to 4 in (said, not asserted: it is timing). */
static void test_sem_two_hosts_bound(void) {
    char out[8192];
    int rc = sh("export DLOCK_MAP=\"sem:/$T-?=pool\"\n"
                "for i in 1 2 3; do\n"
                "  P \"$PROG\" count /$T-A 2 20 shm & P \"$PROG\" count /$T-B 2 20 shm &\n"
                "done\n"
                "wait\n"
                "echo entries $(od -An -t d4 -j 8 -N 4 shm)\n",
                out, sizeof out);
    if (rc != 0 || max_peak(out) != 2) dlt_out_show(out);
    DLT_ASSERT_INT_EQ(rc, 0);
    DLT_ASSERT_INT_EQ(dlt_out_count(out, "peak "), 6);
    DLT_ASSERT_INT_EQ(max_peak(out), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "entries 120"));
    DLT_ASSERT_INT_EQ(cluster_value("pool"), 2);
    rc = sh("rm -f shm2; for i in 1 2 3; do \"$PROG\" count /$T-C 2 20 shm2 & \"$PROG\" count /$T-D 2 20 shm2 & done; "
            "wait",
            out, sizeof out);
    fprintf(stderr, "  (without the library: peak %d)\n", max_peak(out));
}

/* The calls and their errno, as glibc's: trywait EAGAIN, timedwait and
 * clockwait ETIMEDOUT, getvalue, post, EOVERFLOW past SEM_VALUE_MAX; the
 * semaphore is the server's (its key is there); an unnamed semaphore in
 * the same program stays local. */
static void test_sem_calls_and_errno(void) {
    char out[8192];
    int rc = sh("export DLOCK_MAP=\"sem:$T-*\"\n"
                "P \"$PROG\" basic /$T-basic 2 && P \"$PROG\" max /$T-max\n",
                out, sizeof out);
    if (rc != 0) dlt_out_show(out);
    DLT_ASSERT_INT_EQ(rc, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "value 2"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "overflow"));
    {
        char name[64];
        snprintf(name, sizeof name, "/%s-basic", tag);
        DLT_ASSERT_INT_EQ(cluster_value(name), 2);
    }
    /* the first process's units are the next one's: 2, not 2 more */
    rc = sh("export DLOCK_MAP=\"sem:$T-*\"\nP \"$PROG\" basic /$T-basic 2\n", out, sizeof out);
    DLT_ASSERT_INT_EQ(rc, 0);
}

/* A name no rule matches is the local semaphore, and the server hears
 * nothing of it. */
static void test_sem_unmatched_local(void) {
    char out[8192];
    int rc = sh("export DLOCK_MAP=\"sem:/nothing-here*\"\n"
                "P \"$PROG\" basic /$T-local 3 && P \"$PROG\" max /$T-localmax\n",
                out, sizeof out);
    if (rc != 0) dlt_out_show(out);
    DLT_ASSERT_INT_EQ(rc, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "value 3"));
    DLT_ASSERT_INT_EQ(dlt_redis_keys_count(&dlt_server, "*sem*"), 0);
}

/* The server unreachable: DLOCK_ON_ERROR=open takes the local semaphore
 * (processes of one host still exclude each other), with one message per
 * host and outage (the host-wide outage record); closed: sem_trywait
 * fails with EAGAIN. */
static void test_sem_unreachable(void) {
    char out[16384], script[1024];
    int port = dlt_free_port(), rc;
    snprintf(script, sizeof script,
             "export DLOCK_URL='redis://127.0.0.1:%d?unreachable_ms=500' DLOCK_MAP=\"sem:$T-*\"\n"
             "rm -f shm3\n"
             "P \"$PROG\" count /$T-open 1 10 shm3 & P \"$PROG\" count /$T-open 1 10 shm3 &\n"
             "wait\n"
             "DLOCK_ON_ERROR=closed P \"$PROG\" basic /$T-closed 1; echo closed_rc $?\n",
             port);
    rc = sh(script, out, sizeof out);
    if (rc != 0 || max_peak(out) != 1) dlt_out_show(out);
    DLT_ASSERT_INT_EQ(rc, 0);
    DLT_ASSERT_INT_EQ(dlt_out_count(out, "peak "), 2);
    DLT_ASSERT_INT_EQ(max_peak(out), 1);
    DLT_ASSERT_INT_EQ(dlt_out_count(out, "DLOCK_ON_ERROR=open"), 1); /* once per host, not per program */
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "FAIL sem_trywait: Resource temporarily unavailable"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "closed_rc 1"));
}

/* ------------------------------------------------ two network namespaces */

/* Two "hosts" that are two network namespaces joined by a veth pair, as
 * test_preload.c's test_two_hosts_netns makes them: the redis-server in
 * the first, reached at 10.213.X.1 from both.  Three processes on each
 * host run the unmodified helper, host a on its local semaphore /T-A,
 * host b on /T-B (the kernel never joins them: two names), one rule
 * mapping both to the cluster semaphore "pool" of value 2.  Each process
 * counts who is inside in one shared file (the hosts share the file
 * system, not the network): the peak of all six is 2, every one of the
 * 120 entries made, the server's value 2 again at the end and its script
 * called (the units went over the veth).  Needs root and ip(8): fails
 * without them, as test_two_hosts_netns does. */
static void test_sem_two_hosts_netns(void) {
    char setup[4096], script[8192], out[16384];
    int rc;
    if (!dlt_netns_ok("test_sem_two_hosts_netns", NULL)) return;
    CU_ASSERT_FATAL(dlt_netns_setup(setup, sizeof setup, "dlps", 213, 6391, "\"$PWD/net\"") == 0);
    snprintf(script, sizeof script,
             "%s"
             "H() { h=$1; shift; ip netns exec $ns$h env DLOCK_URL=redis://$SRV:$PORT LD_PRELOAD=\"$SO\""
             " DLOCK_MAP=\"sem:/$T-?=pool\" \"$@\"; }\n"
             "rm -f net/shm\n"
             "J=; for i in 1 2 3; do\n"
             "  H a \"$PROG\" count /$T-A 2 20 net/shm & J=\"$J $!\"\n"
             "  H b \"$PROG\" count /$T-B 2 20 net/shm & J=\"$J $!\"\n"
             "done\n"
             "wait_rc=0; for j in $J; do wait $j || wait_rc=1; done\n"
             "echo jobs_rc $wait_rc\n"
             "echo entries $(od -An -t d4 -j 8 -N 4 net/shm)\n"
             "echo value $(ip netns exec $NB redis-cli -h $SRV -p $PORT get 'dlock:{pool}:sem')\n"
             "echo evalsha $(ip netns exec $NA redis-cli -h $SRV -p $PORT info commandstats |"
             " sed -n 's/^cmdstat_evalsha:calls=\\([0-9]*\\).*/\\1/p')\n",
             setup);
    rc = sh(script, out, sizeof out);
    if (rc != 0 || max_peak(out) != 2 || strstr(out, "entries 120") == NULL) dlt_out_show(out);
    DLT_ASSERT_INT_EQ(rc, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "jobs_rc 0"));
    DLT_ASSERT_INT_EQ(dlt_out_count(out, "peak "), 6);
    DLT_ASSERT_INT_EQ(max_peak(out), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "entries 120"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "value 2\n"));
    {
        const char *e = strstr(out, "evalsha ");
        CU_ASSERT(e != NULL && atoi(e + 8) >= 240); /* a take and a post per entry, at least */
    }
    {
        char chk[128];
        snprintf(chk, sizeof chk, "ip netns list | grep -q dlps%ld", (long)getpid());
        CU_ASSERT(system(chk) != 0); /* the namespaces are gone */
    }
}

/* ------------------------------------------- python3's multiprocessing */

#define PYTHON "/usr/bin/python3"

/* Writes text to the file name in dir: 0, or -1. */
static int write_file(const char *name, const char *text) {
    char path[512];
    FILE *f;
    setup_dir();
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if ((f = fopen(path, "w")) == NULL) return -1;
    fputs(text, f);
    return fclose(f) == 0 ? 0 : -1;
}

/* mp_count.py LOG N METHOD: a multiprocessing.Semaphore(2) and three
 * multiprocessing workers started by METHOD that each N times acquire
 * it, append "E <CLOCK_MONOTONIC ns>" to LOG (O_APPEND), stay 3 ms,
 * append "L <ns>" and release.  With "fork" the semaphore is sem_open of
 * a fresh "/mp-XXXXXXXX", O_CREAT|O_EXCL, unlinked at once, and the
 * workers inherit it; with "spawn" it is unlinked only at the end (by
 * python's resource tracker, another process), and each worker, a new
 * interpreter, opens it again by name (sem_open without O_CREAT). */
static const char mp_count_py[] =
    "import multiprocessing as mp, os, sys, time\n"
    "def worker(sem, log, n):\n"
    "    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)\n"
    "    for _ in range(n):\n"
    "        sem.acquire()\n"
    "        os.write(fd, b'E %d\\n' % time.monotonic_ns())\n"
    "        time.sleep(0.003)\n"
    "        os.write(fd, b'L %d\\n' % time.monotonic_ns())\n"
    "        sem.release()\n"
    "    os.close(fd)\n"
    "if __name__ == '__main__':\n"
    "    mp.set_start_method(sys.argv[3])\n"
    "    sem = mp.Semaphore(2)\n"
    "    ps = [mp.Process(target=worker, args=(sem, sys.argv[1], int(sys.argv[2]))) for _ in range(3)]\n"
    "    for p in ps: p.start()\n"
    "    for p in ps: p.join()\n"
    "    print('exitcodes', *[p.exitcode for p in ps])\n"
    "    sys.exit(0 if all(p.exitcode == 0 for p in ps) else 1)\n";

/* mp_hold.py ROLE: a multiprocessing.Semaphore(2) each; "holder" takes
 * both units, says so (file held), waits for the peer's look (file seen),
 * holds 0.3 s more and releases them; "peer" waits for held, then a
 * non-blocking acquire (sem_trywait) and get_value (sem_getvalue) say
 * what it sees, then acquire(timeout=10) (sem_trywait, then
 * sem_timedwait) waits for the holder's release.  Files wait 10 s at
 * most. */
static const char mp_hold_py[] =
    "import multiprocessing as mp, os, sys, time\n"
    "def say(s):\n" /* one write(2): the two programs share the pipe */
    "    os.write(1, (s + '\\n').encode())\n"
    "def wait_for(f):\n"
    "    end = time.monotonic() + 10\n"
    "    while not os.path.exists(f):\n"
    "        if time.monotonic() > end: say('no ' + f); sys.exit(1)\n"
    "        time.sleep(0.01)\n"
    "sem = mp.Semaphore(2)\n"
    "if sys.argv[1] == 'holder':\n"
    "    sem.acquire(); sem.acquire()\n"
    "    open('held', 'w').close()\n"
    "    wait_for('seen')\n"
    "    time.sleep(0.3)\n"
    "    sem.release(); sem.release()\n"
    "    say('holder released')\n"
    "else:\n"
    "    wait_for('held')\n"
    "    say('peer try %s value %d' % (sem.acquire(False), sem.get_value()))\n"
    "    open('seen', 'w').close()\n"
    "    say('peer acquired %s' % sem.acquire(timeout=10))\n"
    "    sem.release()\n";

/* The largest number of E's not yet matched by L's in the log file,
 * events in time order (an L first where two tie: a release comes
 * before the acquire it lets through); -1 if the log is unreadable. */
static int log_peak(const char *name, int *events) {
    char path[512], line[64];
    long long *t;
    int n = 0, cap = 4096, i, j, in = 0, peak = 0;
    FILE *f;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if ((f = fopen(path, "r")) == NULL) return -1;
    if ((t = malloc(sizeof *t * (size_t)cap)) == NULL) {
        fclose(f);
        return -1;
    }
    /* each event as 2 * time + (0 for L, 1 for E): sorting puts L first on a tie */
    while (n < cap && fgets(line, sizeof line, f) != NULL)
        if ((line[0] == 'E' || line[0] == 'L') && line[1] == ' ')
            t[n++] = 2 * atoll(line + 2) + (line[0] == 'E');
    fclose(f);
    for (i = 1; i < n; i++) /* insertion sort: a few hundred events */
        for (j = i; j > 0 && t[j - 1] > t[j]; j--) {
            long long x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    for (i = 0; i < n; i++) {
        in += (t[i] & 1) ? 1 : -1;
        if (in > peak) peak = in;
    }
    free(t);
    *events = n;
    return peak;
}

/* Debian's python3, unmodified: its multiprocessing.Semaphore is a
 * POSIX named semaphore ("/mp-" and a random suffix, made with
 * O_CREAT|O_EXCL and unlinked at once; sem_trywait, sem_wait,
 * sem_timedwait, sem_post, sem_getvalue, through libc's versioned
 * symbols).  One rule, sem:/mp-*=T-py, makes every such semaphore of two
 * separate interpreters one cluster semaphore of value 2 (each made its
 * own Semaphore(2): the first made the cluster's, the second joined it).
 * The rule catches every multiprocessing primitive of a program (Lock,
 * RLock, Queue's locks: all are "/mp-..." semaphores) into that one
 * semaphore; these programs have no other.
 * Each interpreter starts three workers, one by fork, the other by spawn
 * (new interpreters that open the semaphore again by name): the peak of
 * concurrent holders over all six, from their timestamps on the
 * monotonic clock, is 2, and the server's value 2 at the end.  Then
 * one interpreter holds both units: the other's non-blocking acquire
 * fails and it sees the value 0, and its acquire with a timeout gets a
 * unit once the first releases. */
static void test_sem_python_multiprocessing(void) {
    char out[8192], name[64];
    int rc, events = 0, peak;
    if (access(PYTHON, X_OK) != 0) {
        CU_FAIL(PYTHON " is missing (Debian package python3)");
        return;
    }
    CU_ASSERT_FATAL(write_file("mp_count.py", mp_count_py) == 0 && write_file("mp_hold.py", mp_hold_py) == 0);
    rc = sh("export DLOCK_MAP=\"sem:/mp-*=$T-py\"\n"
            "rm -f mp.log\n"
            "P " PYTHON " mp_count.py mp.log 20 fork & A=$!\n"
            "P " PYTHON " mp_count.py mp.log 20 spawn & B=$!\n"
            "wait $A; echo a_rc $?; wait $B; echo b_rc $?\n",
            out, sizeof out);
    peak = log_peak("mp.log", &events);
    if (rc != 0 || peak != 2) dlt_out_show(out);
    DLT_ASSERT_INT_EQ(rc, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "a_rc 0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "b_rc 0"));
    DLT_ASSERT_INT_EQ(events, 2 * 2 * 3 * 20);
    DLT_ASSERT_INT_EQ(peak, 2);
    snprintf(name, sizeof name, "%s-py", tag);
    DLT_ASSERT_INT_EQ(cluster_value(name), 2);
    DLT_ASSERT_INT_EQ(dlt_redis_keys_count(&dlt_server, "*{/mp-*"), 0); /* no semaphore under python's own names */

    rc = sh("export DLOCK_MAP=\"sem:/mp-*=$T-py\"\n"
            "rm -f held seen\n"
            "P " PYTHON " mp_hold.py holder & A=$!\n"
            "P " PYTHON " mp_hold.py peer; echo peer_rc $?\n"
            "wait $A; echo holder_rc $?\n",
            out, sizeof out);
    if (rc != 0 || strstr(out, "peer try False value 0") == NULL || strstr(out, "peer acquired True") == NULL)
        dlt_out_show(out);
    DLT_ASSERT_INT_EQ(rc, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "peer try False value 0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "peer acquired True"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "peer_rc 0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "holder_rc 0"));
    DLT_ASSERT_INT_EQ(cluster_value(name), 2);

    /* Without the library the two interpreters' semaphores are two: up
     * to 4 inside (said, not asserted: it is timing). */
    (void)sh("rm -f mp0.log; " PYTHON " mp_count.py mp0.log 20 fork & " PYTHON " mp_count.py mp0.log 20 fork; wait",
             out, sizeof out);
    fprintf(stderr, "  (without the library: peak %d)\n", log_peak("mp0.log", &events));
}

/* mp_pool.py: Pool(4).map of 200 squares, then 20 acquire/release
 * pairs of a multiprocessing.Lock; says the sum and the time it took.
 * Every multiprocessing primitive is a POSIX named semaphore made with
 * a fresh name and unlinked at once (fork start method). */
static const char mp_pool_py[] =
    "import multiprocessing as mp, sys, time\n"
    "def sq(x): return x * x\n"
    "if __name__ == '__main__':\n"
    "    t = time.monotonic()\n"
    "    with mp.Pool(4) as p: r = p.map(sq, range(200))\n"
    "    l = mp.Lock()\n"
    "    for _ in range(20): l.acquire(); l.release()\n"
    "    print('sum %d t_pool %.3f' % (sum(r), time.monotonic() - t))\n";

/* mp_hold_lock.py FILE SECONDS: a multiprocessing.Lock, acquired; FILE
 * made when it is held; released and exit after SECONDS. */
static const char mp_hold_lock_py[] =
    "import multiprocessing as mp, sys, time\n"
    "l = mp.Lock(); l.acquire()\n"
    "open(sys.argv[1], 'w').close()\n"
    "time.sleep(float(sys.argv[2]))\n"
    "l.release()\n";

/* mp_calls.py MODE: the calls a program makes of multiprocessing's
 * semaphores, each timed: open (Lock()), 20 non-blocking acquires
 * (sem_trywait), and in open mode 20 acquire/release pairs (sem_trywait,
 * sem_post), get_value of a Semaphore (sem_getvalue) and a second Lock. */
static const char mp_calls_py[] =
    "import multiprocessing as mp, sys, time\n"
    "t0 = time.monotonic(); l = mp.Lock(); t1 = time.monotonic()\n"
    "tries = [l.acquire(False) for _ in range(20)]\n"
    "t2 = time.monotonic()\n"
    "print('t_open %.3f t_tries %.3f got %d' % (t1 - t0, t2 - t1, sum(tries)))\n"
    "if sys.argv[1] == 'open':\n"
    "    l.release()\n"
    "    for _ in range(20): l.acquire(); l.release()\n"
    "    s = mp.Semaphore(3); v = s.get_value(); l2 = mp.Lock(); l2.acquire(); l2.release()\n"
    "    print('value %d t_rest %.3f' % (v, time.monotonic() - t2))\n";

/* "NAME X.XXX" in out: X, or -1. */
static double seconds(const char *out, const char *name) {
    const char *p = strstr(out, name);
    return p != NULL ? atof(p + strlen(name) + 1) : -1;
}

/* The server unreachable (a port nobody listens on, unreachable_ms 2 s):
 * a mapped semaphore pays the wait once per back-off period, as a mapped
 * mutex does -- the first program's first sem_open; the next program
 * reads the host-wide outage record and pays none -- and then every call
 * answers at once from the circuit breaker, a try (sem_trywait) with one
 * attempt: DLOCK_ON_ERROR=open takes the local semaphore (a
 * multiprocessing.Lock works, 20 pairs, get_value 3), closed gives EAGAIN
 * to each try.  And Pool(4).map under `sem:*` finishes in at most the
 * time it takes without the library plus that one wait. */
static void test_sem_breaker(void) {
    char out[8192], script[2048];
    double t0, t;
    int rc;
    CU_ASSERT_FATAL(write_file("mp_calls.py", mp_calls_py) == 0 && write_file("mp_pool.py", mp_pool_py) == 0);
    snprintf(script, sizeof script,
             "export DLOCK_URL='redis://127.0.0.1:%d?unreachable_ms=2000' DLOCK_MAP='sem:*'\n"
             "P timeout 60 " PYTHON " mp_calls.py open; echo open_rc $?\n"
             "DLOCK_ON_ERROR=closed P timeout 60 " PYTHON " mp_calls.py closed; echo closed_rc $?\n",
             dlt_free_port());
    rc = sh(script, out, sizeof out);
    if (rc != 0 || strstr(out, "value 3") == NULL || seconds(out, "t_tries") > 0.5) dlt_out_show(out);
    DLT_ASSERT_INT_EQ(rc, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "open_rc 0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "closed_rc 0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "got 1")); /* open: the local Lock, taken once of 20 tries */
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "got 0")); /* closed: no try gets in */
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "value 3"));
    t = seconds(out, "t_open"); /* open's: the one wait */
    CU_ASSERT(t >= 1.5 && t < 3.5);
    t = seconds(strstr(out, "got 1") ? strstr(out, "got 1") : out, "t_open");
    CU_ASSERT(t >= 0 && t < 0.5); /* closed's: the host already knows */
    t = seconds(out, "t_tries");
    CU_ASSERT(t >= 0 && t < 0.5);
    t = seconds(strstr(out, "got 1") ? strstr(out, "got 1") : out, "t_tries");
    CU_ASSERT(t >= 0 && t < 0.5);
    t = seconds(out, "t_rest");
    CU_ASSERT(t >= 0 && t < 1.0);
    DLT_ASSERT_INT_EQ(dlt_out_count(out, "DLOCK_ON_ERROR=open"), 1);
    DLT_ASSERT_INT_EQ(dlt_out_count(out, "DLOCK_ON_ERROR=closed"), 1);

    rc = sh(PYTHON " mp_pool.py\n", out, sizeof out);
    DLT_ASSERT_INT_EQ(rc, 0);
    t0 = seconds(out, "t_pool");
    snprintf(script, sizeof script,
             "export DLOCK_URL='redis://127.0.0.1:%d?unreachable_ms=2000' DLOCK_MAP='sem:*'\n"
             "P timeout 60 " PYTHON " mp_pool.py; echo pool_rc $?\n",
             dlt_free_port());
    rc = sh(script, out, sizeof out);
    t = seconds(out, "t_pool");
    fprintf(stderr, "  (Pool(4).map: %.2fs without the library, %.2fs with it, the server down)\n", t0, t);
    if (rc != 0 || t < 0 || t > t0 + 2.0 + 1.0) dlt_out_show(out);
    DLT_ASSERT_INT_EQ(rc, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "sum 2646700"));
    CU_ASSERT(t >= 0 && t <= t0 + 2.0 + 1.0);
}

/* Under `sem:*` (each name its own cluster semaphore) Python's
 * multiprocessing semaphores, unlinked right after sem_open, get an
 * expiry that their users renew: Pool(4).map with the server up gives
 * the right sum in at most the time without the library plus one
 * outage wait (5 s), its keys expire; a program killed with SIGKILL
 * while it holds its Lock leaves nothing after the expiry (10 s); a
 * program that holds its Lock longer than that keeps its semaphore (its
 * renewals), until it exits: then nothing of /mp-* is left.  A name not
 * unlinked keeps no expiry (test_sem_calls_and_errno reads its value
 * later). */
static void test_sem_unlinked_expire(void) {
    char out[8192];
    double t0, t, t_kill, end;
    long long n = -1;
    int rc;
    CU_ASSERT_FATAL(write_file("mp_pool.py", mp_pool_py) == 0 && write_file("mp_hold_lock.py", mp_hold_lock_py) == 0);
    rc = sh(PYTHON " mp_pool.py\n", out, sizeof out);
    DLT_ASSERT_INT_EQ(rc, 0);
    t0 = seconds(out, "t_pool");
    rc = sh("export DLOCK_MAP='sem:*'\n"
            "rm -f alive.held killed.held\n"
            "(exec </dev/null >/dev/null 2>&1; P " PYTHON " mp_hold_lock.py alive.held 16) &\n"
            "LD_PRELOAD=\"$SO\" " PYTHON " mp_hold_lock.py killed.held 100 & K=$!\n"
            "i=0; while [ ! -e killed.held ] || [ ! -e alive.held ]; do sleep 0.05; i=$((i+1)); [ $i -lt 400 ] || exit 3; done\n"
            "kill -9 $K; wait $K\n"
            "P timeout 60 " PYTHON " mp_pool.py; echo pool_rc $?\n",
            out, sizeof out);
    t_kill = dlt_now();
    t = seconds(out, "t_pool");
    fprintf(stderr, "  (Pool(4).map: %.2fs without the library, %.2fs with it)\n", t0, t);
    if (rc != 0 || strstr(out, "pool_rc 0") == NULL) dlt_out_show(out);
    DLT_ASSERT_INT_EQ(rc, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "sum 2646700"));
    CU_ASSERT(t >= 0 && t <= t0 + 5.0);
    CU_ASSERT(dlt_redis_keys_count(&dlt_server, "*{/mp-*}:sem") >= 3); /* alive, killed, the pool's */
    /* The killed program's and the pool's semaphores go with their
     * expiry; the live one's stays. */
    end = t_kill + 13.0;
    while (dlt_now() < end && (n = dlt_redis_keys_count(&dlt_server, "*{/mp-*}:sem")) != 1) dlt_sleep_ms(200);
    fprintf(stderr, "  (%lld semaphores left %.1fs after the kill)\n", n, dlt_now() - t_kill);
    DLT_ASSERT_INT_EQ(n, 1);
    /* ... until its program exits. */
    end = t_kill + 16.0 + 13.0;
    while (dlt_now() < end && (n = dlt_redis_keys_count(&dlt_server, "*{/mp-*")) != 0) dlt_sleep_ms(200);
    DLT_ASSERT_INT_EQ(n, 0);
}

/* The value as the server keeps it, read without touching the semaphore
 * (dlock_sem_info): -1 when it does not exist, below that an error. */
static int info_value(const char *name) {
    dlock_sem_info_t si;
    if (dlock_sem_info(NULL, name, &si) != 0) return -100;
    return si.exists ? si.value : -1;
}

/* sem_user.py ROLE NAME: the posix semaphore NAME through python's
 * _multiprocessing.SemLock (sem_open, sem_trywait, sem_post, sem_unlink).
 * "maker" makes it (O_CREAT|O_EXCL, value 1), says so (file made), waits
 * for the user (file opened), unlinks it and exits; "user" opens it by
 * name (sem_open without O_CREAT) once made, says so, and takes and gives
 * back its unit twice a second for 15 s, then says how many takes got
 * it and how many found none (file used). */
static const char sem_user_py[] =
    "import _multiprocessing as m, os, sys, time\n"
    "def wait_for(f):\n"
    "    end = time.monotonic() + 10\n"
    "    while not os.path.exists(f):\n"
    "        if time.monotonic() > end: sys.exit(3)\n"
    "        time.sleep(0.01)\n"
    "if sys.argv[1] == 'maker':\n"
    "    s = m.SemLock(1, 1, 1, sys.argv[2], False)\n"
    "    open('made', 'w').close()\n"
    "    wait_for('opened')\n"
    "    m.sem_unlink(sys.argv[2])\n"
    "else:\n"
    "    wait_for('made')\n"
    "    s = m.SemLock._rebuild(0, 1, 1, sys.argv[2])\n"
    "    open('opened', 'w').close()\n"
    "    n, f, end = 0, 0, time.monotonic() + 15\n"
    "    while time.monotonic() < end:\n"
    "        if s.acquire(False): n += 1; s.release()\n"
    "        else: f += 1\n"
    "        time.sleep(0.5)\n"
    "    with open('used', 'w') as o: o.write('%d failed %d\\n' % (n, f))\n";

/* An unlinked semaphore lives while another process has it open: one
 * program makes it, another opens it by name, the first unlinks it and
 * exits; the second, which never unlinked it, renews the expiry the
 * unlink gave it, and uses it for 15 s (longer than the expiry): the
 * semaphore is still there with its value then, and every take got its
 * unit; it goes within the expiry once that program exits. */
static void test_sem_unlinked_kept_by_user(void) {
    char out[4096], name[64], key[128];
    long long n = -1;
    double end;
    int rc;
    CU_ASSERT_FATAL(write_file("sem_user.py", sem_user_py) == 0);
    snprintf(name, sizeof name, "/%s-kept", tag);
    snprintf(key, sizeof key, "*{%s}*", name);
    rc = sh("export DLOCK_MAP=\"sem:/$T-kept\"\n"
            "rm -f made opened used\n"
            "P " PYTHON " sem_user.py user /$T-kept & U=$!\n"
            "P " PYTHON " sem_user.py maker /$T-kept; echo maker_rc $?\n"
            "wait $U; echo user_rc $? used $(cat used)\n",
            out, sizeof out);
    if (rc != 0 || strstr(out, "failed 0") == NULL) dlt_out_show(out);
    DLT_ASSERT_INT_EQ(rc, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "maker_rc 0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "user_rc 0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "failed 0")); /* every take got the unit */
    CU_ASSERT(strstr(out, "used ") != NULL && atoi(strstr(out, "used ") + 5) >= 20);
    DLT_ASSERT_INT_EQ(info_value(name), 1); /* 15 s after the unlink: still there */
    end = dlt_now() + 13.0;
    while (dlt_now() < end && (n = dlt_redis_keys_count(&dlt_server, key)) != 0) dlt_sleep_ms(200);
    DLT_ASSERT_INT_EQ(n, 0);
}

/* A SIGALRM handler installed without SA_RESTART ends sem_wait and
 * sem_timedwait with EINTR; one with SA_RESTART lets the timed wait go on
 * to its deadline: under the library as without it (each run bounded by
 * timeout(1), so a wait that never ends fails the test). */
static void test_semx_eintr(void) {
    char out[4096];
    int rc = sh("export DLOCK_MAP=\"sem:/$T-[ir]=$T-intr\"\n"
                "timeout 20 env LD_PRELOAD=\"$SO\" \"$PROGX\" intr /$T-i; echo mapped_rc $?\n"
                "timeout 20 \"$PROGX\" intr /$T-j; echo local_rc $?\n"
                "timeout 20 env LD_PRELOAD=\"$SO\" \"$PROGX\" restart /$T-r; echo mapped_restart_rc $?\n"
                "timeout 20 \"$PROGX\" restart /$T-s; echo local_restart_rc $?\n",
                out, sizeof out);
    if (strstr(out, "mapped_rc 0") == NULL || strstr(out, "mapped_restart_rc 0") == NULL) dlt_out_show(out);
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
    DLT_ASSERT_INT_EQ(info_value(name), 0);
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
                "P \"$PROGX\" open /$T-o1\n",
                out, sizeof out);
    DLT_ASSERT_INT_EQ(rc, 0);
    if (strstr(out, "errno ENOENT") == NULL) dlt_out_show(out);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "errno ENOENT"));
    snprintf(name, sizeof name, "%s-open", tag);
    DLT_ASSERT_INT_EQ(info_value(name), -1); /* and nothing was made */
    DLT_ASSERT_ERR(dlock_sem_init(&s, name, 3, NULL), 0);
    rc = sh("export DLOCK_MAP=\"sem:/$T-o*=$T-open\"\n"
            "P \"$PROGX\" open /$T-o2\n",
            out, sizeof out);
    DLT_ASSERT_INT_EQ(rc, 0);
    if (strstr(out, "opened") == NULL) dlt_out_show(out);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "opened"));
    DLT_ASSERT_INT_EQ(info_value(name), 3);
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
            "LD_PRELOAD=\"$SO\" \"$PROGX\" hold /$T-u 1 > u.out 2>&1 < /dev/null & echo $! > u.pid\n"
            "LD_PRELOAD=\"$SO\" \"$PROGX\" hold /$T-p 1 > p.out 2>&1 < /dev/null & echo $! > p.pid\n"
            "i=0; until grep -q holding u.out && grep -q holding p.out; do\n"
            "  i=$((i+1)); [ $i -gt 200 ] && { echo never held; exit 1; }; sleep 0.05; done\n"
            "echo held\n",
            out, sizeof out);
    if (rc != 0) dlt_out_show(out);
    DLT_ASSERT_INT_EQ(rc, 0);
    DLT_ASSERT_INT_EQ(info_value(undo), 0);
    DLT_ASSERT_INT_EQ(info_value(plain), 0);
    dlock_sem_info_t si;
    DLT_ASSERT_INT_EQ(dlock_sem_info(NULL, undo, &si), 0);
    DLT_ASSERT_INT_EQ(si.leased, 1);
    rc = sh("kill -9 $(cat u.pid) $(cat p.pid); wait 2>/dev/null; echo killed\n", out, sizeof out);
    DLT_ASSERT_INT_EQ(rc, 0);
    t0 = dlt_now();
    end = t0 + 20.0;
    /* A lapsed lease comes back at the next operation on the semaphore:
     * this poll's getvalue is one. */
    while ((v = cluster_value(undo)) != 1 && dlt_now() < end) dlt_sleep_ms(200);
    DLT_ASSERT_INT_EQ(v, 1);
    fprintf(stderr, "  (the killed holder's unit came back after %.2fs)\n", dlt_now() - t0);
    DLT_ASSERT_INT_EQ(cluster_value(plain), 0);
}

/* A `sem+undo:` unit whose lease the server lost (FLUSHALL: the data
 * gone) is told lost to the program by DLOCK_ON_LOST: warn prints it,
 * abort stops the holder. */
static void test_semx_undo_lost_told(void) {
    char out[8192];
    redisReply *r;
    int rc;
    setup_dir();
    rc = sh("export DLOCK_MAP=\"sem+undo:/$T-l1=$T-lost1;sem+undo:/$T-l2=$T-lost2\"\n"
            "DLOCK_ON_LOST=warn LD_PRELOAD=\"$SO\" \"$PROGX\" hold /$T-l1 1 > w.out 2>&1 < /dev/null &"
            " echo $! > w.pid\n"
            "DLOCK_ON_LOST=abort LD_PRELOAD=\"$SO\" \"$PROGX\" hold /$T-l2 1 > a.out 2>&1 < /dev/null &"
            " echo $! > a.pid\n"
            "i=0; until grep -q holding w.out && grep -q holding a.out; do\n"
            "  i=$((i+1)); [ $i -gt 200 ] && { echo never held; exit 1; }; sleep 0.05; done\n"
            "echo held\n",
            out, sizeof out);
    if (rc != 0) dlt_out_show(out);
    DLT_ASSERT_INT_EQ(rc, 0);
    r = dlt_redis_cmd(&dlt_server, "FLUSHALL");
    CU_ASSERT_PTR_NOT_NULL(r);
    if (r != NULL) freeReplyObject(r);
    /* Told by the unit's next renewal (a third of the 10 s lease) or, at
     * the latest, by the holder's own clock at the lease's end. */
    rc = sh("i=0; until grep -q 'lost a unit' w.out && ! kill -0 $(cat a.pid) 2>/dev/null; do\n"
            "  i=$((i+1)); [ $i -gt 300 ] && { echo not told; break; }; sleep 0.05; done\n"
            "kill -9 $(cat w.pid) 2>/dev/null; wait 2>/dev/null\n"
            "echo '-- warn:'; cat w.out; echo '-- abort:'; cat a.out\n",
            out, sizeof out);
    if (strstr(out, "not told") != NULL) dlt_out_show(out);
    CU_ASSERT_PTR_NULL(strstr(out, "not told"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "DLOCK_ON_LOST=warn"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "DLOCK_ON_LOST=abort"));
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_sem_two_hosts_bound),
    DLT_TEST(test_sem_calls_and_errno),
    DLT_TEST(test_sem_unmatched_local),
    DLT_TEST(test_sem_unreachable),
    DLT_TEST(test_sem_two_hosts_netns),
    DLT_TEST(test_sem_python_multiprocessing),
    DLT_TEST(test_sem_breaker),
    DLT_TEST(test_sem_unlinked_expire),
    DLT_TEST(test_sem_unlinked_kept_by_user),
    DLT_TEST(test_semx_eintr),
    DLT_TEST(test_semx_open_existing_only),
    DLT_TEST(test_semx_undo_kill9),
    DLT_TEST(test_semx_undo_lost_told),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    int rc;
    if (DLPL_SO[0] == '\0') {
        fprintf(stderr, "libdlock_preload.so is not built (sanitizer build?): test disabled\n");
        return 77;
    }
    rc = dlt_main(argc, argv, "preload_sem", tests);
    cleanup_dir();
    return rc;
}
