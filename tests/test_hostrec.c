/* labels: preload redis; timeout: 300 */
/* test_hostrec.c -- one host, one outage: the host-wide outage record
 * (src/net/hostrec.c) beside the circuit breaker.
 *
 * Once one process has found the server unreachable, the user's other
 * processes on the host fail at once (but for one probe a second for the
 * whole host) instead of each waiting the unreachable bound; the
 * server's return is noticed by the next process within about a second;
 * a bad record (corrupt, foreign-owned, wrong mode, a symbolic link, in a
 * directory others may write, stale) is no record: it costs a wait, never
 * a wrong answer; under the preload, one notice per host per outage.  The
 * library's part runs in every build; the preload's (real flock(1))
 * where libdlock_preload.so is built.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture.h"
#include "net/net.h"
#include "proxy.h"

#define FLOCK "/usr/bin/flock"
#define BOUND_MS 1500
#define NS 1000000000LL

static dlt_redis dead_srv; /* started once, then stopped: its port refuses */
static char dead_url[256];

static int dead_setup(void) {
    if (dead_srv.port == 0 && dlt_redis_start(&dead_srv, NULL) != 0) return -1;
    if (dead_srv.pid != 0 && dlt_redis_stop(&dead_srv) != 0) return -1;
    snprintf(dead_url, sizeof dead_url, "redis://127.0.0.1:%d?unreachable_ms=%d&breaker_ms=30000", dead_srv.port,
             BOUND_MS);
    return 0;
}

/* One lock call on a new client of url: its result, how long it took
 * (*secs) and its message (msg, when given). */
static int lock_once(const char *url, const char *name, double *secs, char *msg, size_t cap) {
    dlock_client_t *c;
    dlock_mutex_t m;
    double t0 = dlt_now();
    int rc;
    if ((rc = dlt_client_make(&c, url, 0)) != 0) return rc;
    if ((rc = dlt_mutex_make(&m, name, 0, c)) == 0) {
        rc = dlock_mutex_lock(&m);
        if (msg != NULL) snprintf(msg, cap, "%s", dlock_last_error());
        if (rc == 0) dlock_mutex_unlock(&m);
        dlock_mutex_destroy(&m);
    }
    *secs = dlt_now() - t0;
    dlock_client_destroy(c);
    return rc;
}

/* A process that finds the dead server unreachable: exits 0 on ENOLCK. */
static int finder(void *arg) {
    double secs;
    return lock_once(arg, "hr/a", &secs, NULL, 0) == ENOLCK ? 0 : 1;
}

/* ------------------------------------------------------------ library */

static void test_record_shared_across_processes(void) {
    char msg[512], off[300];
    double secs;
    pid_t p;
    CU_ASSERT_FATAL(dead_setup() == 0);
    /* Without the record (host_breaker=0), a second process waits too. */
    snprintf(off, sizeof off, "%s&host_breaker=0", dead_url);
    p = dlt_spawn(finder, off);
    DLT_ASSERT_INT_EQ(dlt_wait(p, 20000), 0);
    DLT_ASSERT_ERR(lock_once(off, "hr/a", &secs, NULL, 0), ENOLCK);
    CU_ASSERT(secs >= BOUND_MS / 1000.0 - 0.1);
    /* With it: the first process waits, the next one does not. */
    p = dlt_spawn(finder, dead_url);
    DLT_ASSERT_INT_EQ(dlt_wait(p, 20000), 0);
    DLT_ASSERT_ERR(lock_once(dead_url, "hr/a", &secs, msg, sizeof msg), ENOLCK);
    printf("  second process: %.3f s: %s\n", secs, msg);
    CU_ASSERT(secs < 0.5);
    CU_ASSERT(strstr(msg, "unreachable from this host") != NULL);
}

/* A child: one trylock-like lock on dead_url's server, now back: 0 if
 * granted. */
static int returner(void *arg) {
    double secs;
    return lock_once(arg, "hr/back", &secs, NULL, 0) == 0 ? 0 : 1;
}

