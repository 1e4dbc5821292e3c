/* scripts.c -- runs the Lua scripts that acquire, release and renew a
 * lock (and those of the semaphores, condition variables, waits, figures
 * and record locks), and makes a lock's keys.
 *
 * The scripts themselves are src/backend/lua/NAME.lua, one file per script,
 * each opening with its KEYS, ARGV and reply; the build expands their
 * includes and embeds them as C strings (scripts/lua-embed, into the build
 * tree: lua_scripts.h).  The table DLOCK__SCRIPTS (backend.h) names them.
 * Each operation is one script so that it is atomic on the server and
 * costs one round trip.  Names, tokens and every other value travel only
 * as KEYS and ARGV: no caller data is ever spliced into script text.
 * Scripts run by EVALSHA; a NOSCRIPT answer (a restarted or flushed
 * server) loads the script and runs it again, so a restart changes nothing
 * for the caller.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"

#include "backend/lua_scripts.h" /* dlock__lua_FILE: generated from src/backend/lua/FILE.lua */

/* Each script's body and its SHA1 (for EVALSHA), as plain and as the
 * cluster's variant: on Redis Cluster the scripts publish with SPUBLISH
 * (sharded pub/sub: the message stays on the lock's shard) rather than
 * PUBLISH (which the cluster bus carries to every node).  The build makes
 * all four (scripts/lua-embed), so nothing is hashed at run time. */
#define DLOCK__SCRIPT_BODY(id, file) [DLOCK__SCRIPT_##id] = { dlock__lua_##file, dlock__lua_##file##_sharded },
static const char *const bodies[][2] = { DLOCK__SCRIPTS(DLOCK__SCRIPT_BODY) };
#undef DLOCK__SCRIPT_BODY
#define DLOCK__SCRIPT_SHA(id, file) [DLOCK__SCRIPT_##id] = { dlock__lua_##file##_sha, dlock__lua_##file##_sharded_sha },
static const char *const shas[][2] = { DLOCK__SCRIPTS(DLOCK__SCRIPT_SHA) };
#undef DLOCK__SCRIPT_SHA
_Static_assert(sizeof bodies / sizeof bodies[0] == DLOCK__NSCRIPTS, "a body for every script");
_Static_assert(sizeof shas / sizeof shas[0] == DLOCK__NSCRIPTS, "a hash for every script");
_Static_assert(DLOCK__NSCRIPTS <= 64, "a bit of dlock__all_req.script for every script");

/* The one place that decides how a hold ends (the `how` of release.lua):
 * a read hold is "shared"; a hold of a mutex that is not robust,
 * "plain"; of a robust one, "dead" when its holder died or may have (the
 * process exits holding it; an acquire found, or may have found, the
 * owner-died marker and its hold is given back), "inconsistent" when it
 * is unlocked after EOWNERDEAD without consistent(), "clean" otherwise. */
int dlock__release_kind(int shared, int robust, int dead, int inconsistent, int hashed) {
    if (shared) return DLOCK__REL_SHARED;
    if (!robust) return hashed ? DLOCK__REL_HASH : DLOCK__REL_PLAIN;
    if (dead) return DLOCK__REL_DEAD;
    return inconsistent ? DLOCK__REL_INCONSISTENT : DLOCK__REL_CLEAN;
}

/* An acquisition taken back unused leaves the robust marker as it found
 * it: "dead" would leave the marker its own take set on a clean lock, and
 * the next acquirer would get EOWNERDEAD though nobody died holding it. */
int dlock__undo_kind(int shared, int robust) {
    return robust && !shared ? DLOCK__REL_UNDO : dlock__release_kind(shared, robust, 0, 0, 0);
}

static const char *script_sha(int which, int variant) {
    return shas[which][variant != 0];
}

const char *dlock__script_sha(int which, int variant) {
    return script_sha(which, variant);
}

const char *dlock__script_body(int which, int variant) {
    return bodies[which][variant != 0];
}

#define MAX_SCRIPT_ARGS 24

/* Fills argv for EVALSHA (or EVAL) of `which`. */
static int script_argv(int which, int variant, int use_eval, int numkeys, int nargs, const char **args,
                       const size_t *lens, const char **argv, size_t *argvlen, char *nk) {
    int i;
    if (nargs > MAX_SCRIPT_ARGS || numkeys < 0) return -1;
    argv[0] = use_eval ? "EVAL" : "EVALSHA";
    argvlen[0] = use_eval ? 4 : 7;
    argv[1] = use_eval ? dlock__script_body(which, variant) : script_sha(which, variant);
    if (argv[1] == NULL) return -1;
    argvlen[1] = strlen(argv[1]);
    argv[2] = nk;
    argvlen[2] = dlock__dec(nk, (unsigned long long)numkeys);
    for (i = 0; i < nargs; i++) {
        argv[3 + i] = args[i];
        argvlen[3 + i] = lens[i];
    }
    return 3 + nargs;
}

