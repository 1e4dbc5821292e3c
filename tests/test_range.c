/* labels: redis; timeout: 120 */
/* test_range.c -- the record-lock range table (src/backend/lua/range.lua,
 * through dlock__range in src/api/range.c), which
 * the preload's fcntl and lockf hooks use (docs/preload.md, "Record
 * locks"): POSIX replacement, split and merge of an owner's ranges,
 * conflicts between owners, a refused upgrade that keeps the read lock,
 * restore, leases that lapse, EDEADLK and no false one, the owners' wait
 * edges (dlock__range_edge), what the administration calls
 * (dlock_range_list, _tables, _break) see and clear, against a real redis-server and a real Redis
 * Cluster.  Runs in the sanitizer build too (the preload does not).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "fixture_multi.h"
#include "api/api.h"

static dlock_client_t *cl;

#define STR_EQ(got, want)                                                               \
    do {                                                                                \
        if (strcmp((got), (want)) != 0) fprintf(stderr, "  line %d: got '%s', want '%s'\n", __LINE__, (got), (want)); \
        CU_ASSERT_STRING_EQUAL((got), (want));                                          \
    } while (0)

static void open_client(void) {
    if (cl == NULL) CU_ASSERT_FATAL(dlt_client_make(&cl, NULL, 2000) == 0);
}

/* One request: "set", "unl", "get", "restore", "renew", "nowait".  The
 * answer joined by spaces into out. */
static int rq(const char *name, const char *op, const char *owner, const char *lease, int type, long long s,
              long long e, int wait, const char *segs, char *out, size_t cap) {
    char ty[4], sb[24], eb[24];
    const char *args[9];
    dlock__strs ans;
    size_t i, n = 0;
    int rc;
    snprintf(ty, sizeof ty, "%d", type);
    snprintf(sb, sizeof sb, "%lld", s);
    snprintf(eb, sizeof eb, "%lld", e);
    args[0] = op;
    args[1] = owner;
    args[2] = lease;
    args[3] = ty;
    args[4] = sb;
    args[5] = eb;
    args[6] = "testhost:1";
    args[7] = wait ? "1" : "0";
    args[8] = segs ? segs : "";
    out[0] = '\0';
    if ((rc = dlock__range(cl, name, 0, 9, args, &ans)) != 0) return rc;
    for (i = 0; i < ans.n; i++) n += (size_t)snprintf(out + n, n < cap ? cap - n : 0, "%s%s", i ? " " : "", ans.v[i]);
    dlock__strs_free(&ans);
    return 0;
}

#define SET(n, o, t, s, e) rq(n, "set", o, "10000", t, s, e, 0, NULL, out, sizeof out)

/* The owner's ranges as the table keeps them ("S:E:T,..."). */
static void ranges(const char *name, const char *owner, char *buf, size_t cap) {
    redisReply *r = dlt_redis_cmd(&dlt_server, "HGET dlock:{%s}:rl %s", name, owner);
    const char *p;
    buf[0] = '\0';
    if (r != NULL && r->type == REDIS_REPLY_STRING && (p = strrchr(r->str, '|')) != NULL)
        snprintf(buf, cap, "%s", p + 1);
    if (r != NULL) freeReplyObject(r);
}

#define RANGES(name, owner, want)                    \
    do {                                             \
        char got_[256];                              \
        ranges(name, owner, got_, sizeof got_);      \
        STR_EQ(got_, want);               \
    } while (0)