static void test_return_noticed(void) {
    double t0, secs;
    int got = 0;
    pid_t p;
    CU_ASSERT_FATAL(dead_setup() == 0);
    p = dlt_spawn(finder, dead_url);
    DLT_ASSERT_INT_EQ(dlt_wait(p, 20000), 0);
    DLT_ASSERT_ERR(lock_once(dead_url, "hr/a", &secs, NULL, 0), ENOLCK);
    CU_ASSERT(secs < 0.5); /* the record is there */
    CU_ASSERT_FATAL(dlt_redis_restart(&dead_srv) == 0);
    t0 = dlt_now();
    /* A new process every 50 ms: the first one that is the host's probe
     * finds the server and tells the others. */
    while (!got && dlt_now() - t0 < 5) {
        p = dlt_spawn(returner, dead_url);
        got = dlt_wait(p, 20000) == 0;
        if (!got) dlt_sleep_ms(50);
    }
    printf("  the return noticed after %.3f s\n", dlt_now() - t0);
    CU_ASSERT(got);
    CU_ASSERT(dlt_now() - t0 < 1.6);
    /* From then on every process asks the server at once. */
    DLT_ASSERT_ERR(lock_once(dead_url, "hr/back", &secs, NULL, 0), 0);
    CU_ASSERT(secs < 0.5);
    CU_ASSERT_FATAL(dlt_redis_stop(&dead_srv) == 0);
}

/* A process whose lock call goes on waiting (unreachable_ms 8 s) while
 * the server is down: 0 once granted. */
static int patient(void *arg) {
    char url[300];
    double secs;
    snprintf(url, sizeof url, "%s&unreachable_ms=8000", (const char *)arg);
    return lock_once(url, "hr/patient", &secs, NULL, 0) == 0 ? 0 : 1;
}

/* A request that recorded the outage (refused for 1 s) and then got its
 * answer ends the outage for the host at once, not at the next probe. */
static void test_waiter_answered_ends_outage(void) {
    char base[160], msg[512];
    double secs;
    pid_t p;
    CU_ASSERT_FATAL(dead_setup() == 0);
    snprintf(base, sizeof base, "redis://127.0.0.1:%d?breaker_ms=30000", dead_srv.port);
    p = dlt_spawn(patient, base);
    CU_ASSERT_FATAL(p > 0);
    dlt_sleep_ms(1400); /* it recorded the outage after 1 s */
    DLT_ASSERT_ERR(lock_once(dead_url, "hr/a", &secs, msg, sizeof msg), ENOLCK);
    CU_ASSERT(strstr(msg, "unreachable from this host") != NULL);
    CU_ASSERT_FATAL(dlt_redis_restart(&dead_srv) == 0);
    DLT_ASSERT_INT_EQ(dlt_wait(p, 20000), 0);
    /* at once, though the host's next probe may be nearly a second away */
    DLT_ASSERT_ERR(lock_once(dead_url, "hr/a", &secs, msg, sizeof msg), 0);
    CU_ASSERT(secs < 0.5);
    CU_ASSERT_FATAL(dlt_redis_stop(&dead_srv) == 0);
}

/* A genuine record saying that url's server is down, written as a
 * process that found it so writes it; its path in path. */
static int record_down(const char *url, unsigned breaker_ms, char *path, size_t cap) {
    dlock_config_t cfg;
    dlock__node n;
    memset(&n, 0, sizeof n);
    dlock_config_init(&cfg);
    cfg.url = url;
    cfg.breaker_ms = breaker_ms;
    if (dlock__conf_parse(&n.conf, &cfg) != 0) return -1;
    dlock__hostrec_init(&n);
    snprintf(path, cap, "%s", n.host_rec);
    unlink(path);
    dlock__hostrec_down(&n, dlock__now());
    dlock__conf_free(&n.conf);
    return path[0] != '\0' && access(path, F_OK) == 0 ? 0 : -1;
}

static int flip_byte(const char *path) {
    unsigned char b;
    int fd = open(path, O_RDWR), ok;
    if (fd < 0) return -1;
    ok = pread(fd, &b, 1, 20) == 1;
    b ^= 0x5a;
    ok = ok && pwrite(fd, &b, 1, 20) == 1;
    close(fd);
    return ok ? 0 : -1;
}

/* What is done to a genuine record before the lock call. */
enum spoil { GENUINE, MODE, OWNER, CORRUPT, SHORT, LINK, DIR_MODE, STALE };
static const char *const spoil_names[] = { "genuine", "mode 0644", "foreign owner", "corrupt",
                                           "short", "symbolic link", "directory 0755", "stale" };

