/* figures.c -- live figures (DLOCK_STATS) for the tests that read them
 * back (figures.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "figures.h"
#include "fixture.h"
#include "proxy.h"

/* A client of url (NULL: the suite's server; timeout_ms as
 * dlt_client_make's) with figures on.  The variable is put back as it
 * was: a suite that keeps figures on (test_top) keeps them. */
static int figures_client_of(dlock_client_t **out, const char *url, int timeout_ms) {
    const char *was = getenv("DLOCK_STATS");
    char *keep = was != NULL ? strdup(was) : NULL;
    int rc;
    setenv("DLOCK_STATS", "1", 1);
    rc = dlt_client_make(out, url, timeout_ms);
    if (keep != NULL) setenv("DLOCK_STATS", keep, 1);
    else unsetenv("DLOCK_STATS");
    free(keep);
    return rc;
}

int dlt_figures_client(dlock_client_t **out) {
    return figures_client_of(out, NULL, 0);
}

/* One client, so that one destruction flushes the figures of both. */
void dlt_figures_workload(const char *a, int na, unsigned hold_ms, const char *b, int nb) {
    dlock_client_t *c;
    dlock_mutex_t ma, mb;
    int i;
    CU_ASSERT_FATAL(dlt_figures_client(&c) == 0);
    CU_ASSERT_FATAL(dlt_mutex_make(&ma, a, 0, c) == 0);
    CU_ASSERT_FATAL(dlt_mutex_make(&mb, b, 0, c) == 0);
    for (i = 0; i < na; i++) {
        DLT_ASSERT_ERR(dlock_mutex_lock(&ma), 0);
        dlt_sleep_ms(hold_ms);
        DLT_ASSERT_ERR(dlock_mutex_unlock(&ma), 0);
    }
    for (i = 0; i < nb; i++) {
        DLT_ASSERT_ERR(dlock_mutex_lock(&mb), 0);
        DLT_ASSERT_ERR(dlock_mutex_unlock(&mb), 0);
    }
    DLT_ASSERT_ERR(dlock_mutex_destroy(&ma), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&mb), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
}

static void trouble_lost(dlock_mutex_t *m, const char *name, void *arg) {
    (void)m;
    (void)name;
    dlt_flag_add(arg, 1);
}

static int trouble_lost_seen;

int dlt_figures_trouble(const char *lost, const char *dead, int ndead) {
    dlock_client_t *c;
    dlock_mutexattr_t a;
    dlock_mutex_t ml, md;
    int i, held = 0;
    DLT_CK(dlt_figures_client(&c), 0);
    DLT_CK(dlock_mutexattr_init(&a), 0);
    DLT_CK(dlock_mutexattr_setclient(&a, c), 0);
    DLT_CK(dlock_mutexattr_setlease(&a, 600), 0);
    DLT_CK(dlock_mutexattr_setlostcallback(&a, trouble_lost, &trouble_lost_seen), 0);
    DLT_CK(dlock_mutex_init(&ml, lost, &a), 0);
    DLT_CK(dlock_mutexattr_settype(&a, DLOCK_MUTEX_ERRORCHECK), 0);
    DLT_CK(dlock_mutexattr_setlostcallback(&a, NULL, NULL), 0);
    DLT_CK(dlock_mutex_init(&md, dead, &a), 0);
    DLT_CK(dlock_mutexattr_destroy(&a), 0);
    dlt_flag_set(&trouble_lost_seen, 0);
    DLT_CK(dlock_mutex_lock(&ml), 0);
    DLT_CK(dlock_break(c, lost, DLOCK_BREAK_RESET, &held), 0);
    DLT_CK(held, 1);
    DLT_CK(dlt_flag_wait(&trouble_lost_seen, 1, 10000), 1);
    DLT_CK(dlock_mutex_unlock(&ml), EPERM);
    DLT_CK(dlock_mutex_lock(&md), 0);
    for (i = 0; i < ndead; i++) DLT_CK(dlock_mutex_lock(&md), EDEADLK);
    DLT_CK(dlock_mutex_unlock(&md), 0);
    DLT_CK(dlock_mutex_destroy(&ml), 0);
    DLT_CK(dlock_mutex_destroy(&md), 0);
    DLT_CK(dlock_client_destroy(c), 0);
    return 0;
}

/* The risk handler's events, counted: [0] at risk, [1] recovered, [2]
 * anything else. */
static int risk_seen[3];
static void risk_count(dlock_mutex_t *m, const char *name, int event, unsigned left_ms, void *arg) {
    (void)m, (void)name, (void)left_ms, (void)arg;
    dlt_flag_add(&risk_seen[event == DLOCK_LEASE_AT_RISK ? 0 : event == DLOCK_LEASE_RECOVERED ? 1 : 2], 1);
}

/* Waits up to ms for *flag to be nonzero: 1, or 0. */
static int risk_wait(const int *flag, int ms) {
    double end = dlt_now() + ms / 1000.0;
    while (dlt_flag_get(flag) == 0 && dlt_now() < end) dlt_sleep_ms(2);
    return dlt_flag_get(flag) != 0;
}

int dlt_figures_risk(const char *name) {
    dlt_proxy *px = dlt_proxy_start(dlt_server.port);
    dlock_client_t *c;
    dlock_mutexattr_t a;
    dlock_mutex_t m;
    char url[256];
    DLT_CK(px != NULL, 1);
    memset(risk_seen, 0, sizeof risk_seen);
    snprintf(url, sizeof url, "%s?drift_ms=100&connect_timeout_ms=2000", dlt_proxy_url(px));
    DLT_CK(figures_client_of(&c, url, 5000), 0);
    DLT_CK(dlock_mutexattr_init(&a), 0);
    DLT_CK(dlock_mutexattr_setclient(&a, c), 0);
    DLT_CK(dlock_mutexattr_setlease(&a, 1500), 0);
    DLT_CK(dlock_mutexattr_setriskcallback(&a, risk_count, NULL, 500), 0);
    DLT_CK(dlock_mutex_init(&m, name, &a), 0);
    DLT_CK(dlock_mutexattr_destroy(&a), 0);
    DLT_CK(dlock_mutex_lock(&m), 0);
    dlt_proxy_set(px, DLT_PROXY_DROP, 0, NULL, 0); /* the renewals go unanswered */
    dlt_proxy_close_all(px);
    DLT_CK(risk_wait(&risk_seen[0], 3000), 1);
    dlt_proxy_pass(px); /* back: the connections hung in the black hole cut */
    dlt_sleep_ms(60);
    dlt_proxy_close_all(px);
    DLT_CK(risk_wait(&risk_seen[1], 2000), 1);
    DLT_CK(dlock_mutex_unlock(&m), 0);
    DLT_CK(dlt_flag_get(&risk_seen[0]) == 1 && dlt_flag_get(&risk_seen[2]) == 0, 1);
    DLT_CK(dlock_mutex_destroy(&m), 0);
    DLT_CK(dlock_client_destroy(c), 0);
    dlt_proxy_stop(px);
    return 0;
}
