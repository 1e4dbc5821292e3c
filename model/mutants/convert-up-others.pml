/* mutant convert-up-others: convert.lua's up takes the lock while another reader holds it (mutex).  Written by model/mutants/make from lock.pml; do not edit. */
#define K1 READ
#define K2 READ
#define CONV 1
#define ROUNDS1 1
#define NCONV 1
/* lock.pml -- the lock protocol of src/backend/lua/ (acquire.lua,
 * acquire_shared.lua, release.lua, renew.lua, reset.lua and the fence
 * scripts) and of the client that uses it (src/core/lock.c, hold.c,
 * renew.c), for SPIN.  model/README.md maps every action below to the
 * lines it stands for, says what is abstracted away, and how to check it:
 *
 *   spin -search -a -ltl mutex lock.pml      (and -ltl crashed)
 *   spin -search -a -noclaim lock.pml        (the asserts alone)
 *
 * Two clients (1 and 2), each ROUNDS acquisitions of a kind chosen anew
 * every round (plain, fair, caching, read), talk to one server through
 * one request slot and one answer slot each: a request, an answer or a
 * grant popped from its list can be lost, and each is delayed for as
 * long as anything else can happen.
 * Time is one clock (`now`, in ticks; a tick stands for a microsecond of
 * the server's TIME) that advances by itself; every key with an expiry
 * is gone once the clock reaches it.  The server can restart keeping its
 * data, without it, or from an older snapshot; its fence key can vanish
 * (its expiry, a flush); `dlock break` can cut every hold.
 *
 * Build-time switches (-D): LIVE (no clock, no faults, fair waiters only:
 * the setting of the liveness claim `wake`, lock-live.pml); NOGUARD (the
 * clients use no restart guard: a restart without data then cuts holds,
 * as a break does). */

#define NC 2                 /* clients, 1..NC */
#ifndef ROUNDS1
#define ROUNDS1 2            /* acquisitions of client 1 */
#endif
#ifndef ROUNDS2
#define ROUNDS2 1            /* and of client 2 */
#endif
#ifndef MAXT
#define MAXT 3               /* the clock stops here */
#endif
#ifndef K1
#define K1 0                 /* client 1's kind (below), 0: any, chosen every round */
#endif
#ifndef K2
#define K2 0                 /* client 2's */
#endif
#ifndef FAULT
#define FAULT 0              /* the fault of this run, at most once: 0 none, 1 restart
                              * keeping the data, 2 restart without it, 3 restart
                              * from an older snapshot, 4 dlock break */
#endif
#define L 2                  /* lease (ticks) */
#define G 1                  /* a grant's lease: min(lease, GRANT_MS) */
#define S 8                  /* fence units per tick: the nanoseconds of a microsecond */
#define GUARD L              /* restart guard: at least the longest lease */
#define NLOC 1               /* local holds per caching hold */

/* request ops */
#define ACQ 1                /* acquire.lua (mutex, write lock) */
#define ACQS 2               /* acquire_shared.lua (read lock) */
#define REL 3                /* release.lua "plain"/"hash" */
#define RELS 4               /* release.lua "shared" */
#define WDR 5                /* release.lua "withdraw" */
#define REN 6                /* renew.lua, exclusive */
#define RENS 7               /* renew.lua "s" */
#define CONVU 8              /* convert.lua "up" */
#define CONVD 9              /* convert.lua "down" */
/* answers */
#define A_GOT 1              /* {1, fence} or {2, fence} (or the uncontended path's fence) */
#define A_WAIT 2             /* {0, ms, last} */
#define A_OK 3               /* 1 */
#define A_NO 4               /* 0 */
/* kinds of acquisition */
#define PLAIN 1
#define FAIR 2
#define CACHE 3
#define READ 4
/* client phases */
#define IDLE 0
#define SENT 1               /* an acquire sent, no answer yet */
#define WAITQ 2              /* queued in the fair queue: waits for a grant */
#define BUSY 3               /* told the lock is held: retries at a "released" or the expiry */
#define HOLD 4
#define DEAD 5