static int is_noscript(const redisReply *r) {
    return r != NULL && r->type == REDIS_REPLY_ERROR && r->str != NULL && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

static int script_run(dlock__backend *c, int which, redisReply **out, dlock__mono deadline, int numkeys,
                      int nargs, const char **args, const size_t *lens, long long *acked, dlock__sent *sent);

int dlock__script_run(dlock__backend *c, int which, redisReply **out, dlock__mono deadline, int numkeys,
                      int nargs, const char **args, const size_t *lens, dlock__sent *sent) {
    return script_run(c, which, out, deadline, numkeys, nargs, args, lens, NULL, sent);
}

int dlock__script_run_wait(dlock__backend *c, int which, redisReply **out, dlock__mono deadline, int numkeys,
                           int nargs, const char **args, const size_t *lens, long long *acked, dlock__sent *sent) {
    return script_run(c, which, out, deadline, numkeys, nargs, args, lens, acked, sent);
}

int dlock__script_send(dlock__backend *c, int which, int numkeys, int nargs, const char **args, const size_t *lens,
                       int hold, dlock__owed_fn fn, void *arg, dlock__mono deadline) {
    const char *argv[3 + MAX_SCRIPT_ARGS];
    size_t argvlen[3 + MAX_SCRIPT_ARGS];
    char nk[DLOCK__DEC_MAX];
    int argc = script_argv(which, c->node.conf.cluster, 0, numkeys, nargs, args, lens, argv, argvlen, nk);
    if (argc < 0) return dlock__seterr(ENOMEM, "cannot make the script request (out of memory)");
    return dlock__command_send(&c->node, argc, argv, argvlen, hold, fn, arg,
                               deadline); /* (NOSCRIPT: the caller asks again) */
}

static int script_run(dlock__backend *c, int which, redisReply **out, dlock__mono deadline, int numkeys,
                      int nargs, const char **args, const size_t *lens, long long *acked, dlock__sent *sent) {
    const char *argv[3 + MAX_SCRIPT_ARGS];
    size_t argvlen[3 + MAX_SCRIPT_ARGS];
    char nk[DLOCK__DEC_MAX];
    int argc, rc, once;

    argc = script_argv(which, c->node.conf.cluster, 0, numkeys, nargs, args, lens, argv, argvlen, nk);
    if (argc < 0) return dlock__seterr(ENOMEM, "cannot make the script request (out of memory)");
    /* A reset is asked once: asked again it could cut off a holder that
     * came in between; so is a semaphore's unlink or break, which could
     * delete or take back what was made in between.  The others are safe
     * to repeat -- a release too: the token decides, so a second one ends
     * nothing the first did not; only its answer may differ ("not held"
     * once the first has run), which sent->maybe_ran lets its caller read
     * (core/lock.c, release_as). */
    once = which == DLOCK__SCRIPT_RESET || which == DLOCK__SCRIPT_SEM_ADMIN;
    rc = acked ? dlock__command_wait(&c->node, out, deadline, argc, argv, argvlen, acked, sent)
               : dlock__command(&c->node, out, deadline, once, argc, argv, argvlen, sent);
    if (rc == 0 && is_noscript(*out)) {
        /* The server does not know the script (restarted or flushed): EVAL
         * runs it and caches it, so the next EVALSHA finds it. */
        freeReplyObject(*out);
        *out = NULL;
        argc = script_argv(which, c->node.conf.cluster, 1, numkeys, nargs, args, lens, argv, argvlen, nk);
        rc = acked ? dlock__command_wait(&c->node, out, deadline, argc, argv, argvlen, acked, sent)
                   : dlock__command(&c->node, out, deadline, once, argc, argv, argvlen, sent);
    }
    return rc;
}

void dlock__script_run_all(dlock__backend **cs, size_t n, size_t need, const dlock__all_judge *judge, int flags,
                           int which, redisReply **out, int *rcs, dlock__mono deadline, int numkeys, int nargs,
                           const char **args, const size_t *lens) {
    const char *argv[3 + MAX_SCRIPT_ARGS], *eargv[3 + MAX_SCRIPT_ARGS];
    size_t argvlen[3 + MAX_SCRIPT_ARGS], eargvlen[3 + MAX_SCRIPT_ARGS], i;
    char nk[DLOCK__DEC_MAX], enk[DLOCK__DEC_MAX];
    int argc = n > 0 ? script_argv(which, cs[0]->node.conf.cluster, 0, numkeys, nargs, args, lens, argv, argvlen, nk) : -1;
    dlock__all_req req = { argc, argv, eargv, argvlen, eargvlen, (uint64_t)1 << which };
    if (argc >= 0 && script_argv(which, cs[0]->node.conf.cluster, 1, numkeys, nargs, args, lens, eargv, eargvlen, enk) < 0)
        argc = -1;
    if (argc < 0) {
        for (i = 0; i < n; i++) {
            out[i] = NULL;
            rcs[i] = dlock__seterr(ENOMEM, "cannot make the script request (out of memory)");
        }
        return;
    }
    {
        dlock__node *ns[DLOCK__NODES_MAX];
        for (i = 0; i < n && i < DLOCK__NODES_MAX; i++) ns[i] = &cs[i]->node;
        dlock__command_all(ns, i, need, judge, flags, &req, out, rcs, deadline);
    }
    for (i = 0; i < n; i++) {
        if (out[i] == NULL || !is_noscript(out[i])) continue;
        /* That server does not know the script yet: the one-server path
         * loads it (rare: a new or restarted server). */
        freeReplyObject(out[i]);
        out[i] = NULL;
        rcs[i] = script_run(cs[i], which, &out[i], deadline, numkeys, nargs, args, lens, NULL, NULL);
    }
}

int dlock__script_append(redisContext *ctx, int which, int variant, int numkeys, int nargs,
                         const char **args, const size_t *lens) {
    const char *argv[3 + MAX_SCRIPT_ARGS];
    size_t argvlen[3 + MAX_SCRIPT_ARGS];
    char nk[DLOCK__DEC_MAX];
    int argc = script_argv(which, variant, 0, numkeys, nargs, args, lens, argv, argvlen, nk);
    if (argc < 0) return -1;
    return dlock__resp_append(ctx, argc, argv, argvlen) == 0 ? 0 : -1;
}

int dlock__script_load_append(redisContext *ctx, int which, int variant) {
    const char *body = dlock__script_body(which, variant);
    const char *argv[3] = { "SCRIPT", "LOAD", body };
    size_t lens[3] = { 6, 4, body ? strlen(body) : 0 };
    return body == NULL || dlock__resp_append(ctx, 3, argv, lens) != 0 ? -1 : 0;
}

int dlock__script_load_all(dlock__conn *cn, int variant) {
    int i, n = 0, ok = 1;
    /* Every SCRIPT LOAD written at once, then every answer read: one round
     * trip, not one per script. */
    for (i = 0; i < DLOCK__NSCRIPTS; i++) {
        if (dlock__script_load_append(cn->ctx, i, variant) != 0) return -2;
        n++;
    }
    if (dlock__conn_flush(cn) != 0) return -2;
    for (i = 0; i < n; i++) {
        void *r = NULL;
        if (dlock__conn_reply(cn, &r) != REDIS_OK || r == NULL) return -2; /* out of step: the caller drops cn */
        ok = ok && ((redisReply *)r)->type == REDIS_REPLY_STRING;
        freeReplyObject(r);
    }
    return ok ? 0 : -1;
}

/* Makes the keys of a lock (see DLOCK__K_*), of a condition variable
 * (its waiters at <prefix>{<name>}:cond, which is also its channel) or of
 * a semaphore (DLOCK__KS_*; the first, its value, is also its channel),
 * in one buffer; kind is a DLOCK__KEYS_*. */
int dlock__keys_make(dlock__keys *k, const char *prefix, const char *name, size_t namelen, int kind) {
    static const char *const lock_suffix[DLOCK__NKEYS + 1] = { "",         ":fence",   ":state", ":readers",
                                                               ":writers", ":handoff", ":fifo",  ":epoch" };
    static const char *const cond_suffix[DLOCK__NKEYS + 1] = { ":cond", ":cond", ":cond", ":cond",
                                                               ":cond", ":cond", ":cond", ":cond" };
    static const char *const sem_suffix[DLOCK__NKEYS + 1] = { ":sem",  ":semq", ":semx", ":semg",
                                                              ":semd", ":semo", ":semu", ":sem" };
    const char *const *suffix = kind == DLOCK__KEYS_COND ? cond_suffix : kind == DLOCK__KEYS_SEM ? sem_suffix : lock_suffix;
    size_t plen = strlen(prefix), base = plen + namelen + 2, total = 0, i;
    char *b;
    for (i = 0; i <= DLOCK__NKEYS; i++) total += base + strlen(suffix[i]) + 1;
    total += base + sizeof ":lvb"; /* a lock's value block (acquire.lua), after them */
    if ((b = malloc(total)) == NULL || (k->name = malloc(namelen + 1)) == NULL) {
        free(b);
        return dlock__seterr(ENOMEM, "out of memory");
    }
    memcpy(k->name, name, namelen);
    k->name[namelen] = '\0';
    k->namelen = namelen;
    for (i = 0; i <= DLOCK__NKEYS; i++) {
        size_t sl = strlen(suffix[i]);
        k->keys[i] = b;
        k->keylens[i] = base + sl;
        memcpy(b, prefix, plen);
        b[plen] = '{';
        memcpy(b + plen + 1, name, namelen);
        b[plen + 1 + namelen] = '}';
        memcpy(b + base, suffix[i], sl + 1);
        b += base + sl + 1;
    }
    memcpy(b, k->keys[0], base);
    memcpy(b + base, ":lvb", sizeof ":lvb");
    k->lvbkey = b;
    k->lvbkeylen = base + sizeof ":lvb" - 1;
    k->lvb_pending = 0;
    k->key = k->keys[DLOCK__K_LOCK];
    k->keylen = k->keylens[DLOCK__K_LOCK];
    return 0;
}

void dlock__keys_free(dlock__keys *k) {
    free(k->name);
    free(k->key);
    k->name = k->key = NULL;
}
