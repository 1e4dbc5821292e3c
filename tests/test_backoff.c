/* labels: unit; timeout: 60 */
/* test_backoff.c -- the one back-off of every retry loop (base/clock.c,
 * dlock__backoff_*), without a server: the steps double from min to max
 * and stay there, each delay lies in the upper half of its step and is
 * spread over it, reset starts over, the sleep never reaches its deadline
 * (it says ETIMEDOUT at once instead), and a fork child does not draw its
 * parent's numbers.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>

#include "fixture.h"

#include "base/base.h"

#define DRAWS 2000

/* Each delay lies in [step/2, step]; the steps are min, 2 min, ... max. */
static void test_growth(void) {
    static const unsigned steps[] = { 10, 20, 40, 80, 160, 200, 200, 200 };
    dlock__backoff b;
    size_t i;
    dlock__backoff_init(&b, 10, 200);
    for (i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        unsigned d = dlock__backoff_next(&b);
        if (d < steps[i] / 2 || d > steps[i])
            printf("\n  draw %zu: %u ms, not in [%u, %u]", i, d, steps[i] / 2, steps[i]);
        CU_ASSERT(d >= steps[i] / 2 && d <= steps[i]);
    }
}

/* Never past the cap, however long it runs, also with a cap that is not
 * min times a power of two, or equal to min (a fixed interval). */
static void test_cap(void) {
    dlock__backoff b;
    unsigned i, d, worst = 0;
    dlock__backoff_init(&b, 7, 100);
    for (i = 0; i < DRAWS; i++) {
        d = dlock__backoff_next(&b);
        if (d > worst) worst = d;
    }
    CU_ASSERT(worst <= 100);
    CU_ASSERT(b.cur_ms == 100);
    dlock__backoff_init(&b, 50, 50);
    for (i = 0; i < DRAWS; i++) {
        d = dlock__backoff_next(&b);
        CU_ASSERT_FATAL(d >= 25 && d <= 50);
    }
    /* bad bounds are mended: min at least 1, max at least min */
    dlock__backoff_init(&b, 0, 0);
    CU_ASSERT(b.min_ms == 1 && b.max_ms == 1);
    CU_ASSERT(dlock__backoff_next(&b) <= 1);
    dlock__backoff_init(&b, 30, 10);
    CU_ASSERT(b.min_ms == 30 && b.max_ms == 30);
    /* the initializer is init's */
    {
        dlock__backoff s = DLOCK__BACKOFF_INIT(10, 200);
        dlock__backoff_init(&b, 10, 200);
        CU_ASSERT(memcmp(&s, &b, sizeof s) == 0);
    }
    /* a cap near UINT_MAX does not overflow the doubling */
    dlock__backoff_init(&b, 1u << 30, 0xffffffffu);
    for (i = 0; i < 8; i++) CU_ASSERT(dlock__backoff_next(&b) >= (1u << 29));
    CU_ASSERT(b.cur_ms == 0xffffffffu);
}

/* The delays spread over the whole upper half of the step: both ends are
 * drawn, and no one value takes most draws. */
static void test_jitter_range(void) {
    dlock__backoff b;
    unsigned i, lo = ~0u, hi = 0, count[101];
    unsigned most = 0;
    memset(count, 0, sizeof count);
    dlock__backoff_init(&b, 100, 100);
    for (i = 0; i < DRAWS; i++) {
        unsigned d = dlock__backoff_next(&b);
        CU_ASSERT_FATAL(d >= 50 && d <= 100);
        count[d]++;
        if (d < lo) lo = d;
        if (d > hi) hi = d;
    }
    for (i = 0; i <= 100; i++)
        if (count[i] > most) most = count[i];
    printf("\n  %u draws in [%u, %u], the commonest %u times ", DRAWS, lo, hi, most);
    CU_ASSERT(lo <= 52);
    CU_ASSERT(hi >= 98);
    CU_ASSERT(most < DRAWS / 10); /* 51 values: about 40 each */
}