/* ---- the server's keys ---- */
byte owner;                  /* lock hash: owner (0: no lock key) */
byte lexp;                   /* its expiry (PEXPIRE) */
byte lfence;                 /* its fence field */
byte lfo;                    /* ghost: the client lfence was issued to */
bool wmark;                  /* its w field: somebody may wait */
byte fk;                     /* fence key (0: none) */
byte fko;                    /* ghost: the client fk was issued to */
byte rexp[NC + 1];           /* readers zset: score (0: not a member) */
byte wexp[NC + 1];           /* waiting writers zset (registration) */
byte q[NC];                  /* fair queue (list), head first */
byte qlen;
byte gl[NC + 1];             /* grant list <lock>:g:<token>: the pushed fence */
byte glexp[NC + 1];
byte glg[NC + 1];            /* ghost: gen of the grant */
bool epoch = 1;              /* restart guard's epoch key (a server long up has one) */
byte nb;                     /* its "not before" */

/* ---- the clients ---- */
byte now = 1;
byte ph[NC + 1];
byte kind[NC + 1];
byte req[NC + 1];            /* request in flight (0: none) */
byte rsent[NC + 1];          /* when it was sent */
byte ans[NC + 1];            /* answer arrived, not read yet */
byte ansf[NC + 1];           /* its fence */
byte anso[NC + 1];           /* ghost: whom that fence was issued to */
byte ansg[NC + 1];           /* ghost: gen when answered */
byte dl[NC + 1];             /* the client's validity end (sent + lease) */
byte cf[NC + 1];             /* fence of the hold in use */
byte hg[NC + 1];             /* ghost: gen of the hold */
byte floor[NC + 1];          /* last fence of the busy answer (lock.c) */
byte wsent[NC + 1];          /* when the request answered busy was sent */
byte tans[NC + 1];           /* caching: when the answer arrived */
byte cbase[NC + 1];          /* caching: the fence the server issued */
byte nloc[NC + 1];
bool cv[NC + 1];             /* a conversion request of its hold is out (convert.lua) */
#ifndef NCONV
#define NCONV 2              /* conversions per client (each a round trip: few fences a tick) */
#endif
byte ncv[NC + 1];

/* ---- ghosts for the properties ---- */
byte maxf;                   /* greatest fence issued so far (valid holds) */
byte gen;                    /* bumped when holds are cut: break, older snapshot */
bool crashed[NC + 1];
byte lastproc[NC + 1];       /* crashed: when it crashed, or the server last ran its request */
byte faults;                 /* restarts and breaks so far */
#define MAXFAULTS 1

#if FAULT == 3
/* snapshot (an older copy of the data: RDB, AOF, a lagged replica) */
bool snapped;
byte s_owner, s_lexp, s_lfence, s_lfo, s_fk, s_fko, s_qlen, s_nb;
bool s_wmark, s_epoch;
byte s_rexp[NC + 1], s_wexp[NC + 1], s_q[NC], s_gl[NC + 1], s_glexp[NC + 1], s_glg[NC + 1];
#endif

/* ---- the properties ---- */
/* A client holds with a valid lease: it believes so, its own deadline has
 * not passed, and its hold was not cut by a break or an older snapshot
 * (those are what fences are for: see fence_issue). */
#define XV(c) (ph[c] == HOLD && kind[c] != READ && now < dl[c] && hg[c] == gen)
#define RV(c) (ph[c] == HOLD && kind[c] == READ && now < dl[c] && hg[c] == gen)
ltl mutex { [] !((XV(1) && (XV(2) || RV(2))) || (XV(2) && RV(1))) }
/* What a crashed client held lapses one lease after its crash or the
 * server's last run of a request it sent before (a delayed renewal),
 * whichever is later.  A grant made to it as a waiter fits in that too:
 * made while its registration (that run + lease) was live, for a grant's
 * lease at most the rest of it. */
#define GONE(c) (!(crashed[c] && now >= lastproc[c] + L) || \
                 (!(owner == c && now < lexp) && !(rexp[c] > now)))
ltl lapse { [] (GONE(1) && GONE(2)) }

/* ---- scratch of the atomic steps: written before read in each, so
 * not part of the state ---- */
hidden byte c, op, f, h, e, i, j, o;
hidden byte g, r, rw;