static void test_replace_split_merge(void) {
    char out[256];
    open_client();
    DLT_ASSERT_INT_EQ(SET("rg1", "o1", 2, 0, 9), 0);
    STR_EQ(out, "0 ");
    DLT_ASSERT_INT_EQ(SET("rg1", "o1", 2, 10, 19), 0);
    RANGES("rg1", "o1", "0:19:2"); /* merged */
    DLT_ASSERT_INT_EQ(SET("rg1", "o1", 1, 5, 7), 0);
    STR_EQ(out, "0 5:7:2"); /* the former segment, for restore */
    RANGES("rg1", "o1", "0:4:2,5:7:1,8:19:2"); /* downgrade of the middle: split */
    DLT_ASSERT_INT_EQ(rq("rg1", "unl", "o1", "10000", 0, 0, 5, 0, NULL, out, sizeof out), 0);
    STR_EQ(out, "0 2");
    RANGES("rg1", "o1", "6:7:1,8:19:2");
    DLT_ASSERT_INT_EQ(SET("rg1", "o1", 2, 0, 7), 0);
    RANGES("rg1", "o1", "0:19:2"); /* merged again */
    DLT_ASSERT_INT_EQ(rq("rg1", "unl", "o1", "10000", 0, 0, 9007199254740991LL, 0, NULL, out, sizeof out), 0);
    STR_EQ(out, "0 0");
    DLT_ASSERT_INT_EQ(dlt_redis_keys_count(&dlt_server, "dlock:{rg1}:rl"), 0); /* nothing left */
}

static void test_conflicts_and_upgrade(void) {
    char out[256];
    open_client();
    DLT_ASSERT_INT_EQ(SET("rg2", "o1", 1, 0, 99), 0);
    DLT_ASSERT_INT_EQ(SET("rg2", "o2", 1, 50, 59), 0); /* read with read */
    STR_EQ(out, "0 ");
    DLT_ASSERT_INT_EQ(SET("rg2", "o1", 2, 0, 99), 0); /* upgrade refused... */
    STR_EQ(out, "1 1 50 59 testhost:1 o2");
    RANGES("rg2", "o1", "0:99:1"); /* ...and the read lock kept */
    DLT_ASSERT_INT_EQ(SET("rg2", "o1", 2, 0, 49), 0); /* a partial upgrade */
    RANGES("rg2", "o1", "0:49:2,50:99:1");
    DLT_ASSERT_INT_EQ(SET("rg2", "o2", 1, 49, 49), 0);
    STR_EQ(out, "1 2 0 49 testhost:1 o1");
    DLT_ASSERT_INT_EQ(SET("rg2", "o3", 2, 100, 200), 0); /* disjoint */
    STR_EQ(out, "0 ");
    DLT_ASSERT_INT_EQ(rq("rg2", "get", "o3", "10000", 2, 0, 1000, 0, NULL, out, sizeof out), 0);
    STR_EQ(out, "1 2 0 49 testhost:1 o1,o2"); /* the lowest conflict, never one's own; who conflicts */
    DLT_ASSERT_INT_EQ(rq("rg2", "get", "o1", "10000", 2, 0, 49, 0, NULL, out, sizeof out), 0);
    STR_EQ(out, "0");
    /* a kernel call that failed after a set: the former segments go back */
    DLT_ASSERT_INT_EQ(SET("rg2", "o3", 2, 300, 300), 0);
    DLT_ASSERT_INT_EQ(SET("rg2", "o3", 1, 100, 300), 0);
    STR_EQ(out, "0 100:200:2,300:300:2");
    DLT_ASSERT_INT_EQ(rq("rg2", "restore", "o3", "10000", 0, 100, 300, 0, "100:200:2,300:300:2", out, sizeof out), 0);
    RANGES("rg2", "o3", "100:200:2,300:300:2");
    DLT_ASSERT_INT_EQ(rq("rg2", "set", "o9", "10000", 9, 5, 1, 0, NULL, out, sizeof out) != 0, 1); /* bad range */
}

static void test_lease_lapses(void) {
    char out[256];
    open_client();
    DLT_ASSERT_INT_EQ(rq("rg3", "set", "o1", "200", 2, 0, 9, 0, NULL, out, sizeof out), 0);
    DLT_ASSERT_INT_EQ(rq("rg3", "renew", "o1", "200", 0, 0, 0, 0, NULL, out, sizeof out), 0);
    STR_EQ(out, "0 1");
    DLT_ASSERT_INT_EQ(SET("rg3", "o2", 2, 0, 9), 0);
    STR_EQ(out, "1 2 0 9 testhost:1 o1");
    dlt_sleep_ms(400);
    DLT_ASSERT_INT_EQ(SET("rg3", "o2", 2, 0, 9), 0); /* o1's lease ran out */
    STR_EQ(out, "0 ");
    DLT_ASSERT_INT_EQ(rq("rg3", "renew", "o1", "200", 0, 0, 0, 0, NULL, out, sizeof out), 0);
    STR_EQ(out, "1"); /* lost */
    {
        redisReply *r = dlt_redis_cmd(&dlt_server, "PTTL dlock:{rg3}:rl");
        CU_ASSERT(r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer > 0 && r->integer <= 20000);
        if (r) freeReplyObject(r);
    }
}

