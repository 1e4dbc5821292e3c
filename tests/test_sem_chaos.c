/* labels: redis slow; timeout: 120 */
/* test_sem_chaos.c -- a counting semaphore of value N under chaos: takers
 * SIGKILLed at random (and replaced), the server restarted once.
 *
 * SHAPE
 *
 * The test's main process is only the fault injector and the checker; it
 * never calls dlock itself (it reads the server's keys through the
 * fixture), so every process it forks starts clean.  It starts its own
 * redis-server with persistence ("appendonly yes", "appendfsync always"):
 * a semaphore's value is an ordinary key with no expiry, and it survives
 * a restart of the server only when the server persists it.  Without
 * persistence a restart loses the value and the queue, and the record
 * of calls done that keeps a call sent again from being done twice; run
 * so, this test fails (seen: 5 holders of a semaphore of 3, a value of 4).
 *
 * SEM_CHAOS_SEED=S repeats the injector's choices (not the timing);
 * SEM_CHAOS_TRACE=1 prints the slots and the server's queue every 100 ms.
 *
 * NTAKERS taker processes (forked; each with its own client, unreachable
 * bound 5 s, longer than the restart) loop for RUN_MS: take a unit (at
 * random dlock_sem_wait, _timedwait, _clockwait with a 300 ms deadline,
 * or _trywait), hold it 2-10 ms, post it.  Each taker has a slot in
 * MAP_SHARED memory whose word holds its state and the units it has
 * taken, written in one store (a SIGKILL never splits them):
 *   IDLE     between a post that returned and the next take call
 *   WAITING  inside a take call, and from one that failed to the next
 *            (a failed take may have taken a unit on the server, which
 *            the thread's next call of the semaphore gives back first)
 *   HOLDING  set after the take returned 0, left (to POSTING) before
 *            the post is called
 *   POSTING  inside the post call
 * So the slots in HOLDING never undercount the units taken and not
 * given back: right after setting HOLDING a taker counts them all (dead
 * slots included) and keeps the peak.  A monitor process reads the value
 * with dlock_sem_getvalue every 10 ms and counts any outside [0, N].
 *
 * FAULTS
 *
 * Every 600-1100 ms the injector SIGKILLs a taker -- in turn one in
 * HOLDING, one in WAITING (asleep in the server's queue behind another
 * waiter, most likely), two in HOLDING, one at random -- reaps it, and
 * forks a replacement in a fresh slot; the dead one's slot keeps its
 * state at death.  Once, halfway, it stops the server (SIGTERM) and
 * starts it again.
 *
 * No undo: a unit held by a killed taker is lost for ever, as a POSIX
 * semaphore's.  So that the run does not starve, the injector gives such
 * units back (the dead slot goes GIVEN_BACK, then the monitor posts the
 * unit), all but the first: that one stays lost, and the accounting
 * below must find it.  A killed waiter's take may have taken a unit
 * too: once the server's record of ops shows it, that unit is given
 * back the same way (settle_waiters).  Kills are spaced and chosen so
 * on purpose: a waiter killed in the server's queue keeps its place
 * until its registration lapses, and a unit handed to it meanwhile is
 * out of use for 3 s (sem.lua's ttl, REG_TTL_MS in core/sem.c) -- faster kills of
 * waiters, or of the one at the head of the queue, starve the run; so
 * a kill meant for a holder waits for one (HOLDER_WAIT_MS) and is
 * skipped rather than turned on a waiter.
 *
 * CHECKS
 *
 * (1) The peak of slots in HOLDING (units taken and not given back, dead
 *     holders' included) never exceeds N.
 * (2) Every value the monitor read was within [0, N], and it read many.
 * (3) Every take returned 0, ETIMEDOUT (timed) or EAGAIN (trywait), and
 *     every post 0: the restart was ridden out, no ENOLCK.
 * (4) Work went on: many units taken, some after the restart; the
 *     injector killed takers, some of them holding a unit.
 * (5) After the run, once the takers have stopped and the server has
 *     dropped the registrations of killed waiters (a unit handed to a
 *     waiter that died comes back after its 3 s; the monitor's calls
 *     make the server look), N - value == the units lost to killed
 *     holders, not given back -- give or take the takers killed inside
 *     a take or post call (WAITING, POSTING): such a call may or may not
 *     have moved a unit on the server before the kill, so each may have
 *     lost one (less those the injector saw take one and gave back).
 *     The check is lost <= N - value <= lost + those.
 * (6) The same, exact, against the server's own ledger (see ledger()):
 *     how many of those calls did move a unit is known, and N - value
 *     must be the units lost by the count of the injector and takers.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fixture.h"

#define N 3              /* the semaphore's value */
#define NTAKERS 6        /* takers alive at once */
#define MAXSLOTS 64      /* takers ever (NTAKERS + replacements) */
#define RUN_MS 10000     /* the chaos */
#define DRAIN_MS 10000   /* the most the server may take to drop dead waiters */
#define SEM_NAME "chaos/sem"
#define HOLDER_WAIT_MS 4000 /* longer than a unit handed to a dead waiter stays out (3 s) */

