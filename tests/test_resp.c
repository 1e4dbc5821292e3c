/* labels: unit; timeout: 60 */
/* test_resp.c -- the hand-written RESP request encoder (src/net/resp.c),
 * with no server:
 *
 *   - dlock__dec writes the decimal digits of 0, 9, 10, 99, 100, ... and
 *     of the largest 64-bit number, nothing else;
 *   - dlock__resp_encode / _size give byte-exact requests for a few
 *     argument vectors: one argument, an empty argument, binary arguments
 *     (NUL, CR, LF inside), lengths at the 9/10 and 99/100 boundaries, and
 *     10 arguments (a two-digit count);
 *   - the same bytes as hiredis's own formatter for many vectors;
 *   - dlock__resp_append appends to a context's output buffer after what
 *     is already there (a pipeline), and refuses an empty request;
 *   - the acquire and release scripts' arguments (backend.c), made without
 *     printf: every length is its string's, the numbers are in decimal,
 *     the holder identity is "host:pid:tid" and follows dlock__set_who.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>

#include "backend/backend.h"

static void dec_is(unsigned long long v, const char *want) {
    char buf[DLOCK__DEC_MAX + 1];
    size_t n;
    memset(buf, 'x', sizeof buf);
    n = dlock__dec(buf, v);
    CU_ASSERT_EQUAL(n, strlen(want));
    CU_ASSERT(memcmp(buf, want, strlen(want)) == 0);
    CU_ASSERT_EQUAL(buf[n], 'x'); /* nothing past the digits */
}

static void test_dec(void) {
    dec_is(0, "0");
    dec_is(1, "1");
    dec_is(9, "9");
    dec_is(10, "10");
    dec_is(99, "99");
    dec_is(100, "100");
    dec_is(4294967295ull, "4294967295");
    dec_is(18446744073709551615ull, "18446744073709551615");
}

/* Encodes argv (argc strings, lengths lens) and compares with want (wantlen
 * bytes). */
