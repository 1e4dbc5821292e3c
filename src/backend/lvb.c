/* lvb.c -- the lock value block as one server keeps it: <lock>:lvb, a
 * hash of v (the value), ok ("1" valid, "0" not: a hold ended without a
 * release since it was written) and open (the hold under way), written by
 * the lock scripts alone (acquire.lua, release.lua; docs/protocol.md).
 * This reads it, with one HMGET; a Cluster asks the master of the lock's
 * slot (cluster.c).
 */
#include <errno.h>
#include <string.h>

#include "backend/backend.h"

int dlock__single_lvb_read(dlock__backend *c, const dlock__keys *k, void *buf, size_t *len, int *valid,
                           dlock__mono deadline) {
    const char *argv[4] = { "HMGET", k->lvbkey, "v", "ok" };
    size_t lens[4] = { 5, k->lvbkeylen, 1, 2 };
    const redisReply *v, *ok;
    redisReply *r;
    int rc;

    *len = 0;
    *valid = -1;
    if ((rc = dlock__command(&c->node, &r, deadline, 0, 4, argv, lens, NULL)) != 0) return rc;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
        rc = dlock__seterr(EPROTO, "%s: unexpected answer to the value block's HMGET%s%.200s",
                           c->node.conf.redacted_url, r->type == REDIS_REPLY_ERROR ? ": " : "",
                           r->type == REDIS_REPLY_ERROR ? r->str : "");
        freeReplyObject(r);
        return rc;
    }
    v = r->element[0];
    ok = r->element[1];
    if (v->type == REDIS_REPLY_STRING && v->len <= DLOCK_LVB_MAX) {
        memcpy(buf, v->str, v->len);
        *len = v->len;
        *valid = !(ok->type == REDIS_REPLY_STRING && ok->len == 1 && ok->str[0] == '0');
    } else if (v->type != REDIS_REPLY_NIL) {
        rc = dlock__seterr(EPROTO, "%s: '%.64s' keeps a value block that is not one (%zu bytes)",
                           c->node.conf.redacted_url, k->name, v->type == REDIS_REPLY_STRING ? v->len : 0);
    }
    freeReplyObject(r);
    return rc;
}
