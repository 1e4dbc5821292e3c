/* lua_run.h -- runs one of the library's Lua scripts (src/backend/lua/)
 * alone on the suite's server, as a contract test does: SCRIPT LOAD of the
 * body the library sends (its SHA checked against the library's), then
 * EVALSHA with the given KEYS and ARGV.  And small reply accessors that
 * tolerate a NULL or a reply of another type, so that a wrong answer
 * fails an assert rather than the test program.
 */
#ifndef DLT_LUA_RUN_H
#define DLT_LUA_RUN_H

#include <stddef.h>

#include <hiredis/hiredis.h>

/* Script `which` (DLOCK__SCRIPT_*, variant 0) with numkeys KEYS then its
 * ARGV: nargs strings in all.  The reply (an error reply included), or
 * NULL when the server did not answer or the SHA differs; freeReplyObject. */
redisReply *dlt_lua_argv(int which, int numkeys, int nargs, const char *const *args);
/* The same with the strings as arguments, ending with NULL. */
redisReply *dlt_lua(int which, int numkeys, ...);

/* Element i of an array reply, or NULL. */
const redisReply *dlt_el(const redisReply *r, size_t i);
/* An integer reply's value, else -999999. */
long long dlt_int(const redisReply *r);
/* A string (or status, or error) reply's text, else "" (a nil: "(nil)"). */
const char *dlt_str(const redisReply *r);
/* Number of elements of an array reply, else -1. */
long long dlt_len(const redisReply *r);

#endif /* DLT_LUA_RUN_H */
