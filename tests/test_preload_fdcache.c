/* labels: preload redis; timeout: 240 */
/* test_preload_fdcache.c -- the preload's per-descriptor cache
 * (preload/fd.c, docs/preload.md "Unmapped locks"): a lock call on a
 * descriptor that no rule maps makes no system call beyond the native
 * one, and what the cache knows of a descriptor number never outlives it.
 *
 * tests/preload/dlpl_fdcache.c, an unmodified program, runs under
 * LD_PRELOAD=libdlock_preload.so with a file rule (DLOCK_MAP=file:locks/\*.lock under
 * DLOCK_ROOT=DIR/A) against the suite's real redis-server:
 *   - under strace, N flock / fcntl / lockf pairs on an unmapped file make
 *     exactly the 2N system calls they make without the library (before:
 *     one fstat more per call);
 *   - a known unmapped descriptor whose number is closed and reused by
 *     open() for a mapped file, replaced by dup2/dup3, closed by fclose,
 *     freopen or close_range, or closed behind the hooks' back and made again by dup
 *     or F_DUPFD, locks the mapped file cluster-wide (another "host",
 *     DLOCK_ROOT=DIR/B, finds the lock held); the reverse (a mapped
 *     number reused for an unmapped file) stays local; and across fork.
 * Needs strace (Debian package strace, scripts/deps): fails without it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"

#define NPAIRS 400

static char dir[256];

/* Runs script in sh in a fresh folder (DIR/A/locks/m.lock mapped,
 * DIR/A/plain/u.lock not; DIR/B/locks/m.lock: the same name on another
 * "host"), with A() running a command under the library; stdout and
 * stderr go to out.  Returns sh's exit status. */