/* Reset starts from min again. */
static void test_reset(void) {
    dlock__backoff b;
    unsigned i;
    dlock__backoff_init(&b, 10, 1000);
    for (i = 0; i < 10; i++) (void)dlock__backoff_next(&b);
    CU_ASSERT(b.cur_ms == 1000);
    dlock__backoff_reset(&b);
    CU_ASSERT(b.cur_ms == 10);
    CU_ASSERT(dlock__backoff_next(&b) <= 10);
    CU_ASSERT(dlock__backoff_next(&b) <= 20);
}

/* The sleep sleeps its delay (at least step/2), and within a deadline
 * up to the deadline at most (the caller's last attempt comes there, not
 * a step before it); with the deadline passed, ETIMEDOUT without
 * sleeping. */
static void test_sleep_deadline(void) {
    dlock__backoff b;
    dlock__mono t0, t1, deadline;
    int rc;

    dlock__backoff_init(&b, 40, 40);
    t0 = dlock__now();
    rc = dlock__backoff_sleep(&b, DLOCK__MONO_NEVER);
    t1 = dlock__now();
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT(t1 - t0 >= 20 * DLOCK__MS);

    /* room for the step: it sleeps, and wakes before the deadline */
    t0 = dlock__now();
    deadline = t0 + 10000 * DLOCK__MS;
    rc = dlock__backoff_sleep(&b, deadline);
    t1 = dlock__now();
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT(t1 - t0 >= 20 * DLOCK__MS);
    CU_ASSERT(t1 < deadline);

    /* a step of at least 2.5 s, a deadline 100 ms away: it sleeps to the
     * deadline, not the step; asked again, ETIMEDOUT at once */
    dlock__backoff_init(&b, 5000, 5000);
    t0 = dlock__now();
    rc = dlock__backoff_sleep(&b, t0 + 100 * DLOCK__MS);
    t1 = dlock__now();
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT(t1 - t0 >= 100 * DLOCK__MS);
    CU_ASSERT(t1 - t0 < 2000 * DLOCK__MS); /* it did not sleep the step */
    CU_ASSERT_EQUAL(dlock__backoff_sleep(&b, t0 + 100 * DLOCK__MS), ETIMEDOUT);
    CU_ASSERT(dlock__now() - t1 < 50 * DLOCK__MS);

    /* a deadline already past */
    dlock__backoff_init(&b, 1, 1);
    CU_ASSERT_EQUAL(dlock__backoff_sleep(&b, dlock__now() - DLOCK__MS), ETIMEDOUT);

    /* sleep_until: a time past returns at once, one ahead is waited for */
    t0 = dlock__now();
    dlock__sleep_until(t0 - DLOCK__MS);
    dlock__sleep_until(t0 + 15 * DLOCK__MS);
    CU_ASSERT(dlock__now() >= t0 + 15 * DLOCK__MS);
}

/* A fork child draws its own numbers, not its parent's next ones: clients
 * forked together do not retry together. */
static void test_fork_reseeds(void) {
    enum { N = 16 };
    unsigned mine[N], its[N];
    dlock__backoff b;
    int fds[2], st, i, same = 1;
    pid_t pid;

    dlock__backoff_init(&b, 1u << 30, 1u << 30);
    (void)dlock__backoff_next(&b); /* this thread has a seed */
    CU_ASSERT_FATAL(pipe(fds) == 0);
    pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        for (i = 0; i < N; i++) its[i] = dlock__backoff_next(&b);
        _exit(write(fds[1], its, sizeof its) == (ssize_t)sizeof its ? 0 : 1);
    }
    for (i = 0; i < N; i++) mine[i] = dlock__backoff_next(&b);
    CU_ASSERT(read(fds[0], its, sizeof its) == (ssize_t)sizeof its);
    CU_ASSERT(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    close(fds[0]);
    close(fds[1]);
    for (i = 0; i < N; i++)
        if (mine[i] != its[i]) same = 0;
    CU_ASSERT(!same);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_growth),
    DLT_TEST(test_cap),
    DLT_TEST(test_jitter_range),
    DLT_TEST(test_reset),
    DLT_TEST(test_sleep_deadline),
    DLT_TEST(test_fork_reseeds),
    { NULL, NULL }
};

int main(int argc, char **argv) {
    return dlt_main_unit(argc, argv, "backoff", tests, 60);
}