static int spoil(enum spoil s, const char *url, const char *bare, char *path, size_t cap) {
    char other[PATH_MAX + 8], dir[PATH_MAX];
    /* (the record's name leaves the query out: bare's is url's) */
    if (record_down(s == STALE ? bare : url, s == STALE ? 1 : 30000, path, cap) != 0) return -1;
    snprintf(dir, sizeof dir, "%s", path);
    *strrchr(dir, '/') = '\0';
    switch (s) {
    case GENUINE:
        return 0;
    case MODE:
        return chmod(path, 0644);
    case OWNER:
        return chown(path, 65534, 65534);
    case CORRUPT:
        return flip_byte(path);
    case SHORT:
        return truncate(path, 10);
    case LINK: /* a genuine record, reached through a symbolic link */
        snprintf(other, sizeof other, "%s.real", path);
        return rename(path, other) != 0 || symlink(other, path) != 0 ? -1 : 0;
    case DIR_MODE:
        return chmod(dir, 0755);
    case STALE: /* its period (1 ms) is over */
        dlt_sleep_ms(20);
        return 0;
    }
    return -1;
}

static void unspoil(const char *path) {
    char dir[PATH_MAX], other[PATH_MAX + 8];
    snprintf(dir, sizeof dir, "%s", path);
    *strrchr(dir, '/') = '\0';
    chmod(dir, 0700);
    unlink(path);
    snprintf(other, sizeof other, "%s.real", path);
    unlink(other);
}

/* Against the live suite server: a genuine record fails the call at once
 * (the record works); a spoiled one is no record, and the call is
 * granted by the server -- never a wrong answer. */