/* ---- server helpers ---- */
inline consumed(c) {
    ans[c] = 0; ansf[c] = 0; anso[c] = 0; ansg[c] = 0
}

inline fence_issue(c, f) {
    /* FENCE_FROM: max(last + 1, the clock in ns), written to the fence key */
    f = now * S;
    if
    :: fk >= f -> f = fk + 1
    :: else
    fi;
    fk = f; fko = c;
    assert(f < (now + 1) * S);   /* never ahead of the clock: the assumption */
    assert(f > maxf);            /* fences strictly increase */
    maxf = f
}

inline expire() {
    if
    :: owner != 0 && lexp <= now -> owner = 0; lexp = 0; lfence = 0; lfo = 0; wmark = 0
    :: else
    fi;
    i = 1;
    do
    :: i <= NC ->
        if :: rexp[i] != 0 && rexp[i] <= now -> rexp[i] = 0 :: else fi;
        if :: wexp[i] != 0 && wexp[i] <= now -> wexp[i] = 0 :: else fi;
        if :: gl[i] != 0 && glexp[i] <= now -> gl[i] = 0; glexp[i] = 0; glg[i] = 0 :: else fi;
        i++
    :: else -> break
    od
}

inline qpop() {
    i = 1;
    do
    :: i < qlen -> q[i - 1] = q[i]; i++
    :: else -> break
    od;
    qlen--; q[qlen] = 0
}

inline qremove(c) {
    j = 0;
    do
    :: j < qlen && q[j] != c -> j++
    :: j < qlen && q[j] == c ->
        do
        :: j + 1 < qlen -> q[j] = q[j + 1]; j++
        :: else -> break
        od;
        qlen--; q[qlen] = 0; break
    :: j >= qlen -> break
    od
}

inline inq(c, r) {
    r = 0; j = 0;
    do
    :: j < qlen -> if :: q[j] == c -> r = 1 :: else fi; j++
    :: else -> break
    od
}

/* qhead(): the first live waiter; dead ones before it go */
inline qhead(h) {
    h = 0;
    do
    :: qlen == 0 -> break
    :: qlen > 0 && wexp[q[0]] > now -> h = q[0]; break
    :: qlen > 0 && wexp[q[0]] <= now -> wexp[q[0]] = 0; qpop()
    od
}

/* REGISTER: a waiting writer, and a fair one's place in the queue */
inline register(c) {
    wexp[c] = now + L;
    if
    :: kind[c] == FAIR -> inq(c, r); if :: !r -> q[qlen] = c; qlen++ :: else fi
    :: else
    fi
}

inline reply(a, f, o) {
    ans[c] = a; ansf[c] = f; anso[c] = o; ansg[c] = gen
}

/* is a member of the readers (rexp) or writers (wexp) zset live? */
#define anylive(z, r) r = (z[1] > now || z[2] > now)

/* ACQUIRE_PRELUDE's restart guard: true (and busy answered) while held back */
inline guarded(g) {
#ifndef NOGUARD
    if
    :: !epoch -> epoch = 1; nb = now + GUARD
    :: else
    fi;
#endif
    g = (now < nb)
}

/* acquire.lua past its uncontended path (which is take() on a lock with
 * no other keys: the same state here) */
inline acquire_x(c) {
    guarded(g);
    if
    :: g -> reply(A_WAIT, 0, 0)
    :: !g && owner == c ->              /* {2, fence}: already its own */
        lexp = now + L;
        if
        :: kind[c] == CACHE -> fence_issue(c, f); lfence = f; lfo = c
        :: else
        fi;
        reply(A_GOT, lfence, lfo)
    :: !g && owner != 0 && owner != c -> /* HELD_BY_ANOTHER, REGISTER */
        wmark = 1; register(c); reply(A_WAIT, lfence, lfo)
    :: !g && owner == 0 ->
        anylive(rexp, r); anylive(wexp, rw);
        rw = rw || r || qlen > 0;       /* EXISTS K[4..7] */
        h = 0;
        if
        :: !r -> qhead(h)
        :: else
        fi;
        if
        :: r || (h != 0 && h != c) -> register(c); reply(A_WAIT, fk, fko)
        :: else ->
            if
            :: rw -> wexp[c] = 0; if :: h == c -> qpop() :: else fi
            :: else
            fi;
            fence_issue(c, f);          /* take() */
            owner = c; lfence = f; lfo = c; lexp = now + L; wmark = rw;
            reply(A_GOT, f, c)
        fi
    fi
}