/* A cycle of waits is EDEADLK; a waiter whose blocker has let go (but
 * that has not asked again yet) closes none. */
static void test_deadlock(void) {
    char out[256];
    open_client();
    DLT_ASSERT_INT_EQ(SET("rg4", "o1", 2, 0, 0), 0);
    DLT_ASSERT_INT_EQ(SET("rg4", "o2", 2, 1, 1), 0);
    DLT_ASSERT_INT_EQ(rq("rg4", "set", "o1", "10000", 2, 1, 1, 1, NULL, out, sizeof out), 0);
    STR_EQ(out, "1 2 1 1 testhost:1 o2"); /* o1 waits for o2 */
    DLT_ASSERT_INT_EQ(rq("rg4", "set", "o2", "10000", 2, 0, 0, 1, NULL, out, sizeof out), 0);
    STR_EQ(out, "2"); /* o2 would wait for o1: EDEADLK */
    DLT_ASSERT_INT_EQ(rq("rg4", "unl", "o2", "10000", 0, 1, 1, 0, NULL, out, sizeof out), 0);
    DLT_ASSERT_INT_EQ(rq("rg4", "set", "o2", "10000", 2, 0, 0, 1, NULL, out, sizeof out), 0);
    STR_EQ(out, "1 2 0 0 testhost:1 o1"); /* o1's recorded wait is for nobody now */
    DLT_ASSERT_INT_EQ(rq("rg4", "nowait", "o2", "10000", 0, 0, 0, 0, NULL, out, sizeof out), 0);
    DLT_ASSERT_INT_EQ(SET("rg4", "o1", 2, 1, 1), 0);
    STR_EQ(out, "0 ");
    RANGES("rg4", "o1", "0:1:2");
}

/* The wait edges of owners (for a cycle through several files): set,
 * read, dropped. */
static void test_edges(void) {
    dlock__strs ans;
    open_client();
    CU_ASSERT_FATAL(dlock__range_edge(cl, "eset", "o7", "123|o8,o9", 1000, &ans) == 0);
    dlock__strs_free(&ans);
    CU_ASSERT_FATAL(dlock__range_edge(cl, "eget", "o7", "", 0, &ans) == 0);
    DLT_ASSERT_INT_EQ((long long)ans.n, 1);
    if (ans.n == 1) STR_EQ(ans.v[0], "123|o8,o9");
    dlock__strs_free(&ans);
    CU_ASSERT_FATAL(dlock__range_edge(cl, "edel", "o7", "", 0, &ans) == 0);
    dlock__strs_free(&ans);
    CU_ASSERT_FATAL(dlock__range_edge(cl, "eget", "o7", "", 0, &ans) == 0);
    DLT_ASSERT_INT_EQ((long long)ans.n, 0);
    dlock__strs_free(&ans);
}

/* On a Redis Cluster: each table on its name's slot, the edges on theirs
 * (several names, so several slots and masters). */
/* What dlock_range_list, dlock_range_tables and dlock_range_break see
 * and do: each owner's ranges in order, its waiting request, the table
 * counts, one owner's break and every owner's. */
struct seen_ranges {
    char text[512];
    int n;
};

