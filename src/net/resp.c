/* resp.c -- requests in RESP, written by hand.
 *
 * A request is an array of bulk strings: "*N\r\n", then "$len\r\n" arg
 * "\r\n" for each argument.  dlock writes these bytes itself, straight
 * into the connection's output buffer (hiredis's `obuf`, whose room is
 * kept between requests: dlock__conn_flush empties it without freeing
 * it), and numbers go out through a small integer-to-decimal routine: no
 * printf family, no allocation once the buffer has grown to a request's
 * size.  hiredis's argument formatting (redisFormatSdsCommandArgv, built
 * on sdscatfmt) was about half of a client's instructions per lock+unlock
 * pair.  Answers are still parsed by hiredis's reader.
 */
#include <errno.h>
#include <string.h>

#include "net/net.h"

size_t dlock__dec(char *out, unsigned long long v) {
    char tmp[DLOCK__DEC_MAX];
    size_t n = DLOCK__DEC_MAX;
    if (v < 10) { /* most lengths and counts: one or two digits */
        out[0] = (char)('0' + v);
        return 1;
    }
    if (v < 100) {
        out[0] = (char)('0' + v / 10);
        out[1] = (char)('0' + v % 10);
        return 2;
    }
    do {
        tmp[--n] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    memcpy(out, tmp + n, DLOCK__DEC_MAX - n);
    return DLOCK__DEC_MAX - n;
}

/* The digits of v (v < 10^20: every size_t and int). */
static size_t dec_len(unsigned long long v) {
    size_t n = 3;
    if (v < 10) return 1;
    if (v < 100) return 2;
    while (v >= 1000) {
        v /= 10;
        n++;
    }
    return n;
}

int dlock__resp_size(int argc, const size_t *lens, size_t *size) {
    size_t total;
    int i;
    if (argc < 1) return EINVAL;
    total = 1 + dec_len((unsigned long long)argc) + 2;
    for (i = 0; i < argc; i++) {
        /* "$" len "\r\n" arg "\r\n" */
        size_t one = 1 + dec_len(lens[i]) + 2 + 2;
        if (lens[i] > SIZE_MAX - one || total > SIZE_MAX - one - lens[i]) return ENOMEM;
        total += one + lens[i];
    }
    *size = total;
    return 0;
}

static char *crlf(char *p) {
    p[0] = '\r';
    p[1] = '\n';
    return p + 2;
}

char *dlock__resp_encode(char *out, int argc, const char *const *argv, const size_t *lens) {
    char *p = out;
    int i;
    *p++ = '*';
    p = crlf(p + dlock__dec(p, (unsigned long long)argc));
    for (i = 0; i < argc; i++) {
        *p++ = '$';
        p = crlf(p + dlock__dec(p, lens[i]));
        if (lens[i] > 0) memcpy(p, argv[i], lens[i]);
        p = crlf(p + lens[i]);
    }
    return p;
}

int dlock__resp_append(redisContext *ctx, int argc, const char *const *argv, const size_t *lens) {
    size_t size;
    sds buf;
    int rc;
    if ((rc = dlock__resp_size(argc, lens, &size)) != 0) return rc;
    if (size > (size_t)0x7fffffff) return ENOMEM; /* sdsIncrLen takes an int */
    if ((buf = sdsMakeRoomFor(ctx->obuf, size)) == NULL) return ENOMEM;
    ctx->obuf = buf;
    dlock__resp_encode(buf + sdslen(buf), argc, argv, lens);
    sdsIncrLen(buf, (int)size);
    return 0;
}
