/* impl.c -- libdlock_preload_impl.so's start: what the thin interposer
 * (load.c) runs once, at the first call on a mapped lock.  It makes the
 * program's client (for its circuit breaker, the mapped mutexes and
 * semaphores, the record locks), finds the dynamic loader (keepers are
 * started through it), installs the file hooks' fork handlers, takes
 * over record locks an exec kept, and hands the thin object the table of
 * what its hooks call.
 */
#include <link.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <dlock_private.h> /* the client's circuit breaker: a return nobody told */

#include "preload.h"

dlock_client_t *dlpl_client;
char *dlpl_interp;

/* ------------------------------------------------- the server's answers */

/* 0: the server answers; 1: down, and this program told it; 2: down, and
 * another program of this host had told it (the host-wide record). */
static atomic_int server_down;

void dlpl_server_down(const char *name, int rc) {
    int first;
    if (atomic_load(&server_down) != 0) return;
    /* one notice per host per outage: the first program to find it out */
    first = dlock_client_outage_notice(dlpl_client, dlpl_conf.on_error == DLPL_ON_ERROR_CLOSED
                                                        ? DLOCK_OUTAGE_DOWN_CLOSED : DLOCK_OUTAGE_DOWN);
    if (atomic_exchange(&server_down, first ? 1 : 2) != 0 || (!first && !dlpl_conf.verbose)) return;
    if (dlpl_conf.on_error == DLPL_ON_ERROR_CLOSED)
        dlpl_msg("'%s': no cluster-wide lock (%s); DLOCK_ON_ERROR=closed: mapped file locks fail with ENOLCK, "
                 "mapped semaphores' tries with EAGAIN, and mapped mutexes and semaphores wait until the server "
                 "answers again (asked at most once a second)",
                 name, dlock_strerror(rc));
    else
        dlpl_msg("'%s': no cluster-wide lock (%s); DLOCK_ON_ERROR=open: mapped locks take the local lock only "
                 "(this host) until the server answers again (asked at most once a second)", name,
                 dlock_strerror(rc));
}

static void server_back(void) {
    dlpl_msg("the server answers again: mapped locks are cluster-wide again");
}

void dlpl_server_up(void) {
    int was;
    if (DLPL_LIKELY(atomic_load(&server_down) == 0)) {
        /* a return another program got the answer of, and nobody told */
        if (dlpl_client != NULL && dlock__client_breaker_host_back(dlpl_client)) dlpl_server_returned();
        return;
    }
    if ((was = atomic_exchange(&server_down, 0)) == 0) return;
    if (dlock_client_outage_notice(dlpl_client, DLOCK_OUTAGE_UP) || (was == 1 && dlpl_conf.verbose)) server_back();
}

void dlpl_server_returned(void) {
    if (atomic_load(&server_down) != 0) {
        dlpl_server_up();
    } else if (dlock_client_outage_notice(dlpl_client, DLOCK_OUTAGE_UP)) {
        server_back(); /* an outage another program of this host told of */
    }
}


/* ------------------------------------------------------------- start */

static int interp_cb(struct dl_phdr_info *info, size_t size, void *arg) {
    int i;
    (void)size;
    for (i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type == PT_INTERP) {
            *(char **)arg = strdup((const char *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr));
            break;
        }
    }
    return 1; /* the first object is the program */
}

static void impl_atfork_prepare(void) {
    dlpl_mx_atfork(0);
    dlpl_file_atfork_prepare();
}
static void impl_atfork_parent(void) {
    dlpl_file_atfork_parent();
    dlpl_mx_atfork(1);
}
static void impl_atfork_child(void) {
    dlpl_file_atfork_child();
    dlpl_mx_atfork(2);
}

static const struct dlpl_impl table = {
    .flock = dlpl_file_flock,
    .lk = dlpl_file_lk,
    .close = dlpl_file_close,
    .mutex_lock = dlpl_mx_lock,
    .mutex_unlock = dlpl_mx_unlock,
    .mutex_consistent = dlpl_mx_consistent,
    .cond_wait = dlpl_mx_cond,
    .sem_open = dlpl_sem_open,
    .sem_unlink = dlpl_sem_unlink,
    .sem_close = dlpl_sem_close,
    .sem_take = dlpl_sem_take,
    .sem_post = dlpl_sem_post,
    .sem_getvalue = dlpl_sem_getvalue,
};

/* The client comes first, so that the library's own fork handlers are
 * registered before the file hooks' (file.c counts on running around
 * them).  A bad DLOCK_URL refuses the load: DLOCK_ON_ERROR decides then,
 * as for a server that cannot be reached. */
__attribute__((visibility("default"))) int dlpl_impl_start(const struct dlpl_impl **out, char *err, size_t errlen) {
    dlock_config_t cfg;
    dlock_config_init(&cfg);
    cfg.breaker_ms = DLPL_BREAKER_MS; /* DLOCK_URL's breaker_ms, if any, wins */
    if (dlock_client_create(&dlpl_client, &cfg) != 0) {
        snprintf(err, errlen, "DLOCK_URL: %s", dlock_last_error());
        dlpl_client = NULL;
        return -1;
    }
    dl_iterate_phdr(interp_cb, &dlpl_interp);
    pthread_atfork(impl_atfork_prepare, impl_atfork_parent, impl_atfork_child);
    dlpl_file_init();
    *out = &table;
    return 0;
}
