/* token.c -- per-thread owner identities.
 *
 * Owner identity is the thread: each thread gets its own unguessable
 * 128-bit token from RAND_bytes on first use.  A failure of RAND_bytes is
 * an error, never a fallback to a weaker source.  The identity lives in
 * thread-specific data whose destructor tells the layer above (the core,
 * through the exit hook it sets: dlock__thread_exit_hook) that the thread
 * is gone, so it stops renewing the thread's locks at once.  A fork child notices the
 * identity it inherited belongs to its parent (by pid) and makes its own.
 * A process-owned mutex (DLOCK_OWNER_PROCESS) has one more identity, the
 * process's, shared by all its threads.  Background threads of the
 * library start here too, with every signal blocked (dlock__thread_start).
 *
 * Every identity is also on one global list, so that a fork child, where
 * the parent's other threads no longer exist, still reaches theirs (it
 * never uses them, but a leak checker must not see them as lost).
 *
 * The random source is dlock's own OpenSSL library context (rand_ctx),
 * whose DRBG is a HASH-DRBG over SHA-256, read with RAND_bytes_ex.  Its
 * own, so that the choice of DRBG (the cheapest to set up of OpenSSL's
 * three: the first RAND_bytes of a process costs about a millisecond of
 * fetching and instantiating, two thirds of it for CTR-DRBG, the global
 * default) never touches the program's default context, its
 * configuration or FIPS mode.  That set-up runs in a short-lived thread
 * started when a client is made (dlock__random_prepare), while the
 * caller connects; the first token waits for it only if it is not done,
 * or does it itself if the thread has not begun.  A caller that would
 * wait helps instead: of the set-up's two parts -- fetching and
 * instantiating the DRBG, and loading OpenSSL's configuration and error
 * strings, which the first needs only at its end and OpenSSL would load
 * there anyway -- the set-up thread takes the DRBG's as it starts, and
 * the caller loads the configuration at once (dlock__random_help_conf),
 * before it connects, so that it is loaded before the DRBG's part needs
 * it; the DRBG's part goes to the caller if the thread has not begun it
 * by then (dlock__random_help).  On two cores neither part waits for the
 * other: the set-up thread is bound to a CPU other than its starter's
 * (rand_thread_start).  The context lives as long as the process, as OpenSSL's default
 * one does.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "base/base.h"

static pthread_key_t self_key;
static pthread_once_t self_once = PTHREAD_ONCE_INIT;
static int self_key_err;
static pthread_mutex_t all_mu = PTHREAD_MUTEX_INITIALIZER;
static dlock__thread *all;
static dlock__thread *proc_id; /* the process's identity (dlock__proc_self) */

/* RAND_bytes takes OpenSSL's DRBG lock; a fork while another thread is
 * inside it would leave that lock held forever in the child, whose first
 * token would then hang.  dlock's calls are serialised by mutexes that
 * the fork handlers hold across fork: the draws by rand_mu, the DRBG's
 * set-up (rand_setup, by the set-up thread or a helping caller) by
 * setup_mu, the load of OpenSSL's configuration (conf_load) by conf_mu,
 * the set-up thread's OpenSSL thread state freed before it lets go of
 * its own.  A fork waits for a set-up under way (and its thread's end),
 * and the child gets a context that is ready (its DRBG reseeds itself on
 * seeing a new pid) or none (it sets one up itself).  The set-up thread
 * never needs rand_mu, which its starter holds while it makes it: a
 * thread that began by waiting for it could then wait for a CPU too.
 * Order: rand_mu, setup_mu, conf_mu.
 * The fields below are rand_mu's (rand_ctx: setup_mu's). */
static pthread_mutex_t rand_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t setup_mu = PTHREAD_MUTEX_INITIALIZER;
static OSSL_LIB_CTX *rand_ctx; /* set up: never freed while the process lives */
static pthread_t rand_thread;  /* the set-up thread, while rand_live */
static int rand_live;          /* it was started and is not joined yet (read unlocked) */
static int rand_done;          /* it has let go of setup_mu and conf_mu for good (atomic) */
static int rand_exit_set;      /* rand_at_exit is registered */
static int rand_claimed;       /* rand_setup is someone's (rand_claim; atomic) */
static pthread_mutex_t conf_mu = PTHREAD_MUTEX_INITIALIZER;
static int conf_done; /* OpenSSL's configuration is loaded (atomic; written under conf_mu) */