inline acquire_s(c) {
    guarded(g);
    if
    :: g -> reply(A_WAIT, 0, 0)
    :: !g && owner != 0 -> wmark = 1; reply(A_WAIT, 0, 0)
    :: !g && owner == 0 && rexp[c] > now ->  /* {2, GET fence or '1'} */
        rexp[c] = now + L;
        if
        :: fk != 0 -> reply(A_GOT, fk, fko)
        :: else -> reply(A_GOT, 1, 0)
        fi
    :: !g && owner == 0 && rexp[c] <= now ->
        anylive(wexp, r);               /* writers first */
        if
        :: r -> reply(A_WAIT, 0, 0)
        :: else -> rexp[c] = now + L; fence_issue(c, f); reply(A_GOT, f, c)
        fi
    fi
}

/* release.lua, an exclusive hold ("plain", "hash"; "withdraw" after its own part) */
inline release_x(c) {
    if
    :: owner != c -> reply(A_NO, 0, 0)                /* the token compare */
    :: owner == c && !wmark -> owner = 0; lexp = 0; lfence = 0; lfo = 0; reply(A_OK, 0, 0)
    :: owner == c && wmark ->
        h = 0;                                        /* the queue's live head, popped */
        do
        :: qlen == 0 -> break
        :: qlen > 0 -> e = q[0]; qpop();
            if
            :: wexp[e] > now -> h = e; break
            :: else -> wexp[e] = 0
            fi
        od;
        if
        :: h != 0 ->                                  /* the grant */
            wexp[h] = 0;
            fence_issue(h, f);
            owner = h; lfence = f; lfo = h; lexp = now + G; wmark = 1;
            gl[h] = f; glexp[h] = now + G; glg[h] = gen
        :: else -> owner = 0; lexp = 0; lfence = 0; lfo = 0; wmark = 0
        fi;
        reply(A_OK, 0, 0)
    fi
}

inline withdraw(c) {
    wexp[c] = 0; qremove(c); gl[c] = 0; glexp[c] = 0; glg[c] = 0;
    if
    :: owner == c -> release_x(c)
    :: else -> reply(A_NO, 0, 0)
    fi
}

/* convert.lua "up": the caller, a live reader and the only one, becomes
 * the writer under a new fence; its own hash already: {2, fence}; other
 * readers (or an owner): wait; not a reader: 7 (A_NO).  (Its registration
 * as the upgrader and the conversion deadlock order the waiters; they
 * are not modelled.) */
inline convert_up(c) {
    if
    :: owner == c -> lexp = now + L; reply(A_GOT, lfence, lfo)
    :: owner != c && rexp[c] <= now -> reply(A_NO, 0, 0)
    :: owner != c && rexp[c] > now && (owner != 0 || rexp[3 - c] > now) -> reply(A_WAIT, 0, 0)
    :: owner == 0 && rexp[c] > now ->
        rexp[c] = 0;
        fence_issue(c, f);
        owner = c; lfence = f; lfo = c; lexp = now + L; wmark = 1;
        reply(A_GOT, f, c)
    fi
}

/* convert.lua "down": the writer's hash goes and it joins the readers in
 * one step; a reader already (asked again): A_OK; else A_NO. */
inline convert_down(c) {
    if
    :: owner == c -> owner = 0; lexp = 0; lfence = 0; lfo = 0; wmark = 0; rexp[c] = now + L; reply(A_OK, 0, 0)
    :: owner != c && rexp[c] > now -> reply(A_OK, 0, 0)
    :: owner != c && rexp[c] <= now -> reply(A_NO, 0, 0)
    fi
}

