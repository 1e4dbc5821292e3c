#include <dlock.h>
#include <errno.h>
#include <stdio.h>

/* A static mutex needs no init call: its first use connects. */
static dlock_mutex_t nightly = DLOCK_MUTEX_INITIALIZER("jobs/nightly");

static int report(const char *call, int rc) {
    /* dlock_strerror: what the code means; dlock_last_error: this
     * thread's detail about the failure (never a password). */
    fprintf(stderr, "%s: %s [%s]\n", call, dlock_strerror(rc), dlock_last_error());
    return 1;
}

int main(void) {
    dlock_mutex_t m;
    int rc;

    /* Every thread of every process on every host that names
     * "orders/42" (on the same Redis) shares this lock. */
    if ((rc = dlock_mutex_init(&m, "orders/42", NULL)) != 0)
        return report("dlock_mutex_init", rc);
    if ((rc = dlock_mutex_lock(&m)) != 0) /* ENOLCK: server unreachable */
        return report("dlock_mutex_lock", rc);
    printf("holding orders/42, fencing token %llu\n",
           (unsigned long long)dlock_mutex_fence(&m));
    /* ... the critical section ... */
    if ((rc = dlock_mutex_unlock(&m)) != 0) /* EPERM: the lease was lost */
        return report("dlock_mutex_unlock", rc);
    if ((rc = dlock_mutex_destroy(&m)) != 0)
        return report("dlock_mutex_destroy", rc);

    rc = dlock_mutex_trylock(&nightly);
    if (rc == EBUSY) {
        printf("the nightly job runs elsewhere\n");
    } else if (rc != 0) {
        return report("dlock_mutex_trylock", rc);
    } else {
        printf("running the nightly job\n");
        dlock_mutex_unlock(&nightly);
    }
    return 0;
}
