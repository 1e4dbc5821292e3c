/* fuzz_keeper.c -- libFuzzer target: the keeper's command line.
 *
 * A keeper is `ld.so libdlock_preload.so --dlock-keeper KIND WATCH
 * ON-LOST PARENT NAME`; it reads those words from /proc/self/cmdline,
 * NUL-separated.  The input is such a command line (its bytes, NULs and
 * all, as the kernel would give them), handed to the keeper's own parser,
 * keeper_args (preload/keeper.c, included here so that its statics can be
 * read).  Besides memory and UB errors it checks what a keeper relies on:
 * an accepted line has "--dlock-keeper" among its first four words,
 * the kind "flock", and a non-empty lock name inside the buffer.
 *
 * keeper.c's neighbours in the preload: preload/preload.c is compiled into
 * this target; what it and keeper.c use of the other files (the loader,
 * the hooks, the implementation's start) are stubs, never reached.
 */
#include "../preload/keeper.c"

#include <stdint.h>

int dlpl_mutex_init(void) { return 0; }
void dlpl_neg_atfork(int phase) { (void)phase; }
int dlpl_posix_locks_held(void) { return 0; }
const struct dlpl_impl *dlpl_impl(void) { return NULL; }
void dlpl_lock_delay_set(dlock_mutexattr_t *a) {
    (void)a;
}
void dlpl_risk_set(dlock_mutexattr_t *a, pid_t whom) {
    (void)a;
    (void)whom;
}
dlock_client_t *dlpl_client;
char *dlpl_interp;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf;
    if (size > 8191) return 0; /* the keeper reads at most 8191 bytes */
    if ((buf = malloc(size + 1)) == NULL) return 0;
    memcpy(buf, data, size);
    buf[size] = '\0'; /* as the keeper ends what it read */
    lockname = NULL;
    if (keeper_args(buf, size) == 0) {
        if (memmem(buf, size, "flock", 6) == NULL) abort();
        if (lockname == NULL || lockname < buf || lockname >= buf + size || *lockname == '\0') abort();
        if (memmem(buf, size, "--dlock-keeper", 15) == NULL) abort();
        if (watch_ok != 0 && watch_ok != 1) abort();
    }
    free(buf);
    return 0;
}