inline serve(c) {
    op = req[c]; req[c] = 0;
    if :: crashed[c] -> lastproc[c] = now :: else fi;   /* a request it sent before it crashed */
    expire();
    if
    :: op == ACQ -> acquire_x(c)
    :: op == ACQS -> acquire_s(c)
    :: op == REL -> release_x(c)
    :: op == RELS -> if :: rexp[c] != 0 -> rexp[c] = 0; reply(A_OK, 0, 0) :: else -> reply(A_NO, 0, 0) fi
    :: op == WDR -> withdraw(c)
    :: op == REN -> if :: owner == c -> lexp = now + L; reply(A_OK, 0, 0) :: else -> reply(A_NO, 0, 0) fi
    :: op == RENS -> if :: rexp[c] > now -> rexp[c] = now + L; reply(A_OK, 0, 0) :: else -> reply(A_NO, 0, 0) fi
    :: op == CONVU -> convert_up(c)
    :: op == CONVD -> convert_down(c)
    fi;
#ifndef LIVE
    if
    :: skip
    :: consumed(c)                      /* the answer is lost */
    fi
#endif
}

inline drop_conns() {               /* a restart: what was in flight is lost */
    req[1] = 0; req[2] = 0; ans[1] = 0; ans[2] = 0
}

inline wipe() {
    owner = 0; lexp = 0; lfence = 0; lfo = 0; wmark = 0; fk = 0; fko = 0;
    qlen = 0; epoch = 0; nb = 0;
    i = 0;
    do
    :: i <= NC -> rexp[i] = 0; wexp[i] = 0; gl[i] = 0; glexp[i] = 0; glg[i] = 0;
        if :: i < NC -> q[i] = 0 :: else fi; i++
    :: else -> break
    od
}

#if FAULT == 3
inline snap_copy(to_snap) {
    i = 0;
    do
    :: i <= NC ->
        if
        :: to_snap -> s_rexp[i] = rexp[i]; s_wexp[i] = wexp[i]; s_gl[i] = gl[i]; s_glexp[i] = glexp[i]; s_glg[i] = glg[i];
            if :: i < NC -> s_q[i] = q[i] :: else fi
        :: else -> rexp[i] = s_rexp[i]; wexp[i] = s_wexp[i]; gl[i] = s_gl[i]; glexp[i] = s_glexp[i]; glg[i] = s_glg[i];
            if :: i < NC -> q[i] = s_q[i] :: else fi
        fi;
        i++
    :: else -> break
    od;
    if
    :: to_snap -> s_owner = owner; s_lexp = lexp; s_lfence = lfence; s_lfo = lfo; s_wmark = wmark;
        s_fk = fk; s_fko = fko; s_qlen = qlen; s_epoch = epoch; s_nb = nb
    :: else -> owner = s_owner; lexp = s_lexp; lfence = s_lfence; lfo = s_lfo; wmark = s_wmark;
        fk = s_fk; fko = s_fko; qlen = s_qlen; epoch = s_epoch; nb = s_nb
    fi
}
#endif

active proctype server() {
end:
    do
    :: atomic { req[1] != 0 -> c = 1; serve(c) }
    :: atomic { req[2] != 0 -> c = 2; serve(c) }
#ifndef LIVE
    :: atomic { req[1] != 0 -> req[1] = 0 }          /* a request lost */
    :: atomic { req[2] != 0 -> req[2] = 0 }
    :: atomic { gl[1] != 0 -> gl[1] = 0; glexp[1] = 0; glg[1] = 0 }  /* a BLPOP's answer lost */
    :: atomic { gl[2] != 0 -> gl[2] = 0; glexp[2] = 0; glg[2] = 0 }
    :: atomic { fk != 0 && now < MAXT ->              /* the fence key expired or flushed, */
        fk = 0; fko = 0; now++ }                      /* which takes more than a tick */
#if FAULT == 1
    :: atomic { faults < MAXFAULTS && now < MAXT ->   /* restart keeping its data */
        faults++; drop_conns(); now++ }
#elif FAULT == 2
    :: atomic { faults < MAXFAULTS && now < MAXT ->   /* restart without its data */
        faults++; drop_conns(); wipe(); now++;
#ifdef NOGUARD
        gen++
#endif
        }
#elif FAULT == 3
    :: atomic { !snapped -> snapped = 1; snap_copy(1) }
    :: atomic { faults < MAXFAULTS && snapped && now < MAXT -> /* from an older snapshot */
        faults++; drop_conns(); snap_copy(0); now++; gen++ }
#elif FAULT == 4
    :: atomic { faults < MAXFAULTS ->                 /* dlock break (reset.lua) */
        faults++; owner = 0; lexp = 0; lfence = 0; lfo = 0; wmark = 0; qlen = 0;
        i = 0;
        do
        :: i <= NC -> rexp[i] = 0; wexp[i] = 0; if :: i < NC -> q[i] = 0 :: else fi; i++
        :: else -> break
        od;
        gen++ }
#endif
#endif
    od
}

