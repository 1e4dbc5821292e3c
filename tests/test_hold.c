/* labels: unit; timeout: 60 */
/* test_hold.c -- a hold's states and transitions (src/core/hold.c) and the
 * one place that decides the release kind (dlock__release_kind), with no
 * server: a zeroed client and a lock entry made here.
 *
 *   - the release kind for every input, and the same answers the six
 *     places that each computed it used to give, for the inputs each had;
 *   - take, cache, uncache, release start, lost, forget, abandon and
 *     consistent move a hold between the states as hold.c's table says,
 *     and every question answers as it says in each state;
 *   - a releasing hold is live and renewed but never declared lost, and
 *     stays releasing when it is lost; a cached hold's loss tells its
 *     handler only for a hold that ended into the cache unconfirmed.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>

#include "fixture.h"

#include "core/core.h"

/* ------------------------------------------------------------ release kind */

static void test_release_kind_table(void) {
    int s, r, d, i, h;
    for (s = 0; s < 2; s++)
        for (r = 0; r < 2; r++)
            for (d = 0; d < 2; d++)
                for (i = 0; i < 2; i++)
                    for (h = 0; h < 2; h++) {
                        int want = s ? DLOCK__REL_SHARED
                                   : !r ? (h ? DLOCK__REL_HASH : DLOCK__REL_PLAIN)
                                   : d ? DLOCK__REL_DEAD
                                   : i ? DLOCK__REL_INCONSISTENT
                                       : DLOCK__REL_CLEAN;
                        CU_ASSERT_EQUAL(dlock__release_kind(s, r, d, i, h), want);
                    }
}

/* The expressions the six places used before there was one function, for
 * the inputs each of them can have (a read hold is never robust). */
static void test_release_kind_as_before(void) {
    static const int granted[3] = { DLOCK__ACQ_ACQUIRED, DLOCK__ACQ_OWNERDEAD, DLOCK__ACQ_MINE };
    int s, r, x, k, st;
    for (r = 0; r < 2; r++) {
        /* lock.c, a cached hold given back: exclusive, consistent */
        CU_ASSERT_EQUAL(dlock__release_kind(0, r, 0, 0, 0), r ? DLOCK__REL_CLEAN : DLOCK__REL_PLAIN);
        /* client.c at exit: a cached hold, or one a thread holds */
        for (x = 0; x < 2; x++)
            CU_ASSERT_EQUAL(dlock__release_kind(0, r, !x, 0, 0),
                            x ? (r ? DLOCK__REL_CLEAN : DLOCK__REL_PLAIN) : (r ? DLOCK__REL_DEAD : DLOCK__REL_PLAIN));
        /* lock.c, an orphan after a failed acquire */
        CU_ASSERT_EQUAL(dlock__release_kind(0, r, 1, 0, 0), r ? DLOCK__REL_DEAD : DLOCK__REL_PLAIN);
    }
    CU_ASSERT_EQUAL(dlock__release_kind(1, 0, 1, 0, 0), DLOCK__REL_SHARED);
    CU_ASSERT_EQUAL(dlock__release_kind(1, 0, 0, 0, 0), DLOCK__REL_SHARED); /* at exit, a read hold */
    for (s = 0; s < 2; s++)
        for (r = 0; r < 2 - s; r++)
            for (k = 0; k < 3; k++) {
                st = granted[k];
                /* lock.c give_back: dead unless a clean ACQUIRED */
                CU_ASSERT_EQUAL(dlock__release_kind(s, r, st != DLOCK__ACQ_ACQUIRED, 0, 0),
                                s ? DLOCK__REL_SHARED : !r ? DLOCK__REL_PLAIN
                                : st == DLOCK__ACQ_ACQUIRED ? DLOCK__REL_CLEAN : DLOCK__REL_DEAD);
                /* backend.c (replicas did not acknowledge), redlock.c (no
                 * quorum): dead only for OWNERDEAD */
                CU_ASSERT_EQUAL(dlock__release_kind(s, r, st == DLOCK__ACQ_OWNERDEAD, 0, 0),
                                s ? DLOCK__REL_SHARED : !r ? DLOCK__REL_PLAIN
                                : st == DLOCK__ACQ_OWNERDEAD ? DLOCK__REL_DEAD : DLOCK__REL_CLEAN);
            }
    /* lock.c unlock: inconsistent only for a robust exclusive hold */
    for (s = 0; s < 2; s++)
        for (r = 0; r < 2 - s; r++)
            for (x = 0; x < 2; x++)
                CU_ASSERT_EQUAL(dlock__release_kind(s, r, 0, x, 0),
                                s ? DLOCK__REL_SHARED : !r ? DLOCK__REL_PLAIN
                                : x ? DLOCK__REL_INCONSISTENT : DLOCK__REL_CLEAN);
}

