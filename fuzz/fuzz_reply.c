/* fuzz_reply.c -- libFuzzer target: what a server answers.
 *
 * The input is fed to a hiredis reader (in two parts, split where the
 * first byte says, so that partial reads are exercised too), and every
 * reply it yields -- and, recursively, every element of an array -- goes
 * to dlock's pure reply checkers: dlock__acq_parse, dlock__flag_parse,
 * dlock__info_parse, dlock__u64_parse and dlock__grant_parse.  Besides
 * memory and UB errors it checks what they promise: an accepted acquire
 * answer has a known status, a non-zero fence when acquired, a PTTL in
 * range when busy; a flag is 0 or 1; lock info has a terminated host; a
 * grant has a non-zero fence and lease.
 *
 * Inputs announcing an aggregate of more than 2^20 elements or a bulk
 * string of more than 2^24 bytes are skipped: hiredis 0.14 allocates the
 * announced size up front, which libFuzzer would report as out-of-memory
 * (a property of hiredis, not of dlock's checkers).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"

static int too_big(const uint8_t *d, size_t n) {
    size_t i;
    for (i = 0; i + 1 < n; i++) {
        if (d[i] == '*' || d[i] == '$' || d[i] == '%' || d[i] == '~' || d[i] == '>') {
            unsigned long long v = 0;
            size_t j = i + 1, digits = 0;
            while (j < n && d[j] >= '0' && d[j] <= '9' && digits < 20) {
                v = v * 10 + (unsigned long long)(d[j] - '0');
                j++;
                digits++;
            }
            if (digits >= 19 || (d[i] == '$' ? v > (1ull << 24) : v > (1ull << 20))) return 1;
        }
    }
    return 0;
}

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
    if (r->type == REDIS_REPLY_ARRAY && depth < 16)
        for (i = 0; i < r->elements; i++)
            if (r->element[i] != NULL) check(r->element[i], depth + 1);
}

/* Takes every complete reply out of the reader: 0, or -1 on a protocol
 * error (the reader is then unusable). */
static int drain(redisReader *rd) {
    for (;;) {
        void *reply = NULL;
        if (redisReaderGetReply(rd, &reply) != REDIS_OK) return -1;
        if (reply == NULL) return 0;
        check(reply, 0);
        freeReplyObject(reply);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    redisReader *rd;
    size_t cut;

    if (size == 0 || too_big(data, size)) return 0;
    if ((rd = redisReaderCreate()) == NULL) return 0;
    cut = 1 + (size > 1 ? data[0] % size : 0); /* data[0] only chooses the split */
    if (cut > size) cut = size;
    if (redisReaderFeed(rd, (const char *)data + 1, cut - 1) == REDIS_OK && drain(rd) == 0 &&
        redisReaderFeed(rd, (const char *)data + cut, size - cut) == REDIS_OK)
        (void)drain(rd);
    redisReaderFree(rd);
    return 0;
}