static void encodes_as(int argc, const char *const *argv, const size_t *lens, const char *want, size_t wantlen) {
    size_t size = 0;
    char *buf, *end;
    CU_ASSERT_EQUAL_FATAL(dlock__resp_size(argc, lens, &size), 0);
    CU_ASSERT_EQUAL(size, wantlen);
    buf = malloc(size + 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
    buf[size] = '#';
    end = dlock__resp_encode(buf, argc, argv, lens);
    CU_ASSERT_EQUAL((size_t)(end - buf), wantlen);
    CU_ASSERT(memcmp(buf, want, wantlen) == 0);
    CU_ASSERT_EQUAL(buf[size], '#'); /* not a byte more */
    free(buf);
}

#define S(lit) lit, sizeof(lit) - 1

static void test_simple(void) {
    const char *a1[1] = { "PING" };
    size_t l1[1] = { 4 };
    const char *a3[3] = { "SET", "k", "v" };
    size_t l3[3] = { 3, 1, 1 };
    encodes_as(1, a1, l1, S("*1\r\n$4\r\nPING\r\n"));
    encodes_as(3, a3, l3, S("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n"));
}

static void test_empty_argument(void) {
    const char *a[3] = { "SET", "", "x" };
    size_t l[3] = { 3, 0, 1 };
    const char *b[1] = { NULL }; /* an empty argument may have no bytes at all */
    size_t lb[1] = { 0 };
    encodes_as(3, a, l, S("*3\r\n$3\r\nSET\r\n$0\r\n\r\n$1\r\nx\r\n"));
    encodes_as(1, b, lb, S("*1\r\n$0\r\n\r\n"));
}

static void test_binary_argument(void) {
    static const char bin[] = { 'a', '\0', '\r', '\n', '$', '*', (char)0xff, 'z' };
    const char *a[2] = { "ECHO", bin };
    size_t l[2] = { 4, sizeof bin };
    static const char want[] = "*2\r\n$4\r\nECHO\r\n$8\r\na\0\r\n$*\xffz\r\n";
    encodes_as(2, a, l, want, sizeof want - 1);
}

/* An argument of n bytes ('a'...) alone: "*1\r\n$<n>\r\n<n bytes>\r\n". */
static void one_of_length(size_t n) {
    char *arg = malloc(n + 1), *want = malloc(n + 32), digits[DLOCK__DEC_MAX + 1];
    const char *a[1];
    size_t l[1], w, i;
    CU_ASSERT_PTR_NOT_NULL_FATAL(arg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(want);
    for (i = 0; i < n; i++) arg[i] = (char)('a' + i % 26);
    a[0] = arg;
    l[0] = n;
    snprintf(digits, sizeof digits, "%zu", n);
    w = (size_t)sprintf(want, "*1\r\n$%s\r\n", digits);
    memcpy(want + w, arg, n);
    w += n;
    memcpy(want + w, "\r\n", 2);
    encodes_as(1, a, l, want, w + 2);
    free(arg);
    free(want);
}

static void test_length_boundaries(void) {
    static const size_t ns[] = { 0, 1, 9, 10, 11, 99, 100, 101, 999, 1000, 65536 };
    size_t i;
    for (i = 0; i < sizeof ns / sizeof ns[0]; i++) one_of_length(ns[i]);
}

static void test_count_boundaries(void) {
    const char *a[100];
    size_t l[100], i;
    char want[1024];
    size_t w;
    int argc;
    static const int counts[] = { 9, 10, 99, 100 };
    for (i = 0; i < 100; i++) {
        a[i] = "x";
        l[i] = 1;
    }
    for (i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        int j;
        argc = counts[i];
        w = (size_t)sprintf(want, "*%d\r\n", argc);
        for (j = 0; j < argc; j++) w += (size_t)sprintf(want + w, "$1\r\nx\r\n");
        encodes_as(argc, a, l, want, w);
    }
}

/* The same bytes as hiredis's formatter, for vectors of every shape. */
static void test_as_hiredis(void) {
    unsigned seed = 12345;
    int round;
    for (round = 0; round < 500; round++) {
        const char *a[24];
        size_t l[24];
        char *store[24], *theirs = NULL;
        int argc, i, len;
        seed = seed * 1103515245u + 12345u;
        argc = 1 + (int)((seed >> 16) % 24);
        for (i = 0; i < argc; i++) {
            size_t j;
            seed = seed * 1103515245u + 12345u;
            l[i] = (seed >> 16) % 5 == 0 ? 0 : (seed >> 8) % 300;
            store[i] = malloc(l[i] + 1);
            CU_ASSERT_PTR_NOT_NULL_FATAL(store[i]);
            for (j = 0; j < l[i]; j++) {
                seed = seed * 1103515245u + 12345u;
                store[i][j] = (char)(seed >> 16);
            }
            a[i] = store[i];
        }
        len = redisFormatCommandArgv(&theirs, argc, a, l);
        CU_ASSERT_FATAL(len > 0 && theirs != NULL);
        encodes_as(argc, a, l, theirs, (size_t)len);
        redisFreeCommand(theirs);
        for (i = 0; i < argc; i++) free(store[i]);
    }
}

static void test_append(void) {
    redisContext ctx;
    const char *a1[1] = { "ASKING" };
    size_t l1[1] = { 6 };
    const char *a2[2] = { "GET", "key" };
    size_t l2[2] = { 3, 3 };
    size_t size = 99;
    static const char want[] = "*1\r\n$6\r\nASKING\r\n*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n";
    memset(&ctx, 0, sizeof ctx);
    ctx.obuf = sdsempty();
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx.obuf);
    CU_ASSERT_EQUAL(dlock__resp_append(&ctx, 1, a1, l1), 0);
    CU_ASSERT_EQUAL(dlock__resp_append(&ctx, 2, a2, l2), 0);
    CU_ASSERT_EQUAL(sdslen(ctx.obuf), sizeof want - 1);
    CU_ASSERT(memcmp(ctx.obuf, want, sizeof want - 1) == 0);
    CU_ASSERT_EQUAL(ctx.obuf[sdslen(ctx.obuf)], '\0'); /* still an sds */
    /* emptied as dlock__conn_flush does, the room stays: no allocation */
    sdsclear(ctx.obuf);
    CU_ASSERT_EQUAL(dlock__resp_append(&ctx, 2, a2, l2), 0);
    CU_ASSERT_EQUAL(sdslen(ctx.obuf), sizeof want - 1 - 16);
    CU_ASSERT(memcmp(ctx.obuf, want + 16, sizeof want - 1 - 16) == 0);
    /* no arguments: no request */
    CU_ASSERT_EQUAL(dlock__resp_size(0, l1, &size), EINVAL);
    CU_ASSERT_EQUAL(size, 99);
    CU_ASSERT_EQUAL(dlock__resp_append(&ctx, 0, a1, l1), EINVAL);
    CU_ASSERT_EQUAL(sdslen(ctx.obuf), sizeof want - 1 - 16);
    sdsfree(ctx.obuf);
}

static void test_too_large(void) {
    size_t l[2] = { (size_t)-1 - 5, 10 }, size = 7;
    CU_ASSERT_EQUAL(dlock__resp_size(2, l, &size), ENOMEM);
    CU_ASSERT_EQUAL(size, 7);
}


/* Every argument's length is its string's (all of these are text). */
static void lengths_true(const dlock__args *a) {
    int i;
    for (i = 0; i < a->n; i++) {
        CU_ASSERT_PTR_NOT_NULL_FATAL(a->v[i]);
        CU_ASSERT_EQUAL(a->len[i], strlen(a->v[i]));
    }
}

static void test_script_args(void) {
    dlock__backend c;
    dlock__keys k;
    dlock__args a;
    char host[256], want[400];
    int which;
    memset(&c, 0, sizeof c);
    memset(&k, 0, sizeof k);
    c.epoch_key = "t:epoch";
    c.node.conf.restart_guard_ms = 100;
    c.node.conf.handoff_ms = 5;
    CU_ASSERT_EQUAL_FATAL(dlock__keys_make(&k, "t:", "name", 4, 0), 0);
    if (gethostname(host, sizeof host - 1) != 0) strcpy(host, "unknown");
    host[sizeof host - 1] = '\0';

    which = dlock__acquire_args(&c, &k, "tok", 30000, DLOCK__F_ROBUST | DLOCK__F_FAIR | DLOCK__F_GRANTLIST, 0, &a);
    CU_ASSERT_EQUAL(which, DLOCK__SCRIPT_ACQUIRE);
    lengths_true(&a);
    CU_ASSERT_EQUAL_FATAL(a.nkeys, 2); /* the restart guard is on: the epoch key too */
    CU_ASSERT_STRING_EQUAL(a.v[1], "t:epoch");
    CU_ASSERT_EQUAL_FATAL(a.n, a.nkeys + 5);
    CU_ASSERT_STRING_EQUAL(a.v[a.nkeys], "tok");
    CU_ASSERT_STRING_EQUAL(a.v[a.nkeys + 1], "30000");
    CU_ASSERT_STRING_EQUAL(a.v[a.nkeys + 2], "1020"); /* robust, not waiting, fair with a grant list, not caching */
    snprintf(want, sizeof want, "%s:%ld:%lu", host, (long)getpid(), 0ul); /* (no thread identity here) */
    { /* "SINCE WHO": this host's wall clock in ms, then the identity */
        const char *sp = strchr(a.v[a.nkeys + 3], ' ');
        long long since = atoll(a.v[a.nkeys + 3]), now = (long long)time(NULL) * 1000;
        CU_ASSERT_PTR_NOT_NULL_FATAL(sp);
        CU_ASSERT(since > now - 60000 && since < now + 60000);
        if (strncmp(sp + 1, want, strlen(host) + 1) != 0) CU_FAIL("identity is not host:...");
    }
    CU_ASSERT_STRING_EQUAL(a.v[a.nkeys + 4], "100"); /* the guard, last */

    /* dlock__set_who names another process: the identity follows; with
     * the guard off, one key and no guard argument */
    c.node.conf.restart_guard_ms = 0;
    dlock__set_who(4242, 99);
    dlock__acquire_args(&c, &k, "tok", 7, DLOCK__F_WAIT | DLOCK__F_CACHING, 0, &a);
    lengths_true(&a);
    CU_ASSERT_EQUAL_FATAL(a.nkeys, 1);
    CU_ASSERT_EQUAL_FATAL(a.n, a.nkeys + 4);
    snprintf(want, sizeof want, " %s:4242:99", host);
    CU_ASSERT_STRING_EQUAL(strchr(a.v[a.nkeys + 3], ' '), want);
    CU_ASSERT_STRING_EQUAL(a.v[a.nkeys + 1], "7");
    CU_ASSERT_STRING_EQUAL(a.v[a.nkeys + 2], "0101"); /* waiting, caching */
    /* a lock-delay: the guard's place ("0", off) and the delay after it */
    dlock__acquire_args(&c, &k, "tok", 7, DLOCK__F_WAIT, 1500, &a);
    lengths_true(&a);
    CU_ASSERT_EQUAL_FATAL(a.n, a.nkeys + 6);
    CU_ASSERT_STRING_EQUAL(a.v[a.nkeys + 4], "0");
    CU_ASSERT_STRING_EQUAL(a.v[a.nkeys + 5], "1500");
    CU_ASSERT_STRING_EQUAL(k.lvbkey, "t:{name}:lvb");
    CU_ASSERT_EQUAL(k.lvbkeylen, strlen("t:{name}:lvb"));

    /* a queuing waiter: H's place ("0") and L; L "1"/"2" (it holds
     * nothing; its wait detects) with its call's start, for its entry */
    dlock__acq io;
    memset(&io, 0, sizeof io);
    io.since_ms = 1764000000123ull;
    dlock__acquire_args(&c, &k, "tok", 7, DLOCK__F_WAIT | DLOCK__F_FAIR | DLOCK__F_GRANTLIST, 0, &a);
    dlock__acquire_since(&a, DLOCK__F_WAIT | DLOCK__F_FAIR | DLOCK__F_GRANTLIST, &io);
    lengths_true(&a);
    CU_ASSERT_STRING_EQUAL(a.v[a.nkeys + 2], "012000");
    dlock__acquire_args(&c, &k, "tok", 7, DLOCK__F_WAIT | DLOCK__F_FAIR | DLOCK__F_LISTED | DLOCK__F_DETECTS, 0, &a);
    dlock__acquire_since(&a, DLOCK__F_WAIT | DLOCK__F_FAIR | DLOCK__F_LISTED | DLOCK__F_DETECTS, &io);
    lengths_true(&a);
    CU_ASSERT_STRING_EQUAL(a.v[a.nkeys + 2], "0110021764000000123");
    dlock__acquire_args(&c, &k, "tok", 7, DLOCK__F_WAIT | DLOCK__F_FAIR | DLOCK__F_LISTED | DLOCK__F_HELD, 0, &a);
    dlock__acquire_since(&a, DLOCK__F_WAIT | DLOCK__F_FAIR | DLOCK__F_LISTED | DLOCK__F_HELD, &io);
    lengths_true(&a);
    CU_ASSERT_STRING_EQUAL(a.v[a.nkeys + 2], "0110211764000000123");
    /* a call's first request makes its since: its clock less the call's age */
    io.since_ms = 0;
    io.age_ms = 60000;
    dlock__acquire_args(&c, &k, "tok", 7, DLOCK__F_WAIT | DLOCK__F_FAIR | DLOCK__F_LISTED, 0, &a);
    dlock__acquire_since(&a, DLOCK__F_WAIT | DLOCK__F_FAIR | DLOCK__F_LISTED, &io);
    lengths_true(&a);
    {
        long long now = (long long)time(NULL) * 1000;
        CU_ASSERT((long long)io.since_ms > now - 62000 && (long long)io.since_ms < now - 58000);
        snprintf(want, sizeof want, "011001%llu", (unsigned long long)io.since_ms);
        CU_ASSERT_STRING_EQUAL(a.v[a.nkeys + 2], want);
    }

    dlock__set_who(123456789, 4000000000ul);
    dlock__release_args(&c, &k, "tok", DLOCK__REL_DEAD, &a);
    lengths_true(&a);
    CU_ASSERT_EQUAL_FATAL(a.nkeys, 1);
    CU_ASSERT_EQUAL_FATAL(a.n, a.nkeys + 2);
    CU_ASSERT_STRING_EQUAL(a.v[a.nkeys], "tok");
    snprintf(want, sizeof want, "dead 5 %s:123456789:4000000000", host);
    CU_ASSERT_STRING_EQUAL(a.v[a.nkeys + 1], want);
    dlock__set_who(0, 0);

    which = dlock__acquire_args(&c, &k, "tok", 4294967295u, DLOCK__F_SHARED | DLOCK__F_READFIRST, 0, &a);
    CU_ASSERT_EQUAL(which, DLOCK__SCRIPT_ACQUIRE_SHARED);
    lengths_true(&a);
    CU_ASSERT_STRING_EQUAL(a.v[a.nkeys + 1], "4294967295");
    CU_ASSERT_STRING_EQUAL(a.v[a.nkeys + 3], "1");
    dlock__keys_free(&k);
}

int main(void) {
    static const struct {
        const char *name;
        void (*fn)(void);
    } tests[] = {
        { "dec", test_dec },
        { "simple", test_simple },
        { "empty_argument", test_empty_argument },
        { "binary_argument", test_binary_argument },
        { "length_boundaries", test_length_boundaries },
        { "count_boundaries", test_count_boundaries },
        { "as_hiredis", test_as_hiredis },
        { "append", test_append },
        { "too_large", test_too_large },
        { "script_args", test_script_args },
    };
    CU_pSuite suite;
    size_t i;
    unsigned failed;
    if (CU_initialize_registry() != CUE_SUCCESS) return 1;
    suite = CU_add_suite("resp", NULL, NULL);
    for (i = 0; i < sizeof tests / sizeof tests[0]; i++)
        if (suite == NULL || CU_add_test(suite, tests[i].name, tests[i].fn) == NULL) return 1;
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    return failed != 0;
}