static int on_range(const dlock_range_t *r, void *arg) {
    struct seen_ranges *s = arg;
    size_t k = strlen(s->text);
    char end[24];
    if (r->end >= DLOCK_RANGE_EOF) snprintf(end, sizeof end, "EOF");
    else snprintf(end, sizeof end, "%llu", (unsigned long long)r->end);
    snprintf(s->text + k, sizeof s->text - k, "%s%s:%s:%ld:%llu-%s:%s%s", s->n ? " " : "", r->owner, r->host, r->pid,
             (unsigned long long)r->start, end, r->write ? "w" : "r", r->waiting ? ":waits" : "");
    CU_ASSERT(r->lease_left_ms > 0 && r->lease_left_ms <= 10000);
    s->n++;
    return 0;
}

static int on_table(const char *name, unsigned owners, unsigned ranges, void *arg) {
    struct seen_ranges *s = arg;
    size_t k = strlen(s->text);
    snprintf(s->text + k, sizeof s->text - k, "%s%s=%u/%u", s->n++ ? " " : "", name, owners, ranges);
    return 0;
}

static void test_admin(void) {
    char out[256];
    struct seen_ranges s;
    unsigned dropped = 99;
    open_client();
    CU_ASSERT(SET("ad", "o1", 2, 0, 9) == 0);
    CU_ASSERT(SET("ad", "o1", 1, 100, 9007199254740991LL) == 0);
    CU_ASSERT(SET("ad", "o2", 1, 20, 29) == 0);
    CU_ASSERT(rq("ad", "set", "o2", "10000", 2, 5, 5, 1, NULL, out, sizeof out) == 0); /* o2 waits for 5 */
    memset(&s, 0, sizeof s);
    CU_ASSERT(dlock_range_list(cl, "ad", on_range, &s) == 0);
    STR_EQ(s.text, "o1:testhost:1:0-9:w o1:testhost:1:100-EOF:r o2:testhost:1:20-29:r o2:testhost:1:5-5:w:waits");
    memset(&s, 0, sizeof s);
    CU_ASSERT(dlock_range_tables(cl, "a*", on_table, &s) == 0);
    STR_EQ(s.text, "ad=2/3");
    CU_ASSERT(dlock_range_break(cl, "ad", "o1", &dropped) == 0);
    CU_ASSERT_EQUAL(dropped, 1);
    CU_ASSERT(SET("ad", "o3", 2, 0, 9) == 0);
    STR_EQ(out, "0 "); /* o1's write went */
    CU_ASSERT(dlock_range_break(cl, "ad", NULL, &dropped) == 0);
    CU_ASSERT_EQUAL(dropped, 2);
    memset(&s, 0, sizeof s);
    CU_ASSERT(dlock_range_list(cl, "ad", on_range, &s) == 0);
    CU_ASSERT_EQUAL(s.n, 0);
    memset(&s, 0, sizeof s);
    CU_ASSERT(dlock_range_tables(cl, NULL, on_table, &s) == 0);
    CU_ASSERT_EQUAL(s.n, 0);
    CU_ASSERT(dlock_range_list(cl, "ad", NULL, NULL) == EINVAL);
}

/* trim: an owner's ranges cut to what the given segments cover, each
 * part with the weaker type, and its cache gone; uncache: its ranges
 * become the segments and the cache goes; a set alone with the cache
 * flag gets the cache, another owner then meets it. */
static void test_trim_uncache(void) {
    char out[256];
    const char *args[10] = { "set", "c1", "10000", "2", "0", "99", "testhost:1", "0", "", "1" };
    dlock__strs ans;
    open_client();
    CU_ASSERT_FATAL(dlock__range(cl, "tr", 0, 10, args, &ans) == 0);
    CU_ASSERT(ans.n == 3 && strcmp(ans.v[2], "c") == 0); /* alone: the cache */
    dlock__strs_free(&ans);
    CU_ASSERT(SET("tr", "c2", 1, 200, 209) == 0);
    STR_EQ(out, "3 c1"); /* c1's cache: ask again */
    DLT_ASSERT_INT_EQ(dlock__range_watch(cl, "tr", "c1", 1000), 1); /* c1 is told */
    DLT_ASSERT_INT_EQ(dlock__range_watch(cl, "tr", "c1", 100), 0);  /* once */
    CU_ASSERT(rq("tr", "trim", "c1", "10000", 0, 0, 0, 0, "0:9:2,50:59:1,300:310:2", out, sizeof out) == 0);
    STR_EQ(out, "0 2");
    RANGES("tr", "c1", "0:9:2,50:59:1"); /* no "|1": the cache went */
    CU_ASSERT(SET("tr", "c2", 1, 200, 209) == 0);
    STR_EQ(out, "0 ");
    CU_ASSERT(SET("tr", "c2", 1, 200, 209) == 0); /* c1 has no cache now: no word */
    DLT_ASSERT_INT_EQ(dlock__range_watch(cl, "tr", "c1", 100), 0);
    CU_ASSERT(rq("tr", "uncache", "c1", "10000", 0, 0, 0, 0, "5:6:2", out, sizeof out) == 0);
    STR_EQ(out, "0");
    RANGES("tr", "c1", "5:6:2");
    CU_ASSERT(rq("tr", "trim", "nobody", "10000", 0, 0, 0, 0, "", out, sizeof out) == 0);
    STR_EQ(out, "0 0");
}