/* ------------------------------------------------------------------ holds */

static struct dlock_client *cl;
static dlock__lock *lk;
static dlock__thread t1, t2;
static int handled;

static void on_lost(dlock_mutex_t *m, const char *name, void *arg) {
    (void)m;
    (void)name;
    (void)arg;
    handled++;
}

/* A client with no threads and one lock entry, its exclusive hold held by
 * t1 and on the held list (as lock.c's hold_begin leaves it). */
static void setup(void) {
    cl = calloc(1, sizeof *cl);
    lk = calloc(1, sizeof *lk);
    CU_ASSERT_FATAL(cl != NULL && lk != NULL);
    pthread_mutex_init(&cl->mu, NULL);
    pthread_cond_init(&lk->cv, NULL);
    lk->k.name = strdup("hold");
    lk->x.l = lk;
    cl->renew_running = 1; /* dlock__held_add starts no renewal thread */
    cl->stats_off = 1;     /* no live figures: a lost hold's count would need the client's end to free it */
    dlock__hold_take(&lk->x, &t1, 0);
    lk->x.count = 1;
    lk->x.lease_ms = 30000;
    lk->x.valid_until = dlock__now() + (dlock__mono)30000 * DLOCK__MS;
    dlock__held_add(cl, &lk->x);
}

static void teardown(void) {
    pthread_cond_destroy(&lk->cv);
    pthread_mutex_destroy(&cl->mu);
    free(lk->k.name);
    free(lk);
    free(cl);
}

/* The questions' answers, one bit each, in the order live, cached,
 * releasing, renewable, can_be_lost, in_use. */
static int answers(const dlock__hold *h) {
    return dlock__hold_is_live(h) | dlock__hold_is_cached(h) << 1 | dlock__hold_is_releasing(h) << 2 |
           dlock__hold_is_renewable(h) << 3 | dlock__hold_can_be_lost(h) << 4 | dlock__hold_in_use(h) << 5;
}
enum { A_LIVE = 1, A_CACHED = 2, A_RELEASING = 4, A_RENEW = 8, A_LOSABLE = 16, A_INUSE = 32 };

static void test_states_and_questions(void) {
    dlock__hold none;
    memset(&none, 0, sizeof none);
    CU_ASSERT_EQUAL(none.state, DLOCK__HOLD_NONE); /* a zeroed hold is no hold */
    CU_ASSERT_EQUAL(answers(&none), 0);
    setup();
    CU_ASSERT_EQUAL(lk->x.state, DLOCK__HOLD_HELD);
    CU_ASSERT_EQUAL(answers(&lk->x), A_LIVE | A_RENEW | A_LOSABLE | A_INUSE);
    CU_ASSERT_PTR_EQUAL(cl->held, &lk->x);
    dlock__hold_cache(&lk->x);
    CU_ASSERT_EQUAL(lk->x.state, DLOCK__HOLD_CACHED);
    CU_ASSERT_PTR_NULL(lk->x.owner);
    CU_ASSERT_EQUAL(lk->x.count, 0);
    CU_ASSERT_EQUAL(answers(&lk->x), A_CACHED | A_RENEW | A_LOSABLE | A_INUSE);
    dlock__hold_uncache(&lk->x, &t2);
    CU_ASSERT_EQUAL(lk->x.state, DLOCK__HOLD_HELD);
    CU_ASSERT_PTR_EQUAL(lk->x.owner, &t2);
    dlock__hold_release_start(&lk->x);
    CU_ASSERT_EQUAL(answers(&lk->x), A_LIVE | A_RELEASING | A_RENEW | A_INUSE);
    dlock__hold_forget(cl, &lk->x);
    CU_ASSERT_EQUAL(lk->x.state, DLOCK__HOLD_NONE);
    CU_ASSERT_PTR_NULL(lk->x.owner);
    CU_ASSERT_EQUAL(answers(&lk->x), 0);
    CU_ASSERT_PTR_NULL(cl->held);
    teardown();
}