#ifndef LIVE
active proctype clock() {
end:
    do
    :: atomic { now < MAXT -> now++ }
    od
}
#endif

/* what a client keeps of a hold or a wait goes with it (fewer states) */
inline forget(c) {
    cv[c] = 0; dl[c] = 0; cf[c] = 0; hg[c] = 0; floor[c] = 0; wsent[c] = 0; tans[c] = 0; cbase[c] = 0; nloc[c] = 0
}

inline send(c, o) {
    req[c] = o; rsent[c] = now; consumed(c)
}

inline begin(c, f, o, gg, d) {
    /* the fence was issued to this client; not so of a read hold's
     * {2, GET fence or '1'} (README, "Findings") */
    assert(o == c || kind[c] == READ);
    ph[c] = HOLD; cf[c] = f; hg[c] = gg; dl[c] = d;
    cbase[c] = f; tans[c] = now; nloc[c] = 0
}

inline acquire_op(c) {
    if
    :: kind[c] == READ -> send(c, ACQS)
    :: else -> send(c, ACQ)
    fi;
    ph[c] = SENT
}

proctype client(byte me) {
    byte n = 0, rounds = ROUNDS2;
    if :: me == 1 -> rounds = ROUNDS1 :: else fi;
end:
    do
    :: atomic { ph[me] == IDLE && n < rounds ->
        n++;
#ifdef LIVE
        kind[me] = FAIR;
#else
        if
        :: me == 1 && K1 != 0 -> kind[me] = K1
        :: me == 2 && K2 != 0 -> kind[me] = K2
        :: else ->
            if
            :: kind[me] = PLAIN
            :: kind[me] = FAIR
            :: kind[me] = CACHE
            :: kind[me] = READ
            fi
        fi;
#endif
        acquire_op(me) }
    /* the acquire's answer */
    :: atomic { ph[me] == SENT && ans[me] == A_GOT ->
        if
        :: now < rsent[me] + L -> begin(me, ansf[me], anso[me], ansg[me], rsent[me] + L); consumed(me)
        :: else -> acquire_op(me)        /* its lease ran out on the way: again */
        fi }
    :: atomic { ph[me] == SENT && ans[me] == A_WAIT ->
        floor[me] = ansf[me]; wsent[me] = rsent[me]; consumed(me);
        if
        :: kind[me] == FAIR -> ph[me] = WAITQ
        :: else -> ph[me] = BUSY
        fi }
    :: atomic { ph[me] == SENT && ans[me] == 0 && now >= rsent[me] + L ->  /* no answer in time */
        if
        :: acquire_op(me)                /* asked again */
        :: kind[me] != READ -> send(me, WDR); ph[me] = IDLE; forget(me)    /* gives up */
        :: kind[me] == READ -> ph[me] = IDLE; forget(me)
        fi }
    /* waiting: a plain waiter retries at a "released" (or the holder's
     * expiry); a fair one waits for its grant in BLPOP, or asks again at
     * its wait's end */
    :: atomic { ph[me] == BUSY -> acquire_op(me) }
    :: atomic { ph[me] == BUSY && kind[me] != READ -> send(me, WDR); ph[me] = IDLE; forget(me) }
    :: atomic { ph[me] == WAITQ && gl[me] != 0 && glexp[me] > now ->  /* BLPOP */
        f = gl[me]; o = me; gl[me] = 0;
        if
        :: floor[me] != 0 && f > floor[me] && now < wsent[me] + G ->   /* granted() */
            begin(me, f, o, glg[me], wsent[me] + G)
        :: else -> acquire_op(me)        /* confirmed by an acquire */
        fi;
        glexp[me] = 0; glg[me] = 0 }
#ifndef LIVE
    :: atomic { ph[me] == WAITQ && now >= wsent[me] + L -> acquire_op(me) }
    :: atomic { ph[me] == WAITQ && now >= wsent[me] + L -> send(me, WDR); ph[me] = IDLE; forget(me) }
#endif
    /* holding */
    :: atomic { ph[me] == HOLD && now >= dl[me] -> ph[me] = IDLE; forget(me) }     /* lease ran out */
    :: atomic { ph[me] == HOLD && !cv[me] && ans[me] == A_OK ->       /* renewed */
        if :: rsent[me] + L > dl[me] -> dl[me] = rsent[me] + L :: else fi;
        hg[me] = ansg[me]; consumed(me) }
    :: atomic { ph[me] == HOLD && !cv[me] && ans[me] == A_NO -> consumed(me); ph[me] = IDLE; forget(me) }  /* refused: lost */
#ifdef CONV
    /* conversion (core/convert.c): a reader upgrades, a plain writer
     * downgrades; from its downgrade call on, the caller counts as a
     * reader (it no longer writes) */
    :: atomic { ph[me] == HOLD && !cv[me] && req[me] == 0 && ans[me] == 0 && now < dl[me] &&
                (kind[me] == READ || kind[me] == PLAIN) && ncv[me] < NCONV ->
        ncv[me]++;
        if
        :: kind[me] == READ -> send(me, CONVU)
        :: else -> send(me, CONVD); kind[me] = READ
        fi;
        cv[me] = 1 }
    :: atomic { ph[me] == HOLD && cv[me] && ans[me] == A_GOT ->        /* upgraded: become_writer */
        assert(anso[me] == me);
        kind[me] = PLAIN; cf[me] = ansf[me]; dl[me] = rsent[me] + L; hg[me] = ansg[me];
        cv[me] = 0; consumed(me) }
    :: atomic { ph[me] == HOLD && cv[me] && ans[me] == A_OK ->         /* downgraded: become_reader */
        dl[me] = rsent[me] + L; hg[me] = ansg[me]; cv[me] = 0; consumed(me) }
    :: atomic { ph[me] == HOLD && cv[me] && ans[me] == A_WAIT -> cv[me] = 0; consumed(me) }  /* still reads */
    :: atomic { ph[me] == HOLD && cv[me] && ans[me] == A_NO -> consumed(me); ph[me] = IDLE; forget(me) }
    :: atomic { ph[me] == HOLD && cv[me] && ans[me] == 0 && now >= rsent[me] + L ->  /* no answer: given up */
        ph[me] = IDLE; forget(me) }
#endif
#ifndef LIVE
    :: atomic { ph[me] == HOLD && !cv[me] && req[me] == 0 && now < dl[me] ->
        if
        :: kind[me] == READ -> send(me, RENS)
        :: else -> send(me, REN)
        fi }
    :: atomic { ph[me] == HOLD && kind[me] == CACHE && nloc[me] < NLOC && now < dl[me] ->
        /* a local hold: max(last + 1, issued + elapsed - drift), waiting
         * while last + 1 is ahead of that */
        f = cbase[me] + (now - tans[me]) * (S - 1);
        if :: f >= now * S -> f = now * S - 1 :: else fi;   /* a tick: see README */
        if
        :: f > cf[me] -> nloc[me]++; cf[me] = f;
            if
            :: hg[me] == gen -> assert(f > maxf); maxf = f
            :: else         /* cut off: below the new holder's, as fencing wants */
            fi
        :: else
        fi }
    :: atomic { (ph[me] == HOLD || ph[me] == WAITQ) ->                /* crash */
        ph[me] = DEAD; crashed[me] = 1; lastproc[me] = now; forget(me) }
#endif
    :: atomic { ph[me] == HOLD && !cv[me] ->                          /* unlock */
        if
        :: kind[me] == READ -> send(me, RELS)
        :: else -> send(me, REL)
        fi;
        ph[me] = IDLE; forget(me) }
    :: ph[me] == DEAD -> break
    od
}

init {
    atomic { run client(1); run client(2) }
}
