/* reader.c -- answers read within bounds: what a server may announce.
 *
 * hiredis 0.14's reader trusts the sizes an answer announces: "*N" makes
 * it allocate N element pointers before a single element has come (and
 * free walks them all), so 13 bytes, "*2147483647\r\n", cost 16 GiB and
 * minutes; and "$N" makes it wait, buffering, for N bytes.  A lock
 * server's answers are small (docs/design.md, "Answers a client
 * accepts"), so each connection's reader gets dlock's own object
 * functions: they build the same redisReply objects as hiredis's
 * (freeReplyObject frees them), and refuse an array over
 * DLOCK__REPLY_ARRAY_MAX elements, or one that takes an answer's elements
 * over DLOCK__REPLY_ELEMENTS_MAX (nested headers add up), before anything
 * is allocated for it.  A bulk string over DLOCK__REPLY_BULK_MAX is
 * noticed from the reader's pending state, as soon as its header has
 * come.  Either way the connection fails with a protocol error that says
 * what the server announced (dlock__reply_refused: the caller reports
 * EPROTO rather than asking again).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/net.h"

/* ------------------------------------------------- the object functions */

/* r in its parent's slot (hiredis made the slot when it made the parent). */
static void *attach(const redisReadTask *task, redisReply *r) {
    if (task->parent != NULL) {
        redisReply *p = task->parent->obj;
        p->element[task->idx] = r;
    }
    return r;
}

static redisReply *reply_new(int type) {
    redisReply *r = calloc(1, sizeof *r);
    if (r != NULL) r->type = type;
    return r;
}

static void *make_string(const redisReadTask *task, char *s, size_t len) {
    redisReply *r = reply_new(task->type); /* a bulk string, a status or an error */
    if (r == NULL) return NULL;
    if ((r->str = malloc(len + 1)) == NULL) {
        free(r);
        return NULL;
    }
    if (len > 0) memcpy(r->str, s, len);
    r->str[len] = '\0';
    r->len = len;
    return attach(task, r);
}

static void guard_refuse(dlock__reply_guard *g, const char *what, long long n, unsigned long long max) {
    g->refused = 1;
    snprintf(g->why, sizeof g->why, "the server announced %s %lld (over %llu): answer refused", what, n, max);
}

/* An array of n elements (n >= 0: hiredis makes -1 a nil), within the
 * bounds; NULL (hiredis then stops: "Out of memory", which
 * dlock__reply_get replaces by g->why) past them. */
static void *make_array(const redisReadTask *task, int n) {
    dlock__reply_guard *g = task->privdata;
    redisReply *r;
    if (task->parent == NULL) g->elements = 0; /* a new answer */
    if ((unsigned long long)n > DLOCK__REPLY_ARRAY_MAX) {
        guard_refuse(g, "an array of", n, DLOCK__REPLY_ARRAY_MAX);
        return NULL;
    }
    if (g->elements + (unsigned long long)n > DLOCK__REPLY_ELEMENTS_MAX) {
        guard_refuse(g, "arrays of", (long long)(g->elements + (unsigned long long)n), DLOCK__REPLY_ELEMENTS_MAX);
        return NULL;
    }
    g->elements += (unsigned long long)n;
    if ((r = reply_new(REDIS_REPLY_ARRAY)) == NULL) return NULL;
    if (n > 0 && (r->element = calloc((size_t)n, sizeof *r->element)) == NULL) {
        free(r);
        return NULL;
    }
    r->elements = (size_t)n;
    return attach(task, r);
}

static void *make_integer(const redisReadTask *task, long long v) {
    redisReply *r = reply_new(REDIS_REPLY_INTEGER);
    if (r == NULL) return NULL;
    r->integer = v;
    return attach(task, r);
}

static void *make_nil(const redisReadTask *task) {
    redisReply *r = reply_new(REDIS_REPLY_NIL);
    return r == NULL ? NULL : attach(task, r);
}

static redisReplyObjectFunctions bounded = {
    make_string, make_array, make_integer, make_nil, freeReplyObject,
};