static void test_lost(void) {
    dlock__lost_report rep;
    uint64_t gen;
    setup();
    lk->x.lost_fn = on_lost;
    gen = lk->gen;
    dlock__hold_lost(cl, &lk->x, &rep);
    CU_ASSERT_EQUAL(lk->x.state, DLOCK__HOLD_LOST);
    CU_ASSERT_PTR_EQUAL(lk->x.owner, &t1); /* its unlock says EPERM */
    CU_ASSERT_EQUAL(answers(&lk->x), A_INUSE);
    CU_ASSERT_PTR_NULL(cl->held);
    CU_ASSERT(lk->gen > gen);
    CU_ASSERT(rep.fn == on_lost);
    CU_ASSERT_STRING_EQUAL(rep.name != NULL ? rep.name : "", "hold");
    handled = 0;
    dlock__lost_run(&rep);
    CU_ASSERT_EQUAL(handled, 1);
    free(rep.name);
    CU_ASSERT_EQUAL(dlock__hold_valid(cl, &lk->x, &t1, &rep), 0);
    /* A new grant takes it again. */
    dlock__hold_take(&lk->x, &t2, 1);
    CU_ASSERT_EQUAL(lk->x.state, DLOCK__HOLD_HELD);
    CU_ASSERT(dlock__hold_is_inconsistent(&lk->x));
    dlock__hold_consistent(&lk->x);
    CU_ASSERT(!dlock__hold_is_inconsistent(&lk->x));
    teardown();
}

/* A hold whose unlock is on its way is lost (its validity ran out) and
 * stays releasing; a take by another thread ends that. */
static void test_lost_while_releasing(void) {
    dlock__lost_report rep;
    setup();
    dlock__hold_release_start(&lk->x);
    CU_ASSERT_EQUAL(dlock__hold_valid(cl, &lk->x, &t1, &rep), 1);
    lk->x.valid_until = dlock__now() - 1;
    CU_ASSERT_EQUAL(dlock__hold_valid(cl, &lk->x, &t1, &rep), 0);
    CU_ASSERT_EQUAL(lk->x.state, DLOCK__HOLD_LOST);
    CU_ASSERT_EQUAL(answers(&lk->x), A_RELEASING | A_INUSE);
    dlock__hold_take(&lk->x, &t2, 0);
    CU_ASSERT_EQUAL(answers(&lk->x), A_LIVE | A_RENEW | A_LOSABLE | A_INUSE);
    teardown();
}

/* A cached hold's loss forgets it; it tells the handler only if a hold
 * ended into the cache after the last renewal that confirmed it (then
 * that hold may not have been exclusive), and nobody once a renewal sent
 * after the last such end succeeded (renew.c sets ends_seen so). */
static void test_cached_lost(void) {
    dlock__lost_report rep;
    int confirmed;
    for (confirmed = 0; confirmed <= 1; confirmed++) {
        setup();
        lk->x.lost_fn = on_lost;
        lk->x.caching = 1;
        dlock__hold_cache(&lk->x);
        CU_ASSERT_EQUAL(lk->x.ends, 1);
        if (confirmed) lk->x.ends_seen = lk->x.ends;
        dlock__hold_lost(cl, &lk->x, &rep);
        CU_ASSERT_EQUAL(lk->x.state, DLOCK__HOLD_NONE);
        if (confirmed) {
            CU_ASSERT(rep.fn == NULL);
            CU_ASSERT_PTR_NULL(rep.name);
        } else {
            CU_ASSERT(rep.fn == on_lost);
            CU_ASSERT(rep.name != NULL && strcmp(rep.name, "hold") == 0);
            free(rep.name);
        }
        CU_ASSERT_EQUAL(lk->x.caching, 0);
        CU_ASSERT_EQUAL(lk->x.ends, 0);
        CU_ASSERT_PTR_NULL(cl->held);
        teardown();
    }
}

/* The exit handler's release: off the held list, no hold. */
static void test_abandon(void) {
    setup();
    dlock__hold_release_start(&lk->x);
    CU_ASSERT_EQUAL(dlock__hold_release_kind(&lk->x, 1), DLOCK__REL_PLAIN);
    lk->x.robust = 1;
    CU_ASSERT_EQUAL(dlock__hold_release_kind(&lk->x, 1), DLOCK__REL_DEAD);
    dlock__hold_abandon(cl, &lk->x);
    CU_ASSERT_EQUAL(answers(&lk->x), 0);
    CU_ASSERT_PTR_NULL(lk->x.owner);
    CU_ASSERT_PTR_NULL(cl->held);
    CU_ASSERT_EQUAL(cl->nheld, 0);
    teardown();
}

static const struct dlt_test tests[] = {
    { "release_kind_table", test_release_kind_table },
    { "release_kind_as_before", test_release_kind_as_before },
    { "states_and_questions", test_states_and_questions },
    { "lost", test_lost },
    { "lost_while_releasing", test_lost_while_releasing },
    { "cached_lost", test_cached_lost },
    { "abandon", test_abandon },
    { NULL, NULL }
};

int main(int argc, char **argv) {
    return dlt_main_unit(argc, argv, "hold", tests, 60);
}
