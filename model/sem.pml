/* sem.pml -- the semaphore protocol of src/backend/lua/ (sem.lua:
 * take, withdraw, post, renew, return, its clean-up and its `done`
 * record) and of its client (src/core/sem.c), for SPIN.  model/README.md
 * maps the actions to the lines they stand for.
 *
 *   spin -search -a -ltl units sem.pml
 *
 * Two clients share a semaphore of N units.  Each takes a unit ROUNDS
 * times, with or without undo (a leased unit, chosen anew each round),
 * waits in the queue when none is free, and gives its unit back (post,
 * or return for a leased one), or crashes.  Requests and answers can be
 * lost; a request whose answer was lost is sent again with its first
 * sending's op number, as dlock__command does. */

#define NC 2
#define N 1                  /* units */
#ifndef ROUNDS
#define ROUNDS 1
#endif
#ifndef MAXT
#define MAXT 4
#endif
#define TTL 2                /* a waiter's registration / a grant's time to take it */
#define LEASE 2              /* an undo unit's lease */

#define TAKE 1
#define WDR 2
#define POST 3
#define REN 4
#define RET 5

#define IDLE 0
#define SENT 1               /* a take sent */
#define QUEUED 2             /* told to wait: waits for its grant */
#define HOLD 3
#define DEAD 4

/* sem.lua's keys */
byte v = N;                  /* value */
byte q[NC]; byte qlen;       /* queue (tickets in order) */
byte sx[NC + 1];             /* expiry zset: a waiter's registration, a grant's time */
bool granted[NC + 1];        /* granted: handed a unit, not yet taken */
byte lx[NC + 1];             /* leases: an undo unit's lease end (0: none) */
byte done[NC + 1];           /* done: the caller's last op number that moved a unit */
bool gl[NC + 1];             /* grant list: "1:TTL" pushed */

byte now = 1;
byte ph[NC + 1];
bool undo[NC + 1];
byte req[NC + 1];            /* op in flight */
byte rseq[NC + 1];           /* its op number */
byte rsent[NC + 1];
byte ans[NC + 1];            /* 0 none, 1 + the answer */
byte seq[NC + 1];            /* the caller's op numbers */
byte dl[NC + 1];             /* an undo unit's validity end, the client's view */
bool crashed[NC + 1];

hidden byte c, op, s, h, i, j, res;

/* a client holds a unit it may use */
#define UV(c) (ph[c] == HOLD && (!undo[c] || now < dl[c]))
#define HOLDERS (UV(1) + UV(2))
/* units out, as the server counts them: neither free nor handed out untaken */
#define GRANTED (granted[1] + granted[2])
ltl units { [] (HOLDERS <= N && HOLDERS + v + GRANTED <= N) }

inline qpop() {
    i = 1;
    do
    :: i < qlen -> q[i - 1] = q[i]; i++
    :: else -> break
    od;
    qlen--; q[qlen] = 0
}

inline qremove(x) {
    j = 0;
    do
    :: j < qlen && q[j] != x -> j++
    :: j < qlen && q[j] == x ->
        do
        :: j + 1 < qlen -> q[j] = q[j + 1]; j++
        :: else -> break
        od;
        qlen--; q[qlen] = 0; break
    :: j >= qlen -> break
    od
}

inline inq(x, r) {
    r = 0; j = 0;
    do
    :: j < qlen -> if :: q[j] == x -> r = 1 :: else fi; j++
    :: else -> break
    od
}

/* give(): a unit to the queue's head, or back to the value */
inline give() {
    if
    :: qlen == 0 -> v++
    :: else -> h = q[0]; qpop(); granted[h] = 1; sx[h] = now + TTL;
        if :: h != c || (op != TAKE && op != WDR) -> gl[h] = 1 :: else fi
    fi
}

inline leased() {
    if :: undo[c] -> lx[c] = now + LEASE :: else fi
}

/* the clean-up every op but init does first */
inline cleanup() {
    s = 0; i = 1;
    do
    :: i <= NC ->
        if
        :: sx[i] != 0 && sx[i] <= now ->
            sx[i] = 0; qremove(i);
            if :: granted[i] -> granted[i] = 0; s++ :: else fi
        :: else
        fi;
        if :: lx[i] != 0 && lx[i] <= now -> lx[i] = 0; s++ :: else fi;
        i++
    :: else -> break
    od;
    do
    :: s > 0 -> give(); s--
    :: else -> break
    od;
    do
    :: v > 0 && qlen > 0 -> v--; give()
    :: else -> break
    od
}

