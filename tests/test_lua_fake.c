/* test_lua_fake.c -- the fake backend (fake_backend.c, which the core's
 * unit tests run on) checked against the real scripts: one table of cases,
 * each a sequence of acquires, releases and renewals by a few tokens on
 * one lock, run through the fake's ops and through a real server's ops
 * (the scripts of src/backend/lua/ on this suite's redis-server); after
 * every step the two must answer alike -- the call's result, the
 * acquire's status and path, whether a release ended a hold, a renewal's
 * and a reset's result, whose the lock is and how many wait in its queue, and whether
 * the fence rose.  A change to a script's answers that the fake does not
 * follow (or the other way) fails here.
 * labels: redis
 */
#include "fake_backend.h"
#include "fixture.h"

#include "backend/backend.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

enum { ACQ, REL, RENEW, RESET };

typedef struct step {
    int op;
    const char *tok;
    int arg; /* ACQ: DLOCK__F_*; REL: DLOCK__REL_*; RENEW: 1 a read hold; RESET: DLOCK__RESET_* */
} step;

typedef struct fcase {
    const char *what;
    step steps[12];
} fcase;

#define W (DLOCK__F_WAIT | DLOCK__F_FAIR)

static const fcase cases[] = {
    { "free, again, busy, released once",
      { { ACQ, "tA", 0 }, { ACQ, "tA", 0 }, { ACQ, "tB", 0 }, { REL, "tB", DLOCK__REL_PLAIN },
        { REL, "tA", DLOCK__REL_PLAIN }, { REL, "tA", DLOCK__REL_PLAIN }, { ACQ, "tB", 0 }, { 0, NULL, 0 } } },
    { "robust: owner died, then not recoverable",
      { { ACQ, "tA", DLOCK__F_ROBUST }, { REL, "tA", DLOCK__REL_DEAD }, { ACQ, "tB", DLOCK__F_ROBUST },
        { REL, "tB", DLOCK__REL_INCONSISTENT }, { ACQ, "tC", DLOCK__F_ROBUST }, { 0, NULL, 0 } } },
    { "robust: a clean release leaves no marker",
      { { ACQ, "tA", DLOCK__F_ROBUST }, { REL, "tA", DLOCK__REL_CLEAN }, { ACQ, "tB", DLOCK__F_ROBUST },
        { 0, NULL, 0 } } },
    { "fair queue: granted in order",
      { { ACQ, "tA", 0 }, { ACQ, "tB", W }, { ACQ, "tC", W }, { ACQ, "tB", W }, { REL, "tA", DLOCK__REL_PLAIN },
        { ACQ, "tB", W }, { ACQ, "tD", 0 }, { REL, "tB", DLOCK__REL_HASH }, { REL, "tC", DLOCK__REL_HASH },
        { ACQ, "tD", 0 }, { 0, NULL, 0 } } },
    { "fair queue: a waiter withdraws",
      { { ACQ, "tA", 0 }, { ACQ, "tB", W }, { REL, "tB", DLOCK__REL_WITHDRAW }, { REL, "tA", DLOCK__REL_PLAIN },
        { ACQ, "tC", 0 }, { 0, NULL, 0 } } },
    { "readers share, a writer waits for them",
      { { ACQ, "tR", DLOCK__F_SHARED }, { ACQ, "tS", DLOCK__F_SHARED }, { ACQ, "tW", 0 },
        { REL, "tR", DLOCK__REL_SHARED }, { REL, "tR", DLOCK__REL_SHARED }, { REL, "tS", DLOCK__REL_SHARED },
        { ACQ, "tW", 0 }, { ACQ, "tR", DLOCK__F_SHARED }, { 0, NULL, 0 } } },
    { "renewals",
      { { ACQ, "tA", 0 }, { RENEW, "tA", 0 }, { RENEW, "tB", 0 }, { ACQ, "tR", DLOCK__F_SHARED },
        { REL, "tA", DLOCK__REL_PLAIN }, { RENEW, "tA", 0 }, { ACQ, "tR", DLOCK__F_SHARED }, { RENEW, "tR", 1 },
        { RENEW, "tS", 1 }, { 0, NULL, 0 } } },
    { "a waiting writer: the releaser held back, readers too",
      { { ACQ, "tA", 0 }, { ACQ, "tB", DLOCK__F_WAIT }, { REL, "tA", DLOCK__REL_PLAIN },
        { ACQ, "tA", DLOCK__F_WAIT }, { ACQ, "tR", DLOCK__F_SHARED }, { ACQ, "tB", DLOCK__F_WAIT },
        { REL, "tB", DLOCK__REL_HASH }, { ACQ, "tR", DLOCK__F_SHARED }, { 0, NULL, 0 } } },
    { "reset: holds, waiters and the queue end; break leaves the robust marker",
      { { ACQ, "tA", DLOCK__F_ROBUST }, { ACQ, "tB", W | DLOCK__F_ROBUST }, { RESET, "-", DLOCK__RESET_BREAK },
        { ACQ, "tC", DLOCK__F_ROBUST }, { RESET, "-", DLOCK__RESET_FULL }, { RESET, "-", DLOCK__RESET_FULL },
        { ACQ, "tC", DLOCK__F_ROBUST }, { ACQ, "tR", DLOCK__F_SHARED }, { RESET, "-", DLOCK__RESET_FULL },
        { ACQ, "tR", DLOCK__F_SHARED | DLOCK__F_READFIRST }, { 0, NULL, 0 } } },
    { "caching: a hash, busy for others",
      { { ACQ, "tA", DLOCK__F_CACHING }, { ACQ, "tB", 0 }, { REL, "tA", DLOCK__REL_HASH }, { ACQ, "tB", 0 },
        { 0, NULL, 0 } } },
};