int dlock__random_ready(void) {
    return __atomic_load_n(&rand_ctx, __ATOMIC_ACQUIRE) != NULL; /* never waits for the set-up */
}

/* The process id, cached: getpid() is a system call, and the lock path
 * asks for it several times.  A fork child refreshes it. */
static pid_t cached_pid;

pid_t dlock__pid(void) {
    pid_t p = __atomic_load_n(&cached_pid, __ATOMIC_RELAXED);
    if (p == 0) {
        p = getpid();
        __atomic_store_n(&cached_pid, p, __ATOMIC_RELAXED);
    }
    return p;
}

static void all_lock(void) { pthread_mutex_lock(&all_mu); }
static void all_unlock(void) { pthread_mutex_unlock(&all_mu); }
static void rand_join(int any);
/* A fork first waits for the random source's set-up thread to end, not
 * only for its set-up: a thread on its way out may be inside the
 * allocator, whose lock a child would then inherit taken (glibc's malloc
 * guards against that at fork; ASan's allocator does not). */
static void token_fork_prepare(void) {
    rand_join(1);
    pthread_mutex_lock(&rand_mu);
    pthread_mutex_lock(&setup_mu);
    pthread_mutex_lock(&conf_mu);
    pthread_mutex_lock(&all_mu);
}
static void token_fork_after(void) {
    pthread_mutex_unlock(&all_mu);
    pthread_mutex_unlock(&conf_mu);
    pthread_mutex_unlock(&setup_mu);
    pthread_mutex_unlock(&rand_mu);
}
static void token_fork_child(void) {
    cached_pid = getpid();
    rand_live = rand_done = rand_claimed = 0; /* the set-up thread is the parent's */
    free(proc_id); /* the parent's: the child holds nothing, and makes its own */
    proc_id = NULL;
    token_fork_after();
}

static void all_add(dlock__thread *t) {
    all_lock();
    t->prev = NULL;
    t->next = all;
    if (all != NULL) all->prev = t;
    all = t;
    all_unlock();
}

static void all_remove(dlock__thread *t) {
    all_lock();
    if (t->prev != NULL) t->prev->next = t->next;
    else all = t->next;
    if (t->next != NULL) t->next->prev = t->prev;
    all_unlock();
}

/* What the layers above do when a thread with an identity exits (the
 * core stops renewing its holds); set once, by the first client. */
static void (*_Atomic exit_hook)(dlock__thread *);

void dlock__thread_exit_hook(void (*fn)(dlock__thread *)) {
    exit_hook = fn;
}

static void self_destroy(void *p) {
    dlock__thread *t = p;
    void (*fn)(dlock__thread *) = exit_hook;
    if (fn != NULL && t->pid == dlock__pid()) fn(t);
    all_remove(t);
    free(t);
}

static void self_key_make(void) {
    self_key_err = pthread_key_create(&self_key, self_destroy);
    pthread_atfork(token_fork_prepare, token_fork_after, token_fork_child);
}

/* ------------------------------------------------------ random source */

/* Sets up the random source, if it is not: a library context of dlock's
 * own whose DRBG is a HASH-DRBG (SHA-256), its primary DRBG fetched,
 * instantiated and seeded from the operating system (each thread's first
 * draw makes that thread's own DRBG from it, as RAND_bytes_ex does).
 * The algorithm is fetched first, on its own: the fetch (most of the
 * set-up: the new context's table of names) does not use OpenSSL's error
 * queue, whose first use in a process loads OpenSSL's error strings, nor
 * its configuration, so it does not wait for a helping caller loading
 * both meanwhile (dlock__random_help_conf); the instantiation needs them.
 * 0, or -1 (nothing kept: the next call tries again).  setup_mu held. */
static int rand_setup(void) {
    OSSL_LIB_CTX *ctx;
    if (rand_ctx != NULL) return 0;
    if ((ctx = OSSL_LIB_CTX_new()) == NULL) return -1;
    EVP_RAND_free(EVP_RAND_fetch(ctx, "HASH-DRBG", NULL)); /* (kept in ctx's store: found again below) */
    if (RAND_set_DRBG_type(ctx, "HASH-DRBG", NULL, NULL, "SHA256") != 1 || RAND_get0_primary(ctx) == NULL) {
        OSSL_LIB_CTX_free(ctx);
        return -1;
    }
    __atomic_store_n(&rand_ctx, ctx, __ATOMIC_RELEASE); /* (read unlocked by dlock__random_ready) */
    return 0;
}

