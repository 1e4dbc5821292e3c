/* test_fixture.c -- tests of the test harness itself, against real redis-servers.
 * labels: redis */
#include "fixture.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int reply_is_status(redisReply *rep, const char *want) {
    return rep != NULL && rep->type == REDIS_REPLY_STATUS && strcmp(rep->str, want) == 0;
}

static int ping(dlt_redis *r) {
    redisReply *rep = dlt_redis_cmd(r, "PING");
    int ok = reply_is_status(rep, "PONG");
    if (rep != NULL) freeReplyObject(rep);
    return ok;
}

static void test_server_answers(void) {
    CU_ASSERT_TRUE(dlt_server.pid > 0);
    CU_ASSERT_TRUE(dlt_server.port > 0);
    CU_ASSERT_TRUE(ping(&dlt_server));
    char url[128];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", dlt_server.port);
    CU_ASSERT_STRING_EQUAL(dlt_server.url, url);
    const char *env = getenv("DLOCK_URL");
    CU_ASSERT_PTR_NOT_NULL_FATAL(env);
    CU_ASSERT_STRING_EQUAL(env, dlt_server.url);
    CU_ASSERT_EQUAL(access(dlt_server.dir, F_OK), 0);
}

/* The server starts every test empty with zero counts. */
static void test_each_test_starts_clean(void) {
    redisReply *rep = dlt_redis_cmd(&dlt_server, "DBSIZE");
    CU_ASSERT_PTR_NOT_NULL_FATAL(rep);
    DLT_ASSERT_INT_EQ(rep->integer, 0);
    freeReplyObject(rep);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "set"), 0);
    /* Leave a key behind for the next test to not see. */
    rep = dlt_redis_cmd(&dlt_server, "SET %s %s", "left", "behind");
    CU_ASSERT_TRUE(reply_is_status(rep, "OK"));
    if (rep != NULL) freeReplyObject(rep);
}

static void test_cmdstat_counts_one_set(void) {
    long long before = dlt_redis_cmdstat(&dlt_server, "SET");
    long long total_before = dlt_redis_total_calls(&dlt_server);
    CU_ASSERT_TRUE(before >= 0);
    CU_ASSERT_TRUE(total_before >= 0);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "evalsha"), 0);

    redisReply *rep = dlt_redis_cmd(&dlt_server, "SET %s %b", "k", "v\0x", (size_t)3);
    CU_ASSERT_TRUE(reply_is_status(rep, "OK"));
    if (rep != NULL) freeReplyObject(rep);

    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "set"), before + 1);
    /* The SET, and the INFO calls between the two totals (two cmdstat
     * calls and the first total_calls). */
    DLT_ASSERT_INT_EQ(dlt_redis_total_calls(&dlt_server), total_before + 1 + 3);

    DLT_ASSERT_INT_EQ(dlt_redis_reset_stats(&dlt_server), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "set"), 0);
}

static void test_stop_restart_same_port(void) {
    int port = dlt_server.port;
    char dir[sizeof dlt_server.dir];
    memcpy(dir, dlt_server.dir, sizeof dir);

    DLT_ASSERT_INT_EQ(dlt_redis_stop(&dlt_server), 0);
    DLT_ASSERT_INT_EQ(dlt_server.pid, 0);
    CU_ASSERT_PTR_NULL(dlt_redis_cmd(&dlt_server, "PING"));
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "set"), -1);

    DLT_ASSERT_INT_EQ(dlt_redis_restart(&dlt_server), 0);
    CU_ASSERT_TRUE(dlt_server.pid > 0);
    DLT_ASSERT_INT_EQ(dlt_server.port, port);
    CU_ASSERT_STRING_EQUAL(dlt_server.dir, dir);
    CU_ASSERT_TRUE(ping(&dlt_server));
}

static void test_kill_restart(void) {
    pid_t old = dlt_server.pid;
    DLT_ASSERT_INT_EQ(dlt_redis_kill(&dlt_server), 0);
    CU_ASSERT_PTR_NULL(dlt_redis_cmd(&dlt_server, "PING"));
    DLT_ASSERT_INT_EQ(dlt_redis_restart(&dlt_server), 0);
    CU_ASSERT_TRUE(dlt_server.pid > 0 && dlt_server.pid != old);
    CU_ASSERT_TRUE(ping(&dlt_server));
    /* Restarting a running server is refused. */
    DLT_ASSERT_INT_EQ(dlt_redis_restart(&dlt_server), -1);
}

/* A test that leaves the server down does not break the next one. */
static void test_leave_server_down(void) {
    DLT_ASSERT_INT_EQ(dlt_redis_stop(&dlt_server), 0);
}

static void test_server_is_back(void) {
    CU_ASSERT_TRUE(dlt_server.pid > 0);
    CU_ASSERT_TRUE(ping(&dlt_server));
}