/* ------------------------------------------------- the pending bulk string */

/* A bulk string whose header has come and whose bytes have not: hiredis
 * keeps its task on the stack, typed a string, with the length's digits
 * at the buffer's cursor ("$" already taken).  1 when that length is
 * over the bound (as soon as its digits say so, before its CRLF), with
 * *len what they say so far and *open 1 if more digits may follow. */
static int bulk_too_long(const redisReader *rd, unsigned long long *len, int *open) {
    const char *p, *end;
    unsigned long long v = 0;
    if (rd->ridx < 0 || rd->rstack[rd->ridx].type != REDIS_REPLY_STRING || rd->pos >= rd->len) return 0;
    p = rd->buf + rd->pos;
    end = rd->buf + rd->len;
    for (; p < end && *p >= '0' && *p <= '9' && v <= DLOCK__REPLY_BULK_MAX * 100000ull; p++)
        v = v * 10 + (unsigned long long)(*p - '0');
    *len = v;
    *open = p == end || (*p >= '0' && *p <= '9');
    return v > DLOCK__REPLY_BULK_MAX;
}

/* ------------------------------------------------- the connection's side */

static void guard(dlock__conn *cn) {
    redisReader *rd = cn->ctx->reader;
    if (rd->fn != &bounded) {
        rd->fn = &bounded;
        rd->privdata = &cn->guard;
    }
}

/* The context's error from the guard's refusal (hiredis's says "Out of
 * memory" for a refused array, or nothing yet for a long bulk string). */
static int refused_err(dlock__conn *cn) {
    redisContext *ctx = cn->ctx;
    snprintf(ctx->errstr, sizeof ctx->errstr, "%s", cn->guard.why);
    ctx->err = REDIS_ERR_PROTOCOL;
    if (ctx->reader->err == 0) { /* the reader is done with too: nothing more is parsed */
        ctx->reader->err = REDIS_ERR_PROTOCOL;
        snprintf(ctx->reader->errstr, sizeof ctx->reader->errstr, "%s", cn->guard.why);
    }
    return REDIS_ERR;
}

static int check_pending(dlock__conn *cn) {
    unsigned long long len;
    int open;
    if (cn->guard.refused) return refused_err(cn);
    if (!bulk_too_long(cn->ctx->reader, &len, &open)) return REDIS_OK;
    cn->guard.refused = 1;
    snprintf(cn->guard.why, sizeof cn->guard.why,
             "the server announced a bulk string of %llu%s bytes (over %llu): answer refused", len,
             open ? " or more" : "", (unsigned long long)DLOCK__REPLY_BULK_MAX);
    return refused_err(cn);
}

int dlock__reply_feed(dlock__conn *cn, const char *buf, size_t len) {
    redisContext *ctx = cn->ctx;
    guard(cn);
    if (redisReaderFeed(ctx->reader, buf, len) != REDIS_OK) {
        if (cn->guard.refused) return refused_err(cn);
        snprintf(ctx->errstr, sizeof ctx->errstr, "%s", ctx->reader->errstr);
        ctx->err = ctx->reader->err;
        return REDIS_ERR;
    }
    return check_pending(cn);
}

int dlock__reply_get(dlock__conn *cn, void **reply) {
    guard(cn);
    *reply = NULL;
    if (redisGetReplyFromReader(cn->ctx, reply) != REDIS_OK) {
        if (cn->guard.refused) return refused_err(cn);
        if (cn->ctx->err == REDIS_ERR_PROTOCOL) { /* hiredis's parser: not RESP2, or nested too deep */
            cn->guard.refused = 1;
            snprintf(cn->guard.why, sizeof cn->guard.why, "not RESP2 (%.80s): answer refused", cn->ctx->errstr);
            snprintf(cn->ctx->errstr, sizeof cn->ctx->errstr, "%s", cn->guard.why);
        }
        return REDIS_ERR;
    }
    if (*reply != NULL) return REDIS_OK;
    return check_pending(cn);
}

int dlock__reply_refused(const dlock__conn *cn) {
    return cn->guard.refused;
}