static void test_bad_records_ignored(void) {
    char url[300], path[PATH_MAX], msg[512];
    double secs;
    int s;
    snprintf(url, sizeof url, "%s?breaker_ms=30000", dlt_server.url);
    for (s = GENUINE; s <= STALE; s++) {
        int rc;
        if (s == OWNER && geteuid() != 0) {
            printf("  (foreign owner: not root, cannot chown; the mode check stands for it)\n");
            continue;
        }
        CU_ASSERT_FATAL(spoil((enum spoil)s, url, dlt_server.url, path, sizeof path) == 0);
        rc = lock_once(url, "hr/live", &secs, msg, sizeof msg);
        printf("  %s record: %s in %.3f s\n", spoil_names[s], dlt_errno_name(rc), secs);
        if (s == GENUINE) {
            /* made for its user alone: the directory 0700, the file 0600 */
            struct stat st;
            char dir[PATH_MAX];
            snprintf(dir, sizeof dir, "%s", path);
            *strrchr(dir, '/') = '\0';
            CU_ASSERT(stat(dir, &st) == 0 && (st.st_mode & 0777) == 0700 && st.st_uid == geteuid());
            CU_ASSERT(lstat(path, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0600);
            DLT_ASSERT_ERR(rc, ENOLCK);
            CU_ASSERT(secs < 0.5);
            CU_ASSERT(strstr(msg, "unreachable from this host") != NULL);
        } else {
            DLT_ASSERT_ERR(rc, 0);
        }
        unspoil(path);
    }
}

/* Against the dead server, a corrupt record costs the wait a process
 * pays without one -- and the process then writes a sound one. */
static void test_corrupt_record_costs_a_wait(void) {
    char path[PATH_MAX];
    double secs;
    CU_ASSERT_FATAL(dead_setup() == 0);
    CU_ASSERT_FATAL(record_down(dead_url, 30000, path, sizeof path) == 0);
    CU_ASSERT_FATAL(flip_byte(path) == 0);
    DLT_ASSERT_ERR(lock_once(dead_url, "hr/a", &secs, NULL, 0), ENOLCK);
    CU_ASSERT(secs >= BOUND_MS / 1000.0 - 0.1);
    DLT_ASSERT_ERR(lock_once(dead_url, "hr/a", &secs, NULL, 0), ENOLCK);
    CU_ASSERT(secs < 0.5);
}

/* ------------------------------------------------------------ preload */

static char pdir[256];

static int sh_run(const char *url, const char *script, char *out, size_t cap) {
    char prelude[2048];
    snprintf(prelude, sizeof prelude,
             "cd '%s' || exit 99\nexport DLOCK_URL='%s'\n"
             "P() { LD_PRELOAD='%s' DLOCK_MAP='file:%s/locks/*' \"$@\"; }\n"
             "now() { date +%%s%%N; }\n",
             pdir, url, DLPL_SO, pdir);
    return dlt_sh_scenario(pdir, prelude, script, out, cap);
}

static long long num(const char *out, const char *key) {
    const char *p = strstr(out, key);
    return p != NULL ? strtoll(p + strlen(key), NULL, 10) : -1;
}

static int preload_ready(void) {
    char cmd[600];
    if (DLPL_SO[0] == '\0') {
        printf("  (no libdlock_preload.so in this build: the sanitizers' build)\n");
        return 0;
    }
    if (pdir[0] == '\0') {
        snprintf(pdir, sizeof pdir, "%s/dlhr-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        if (mkdtemp(pdir) == NULL) return 0;
        snprintf(cmd, sizeof cmd, "mkdir -p '%s/locks'", pdir);
        if (system(cmd) != 0) return 0;
    }
    return 1;
}

/* Ten `flock -w 2` in a row against a dead server: the first waits its
 * 2 s, the others not at all; one notice for all of them, and with
 * DLOCK_VERBOSE one each. */
static void test_flock_loop_one_notice(void) {
    char out[16384];
    int rc;
    if (!preload_ready()) return;
    CU_ASSERT_FATAL(dead_setup() == 0);
    rc = sh_run(dead_url,
                "t0=$(now); i=0; while [ $i -lt 10 ]; do P " FLOCK " -w 2 locks/a true || echo FAILED; i=$((i+1)); done\n"
                "echo loop_ns $(( $(now) - t0 ))\n"
                "i=0; while [ $i -lt 3 ]; do DLOCK_VERBOSE=1 P " FLOCK " -w 2 locks/a true; i=$((i+1)); done 2>&1 |"
                " grep -c 'no cluster-wide lock' | sed 's/^/verbose_notices /'\n",
                out, sizeof out);
    printf("  10 x flock -w 2: %.2f s\n", (double)num(out, "loop_ns ") / NS);
    DLT_ASSERT_INT_EQ(rc, 0);
    CU_ASSERT(strstr(out, "FAILED") == NULL);
    CU_ASSERT(num(out, "loop_ns ") > 0 && num(out, "loop_ns ") < 7 * NS);
    /* one notice on the loop's stderr; the verbose ones are counted apart */
    DLT_ASSERT_INT_EQ(dlt_out_count(out, "no cluster-wide lock"), 1);
    DLT_ASSERT_INT_EQ(num(out, "verbose_notices "), 3);
    if (dlt_out_count(out, "no cluster-wide lock") != 1) dlt_out_show(out);
}

/* The server comes back: the next flock that is the host's probe takes
 * the lock cluster-wide and says so, once for the host. */
static void test_flock_return_told_once(void) {
    char out[16384], script[1024];
    int rc;
    if (!preload_ready()) return;
    CU_ASSERT_FATAL(dead_setup() == 0);
    rc = sh_run(dead_url, "P " FLOCK " -w 2 locks/a true; P " FLOCK " -w 2 locks/a true\n", out, sizeof out);
    DLT_ASSERT_INT_EQ(rc, 0);
    DLT_ASSERT_INT_EQ(dlt_out_count(out, "no cluster-wide lock"), 1);
    CU_ASSERT_FATAL(dlt_redis_restart(&dead_srv) == 0);
    snprintf(script, sizeof script,
             "t0=$(now); i=0; while [ $i -lt 30 ]; do P " FLOCK " -w 2 locks/a true 2>>err.txt;"
             " grep -q 'answers again' err.txt && break; i=$((i+1)); sleep 0.05; done\n"
             "echo back_ns $(( $(now) - t0 ))\n"
             "i=0; while [ $i -lt 5 ]; do P " FLOCK " -w 2 locks/a true 2>>err.txt; i=$((i+1)); done\n"
             "cat err.txt; rm -f err.txt\n");
    rc = sh_run(dead_url, script, out, sizeof out);
    printf("  the return told after %.2f s\n", (double)num(out, "back_ns ") / NS);
    DLT_ASSERT_INT_EQ(rc, 0);
    DLT_ASSERT_INT_EQ(dlt_out_count(out, "answers again"), 1);
    CU_ASSERT(num(out, "back_ns ") > 0 && num(out, "back_ns ") < 2 * NS);
    CU_ASSERT_FATAL(dlt_redis_stop(&dead_srv) == 0);
}

/* The record says the server is back from a told outage, and nobody has
 * told the return (the answer that ended it went to a process that says
 * nothing: a keeper whose program gave up waiting): the next program says
 * so, once for the host. */
static void test_flock_untold_return_told(void) {
    char out[16384], url[300], path[PATH_MAX];
    dlock_config_t cfg;
    dlock__node n;
    int rc;
    if (!preload_ready()) return;
    snprintf(url, sizeof url, "%s?breaker_ms=30000", dlt_server.url);
    CU_ASSERT_FATAL(record_down(url, 30000, path, sizeof path) == 0);
    memset(&n, 0, sizeof n);
    dlock_config_init(&cfg);
    cfg.url = url;
    CU_ASSERT_FATAL(dlock__conf_parse(&n.conf, &cfg) == 0);
    dlock__hostrec_init(&n);
    DLT_ASSERT_INT_EQ(dlock__breaker_host_tell(&n, DLOCK__HOST_TOLD_DOWN), 1); /* a program told the outage */
    dlock__hostrec_up(&n);                                                     /* a silent one ended it */
    dlock__conf_free(&n.conf);
    rc = sh_run(url, "P " FLOCK " -w 2 locks/u true; P " FLOCK " -w 2 locks/u true\n", out, sizeof out);
    DLT_ASSERT_INT_EQ(rc, 0);
    DLT_ASSERT_INT_EQ(dlt_out_count(out, "answers again"), 1);
    unlink(path);
}

/* A silent server (the fault proxy dropping every request: connections
 * accepted, never answered): the first `flock -w 2` waits its 2 s, and
 * its request, unanswered for a second, tells the host; the next ones do
 * not wait (but for the host's probe, one attempt: a 200 ms reply wait). */
static void test_flock_silent_server(void) {
    char out[8192], url[300];
    dlt_proxy *hole;
    int rc;
    if (!preload_ready()) return;
    CU_ASSERT_FATAL((hole = dlt_proxy_start(dlt_server.port)) != NULL);
    dlt_proxy_set(hole, DLT_PROXY_DROP, 0, NULL, 0);
    snprintf(url, sizeof url, "%s?breaker_ms=30000", dlt_proxy_url(hole));
    rc = sh_run(url,
                "t0=$(now); P " FLOCK " -w 2 locks/s true; echo first_ns $(( $(now) - t0 ))\n"
                "t0=$(now); i=0; while [ $i -lt 4 ]; do P " FLOCK " -w 2 locks/s true; i=$((i+1)); done\n"
                "echo next_ns $(( $(now) - t0 ))\n",
                out, sizeof out);
    printf("  silent server: the first flock -w 2 %.2f s, the next four %.2f s\n", (double)num(out, "first_ns ") / NS,
           (double)num(out, "next_ns ") / NS);
    DLT_ASSERT_INT_EQ(rc, 0);
    CU_ASSERT(num(out, "first_ns ") >= 19 * NS / 10);
    CU_ASSERT(num(out, "next_ns ") > 0 && num(out, "next_ns ") < 2 * NS);
    DLT_ASSERT_INT_EQ(dlt_out_count(out, "no cluster-wide lock"), 1);
    dlt_proxy_stop(hole);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_record_shared_across_processes),
    DLT_TEST(test_return_noticed),
    DLT_TEST(test_waiter_answered_ends_outage),
    DLT_TEST(test_bad_records_ignored),
    DLT_TEST(test_corrupt_record_costs_a_wait),
    DLT_TEST(test_flock_loop_one_notice),
    DLT_TEST(test_flock_return_told_once),
    DLT_TEST(test_flock_untold_return_told),
    DLT_TEST(test_flock_silent_server),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    int rc;
    if (access(FLOCK, X_OK) != 0) {
        fprintf(stderr, "test_hostrec: %s is missing (scripts/deps installs it)\n", FLOCK);
        return 1;
    }
    rc = dlt_main(argc, argv, "hostrec", tests);
    dlt_redis_cleanup(&dead_srv);
    if (pdir[0] != '\0') dlt_rm_tree(pdir);
    return rc;
}