enum { IDLE = 0, WAITING, HOLDING, POSTING, GIVEN_BACK };

/* A slot's word: its taker's state and the units it has taken, set in
 * one store, so that a SIGKILL never splits them. */
#define WORD(k, st) ((k) * 8 + (st))
#define STATE(w) ((w) & 7)
#define TAKEN(w) ((w) >> 3)

struct slot {
    int pid;
    int word;    /* WORD(units taken, state) */
    int since;   /* when it last went WAITING, ms since the run began */
    int bad;     /* calls with a result outside the contract */
    int bad_rc;  /* the first such result */
    int killed;  /* the injector killed it (else it ran to the end) */
};

struct shared {
    char url[256];
    double t0;           /* the run's start, dlt_now() */
    int stop_takers, stop_monitor;
    int peak;            /* (1) */
    int takes;           /* all takers' units taken */
    int samples, out_of_range, vmin, vmax, bad_value_rc; /* the monitor's */
    int repair_req, repaired; /* units the injector asked the monitor to post back, posted */
    int monitor_ready, final_value, final_rc, vlast;
    struct slot slots[MAXSLOTS];
};

static struct shared *sh;

static unsigned rnd(unsigned *s) {
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

static int open_sem(dlock_client_t **c, dlock_sem_t *s) {
    dlock_semattr_t a;
    int rc;
    if ((rc = dlt_client_make(c, sh->url, 5000)) != 0) return rc;
    if ((rc = dlock_semattr_init(&a)) != 0 || (rc = dlock_semattr_setclient(&a, *c)) != 0) return rc;
    rc = dlock_sem_init(s, SEM_NAME, N, &a);
    dlock_semattr_destroy(&a);
    return rc;
}

/* Units in HOLDING now, over every slot (the dead ones' too). */
static int holding_now(void) {
    int i, n = 0;
    for (i = 0; i < MAXSLOTS; i++) n += STATE(dlt_flag_get(&sh->slots[i].word)) == HOLDING;
    return n;
}

static void bad_call(struct slot *me, int rc) {
    if (dlt_flag_add(&me->bad, 1) == 1) dlt_flag_set(&me->bad_rc, rc);
}

/* One take, of a kind drawn at random: its result. */
static int take(dlock_sem_t *s, unsigned *seed, int *timed) {
    struct timespec t;
    switch (rnd(seed) % 4) {
    case 0:
        *timed = 0;
        return dlock_sem_wait(s);
    case 1:
        *timed = 1;
        t = dlt_abs_in(CLOCK_REALTIME, 300);
        return dlock_sem_timedwait(s, &t);
    case 2:
        *timed = 1;
        t = dlt_abs_in(CLOCK_MONOTONIC, 300);
        return dlock_sem_clockwait(s, CLOCK_MONOTONIC, &t);
    default:
        *timed = 2;
        return dlock_sem_trywait(s);
    }
}

/* A taker (a child process): arg is its slot. */
static int taker(void *arg) {
    struct slot *me = arg;
    dlock_client_t *c = NULL;
    dlock_sem_t s;
    unsigned seed = (unsigned)getpid() * 2654435761u | 1u;
    int rc, timed = 0, k = 0;
    DLT_CK(open_sem(&c, &s), 0);
    while (!dlt_flag_get(&sh->stop_takers)) {
        dlt_flag_set(&me->since, (int)((dlt_now() - sh->t0) * 1000));
        dlt_flag_set(&me->word, WORD(k, WAITING));
        rc = take(&s, &seed, &timed);
        if (rc != 0) { /* (still WAITING: see the states above) */
            if ((rc == ETIMEDOUT && timed == 1) || (rc == EAGAIN && timed == 2)) {
                if (timed == 2) usleep(1000);
                continue;
            }
            bad_call(me, rc);
            usleep(10000);
            continue;
        }
        dlt_flag_set(&me->word, WORD(++k, HOLDING));
        dlt_flag_max(&sh->peak, holding_now());
        dlt_flag_add(&sh->takes, 1);
        usleep(2000 + rnd(&seed) % 8000);
        dlt_flag_set(&me->word, WORD(k, POSTING));
        if ((rc = dlock_sem_post(&s)) != 0) bad_call(me, rc);
        dlt_flag_set(&me->word, WORD(k, IDLE));
        usleep(rnd(&seed) % 2000);
    }
    dlock_sem_destroy(&s);
    dlock_client_destroy(c);
    return 0;
}

/* The monitor (a child process): reads the value every 10 ms, posts the
 * units the injector gives back, and at the end reads the final value. */
static int monitor(void *arg) {
    dlock_client_t *c = NULL;
    dlock_sem_t s;
    int rc, v;
    (void)arg;
    DLT_CK(open_sem(&c, &s), 0);
    dlt_flag_set(&sh->vmin, N);
    dlt_flag_set(&sh->monitor_ready, 1);
    while (!dlt_flag_get(&sh->stop_monitor)) {
        if ((rc = dlock_sem_getvalue(&s, &v)) != 0) {
            dlt_flag_set(&sh->bad_value_rc, rc);
        } else {
            dlt_flag_add(&sh->samples, 1);
            dlt_flag_set(&sh->vlast, v);
            if (v < 0 || v > N) dlt_flag_add(&sh->out_of_range, 1);
            if (v < dlt_flag_get(&sh->vmin)) dlt_flag_set(&sh->vmin, v);
            dlt_flag_max(&sh->vmax, v);
        }
        while (dlt_flag_get(&sh->repaired) < dlt_flag_get(&sh->repair_req)) {
            if ((rc = dlock_sem_post(&s)) != 0) {
                dlt_flag_set(&sh->bad_value_rc, rc);
                break;
            }
            dlt_flag_add(&sh->repaired, 1);
        }
        usleep(10000);
    }
    dlt_flag_set(&sh->final_rc, dlock_sem_getvalue(&s, &v));
    dlt_flag_set(&sh->final_value, v);
    dlock_sem_destroy(&s);
    dlock_client_destroy(c);
    return 0;
}

/* What the injector counts. */
struct tally {
    int kills, dead_holding, dead_waiting, dead_posting, dead_idle, unrepaired, nslots;
    int takes_at_restart, restarts;
    int unsettled[MAXSLOTS], nunsettled; /* killed waiters whose take may yet show on the server */
    int waiter_units;                    /* units taken by killed waiters, given back */
};

static pid_t start_taker(struct tally *t) {
    struct slot *sl;
    if (t->nslots >= MAXSLOTS) return -1;
    sl = &sh->slots[t->nslots++];
    sl->pid = (int)dlt_spawn(taker, sl);
    return sl->pid;
}

/* A live taker in state want -- for WAITING, the one that went WAITING
 * last of two or more waiting for 20 ms at least: most likely asleep in
 * the server's queue behind another waiter, not at its head about to be
 * handed a unit -- found within 300 ms (polling every 0.5 ms), else any
 * live one; NULL if none lives.  For HOLDING, none found within
 * HOLDER_WAIT_MS is NULL, not a waiter: nobody holds a unit when units
 * are stuck (handed to a killed waiter, for REG_TTL_MS), and killing a
 * waiter then would strand the next unit too -- the run would starve. */
static struct slot *victim(const struct tally *t, int want, unsigned *seed) {
    int live[MAXSLOTS], nlive, in[MAXSLOTS], nin, nold, i, now, pick;
    double t0 = dlt_now();
    for (;;) {
        nlive = nin = 0;
        pick = -1;
        nold = 0;
        now = (int)((dlt_now() - sh->t0) * 1000);
        for (i = 0; i < t->nslots; i++) {
            if (sh->slots[i].pid <= 0) continue;
            live[nlive++] = i;
            if (STATE(dlt_flag_get(&sh->slots[i].word)) != want) continue;
            in[nin++] = i;
            if (now - dlt_flag_get(&sh->slots[i].since) < 20) continue;
            nold++;
            if (pick < 0 || dlt_flag_get(&sh->slots[i].since) > dlt_flag_get(&sh->slots[pick].since)) pick = i;
        }
        if (want == WAITING && nold >= 2) return &sh->slots[pick];
        if (want == HOLDING && nin > 0) return &sh->slots[in[rnd(seed) % (unsigned)nin]];
        if (nlive == 0) return NULL;
        if (want == HOLDING) {
            if ((dlt_now() - t0) * 1000 > HOLDER_WAIT_MS) return NULL;
            usleep(500);
            continue;
        }
        if (want < 0 || dlt_now() - t0 > 0.3) return &sh->slots[live[rnd(seed) % (unsigned)nlive]];
        usleep(500);
    }
}

/* Kills one live taker -- in turn one holding a unit, one waiting in a
 * take call, two holding, one at random -- reaps it, tallies its state
 * at death, gives its unit back if it held one (but the first), and
 * starts a replacement. */
static void kill_one(struct tally *t, unsigned *seed) {
    static const int kinds[] = { HOLDING, WAITING, HOLDING, HOLDING, -1 };
    struct slot *v = victim(t, kinds[t->kills % 5], seed);
    int st;
    if (v == NULL) return;
    kill(v->pid, SIGKILL);
    dlt_wait(v->pid, 5000);
    v->killed = 1;
    v->pid = -v->pid; /* dead: its state is now its state at death */
    if (getenv("SEM_CHAOS_TRACE") != NULL)
        printf("trace kill slot %d, state %d\n", (int)(v - sh->slots), STATE(v->word));
    t->kills++;
    st = STATE(dlt_flag_get(&v->word));
    if (st == HOLDING) {
        t->dead_holding++;
        if (t->dead_holding == 1) {
            t->unrepaired++;
        } else {
            dlt_flag_set(&v->word, WORD(TAKEN(v->word), GIVEN_BACK)); /* not held from here */
            dlt_flag_add(&sh->repair_req, 1);
        }
    } else if (st == WAITING) {
        t->dead_waiting++;
        t->unsettled[t->nunsettled++] = (int)(v - sh->slots);
    } else if (st == POSTING) {
        t->dead_posting++;
    } else {
        t->dead_idle++;
    }
    start_taker(t);
}

/* 1 when the server holds no waiter's registration and no unit handed to
 * a waiter (the monitor's calls make it drop those of dead waiters). */
static int server_settled(dlt_redis *srv) {
    long long n = dlt_reply_int(dlt_redis_cmd(srv, "EXISTS dlock:{" SEM_NAME "}:semq dlock:{" SEM_NAME
                                                   "}:semx dlock:{" SEM_NAME "}:semg"));
    return n == 0;
}

/* SEM_CHAOS_TRACE=1: every 100 ms, the slots (a digit: a live taker's
 * state, a letter: a dead one's, 'a' + its state), the server's
 * registrations and grants (a token's first hex digits: ms left) and the
 * units taken so far. */
static void trace(dlt_redis *srv, const struct tally *t, double at) {
    redisReply *q = dlt_redis_cmd(srv, "ZRANGE dlock:{" SEM_NAME "}:semx 0 -1 WITHSCORES");
    redisReply *tm = dlt_redis_cmd(srv, "TIME");
    redisReply *g = dlt_redis_cmd(srv, "HKEYS dlock:{" SEM_NAME "}:semg");
    long long now = 0;
    int j;
    printf("trace t=%.1f takes=%d value=%d slots=", at, dlt_flag_get(&sh->takes), dlt_flag_get(&sh->vlast));
    for (j = 0; j < t->nslots; j++)
        putchar((sh->slots[j].pid > 0 ? '0' : 'a') + STATE(dlt_flag_get(&sh->slots[j].word)));
    if (tm != NULL && tm->type == REDIS_REPLY_ARRAY && tm->elements == 2)
        now = atoll(tm->element[0]->str) * 1000 + atoll(tm->element[1]->str) / 1000;
    printf(" registered:");
    for (j = 0; q != NULL && q->type == REDIS_REPLY_ARRAY && j + 1 < (int)q->elements; j += 2)
        printf(" %.6s:%lld", q->element[j]->str, atoll(q->element[j + 1]->str) - now);
    printf(" granted:");
    for (j = 0; g != NULL && g->type == REDIS_REPLY_ARRAY && j < (int)g->elements; j++)
        printf(" %.6s", g->element[j]->str);
    printf("\n");
    if (q != NULL) freeReplyObject(q);
    if (tm != NULL) freeReplyObject(tm);
    if (g != NULL) freeReplyObject(g);
}

static void settle_waiters(dlt_redis *srv, struct tally *t);

/* The chaos itself: RUN_MS of kills, one restart halfway. */
static void chaos(dlt_redis *srv, struct tally *t, unsigned seed) {
    double t0 = dlt_now();
    while ((dlt_now() - t0) * 1000 < RUN_MS) {
        {
            double until = dlt_now() + (600 + rnd(&seed) % 500) / 1000.0;
            while (dlt_now() < until) {
                dlt_sleep_ms(100);
                settle_waiters(srv, t);
                if (getenv("SEM_CHAOS_TRACE") != NULL) trace(srv, t, dlt_now() - t0);
            }
        }
        if (t->restarts == 0 && (dlt_now() - t0) * 1000 >= RUN_MS / 2) {
            t->takes_at_restart = dlt_flag_get(&sh->takes);
            if (dlt_redis_stop(srv) != 0 || dlt_redis_restart(srv) != 0) {
                CU_FAIL("the server did not restart"); /* the takers are stopped all the same */
                return;
            }
            t->restarts++;
            continue;
        }
        kill_one(t, &seed);
    }
}

/* Stops the takers (each finishes its round) and the monitor, once the
 * server has settled; every survivor must exit 0. */
static void stop_all(dlt_redis *srv, struct tally *t, pid_t mon) {
    int i, rc;
    double t0;
    dlt_flag_set(&sh->stop_takers, 1);
    for (i = 0; i < t->nslots; i++) {
        if (sh->slots[i].pid <= 0) continue;
        rc = dlt_wait(sh->slots[i].pid, 15000);
        if (rc != 0) fprintf(stderr, "taker %d (slot %d): exit %d\n", sh->slots[i].pid, i, rc);
        DLT_ASSERT_INT_EQ(rc, 0);
        sh->slots[i].pid = -sh->slots[i].pid;
    }
    t0 = dlt_now();
    while (!server_settled(srv) && (dlt_now() - t0) * 1000 < DRAIN_MS) dlt_sleep_ms(50);
    CU_ASSERT(server_settled(srv));
    dlt_flag_set(&sh->stop_monitor, 1);
    DLT_ASSERT_INT_EQ(dlt_wait(mon, 15000), 0);
}

static void report(const struct tally *t) {
    int i, bad = 0, bad_rc = 0;
    for (i = 0; i < t->nslots; i++)
        if (sh->slots[i].bad > 0) {
            bad += sh->slots[i].bad;
            if (bad_rc == 0) bad_rc = sh->slots[i].bad_rc;
        }
    printf("\nsem_chaos: N=%d takes=%d (%d after the restart) peak=%d kills=%d (holding %d, waiting %d, "
           "posting %d, idle %d) given back %d (%d taken by killed waiters), lost %d\n",
           N, sh->takes, sh->takes - t->takes_at_restart, sh->peak, t->kills, t->dead_holding, t->dead_waiting,
           t->dead_posting, t->dead_idle, sh->repaired, t->waiter_units, t->unrepaired);
    printf("sem_chaos: value samples=%d in [%d, %d], out of range %d; final value %d; bad results %d (first %s)\n",
           sh->samples, sh->vmin, sh->vmax, sh->out_of_range, sh->final_value, bad, dlt_errno_label(bad_rc));
    DLT_ASSERT_INT_EQ(bad, 0);                                   /* (3) */
}

/* One caller's entry in the server's record of ops done (sem.lua's
 * `done`, dlock:{NAME}:semd, a hash): field "host:pid:tid/TAG", value
 * "EXPIRY SEQ COUNT OP TOKEN" -- the caller's last op that took, posted
 * or returned a unit (OP take, withdraw, post, return; undo: its take
 * whose answer was lost was given back, and no longer counts) and
 * COUNT, how many such ops it has done.  pid 0: not a caller's field. */
struct done_entry {
    long pid, tid;
    long long count;
    int took; /* its last op took a unit (take, withdraw), else posted */
};

static int done_parse(const char *field, const char *value, struct done_entry *e) {
    const char *slash = strrchr(field, '/'), *p;
    long long exp, seq;
    char op[16] = "";
    memset(e, 0, sizeof *e);
    if (slash == NULL) return 0;
    for (p = slash - 1; p > field && *p != ':'; p--)
        ;
    for (p = p - 1; p > field && *p != ':'; p--)
        ;
    if (sscanf(p, ":%ld:%ld/", &e->pid, &e->tid) != 2) return -1;
    if (sscanf(value, "%lld %lld %lld %15s", &exp, &seq, &e->count, op) != 4) return -1;
    e->took = strcmp(op, "take") == 0 || strcmp(op, "withdraw") == 0;
    return e->took || strcmp(op, "post") == 0 || strcmp(op, "undo") == 0 ? 0 : -1;
}

/* A killed waiter's take may have taken a unit on the server -- sent
 * before the kill, done before or after it -- and the dead process
 * will never post it.  Such units are given back as a dead holder's
 * are (else they add up, and the run starves): once the server's record
 * of ops shows the take (the caller's count one more than twice the
 * units its slot saw taken), the monitor posts one.  A take that never
 * shows was not done, and nothing is lost.  Errors (the server
 * restarting) only put the look off to the next call. */
static void settle_waiters(dlt_redis *srv, struct tally *t) {
    redisReply *r;
    struct done_entry e;
    size_t i;
    int j;
    if (t->nunsettled == 0) return;
    r = dlt_redis_cmd(srv, "HGETALL dlock:{" SEM_NAME "}:semd");
    for (i = 0; r != NULL && r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
        if (done_parse(r->element[i]->str, r->element[i + 1]->str, &e) != 0 || e.pid <= 0 || e.tid != e.pid)
            continue;
        for (j = 0; j < t->nunsettled; j++) {
            struct slot *sl = &sh->slots[t->unsettled[j]];
            if (labs((long)sl->pid) != e.pid || e.count != 2LL * TAKEN(sl->word) + 1) continue;
            t->unsettled[j] = t->unsettled[--t->nunsettled];
            t->waiter_units++;
            dlt_flag_add(&sh->repair_req, 1);
            break;
        }
    }
    if (r != NULL) freeReplyObject(r);
}

/* The server's ledger, per caller: in[i] slot i's entry (count 0: none),
 * *mon the monitor's, *d the ops done by all.  Entries that are no
 * taker's and not the monitor's, or that do not parse, count in *stray
 * (there must be none: nothing else moves units). */
static void done_read(dlt_redis *srv, pid_t mon, const struct tally *t, struct done_entry *in,
                      struct done_entry *mon_e, long long *d, int *stray) {
    redisReply *r = dlt_redis_cmd(srv, "HGETALL dlock:{" SEM_NAME "}:semd");
    struct done_entry e;
    size_t i;
    int j, matched;
    memset(in, 0, sizeof *in * MAXSLOTS);
    memset(mon_e, 0, sizeof *mon_e);
    *d = 0;
    *stray = 0;
    CU_ASSERT_FATAL(r != NULL && r->type == REDIS_REPLY_ARRAY);
    for (i = 0; i + 1 < r->elements; i += 2) {
        if (strcmp(r->element[i]->str, "#") == 0) continue;
        matched = 0;
        if (done_parse(r->element[i]->str, r->element[i + 1]->str, &e) == 0 && e.pid > 0) {
            *d += e.count;
            if (e.pid == (long)mon && e.tid == e.pid && mon_e->count == 0) {
                *mon_e = e;
                matched = 1;
            }
            for (j = 0; j < t->nslots && !matched; j++) {
                long pid = labs((long)sh->slots[j].pid);
                if (pid == e.pid && e.tid == e.pid && in[j].count == 0) {
                    in[j] = e;
                    matched = 1;
                }
            }
        }
        if (!matched) {
            fprintf(stderr, "sem_chaos: done entry %s = %s is no taker's\n", r->element[i]->str,
                    r->element[i + 1]->str);
            ++*stray;
        }
    }
    freeReplyObject(r);
}

/* (6): the server's ledger against the takers' counts.  sem.lua keeps,
 * per caller (here each taker and the monitor: one thread each), its
 * last op that took or posted a unit and how many such ops it has done
 * (see done_entry; entries last 60 s, longer than this run).  The
 * takers' slots say what they saw: k units taken, k or k - 1 posted.  A
 * taker's count must be exactly what it saw -- or one more when it was
 * killed inside a take call (WAITING: the take took a unit, xt of them)
 * or a post (POSTING: it posted, xp) -- and, as its ops alternate take,
 * post, its last op must be a take when the count is odd, a post when
 * even.  The monitor's count must be the units it gave back.  Then the
 * sum D of all counts is the units taken plus the units posted on the
 * server, and the value N less the first plus the second, so D + N -
 * value is even and both are known: they must be the takers' and the
 * monitor's plus xt and xp, counted per caller.  A unit made or lost by
 * anything but those calls breaks one of them.  And the units lost are
 * known exactly: N - value must be the dead holders' units that were
 * not given back, plus xt, plus the killed posts that did not post. */
static void ledger(dlt_redis *srv, pid_t mon, const struct tally *t) {
    struct done_entry in[MAXSLOTS], mon_e;
    long long d, took = 0, posted, xt = 0, xp = 0;
    int i, stray, off = 0;
    done_read(srv, mon, t, in, &mon_e, &d, &stray);
    posted = dlt_flag_get(&sh->repaired);
    DLT_ASSERT_INT_EQ(mon_e.count, posted);
    CU_ASSERT(mon_e.count == 0 || !mon_e.took);
    for (i = 0; i < t->nslots; i++) {
        int w = dlt_flag_get(&sh->slots[i].word), st = STATE(w);
        long long seen = 2 * TAKEN(w) - (st == HOLDING || st == POSTING || st == GIVEN_BACK), extra;
        took += TAKEN(w);
        posted += TAKEN(w) - (st == HOLDING || st == POSTING || st == GIVEN_BACK);
        extra = in[i].count - seen;
        /* (a taker that ran to the end gave back what a failed take of
         * its took, at its next call or its destroy: it has no extra) */
        if (extra == 1 && st == WAITING && sh->slots[i].killed) xt++;
        else if (extra == 1 && st == POSTING && sh->slots[i].killed) xp++;
        else if (extra != 0) off++;
        if (in[i].count > 0 && in[i].took != (in[i].count % 2 == 1)) off++;
        if (extra != 0 && (extra != 1 || (st != WAITING && st != POSTING) || !sh->slots[i].killed))
            fprintf(stderr, "sem_chaos: slot %d (state %d, %d taken): %lld ops done on the server\n", i, st,
                    TAKEN(w), in[i].count);
    }
    printf("sem_chaos: ledger: %lld done on the server; takers saw %lld taken, %lld posted (given back "
           "included): %lld more taken by killed waiters, %lld more posted by killed posters\n",
           d, took, posted, xt, xp);
    DLT_ASSERT_INT_EQ(stray, 0);
    DLT_ASSERT_INT_EQ(off, 0);
    CU_ASSERT(d > 0);
    DLT_ASSERT_INT_EQ((d + N - sh->final_value) % 2, 0);
    DLT_ASSERT_INT_EQ((d + N - sh->final_value) / 2, took + xt); /* units taken on the server */
    DLT_ASSERT_INT_EQ((d - N + sh->final_value) / 2, posted + xp); /* units posted */
    CU_ASSERT(xt >= 0 && xt <= t->dead_waiting);
    CU_ASSERT(t->waiter_units <= xt);
    CU_ASSERT(xp >= 0 && xp <= t->dead_posting);
    /* so the units lost are exactly: the dead holders' not given back,
     * the killed takes that took one and were not given back, the
     * killed posts that did not post */
    DLT_ASSERT_INT_EQ(N - sh->final_value, t->unrepaired + xt - t->waiter_units + (t->dead_posting - xp));
}

static void test_sem_chaos(void) {
    dlt_redis srv;
    struct tally t;
    unsigned seed = (unsigned)time(NULL) | 1u;
    const char *e = getenv("SEM_CHAOS_SEED");
    pid_t mon;
    int i, lost_max;
    if (e != NULL && *e) seed = (unsigned)strtoul(e, NULL, 0) | 1u;
    printf("\nsem_chaos: seed=%u (SEM_CHAOS_SEED to repeat the injector's choices)\n", seed);
    memset(&t, 0, sizeof t);
    memset(&srv, 0, sizeof srv);
    if (dlt_redis_start(&srv, "appendonly yes\nappendfsync always") != 0)
        CU_FAIL_FATAL("cannot start the redis-server");
    sh = DLT_SHM_NEW(struct shared, 1);
    sh->t0 = dlt_now();
    snprintf(sh->url, sizeof sh->url, "%s", srv.url);
    mon = dlt_spawn(monitor, NULL);
    CU_ASSERT_FATAL(mon > 0);
    if (!dlt_flag_wait(&sh->monitor_ready, 1, 10000)) {
        kill(mon, SIGKILL);
        dlt_wait(mon, 5000);
        dlt_redis_cleanup(&srv);
        CU_FAIL_FATAL("the monitor did not start");
    }
    for (i = 0; i < NTAKERS; i++) start_taker(&t);
    chaos(&srv, &t, seed);
    stop_all(&srv, &t, mon);
    report(&t);
    DLT_ASSERT_INT_EQ(sh->final_rc, 0);
    CU_ASSERT(sh->peak <= N);                                    /* (1) */
    DLT_ASSERT_INT_EQ(sh->out_of_range, 0);                      /* (2) */
    CU_ASSERT(sh->vmin >= 0 && sh->vmax <= N);
    CU_ASSERT(sh->samples >= 100);
    DLT_ASSERT_INT_EQ(sh->bad_value_rc, 0);
    DLT_ASSERT_INT_EQ(sh->repaired, sh->repair_req);
    CU_ASSERT(sh->takes >= 200);                                 /* (4) */
    CU_ASSERT(sh->takes - t.takes_at_restart >= 10);
    DLT_ASSERT_INT_EQ(t.restarts, 1);
    CU_ASSERT(t.kills >= 6);
    CU_ASSERT(t.dead_holding >= 1);
    lost_max = t.unrepaired + t.dead_waiting - t.waiter_units + t.dead_posting; /* (5) */
    CU_ASSERT(N - sh->final_value >= t.unrepaired);
    CU_ASSERT(N - sh->final_value <= lost_max);
    if (N - sh->final_value < t.unrepaired || N - sh->final_value > lost_max)
        fprintf(stderr, "sem_chaos: N - value = %d, not within [%d, %d]\n", N - sh->final_value, t.unrepaired,
                lost_max);
    ledger(&srv, mon, &t);                                       /* (6) */
    DLT_SHM_FREE(sh, 1);
    dlt_redis_cleanup(&srv);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_sem_chaos),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "sem_chaos", tests);
}