/* What a step found, and the lock after it. */
typedef struct seen {
    int rc, status, plain, released, renewed, rose, held;
    char owner[64];
    long long queued;
} seen;

/* ------------------------------------------------------- the two sides */

typedef struct side {
    const dlock__backend_ops *ops;
    dlock__backend *be;
    int real;
    uint64_t last_fence;
} side;

/* The lock's holder and queue as the side's server sees them. */
static void look(side *s, const char *name, seen *out) {
    char key[128];
    redisReply *r;
    out->owner[0] = '\0';
    if (!s->real) {
        char tok[DLOCK__OWNER_LEN + 1];
        if (fk_owner(name, tok)) snprintf(out->owner, sizeof out->owner, "%s", tok);
        out->queued = fk_queued(name);
        return;
    }
    snprintf(key, sizeof key, "dlock:{%s}", name);
    r = dlt_redis_cmd(&dlt_server, "EVAL %s 1 %s owner", DLT_LOCK_FIELD_LUA, key);
    if (r != NULL && r->type == REDIS_REPLY_STRING) snprintf(out->owner, sizeof out->owner, "%s", r->str);
    if (r != NULL) freeReplyObject(r);
    out->queued = dlt_reply_int(dlt_redis_cmd(&dlt_server, "LLEN %s:fifo", key));
}

static void run_step(side *s, const dlock__keys *k, const step *st, seen *out) {
    dlock__mono deadline = dlock__now() + 2000 * DLOCK__MS;
    memset(out, 0, sizeof *out);
    if (st->op == ACQ) {
        dlock__acq a;
        memset(&a, 0, sizeof a);
        out->rc = s->ops->acquire(s->be, k, st->tok, 5000, st->arg, &a, deadline);
        out->status = a.status;
        out->plain = a.plain;
        if (out->rc == 0 && (a.status == DLOCK__ACQ_ACQUIRED || a.status == DLOCK__ACQ_OWNERDEAD)) {
            out->rose = a.fence > s->last_fence;
            s->last_fence = a.fence;
        }
    } else if (st->op == REL) {
        out->rc = s->ops->release(s->be, k, st->tok, st->arg, &out->released, NULL, deadline);
    } else if (st->op == RESET) {
        out->rc = s->ops->reset(s->be, k, st->arg, &out->held, NULL, deadline);
    } else {
        dlock__renewal rn;
        memset(&rn, 0, sizeof rn);
        rn.k = k;
        rn.shared = st->arg;
        rn.token = st->tok;
        rn.lease_ms = 5000;
        out->rc = s->ops->renew(s->be, &rn, 1, deadline);
        out->renewed = rn.result;
    }
}

/* ----------------------------------------------------------- the test */

static void compare(const fcase *c, int i, const seen *f, const seen *r) {
    char what[256];
    snprintf(what, sizeof what, "case \"%s\", step %d", c->what, i + 1);
#define SAME(field)                                                                                         \
    do {                                                                                                    \
        if (f->field != r->field) {                                                                         \
            fprintf(stderr, "%s: " #field " fake %lld, real %lld\n", what, (long long)f->field,               \
                    (long long)r->field);                                                                   \
            CU_FAIL("the fake and the scripts differ");                                                     \
        }                                                                                                   \
    } while (0)
    SAME(rc);
    SAME(status);
    SAME(plain);
    SAME(released);
    SAME(renewed);
    SAME(rose);
    SAME(held);
    SAME(queued);
#undef SAME
    if (strcmp(f->owner, r->owner) != 0) {
        fprintf(stderr, "%s: owner fake \"%s\", real \"%s\"\n", what, f->owner, r->owner);
        CU_FAIL("the fake and the scripts differ");
    }
}

static void test_fake_follows_scripts(void) {
    dlock_client_t *c;
    dlock_config_t cfg;
    side fake = { fk_ops_table(), NULL, 0, 0 }, real = { NULL, NULL, 1, 0 };
    size_t n;
    int i;
    dlock_config_init(&cfg);
    cfg.url = dlt_server.url;
    cfg.prefix = "dlock:";
    cfg.handoff_ms = 3000; /* a window no step outlasts on a busy machine */
    CU_ASSERT_FATAL(dlock_client_create(&c, &cfg) == 0);
    real.ops = c->be.ops;
    real.be = &c->be;
    fake.be = &c->be; /* not read by the fake */
    for (n = 0; n < sizeof cases / sizeof cases[0]; n++) {
        char name[32];
        dlock__keys k;
        snprintf(name, sizeof name, "case%zu", n);
        CU_ASSERT_FATAL(dlock__keys_make(&k, "dlock:", name, strlen(name), DLOCK__KEYS_LOCK) == 0);
        fk_reset(1);
        fake.last_fence = real.last_fence = 0;
        for (i = 0; cases[n].steps[i].tok != NULL; i++) {
            seen f, r;
            run_step(&fake, &k, &cases[n].steps[i], &f);
            run_step(&real, &k, &cases[n].steps[i], &r);
            look(&fake, name, &f);
            look(&real, name, &r);
            compare(&cases[n], i, &f, &r);
        }
        dlock__keys_free(&k);
    }
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_fake_follows_scripts),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "lua_fake", tests);
}