/* The set-up is two parts that can run side by side: rand_setup (most of
 * it) and OpenSSL's configuration (conf_load), which rand_setup needs only
 * at its end.  The set-up thread and a caller that would wait for it
 * (dlock__random_help) each take one: rand_setup goes to whichever comes
 * first (rand_claim), so that it never waits for a thread that has not
 * started yet, and the other loads the configuration (or finds it loaded:
 * a caller loads it first, dlock__random_help_conf). */
static int rand_claim(void) {
    int free_ = 0;
    return __atomic_compare_exchange_n(&rand_claimed, &free_, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

/* OpenSSL's configuration, and with it OpenSSL's error strings (loaded at
 * a process's first use of the error queue), unless loaded: what
 * OpenSSL's own initialisation loads (OPENSSL_INIT_LOAD_CONFIG), here
 * because the set-up would load both at its end (its digest's engine
 * check); whoever comes first loads them, the other waits for them inside
 * OpenSSL.  thread_stop: this thread's OpenSSL state is freed before
 * conf_mu goes. */
static void conf_load(int thread_stop) {
    pthread_mutex_lock(&conf_mu);
    if (!conf_done) {
        (void)OPENSSL_init_crypto(OPENSSL_INIT_LOAD_CONFIG, NULL);
        __atomic_store_n(&conf_done, 1, __ATOMIC_RELEASE);
    }
    if (thread_stop) OPENSSL_thread_stop();
    pthread_mutex_unlock(&conf_mu);
}

/* The set-up thread: its part of the set-up, and then this thread's
 * OpenSSL state freed while conf_mu is held, so that a fork never finds
 * OpenSSL's locks taken by this thread's exit.  The DRBG's part lets go
 * of setup_mu first: a caller waiting for it draws meanwhile. */
static void *rand_setup_main(void *arg) {
    (void)arg;
    if (rand_claim()) {
        pthread_mutex_lock(&setup_mu);
        (void)rand_setup();
        pthread_mutex_unlock(&setup_mu);
        pthread_mutex_lock(&conf_mu);
        OPENSSL_thread_stop();
        pthread_mutex_unlock(&conf_mu);
    } else {
        conf_load(1);
    }
    __atomic_store_n(&rand_done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Joins the set-up thread: any (wait), or only one that is done. */
static void rand_join(int any) {
    pthread_t th;
    int join = 0;
    pthread_mutex_lock(&rand_mu);
    if (rand_live && (any || __atomic_load_n(&rand_done, __ATOMIC_ACQUIRE))) {
        th = rand_thread;
        __atomic_store_n(&rand_live, 0, __ATOMIC_RELAXED);
        join = 1;
    }
    pthread_mutex_unlock(&rand_mu);
    if (join) pthread_join(th, NULL);
}

void dlock__random_settle(void) {
    rand_join(1);
}

int dlock__random_thread_live(void) {
    return __atomic_load_n(&rand_live, __ATOMIC_RELAXED);
}

/* No thread of dlock's may be inside OpenSSL when its own exit handler
 * (OPENSSL_cleanup) frees it: this one is registered after OpenSSL's, so
 * it runs first, and waits for the set-up thread's end and for a part of
 * the set-up that another thread helps with.  OpenSSL registers its
 * handler at its first full initialisation, which OPENSSL_init_crypto(0)
 * does not make (it returns at once); OPENSSL_INIT_ASYNC does, and costs
 * two thread-local keys. */
static void rand_at_exit(void) {
    rand_join(1);
    pthread_mutex_lock(&rand_mu);
    pthread_mutex_lock(&setup_mu);
    pthread_mutex_lock(&conf_mu);
    pthread_mutex_unlock(&conf_mu);
    pthread_mutex_unlock(&setup_mu);
    pthread_mutex_unlock(&rand_mu);
}

/* The set-up thread runs on a CPU other than its starter's, when the
 * process may use another: left to the scheduler, a new thread is often
 * queued on its starter's CPU, and one of the two then waits for the
 * other's slice (as long as the whole set-up) while the other CPU is
 * idle; neither is moved, having just run there.  The thread ends with
 * the set-up, and its binding with it.  A CPU that is busy costs no more
 * than a late start: a caller that would wait for the thread takes the
 * DRBG's part itself if the thread has not begun it (dlock__random_help).
 * rand_mu held. */
static int rand_cpu = -1, rand_starter_cpu = -1; /* (dlock__random_thread_cpu) */

static int rand_thread_start(void) {
    cpu_set_t allowed, other;
    pthread_attr_t attr;
    int here = sched_getcpu(), rc = -1;
    CPU_ZERO(&other);
    rand_cpu = -1;
    rand_starter_cpu = here;
    if (here >= 0 && sched_getaffinity(0, sizeof allowed, &allowed) == 0)
        for (int i = 1; i < CPU_SETSIZE && rand_cpu < 0; i++)
            if (CPU_ISSET((here + i) % CPU_SETSIZE, &allowed)) rand_cpu = (here + i) % CPU_SETSIZE;
    if (rand_cpu >= 0 && pthread_attr_init(&attr) == 0) {
        CPU_SET(rand_cpu, &other);
        if (pthread_attr_setaffinity_np(&attr, sizeof other, &other) == 0)
            rc = dlock__thread_start(&rand_thread, rand_setup_main, NULL, &attr);
        pthread_attr_destroy(&attr);
    }
    if (rc == 0) return 0;
    rand_cpu = -1;
    return dlock__thread_start(&rand_thread, rand_setup_main, NULL, NULL);
}

int dlock__random_thread_cpu(int *starter) {
    int cpu;
    pthread_mutex_lock(&rand_mu);
    cpu = rand_cpu;
    if (starter != NULL) *starter = rand_starter_cpu;
    pthread_mutex_unlock(&rand_mu);
    return cpu;
}

/* Never waits for a set-up under way (its thread holds setup_mu throughout):
 * a caller that prepares goes on to connect while it runs. */
void dlock__random_prepare(void) {
    pthread_once(&self_once, self_key_make); /* the fork handlers */
    if (dlock__random_ready() || __atomic_load_n(&rand_live, __ATOMIC_ACQUIRE)) return;
    pthread_mutex_lock(&rand_mu);
    if (!dlock__random_ready() && !rand_live) {
        if (!rand_exit_set && OPENSSL_init_crypto(OPENSSL_INIT_ASYNC, NULL) == 1 && atexit(rand_at_exit) == 0)
            rand_exit_set = 1;
        /* Without the exit handler, no thread: the first draw sets up. */
        __atomic_store_n(&rand_done, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&rand_claimed, 0, __ATOMIC_RELEASE); /* (a failed set-up's: nothing kept) */
        if (rand_exit_set && rand_thread_start() == 0) __atomic_store_n(&rand_live, 1, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&rand_mu);
}

/* Only while the set-up thread runs (else the first draw sets up on its
 * own, as without help).  A failed rand_setup keeps nothing: the draw
 * that follows tries again, and says so. */
int dlock__random_help(void) {
    if (dlock__random_ready() || !__atomic_load_n(&rand_live, __ATOMIC_ACQUIRE)) return 0;
    if (rand_claim()) {
        pthread_mutex_lock(&setup_mu);
        (void)rand_setup();
        pthread_mutex_unlock(&setup_mu);
        return 1;
    }
    if (__atomic_load_n(&conf_done, __ATOMIC_ACQUIRE)) return 0;
    conf_load(0);
    return 2;
}

/* Only while the set-up thread runs and the configuration is not loaded
 * (by the thread, or by a caller that helped before). */
int dlock__random_help_conf(void) {
    if (dlock__random_ready() || !__atomic_load_n(&rand_live, __ATOMIC_ACQUIRE) ||
        __atomic_load_n(&conf_done, __ATOMIC_ACQUIRE))
        return 0;
    conf_load(0);
    return 2;
}

/* A draw that finds the DRBG's set-up under way on another thread spins
 * for it a while, giving its core up at each turn, before it sleeps: on
 * two cores that part is about to end when the caller gets here, and a
 * caller asleep on setup_mu would then wait to be woken (tens of
 * microseconds here).  Bounded: a set-up thread still waiting for a core
 * after it is better moved to the caller's, which the scheduler does only
 * once that core is idle.  1 with setup_mu taken, 0 if the source was set
 * up meanwhile (setup_mu not taken: its holder is letting go). */
#define SETUP_SPIN_US 500

static int setup_lock(void) {
    dlock__mono end = dlock__now() + (dlock__mono)SETUP_SPIN_US * 1000;
    while (pthread_mutex_trylock(&setup_mu) != 0) {
        if (dlock__random_ready()) return 0;
        if (dlock__now() >= end) {
            pthread_mutex_lock(&setup_mu);
            return 1;
        }
        sched_yield();
    }
    return 1;
}

int dlock__random(unsigned char *buf, int n) {
    int ok;
    pthread_once(&self_once, self_key_make); /* the fork handlers */
    pthread_mutex_lock(&rand_mu);
    if (!dlock__random_ready() && setup_lock()) { /* (set up here, or waits for the set-up under way) */
        (void)rand_setup();
        pthread_mutex_unlock(&setup_mu);
    }
    ok = n >= 0 && dlock__random_ready() && RAND_bytes_ex(rand_ctx, buf, (size_t)n, 0) == 1;
    pthread_mutex_unlock(&rand_mu);
    if (__atomic_load_n(&rand_live, __ATOMIC_RELAXED)) rand_join(0); /* a set-up thread that is done goes */
    return ok ? 0 : -1;
}

dlock__thread *dlock__self_peek(void) {
    dlock__thread *t;
    if (pthread_once(&self_once, self_key_make) != 0 || self_key_err != 0) return NULL;
    t = pthread_getspecific(self_key);
    return (t != NULL && t->pid == dlock__pid()) ? t : NULL;
}

/* A new identity: a random token, this process's pid, tid 0. */
static dlock__thread *id_make(int *err) {
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[DLOCK__TOKEN_HEX / 2];
    dlock__thread *t;
    int i;
    if (dlock__random(raw, (int)sizeof raw) != 0) {
        *err = dlock__seterr(ENOLCK, "RAND_bytes failed: no secure random token for this thread");
        return NULL;
    }
    if ((t = calloc(1, sizeof *t)) == NULL) {
        *err = dlock__seterr(ENOMEM, "out of memory");
        return NULL;
    }
    memcpy(t->raw, raw, sizeof raw);
    for (i = 0; i < (int)sizeof raw; i++) {
        t->token[2 * i] = hex[raw[i] >> 4];
        t->token[2 * i + 1] = hex[raw[i] & 15];
    }
    t->token[DLOCK__TOKEN_HEX] = '\0';
    t->pid = dlock__pid();
    return t;
}

dlock__thread *dlock__self(int *err) {
    dlock__thread *t, *old;

    if (pthread_once(&self_once, self_key_make) != 0 || self_key_err != 0) {
        *err = dlock__seterr(EAGAIN, "cannot create thread-specific data key");
        return NULL;
    }
    old = pthread_getspecific(self_key);
    if (old != NULL && old->pid == dlock__pid()) return old;
    if ((t = id_make(err)) == NULL) return NULL;
    t->tid = (unsigned long)syscall(SYS_gettid);
    if (pthread_setspecific(self_key, t) != 0) {
        free(t);
        *err = dlock__seterr(ENOMEM, "out of memory");
        return NULL;
    }
    all_add(t);
    if (old != NULL) { /* the parent's identity, inherited across fork */
        all_remove(old);
        free(old);
    }
    return t;
}

/* The process as an owner (DLOCK_OWNER_PROCESS): one identity that every
 * thread uses, made once (under all_mu, so two first users agree) and
 * never freed while the process lives; the fork handler drops the
 * parent's in the child, where no other thread can be looking at it. */
dlock__thread *dlock__proc_peek(void) {
    dlock__thread *t = __atomic_load_n(&proc_id, __ATOMIC_ACQUIRE);
    return t != NULL && t->pid == dlock__pid() ? t : NULL;
}

dlock__thread *dlock__proc_self(int *err) {
    dlock__thread *t = dlock__proc_peek(), *mine;
    if (t != NULL) return t;
    if ((mine = id_make(err)) == NULL) return NULL; /* (the random source sets up the fork handlers) */
    all_lock();
    if ((t = dlock__proc_peek()) == NULL) {
        t = mine;
        mine = NULL;
        __atomic_store_n(&proc_id, t, __ATOMIC_RELEASE);
    }
    all_unlock();
    free(mine); /* another thread made it first */
    return t;
}

/* Background threads start with every signal blocked: a program's
 * handlers never run on them. */
int dlock__thread_start(pthread_t *th, void *(*fn)(void *), void *arg, const pthread_attr_t *attr) {
    sigset_t all, old;
    int rc;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(th, attr, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}