inline serve(c) {
    op = req[c]; req[c] = 0; res = 0;
    if
    :: (op == TAKE || op == WDR || op == POST || op == RET) && rseq[c] == done[c] -> res = 1  /* asked again */
    :: (op == TAKE || op == WDR || op == POST || op == RET) && rseq[c] < done[c] -> res = 0   /* a stale copy */
    :: else ->
        cleanup();
        if
        :: op == TAKE ->
            if
            :: granted[c] -> granted[c] = 0; sx[c] = 0; res = 1
            :: !granted[c] && v > 0 -> v--; res = 1
            :: !granted[c] && v == 0 ->
                inq(c, s);
                if :: !s -> q[qlen] = c; qlen++ :: else fi;
                sx[c] = now + TTL
            fi;
            if :: res == 1 -> leased() :: else fi
        :: op == WDR ->
            res = granted[c]; granted[c] = 0; gl[c] = 0; qremove(c); sx[c] = 0;
            if :: res == 1 -> leased() :: else fi
        :: op == POST ->
            if
            :: qlen > 0 -> give(); res = 1
            :: qlen == 0 && v < N -> v++; res = 1
            :: else
            fi
        :: op == REN -> if :: lx[c] != 0 -> lx[c] = now + LEASE; res = 1 :: else fi
        :: op == RET ->
            if
            :: lx[c] != 0 -> lx[c] = 0; give(); res = 1
            :: else -> res = 2
            fi
        fi;
        if :: res == 1 && op != REN -> done[c] = rseq[c] :: else fi
    fi;
    if
    :: ans[c] = res + 1
    :: skip                         /* the answer is lost */
    fi
}

active proctype server() {
end:
    do
    :: atomic { req[1] != 0 -> c = 1; serve(c) }
    :: atomic { req[2] != 0 -> c = 2; serve(c) }
    :: atomic { req[1] != 0 -> req[1] = 0 }          /* a request lost */
    :: atomic { req[2] != 0 -> req[2] = 0 }
    od
}

active proctype clock() {
end:
    do
    :: atomic { now < MAXT -> now++ }
    od
}

inline send(c, o, sq) {
    req[c] = o; rseq[c] = sq; rsent[c] = now; ans[c] = 0
}

proctype client(byte me) {
    byte n = 0;
end:
    do
    :: atomic { ph[me] == IDLE && n < ROUNDS ->
        n++; seq[me]++;
        if :: undo[me] = 0 :: undo[me] = 1 fi;
        send(me, TAKE, seq[me]); ph[me] = SENT }
    :: atomic { ph[me] == SENT && ans[me] == 2 ->            /* taken */
        ans[me] = 0;
        if
        :: !undo[me] -> ph[me] = HOLD
        :: undo[me] && now < rsent[me] + LEASE -> ph[me] = HOLD; dl[me] = rsent[me] + LEASE
        :: undo[me] && now >= rsent[me] + LEASE -> ph[me] = IDLE   /* its lease ran out on the way */
        fi }
    :: atomic { ph[me] == SENT && ans[me] == 1 -> ans[me] = 0; ph[me] = QUEUED }
    :: atomic { ph[me] == SENT && ans[me] == 0 && req[me] == 0 ->   /* no answer: asked again, */
        req[me] = TAKE }                                        /* valid from its first sending */
    /* the call's next attempts: a take that claims its grant, or refreshes
     * its registration (the same call: its op number moved no unit) */
    :: atomic { ph[me] == QUEUED && gl[me] -> gl[me] = 0; send(me, TAKE, seq[me]); ph[me] = SENT }
    :: atomic { ph[me] == QUEUED && now >= rsent[me] + TTL - 1 -> send(me, TAKE, seq[me]); ph[me] = SENT }
    :: atomic { ph[me] == QUEUED -> seq[me]++; send(me, WDR, seq[me]); ph[me] = IDLE }  /* gives up */
    /* holding */
    :: atomic { ph[me] == HOLD && undo[me] && now >= dl[me] -> ph[me] = IDLE; dl[me] = 0 }  /* lost */
    :: atomic { ph[me] == HOLD && undo[me] && req[me] == 0 && now < dl[me] -> send(me, REN, seq[me]) }
    :: atomic { ph[me] == HOLD && undo[me] && ans[me] == 2 ->
        ans[me] = 0; if :: rsent[me] + LEASE > dl[me] -> dl[me] = rsent[me] + LEASE :: else fi }
    :: atomic { ph[me] == HOLD && undo[me] && ans[me] == 1 -> ans[me] = 0; ph[me] = IDLE; dl[me] = 0 }
    :: atomic { ph[me] == HOLD ->                                  /* gives it back */
        seq[me]++;
        if :: undo[me] -> send(me, RET, seq[me]) :: else -> send(me, POST, seq[me]) fi;
        ph[me] = IDLE; dl[me] = 0 }
    :: atomic { ph[me] != DEAD -> ph[me] = DEAD; crashed[me] = 1; dl[me] = 0 }
    :: ph[me] == DEAD -> break
    od
}

init {
    atomic { run client(1); run client(2) }
}