static int sh(const char *script, char *out, size_t cap) {
    char prelude[2048];
    if (dir[0] == '\0') {
        snprintf(dir, sizeof dir, "%s/dlplf-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        if (mkdtemp(dir) == NULL) return -1;
    }
    snprintf(prelude, sizeof prelude,
             "cd '%s' || exit 99\n"
             "mkdir -p A/locks A/plain B/locks && touch A/locks/m.lock A/plain/u.lock B/locks/m.lock || exit 98\n"
             "A() { env LD_PRELOAD='%s' DLOCK_ROOT='%s/A' DLOCK_MAP='file:locks/*.lock' \"$@\"; }\n"
             "F='%s'\n",
             dir, DLPL_SO, dir, DLPL_FDCACHE);
    return dlt_sh_scenario(dir, prelude, script, out, cap);
}

/* The system calls an strace -f log shows between the program's two
 * getppid() markers: all of them, and the lock calls (flock, fcntl)
 * among them.  -1 if the markers are not there. */
static int between_markers(const char *log, int *locks, char *others, size_t cap) {
    char path[512], line[1024];
    FILE *f;
    int in = 0, total = 0, done = 0;
    snprintf(path, sizeof path, "%s/%s", dir, log);
    *locks = 0;
    others[0] = '\0';
    if ((f = fopen(path, "r")) == NULL) return -1;
    while (!done && fgets(line, sizeof line, f) != NULL) {
        char *p = line, name[64];
        while (*p >= '0' && *p <= '9') p++; /* strace -f: "PID " */
        while (*p == ' ') p++;
        if (*p == '+' || *p == '-' || *p == '<') continue; /* exits, signals, resumptions */
        if (sscanf(p, "%63[a-z0-9_](", name) != 1) continue;
        if (strcmp(name, "getppid") == 0) {
            done = in;
            in = 1;
            continue;
        }
        if (!in) continue;
        total++;
        if (strcmp(name, "flock") == 0 || strcmp(name, "fcntl") == 0) (*locks)++;
        else if (strlen(others) + strlen(name) + 2 < cap) strcat(strcat(others, name), " ");
    }
    fclose(f);
    return done ? total : -1;
}

static void check_pairs(const char *kind) {
    char out[4096], script[1024], log[64], others[512];
    int rc, total, locks;
    snprintf(script, sizeof script,
             "S=$(command -v strace) || { echo no_strace; exit 0; }\n"
             "\"$S\" -f -qq -o trace.%s.native \"$F\" pairs %s %d A/plain/u.lock; echo native_rc $?\n"
             "\"$S\" -f -qq -o trace.%s.preload env LD_PRELOAD='%s' DLOCK_ROOT=\"$PWD/A\" "
             "DLOCK_MAP='file:locks/*.lock' \"$F\" pairs %s %d A/plain/u.lock; echo preload_rc $?\n",
             kind, kind, NPAIRS, kind, DLPL_SO, kind, NPAIRS);
    rc = sh(script, out, sizeof out);
    DLT_ASSERT_INT_EQ(rc, 0);
    if (strstr(out, "no_strace") != NULL) {
        CU_FAIL("strace is not installed (Debian package strace; scripts/deps installs it)");
        return;
    }
    CU_ASSERT(strstr(out, "native_rc 0") != NULL && strstr(out, "preload_rc 0") != NULL);
    /* Without the library: the 2N lock calls, nothing else -- the
     * measure counts what it should. */
    snprintf(log, sizeof log, "trace.%s.native", kind);
    total = between_markers(log, &locks, others, sizeof others);
    DLT_ASSERT_INT_EQ(total, 2 * NPAIRS);
    DLT_ASSERT_INT_EQ(locks, 2 * NPAIRS);
    /* With it, and a file rule: the same, not one fstat more. */
    snprintf(log, sizeof log, "trace.%s.preload", kind);
    total = between_markers(log, &locks, others, sizeof others);
    DLT_ASSERT_INT_EQ(locks, 2 * NPAIRS);
    DLT_ASSERT_INT_EQ(total, 2 * NPAIRS);
    if (total != 2 * NPAIRS) fprintf(stderr, "%s: other system calls: %.400s\n", kind, others);
}

static void test_unmapped_flock_pair_adds_no_syscall(void) {
    check_pairs("flock");
}
static void test_unmapped_fcntl_pair_adds_no_syscall(void) {
    check_pairs("fcntl");
}
static void test_unmapped_lockf_pair_adds_no_syscall(void) {
    check_pairs("lockf");
}

/* The numbers after "key " in out: up to n of them into v; how many. */
static int nums(const char *out, const char *key, int *v, int n) {
    char pat[80];
    const char *p = out;
    char *end;
    int k = 0;
    snprintf(pat, sizeof pat, "\n%s ", key);
    if (strncmp(out, pat + 1, strlen(pat + 1)) == 0) p = out + strlen(pat + 1);
    else if ((p = strstr(out, pat)) != NULL) p += strlen(pat);
    else return 0;
    while (k < n) {
        long x = strtol(p, &end, 10);
        if (end == p) break;
        v[k++] = (int)x;
        p = end;
    }
    return k;
}

/* name's two probes: held while locked (want_held), free after. */
static void expect(const char *out, const char *name, int want_held) {
    int v[2] = { -9, -9 }, f[1] = { -9 };
    char fdkey[80];
    int n = nums(out, name, v, 2);
    snprintf(fdkey, sizeof fdkey, "%s_fd", name);
    if (nums(out, fdkey, f, 1) == 1) DLT_ASSERT_INT_EQ(f[0], 1); /* the numbers came out as meant */
    CU_ASSERT(n == 2);
    DLT_ASSERT_INT_EQ(v[0], want_held);
    DLT_ASSERT_INT_EQ(v[1], 0);
    if (n != 2 || v[0] != want_held || v[1] != 0) fprintf(stderr, "scenario %s: %d %d\n", name, v[0], v[1]);
}

static void test_reused_numbers_are_decided_anew(void) {
    char out[8192];
    int v[1] = { -9 };
    int rc = sh("A \"$F\" scenarios A/plain/u.lock A/locks/m.lock \"$PWD/B\" B/locks/m.lock\n"
                "echo rc $?\n",
                out, sizeof out);
    DLT_ASSERT_INT_EQ(rc, 0);
    CU_ASSERT(strstr(out, "done") != NULL);
    CU_ASSERT(strstr(out, "rc 0") != NULL);
    expect(out, "reuse_mapped", 1);   /* close(), then open() of a mapped file */
    expect(out, "reuse_unmapped", 0); /* and the reverse */
    expect(out, "dup2_mapped", 1);
    expect(out, "dup3_mapped", 1);
    expect(out, "mapped_before", 1);
    expect(out, "dup2_unmapped", 0);
    expect(out, "dup_mapped", 1); /* closed behind the hooks' back, then dup */
    expect(out, "dupfd_mapped", 1);
    expect(out, "dupfd_cloexec_mapped", 1);
    expect(out, "fclose_mapped", 1);
    expect(out, "freopen_mapped", 1);
    expect(out, "close_range_mapped", 1);
    expect(out, "fork_parent_unmapped", 0);
    DLT_ASSERT_INT_EQ(nums(out, "fork_child_mapped", v, 1), 1);
    DLT_ASSERT_INT_EQ(v[0], 1); /* the child's reused number: mapped */
    v[0] = -9;
    DLT_ASSERT_INT_EQ(nums(out, "fork_child_unmapped", v, 1), 1);
    DLT_ASSERT_INT_EQ(v[0], 0); /* the inherited unmapped one: local */
    CU_ASSERT(strstr(out, "flock ") == NULL); /* no lock call failed */
    CU_ASSERT(strstr(out, "dlock:") == NULL); /* nor said anything */
    if (rc != 0 || strstr(out, "done") == NULL || strstr(out, "dlock:") != NULL)
        fprintf(stderr, "---- output ----\n%s----\n", out);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_unmapped_flock_pair_adds_no_syscall),
    DLT_TEST(test_unmapped_fcntl_pair_adds_no_syscall),
    DLT_TEST(test_unmapped_lockf_pair_adds_no_syscall),
    DLT_TEST(test_reused_numbers_are_decided_anew),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    int rc = dlt_main(argc, argv, "preload_fdcache", tests);
    if (dir[0] != '\0') {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        (void)!system(cmd);
    }
    return rc;
}