static void test_second_server_with_extra_conf(void) {
    dlt_redis r;
    DLT_ASSERT_INT_EQ(dlt_redis_start(&r, "maxmemory 12mb\nmaxmemory-policy noeviction"), 0);
    CU_ASSERT_TRUE_FATAL(r.pid > 0);
    CU_ASSERT_TRUE(r.port != dlt_server.port);
    CU_ASSERT_TRUE(strcmp(r.dir, dlt_server.dir) != 0);
    redisReply *rep = dlt_redis_cmd(&r, "CONFIG GET maxmemory");
    CU_ASSERT_TRUE(rep != NULL && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2);
    if (rep != NULL && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2)
        CU_ASSERT_STRING_EQUAL(rep->element[1]->str, "12582912");
    if (rep != NULL) freeReplyObject(rep);

    /* The extra configuration survives a restart. */
    DLT_ASSERT_INT_EQ(dlt_redis_kill(&r), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_restart(&r), 0);
    rep = dlt_redis_cmd(&r, "CONFIG GET maxmemory-policy");
    CU_ASSERT_TRUE(rep != NULL && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2);
    if (rep != NULL && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2)
        CU_ASSERT_STRING_EQUAL(rep->element[1]->str, "noeviction");
    if (rep != NULL) freeReplyObject(rep);

    char dir[sizeof r.dir];
    memcpy(dir, r.dir, sizeof dir);
    pid_t pid = r.pid;
    dlt_redis_cleanup(&r);
    CU_ASSERT_TRUE(access(dir, F_OK) != 0 && errno == ENOENT);
    CU_ASSERT_TRUE(kill(pid, 0) != 0 && errno == ESRCH);
    dlt_redis_cleanup(&r); /* twice is harmless */
}

static void test_bad_config_fails_cleanly(void) {
    dlt_redis r;
    fprintf(stderr, "(a redis-server start failure is expected here)\n");
    DLT_ASSERT_INT_EQ(dlt_redis_start(&r, "no-such-directive 1"), -1);
    DLT_ASSERT_INT_EQ(r.pid, 0);
    DLT_ASSERT_INT_EQ(r.dir[0], 0);
}

static int child_returns_arg(void *arg) {
    return *(int *)arg;
}

static int child_exits_via_exit(void *arg) {
    (void)arg;
    exit(3); /* runs the inherited atexit handlers: they must spare the parent's servers */
}

static int child_dies_of_signal(void *arg) {
    raise(*(int *)arg); /* runs the inherited signal handler, likewise */
    return 0;
}

static int child_sleeps(void *arg) {
    (void)arg;
    dlt_sleep_ms(10000);
    return 0;
}

static void test_spawn_wait(void) {
    int v = 7;
    DLT_ASSERT_INT_EQ(dlt_wait(dlt_spawn(child_returns_arg, &v), 5000), 7);
    DLT_ASSERT_INT_EQ(dlt_wait(dlt_spawn(child_exits_via_exit, NULL), 5000), 3);
    int sig = SIGTERM;
    DLT_ASSERT_INT_EQ(dlt_wait(dlt_spawn(child_dies_of_signal, &sig), 5000), 128 + SIGTERM);
    sig = SIGKILL;
    DLT_ASSERT_INT_EQ(dlt_wait(dlt_spawn(child_dies_of_signal, &sig), 5000), 128 + SIGKILL);

    double t0 = dlt_now();
    DLT_ASSERT_INT_EQ(dlt_wait(dlt_spawn(child_sleeps, NULL), 100), -1);
    CU_ASSERT_TRUE(dlt_now() - t0 < 5.0);

    /* None of the children touched the suite's server. */
    CU_ASSERT_TRUE(ping(&dlt_server));
    CU_ASSERT_EQUAL(access(dlt_server.dir, F_OK), 0);
}

static void test_err_names(void) {
    DLT_ASSERT_ERR(0, 0);
    DLT_ASSERT_ERR(EBUSY, EBUSY);
    CU_ASSERT_STRING_EQUAL(dlt_errno_name(ENOTRECOVERABLE), "ENOTRECOVERABLE");
    CU_ASSERT_STRING_EQUAL(dlt_errno_name(0), "0");
    CU_ASSERT_PTR_NULL(dlt_errno_name(12345));
}

static void test_time(void) {
    double t0 = dlt_now();
    dlt_sleep_ms(50);
    double dt = dlt_now() - t0;
    CU_ASSERT_TRUE(dt >= 0.049 && dt < 2.0);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_server_answers),
    DLT_TEST(test_each_test_starts_clean),
    DLT_TEST(test_cmdstat_counts_one_set),
    DLT_TEST(test_stop_restart_same_port),
    DLT_TEST(test_kill_restart),
    DLT_TEST(test_leave_server_down),
    DLT_TEST(test_server_is_back),
    DLT_TEST(test_second_server_with_extra_conf),
    DLT_TEST(test_bad_config_fails_cleanly),
    DLT_TEST(test_spawn_wait),
    DLT_TEST(test_err_names),
    DLT_TEST(test_time),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "fixture", tests);
}