static void test_cluster(void) {
    dlt_cluster clus;
    dlock_client_t *mine, *keep = cl;
    char url[512], out[256], name[16];
    dlock__strs ans;
    int i;
    CU_ASSERT_FATAL(dlt_cluster_client(&clus, url, sizeof url, &mine) == 0);
    cl = mine;
    for (i = 0; i < 6; i++) {
        snprintf(name, sizeof name, "rgc%d", i);
        DLT_ASSERT_INT_EQ(SET(name, "o1", 2, 0, 9), 0);
        STR_EQ(out, "0 ");
        DLT_ASSERT_INT_EQ(SET(name, "o2", 1, 5, 5), 0);
        STR_EQ(out, "1 2 0 9 testhost:1 o1");
        DLT_ASSERT_INT_EQ(SET(name, "o2", 1, 10, 19), 0);
        STR_EQ(out, "0 ");
    }
    for (i = 0; i < 4; i++) { /* the cache, its word (BLPOP on the slot's node) and its end */
        const char *args[10] = { "set", "c1", "10000", "2", "0", "9", "testhost:1", "0", "", "1" };
        snprintf(name, sizeof name, "rgk%d", i);
        CU_ASSERT_FATAL(dlock__range(cl, name, 0, 10, args, &ans) == 0);
        CU_ASSERT(ans.n == 3 && strcmp(ans.v[2], "c") == 0);
        dlock__strs_free(&ans);
        DLT_ASSERT_INT_EQ(SET(name, "c2", 1, 20, 29), 0);
        STR_EQ(out, "3 c1");
        DLT_ASSERT_INT_EQ(dlock__range_watch(cl, name, "c1", 1000), 1);
        DLT_ASSERT_INT_EQ(rq(name, "uncache", "c1", "10000", 0, 0, 0, 0, "0:9:2", out, sizeof out), 0);
        DLT_ASSERT_INT_EQ(SET(name, "c2", 1, 20, 29), 0);
        STR_EQ(out, "0 ");
    }
    for (i = 0; i < 6; i++) {
        char id[16];
        snprintf(id, sizeof id, "own%d", i);
        CU_ASSERT(dlock__range_edge(cl, "eset", id, "1|x", 1000, &ans) == 0);
        dlock__strs_free(&ans);
        CU_ASSERT(dlock__range_edge(cl, "eget", id, "", 0, &ans) == 0);
        DLT_ASSERT_INT_EQ((long long)ans.n, 1);
        dlock__strs_free(&ans);
    }
    cl = keep;
    dlock_client_destroy(mine);
    dlt_cluster_cleanup(&clus);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_replace_split_merge),
    DLT_TEST(test_conflicts_and_upgrade),
    DLT_TEST(test_lease_lapses),
    DLT_TEST(test_deadlock),
    DLT_TEST(test_edges),
    DLT_TEST(test_admin),
    DLT_TEST(test_trim_uncache),
    DLT_TEST(test_cluster),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    int rc = dlt_main(argc, argv, "range", tests);
    if (cl != NULL) dlock_client_destroy(cl);
    return rc;
}
