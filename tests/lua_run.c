/* lua_run.c -- the library's scripts run alone (lua_run.h). */
#include "lua_run.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "fixture.h"

#define LUA_RUN_MAX 24

redisReply *dlt_lua_argv(int which, int numkeys, int nargs, const char *const *args) {
    const char *argv[3 + LUA_RUN_MAX];
    const char *body = dlock__script_body(which, 0);
    char nk[16];
    redisReply *r;
    int i;
    if (body == NULL || nargs > LUA_RUN_MAX) return NULL;
    r = dlt_redis_cmd(&dlt_server, "SCRIPT LOAD %s", body);
    if (r == NULL || r->type != REDIS_REPLY_STRING || strcmp(r->str, dlock__script_sha(which, 0)) != 0) {
        fprintf(stderr, "lua_run: script %d: SCRIPT LOAD answered %s, not the library's SHA %s\n", which,
                r && r->str ? r->str : "nothing", dlock__script_sha(which, 0));
        if (r != NULL) freeReplyObject(r);
        return NULL;
    }
    freeReplyObject(r);
    snprintf(nk, sizeof nk, "%d", numkeys);
    argv[0] = "EVALSHA";
    argv[1] = dlock__script_sha(which, 0);
    argv[2] = nk;
    for (i = 0; i < nargs; i++) argv[3 + i] = args[i];
    {
        redisContext *c = redisConnect("127.0.0.1", dlt_server.port);
        if (c == NULL || c->err) {
            if (c != NULL) redisFree(c);
            return NULL;
        }
        r = redisCommandArgv(c, 3 + nargs, argv, NULL);
        redisFree(c);
    }
    return r;
}

redisReply *dlt_lua(int which, int numkeys, ...) {
    const char *args[LUA_RUN_MAX];
    const char *a;
    int n = 0;
    va_list ap;
    va_start(ap, numkeys);
    while ((a = va_arg(ap, const char *)) != NULL && n < LUA_RUN_MAX) args[n++] = a;
    va_end(ap);
    return dlt_lua_argv(which, numkeys, n, args);
}

const redisReply *dlt_el(const redisReply *r, size_t i) {
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || i >= r->elements) return NULL;
    return r->element[i];
}

long long dlt_int(const redisReply *r) {
    return r != NULL && r->type == REDIS_REPLY_INTEGER ? r->integer : -999999;
}

const char *dlt_str(const redisReply *r) {
    if (r == NULL) return "";
    if (r->type == REDIS_REPLY_NIL) return "(nil)";
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_ERROR)
        return r->str;
    return "";
}

long long dlt_len(const redisReply *r) {
    return r != NULL && r->type == REDIS_REPLY_ARRAY ? (long long)r->elements : -1;
}
