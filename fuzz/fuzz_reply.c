/* fuzz_reply.c -- libFuzzer target: what a server answers.
 *
 * The input is fed to a connection's reader the way a connection feeds
 * it -- dlock__reply_feed and dlock__reply_get (net/reader.c), with the
 * bounds on what an answer may announce -- in two parts, split where the
 * first byte says, so that partial reads are exercised too; and every
 * reply it yields -- and, recursively, every element of an array -- goes
 * to dlock's pure reply checkers: dlock__acq_parse, dlock__flag_parse,
 * dlock__release_parse, dlock__info_parse, dlock__u64_parse and
 * dlock__grant_parse.  Besides
 * memory and UB errors it checks what they promise: an accepted acquire
 * answer has a known status, a non-zero fence when acquired, a PTTL in
 * range when busy; a flag is 0 or 1, a release's answer 0, 1 or 2
 * (DLOCK__RELEASED_HANDED); lock info has a terminated host; a
 * grant has a non-zero fence and lease; and what the reader promises: no
 * reply holds an array over DLOCK__REPLY_ARRAY_MAX or a string over
 * DLOCK__REPLY_BULK_MAX, and an answer refused is never followed by
 * another.  No input is skipped: an announced size that hiredis would
 * have allocated up front is refused before it is.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"

static void check(const redisReply *r, int depth) {
    dlock__acq acq;
    dlock_lock_info_t info;
    uint64_t u;
    unsigned ms = 0;
    int cache = 0;
    int flag = -7;
    size_t i;

    if (dlock__acq_parse(r, &acq) == 0) {
        switch (acq.status) {
        case DLOCK__ACQ_ACQUIRED:
        case DLOCK__ACQ_MINE:
        case DLOCK__ACQ_OWNERDEAD:
            if (acq.fence == 0) abort();
            break;
        case DLOCK__ACQ_BUSY:
        case DLOCK__ACQ_HELDBACK:
            if (acq.pttl_ms < -2 || acq.pttl_ms > (int64_t)DLOCK_LEASE_MAX_MS * 2) abort();
            break;
        case DLOCK__ACQ_NOTRECOVERABLE:
            break;
        default:
            abort();
        }
    }
    if (dlock__flag_parse(r, &flag) == 0 && flag != 0 && flag != 1) abort();
    if (dlock__release_parse(r, &flag) == 0 && (flag < 0 || flag > DLOCK__RELEASED_HANDED)) abort();
    if (dlock__info_parse(r, &info) == 0) {
        if (memchr(info.host, '\0', sizeof info.host) == NULL) abort();
        if (info.robust_state < 0 || info.robust_state > 2) abort();
    }
    if ((r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) &&
        dlock__u64_parse(r->str, r->len, &u) == 0 && (r->len == 0 || r->len > 20))
        abort();
    if ((r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) &&
        dlock__grant_parse(r->str, r->len, &u, &ms, &cache) == 0 &&
        (u == 0 || ms == 0 || cache < 0 || cache > 2 || memchr(r->str, ':', r->len) == NULL))
        abort();
    if (r->type == REDIS_REPLY_ARRAY && r->elements > DLOCK__REPLY_ARRAY_MAX) abort();
    if ((r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_ERROR) &&
        r->len > DLOCK__REPLY_BULK_MAX)
        abort();
    if (r->type == REDIS_REPLY_ARRAY && depth < 16)
        for (i = 0; i < r->elements; i++)
            if (r->element[i] != NULL) check(r->element[i], depth + 1);
}

/* Takes every complete reply out of the connection's reader: 0, or -1
 * on a protocol error or a refused answer (the reader is then done). */
static int drain(dlock__conn *cn) {
    for (;;) {
        void *reply = NULL;
        if (dlock__reply_get(cn, &reply) != REDIS_OK) {
            if (reply != NULL) abort();
            return -1;
        }
        if (reply == NULL) return 0;
        if (dlock__reply_refused(cn)) abort();
        check(reply, 0);
        freeReplyObject(reply);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dlock__conn cn;
    size_t cut;

    if (size == 0) return 0;
    memset(&cn, 0, sizeof cn);
    if ((cn.ctx = redisConnectFd(-1)) == NULL) return 0; /* a context that never does I/O */
    cut = 1 + (size > 1 ? data[0] % size : 0); /* data[0] only chooses the split */
    if (cut > size) cut = size;
    if (dlock__reply_feed(&cn, (const char *)data + 1, cut - 1) == REDIS_OK && drain(&cn) == 0 &&
        dlock__reply_feed(&cn, (const char *)data + cut, size - cut) == REDIS_OK)
        (void)drain(&cn);
    redisFree(cn.ctx);
    return 0;
}
