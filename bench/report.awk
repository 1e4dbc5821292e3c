# report.awk -- turns bench/results/results.csv (key,value,unit) into the
# results table of bench/README.md: every dlock figure next to its floor or
# its peer from the same run, the ratio, its target (bench/README.md,
# "Targets") and whether it was met.  Usage: awk -f report.awk [-v smoke=1] results.csv
BEGIN { FS = "," }
{ v[$1] = $2; have[$1] = 1 }

function g(k) { return (k in have) ? v[k] + 0 : -1 }
function f(x, d) { if (x < 0) return "n/a"; return sprintf("%." d "f", x) }
function verdict(ok) { return ok ? "MET" : "MISSED" }
function fk(v) { return (v < 0) ? "n/a" : sprintf("%.1fk", v / 1000) }
function x(a, b, d) { return (a >= 0 && b > 0) ? f(a / b, d) "x" : "n/a" }
function verdict2(have_it, ok) { return have_it ? verdict(ok) : "n/a" }
function row(n, what, dl, ref, ratio, target, verd) {
    printf "| %s | %s | %s | %s | %s | %s | %s |\n", n, what, dl, ref, ratio, target, verd
}

END {
    rt = g("floor.ping_p50_us")
    raw = g("floor.raw_pair_per_s")
    print "| # | measure | dlock | floor / peers (same run) | ratio | target | verdict |"
    print "|---|---|---|---|---|---|---|"
    row("1", "PING round trip, p50 (p10-p90)", "", f(rt, 1) " us (" f(g("floor.ping_p10_us"), 0) "-" f(g("floor.ping_p90_us"), 0) ")", "", "floor", "")
    row("1", "raw hiredis SET NX PX + EVALSHA del pair", "",
        f(raw, 0) " pairs/s, p50 " f(g("floor.raw_pair_p50_us"), 1) " us = " f(g("floor.raw_pair_rt"), 2) " RT; server " f(g("floor.raw_pair_server_us"), 1) " us", "", "floor", "")
    split("lock_unlock trylock_unlock timedlock_unlock", ks, " ")
    split("lock+unlock trylock+unlock timedlock+unlock", kn, " ")
    for (i = 1; i <= 3; i++) {
        k = "seq." ks[i]
        r = g(k "_vs_raw")
        row("2", kn[i] " pairs/s, 1 thread, free lock",
            f(g(k "_per_s"), 0) " (p50 " f(g(k "_p50_us"), 1) " us = " f(g(k "_rt"), 2) " RT; " f(g(k "_server_reqs"), 1) " req; server " f(g(k "_server_us"), 1) " us)",
            "raw pair " f(raw, 0), f(r, 2) "x (p50: " f(g(k "_vs_raw_p50"), 2) "x)", ">= 0.9x raw", verdict(r >= 0.9))
    }
    rec = g("seq.recursive_pair_ns"); rc = g("seq.recursive_client_cmds")
    # requests counted in the whole process: the live figures' flush (once
    # a second, the renewal thread's) may land in the loop
    row("3", "recursive relock+unlock by the holder", f(rec, 0) " ns, " f(rc * 1e6, 1) " requests per 10^6 pairs (the process's)", "PING " f(rt * 1000, 0) " ns", "", "no round trip", verdict(rc < 1e-5 && rec < rt * 1000 / 10))

    # 4, 5: the default mutex, then the fair one, of each shape
    split("dlock_proc dlock_fair_proc dlock_thread dlock_fair_thread", cp, " ")
    split("4 processes|4 processes, FAIR|4 threads, 1 process|4 threads, 1 process, FAIR", cw, "|")
    for (m = 1; m <= 4; m++) {
        p = "contend." cp[m]
        what = cw[m]
        n = (m <= 2) ? "4" : "5"
        fair = (m % 2 == 0)
        if (!((p ".acq_per_s") in have)) continue
        r = g(p ".vs_ideal")
        row(n, what ", 1 ms hold: acquisitions/s", f(g(p ".acq_per_s"), 0), "ideal 1/(hold+2RT) = " f(g(p ".ideal_per_s"), 0), f(r, 2) "x", ">= 0.9x ideal", verdict(r >= 0.9))
        h50 = g(p ".handoff_p50_rt")
        row(n, what ": handoff p50 (release issued -> next holder)", f(g(p ".handoff_p50_us"), 0) " us = " f(h50, 1) " RT",
            "", "", "<= 3 RT", verdict(h50 >= 0 && h50 <= 3))
        h99 = g(p ".handoff_p99_us")
        row(n, what ": handoff p99 / max", f(h99, 0) " us / " f(g(p ".handoff_max_us"), 0) " us", "", "", "p99 <= 1 ms", verdict(h99 >= 0 && h99 <= 1000))
        row(n, what ": direct handoff p50/p99 (next holder right after the release)",
            f(g(p ".direct_handoff_p50_us"), 0) " / " f(g(p ".direct_handoff_p99_us"), 0) " us", "", "", "reported", "")
        row(n, what ": longest wait; p99 wait; releaser re-takes it; requests/acq",
            f(g(p ".max_wait_ms"), 1) " ms; " f(g(p ".wait_p99_ms"), 1) " ms; " f(g(p ".self_reacquire_share") * 100, 0) "%; " f(g(p ".server_reqs_per_acq"), 2),
            "", "", "reported", "")
        ov = g(p ".max_overtaken"); ob = g(p ".overtaken_bound_fifo")
        row(n, what ": most acquisitions by others during one wait (after warm-up); longest run by one worker; acquisitions per worker (min-max)",
            f(ov, 0) " (" f(g(p ".max_overtaken_steady"), 0) "); " f(g(p ".longest_run_one_worker"), 0) "; " f(g(p ".acq_per_worker_min"), 0) "-" f(g(p ".acq_per_worker_max"), 0),
            "FIFO bound: " f(ob, 0) " (workers - 1)", "", fair ? "<= workers - 1 (FIFO)" : "reported", fair ? verdict(ov >= 0 && ob >= 0 && ov <= ob) : "")
    }
    split("dlock_ dlock_fair_", tp, " ")
    for (m = 1; m <= 2; m++) {
        hp = g("contend." tp[m] "proc.handoff_p50_us"); ht = g("contend." tp[m] "thread.handoff_p50_us")
        if (ht < 0 || hp < 0) continue
        row("5", "thread handoff vs process handoff (p50)" (m == 2 ? ", FAIR" : ""), f(ht, 0) " us vs " f(hp, 0) " us", "", (hp > 0) ? f(ht / hp, 2) "x" : "n/a", "threads <= processes", verdict(ht >= 0 && hp > 0 && ht <= hp))
        # the target's words: no more round trips. Requests per acquisition
        # (INFO commandstats), to one decimal: each is a round trip.
        qt = g("contend." tp[m] "thread.server_reqs_per_acq"); qp = g("contend." tp[m] "proc.server_reqs_per_acq")
        if (qt < 0 || qp < 0) continue
        row("5", "thread vs process: server requests (round trips) per acquisition; handoff p50 in RT" (m == 2 ? ", FAIR" : ""),
            f(qt, 2) " vs " f(qp, 2) "; " ((rt > 0) ? f(ht / rt, 1) " RT vs " f(hp / rt, 1) " RT" : "n/a"), "", "",
            "threads <= processes in round trips", verdict(sprintf("%.1f", qt) + 0 <= sprintf("%.1f", qp) + 0))
    }
    # the fair mode against the default one, same run
    for (m = 1; m <= 2; m++) {
        pd = "contend." tp[1] (m == 1 ? "proc" : "thread"); pf = "contend." tp[2] (m == 1 ? "proc" : "thread")
        if (!((pf ".max_wait_ms") in have) || !((pd ".max_wait_ms") in have)) continue
        wd = g(pd ".max_wait_ms"); wf = g(pf ".max_wait_ms")
        row(m == 1 ? "4" : "5", "FAIR vs default, " (m == 1 ? "4 processes" : "4 threads") ": longest wait (most overtaken); acquisitions/s; handoff p50",
            f(wf, 1) " ms (" f(g(pf ".max_overtaken"), 0) "); " f(g(pf ".acq_per_s"), 0) "; " f(g(pf ".handoff_p50_us"), 0) " us",
            "default: " f(wd, 1) " ms (" f(g(pd ".max_overtaken"), 0) "); " f(g(pd ".acq_per_s"), 0) "; " f(g(pd ".handoff_p50_us"), 0) " us",
            (wd > 0) ? f(wf / wd, 2) "x" : "n/a", "bounded (FIFO)", verdict(g(pf ".max_overtaken") >= 0 && g(pf ".max_overtaken") <= g(pf ".overtaken_bound_fifo")))
    }

    # waiters: the largest and the smallest multi-process point, default then fair
    split("waiters waiters_fair", wp, " ")
    for (m = 1; m <= 2; m++) {
        q = wp[m]; fw = (m == 2) ? ", FAIR" : ""
        wmax = 0; wmin = 0
        for (k in have) if (k ~ ("^" q "\\.[0-9]+\\.server_reqs_per_acq$")) {
            split(k, a, "."); w = a[2] + 0
            if (w > wmax) wmax = w
            if (w >= 4 && (wmin == 0 || w < wmin)) wmin = w
        }
        if (wmax == 0) continue
        rq = g(q "." wmax ".server_reqs_per_acq"); rq0 = g(q "." wmin ".server_reqs_per_acq")
        row("6", wmax " waiters in 4 processes" fw ": server requests/acq (client commands/acq)",
            f(rq, 2) " (" f(g(q "." wmax ".client_cmds_per_acq"), 2) ")", wmin " waiters: " f(rq0, 2), "",
            "<= 4, not growing", verdict(rq >= 0 && rq <= 4 && rq <= rq0 * 1.25 + 0.25))
        row("6", wmax " waiters" fw ": acquisitions/s; handoff p50/p99; longest wait (most overtaken; after warm-up)",
            f(g(q "." wmax ".acq_per_s"), 0) "; " f(g(q "." wmax ".handoff_p50_us"), 0) "/" f(g(q "." wmax ".handoff_p99_us"), 0) " us; " f(g(q "." wmax ".max_wait_ms"), 0) " ms (" f(g(q "." wmax ".max_overtaken"), 0) "; after warm-up " f(g(q "." wmax ".max_overtaken_steady"), 0) ")",
            "ideal " f(g(q "." wmax ".ideal_per_s"), 0) "; FIFO bound " f(g(q "." wmax ".overtaken_bound_fifo"), 0), f(g(q "." wmax ".vs_ideal"), 2) "x", "reported", "")
    }

    nl = g("renew.locks")
    rtp = g("renew.round_trips_per_period")
    row("7", f(nl, 0) " locks held: renewal round trips per lease period (renewals)",
        f(rtp, 1) " RT (" f(g("renew.renewals_per_period"), 0) ")", "one RT per renewal: " f(g("renew.one_rt_per_lock_would_be"), 0) " RT", "",
        "grows with batches", verdict(rtp >= 0 && rtp <= nl * 3 / 100))
    row("7", "renewal CPU per lease period (" f(g("renew.lease_ms"), 0) " ms lease)",
        "client " f(g("renew.client_cpu_ms_per_period"), 1) " ms, server " f(g("renew.server_cpu_ms_per_period"), 1) " ms", "", "", "reported", (g("renew.lost") == 0) ? "" : "LOCKS LOST")
    row("8", "memory per held lock", "client " f(g("renew.mem.client_bytes_per_held_lock"), 0) " B (" f(g("renew.mem.client_bytes_per_hold_only"), 0) " B for the hold)",
        "server " f(g("renew.mem.server_bytes_per_lock"), 0) " B (MEMORY USAGE: lock " f(g("renew.mem.server_memory_usage_lock_key"), 0) " + fence " f(g("renew.mem.server_memory_usage_fence_key"), 0) ")", "", "reported", "")

    if ("seq.redlock.pair_per_s" in have || "seq.redispy.pair_per_s" in have) {
        dl = g("seq.lock_unlock_per_s")
        split("redlock redispy", ps, " ")
        split("node-redlock+ioredis|redis-py Lock", pn, "|")
        for (i = 1; i <= 2; i++) {
            pr = g("seq." ps[i] ".pair_per_s")
            row("9", "sequential pair vs " pn[i], f(dl, 0) " pairs/s", f(pr, 0) " pairs/s (p50 " f(g("seq." ps[i] ".pair_p50_us"), 0) " us)", (pr > 0) ? f(dl / pr, 2) "x" : "n/a", "reported", "")
        }
    }
    split("dlock_proc poll_1ms redlock redispy", cs, " ")
    split("dlock (4 procs)|naive 1 ms poll (C)|node-redlock defaults|redis-py Lock defaults", cn, "|")
    for (i = 2; i <= 4; i++) {
        p = "contend." cs[i]
        if (!((p ".acq_per_s") in have)) continue
        row("9", "contended, 4 procs, 1 ms hold: " cn[i],
            f(g("contend.dlock_proc.acq_per_s"), 0) "/s, handoff p50/p99 " f(g("contend.dlock_proc.handoff_p50_us"), 0) "/" f(g("contend.dlock_proc.handoff_p99_us"), 0) " us, max wait " f(g("contend.dlock_proc.max_wait_ms"), 0) " ms",
            f(g(p ".acq_per_s"), 0) "/s, handoff p50/p99 " f(g(p ".handoff_p50_us"), 0) "/" f(g(p ".handoff_p99_us"), 0) " us, max wait " f(g(p ".max_wait_ms"), 0) " ms, " f(g(p ".server_reqs_per_acq"), 1) " req/acq",
            (g(p ".acq_per_s") > 0) ? f(g("contend.dlock_proc.acq_per_s") / g(p ".acq_per_s"), 2) "x" : "n/a", "reported", "")
    }
    # 10: lock caching, from `dlock-bench cache`
    if ("cache.caching_lock_unlock_ns" in have) {
        pt = g("cache.pthread_pair_ns")
        row("10", "pthread_mutex_lock+unlock, 1 thread, same program (the pthread floor)", "",
            f(pt, 1) " ns/pair (" f(g("cache.pthread_pair_per_s") / 1e6, 1) " M pairs/s)", "", "floor", "")
        pl = g("cache.plain_lock_unlock_ns")
        row("10", "lock+unlock, default (non-caching) mutex, in the same rounds",
            f(g("cache.plain_lock_unlock_per_s"), 0) " pairs/s (" f(pl / 1000, 1) " us = " f(g("cache.plain_lock_unlock_rt"), 2) " RT of the PING in the same rounds, " f(g("cache.ping_local_p50_us"), 1) " us; " f(g("cache.plain_lock_unlock_server_reqs"), 1) " req)",
            "raw pair (1) " f(raw, 0) " pairs/s; pthread " f(pt, 1) " ns", (pt > 0) ? f(pl / pt, 0) "x pthread" : "n/a", "reported", "")
        split("caching_lock_unlock caching_trylock_unlock", ck, " ")
        split("lock+unlock|trylock+unlock", cn2, "|")
        for (i = 1; i <= 2; i++) {
            k = "cache." ck[i]
            ns = g(k "_ns")
            row("10", "CACHING " cn2[i] ", 1 thread, after warm-up (" f(g(k "_pairs") / 1e6, 1) " M pairs)",
                f(g(k "_per_s") / 1e6, 2) " M pairs/s = " f(ns, 0) " ns/pair (rounds " f(g(k "_min_ns"), 0) "-" f(g(k "_max_ns"), 0) "); " f(g(k "_server_reqs"), 6) " req/pair",
                "pthread " f(pt, 1) " ns; default " f(pl / 1000, 1) " us",
                ((pt > 0) ? f(ns / pt, 1) "x pthread" : "n/a") "; " ((ns > 0) ? f(pl / ns, 0) "x faster than default" : "n/a"),
                "caching pair <= 1 us (well under)", verdict(ns > 0 && ns <= 1000))
        }
        row("10", "CACHING lock+unlock, each pair timed: p50 / p99 / max (incl. one clock read, " f(g("cache.clock_read_ns"), 0) " ns)",
            f(g("cache.caching_pair_timed_p50_ns"), 0) " / " f(g("cache.caching_pair_timed_p99_ns"), 0) " ns / " f(g("cache.caching_pair_timed_max_us"), 1) " us", "", "", "reported", "")
        # Local holds make no request: their fences follow the server's
        # clock (docs/fencing.md), nothing runs out; requests per 2^20 pairs
        # are kept as the figure (at most 2.5: none per pair).
        cr = g("cache.caching_server_reqs_total") + g("cache.after_warmup_server_reqs")
        cpairs = g("cache.caching_lock_unlock_pairs") + g("cache.caching_trylock_unlock_pairs") + g("cache.after_warmup_pairs")
        blk = (cpairs > 0) ? cr / cpairs * 1048576 : -1
        row("10", "CACHING: server requests made by the local pairs after warm-up (all rounds)",
            f(cr, 0) " requests in " f(cpairs / 1e6, 2) " M pairs = " f(blk, 2) " per 2^20 pairs", "local fences follow the server's clock: no block to refill", "",
            "no round trip per pair", verdict(blk >= 0 && blk <= 2.5))
        row("10", "CACHING warm-up: first pair kept local; requests before it",
            "the pair numbered " f(g("cache.warmup_first_local_pair"), 0) ", " f(g("cache.warmup_first_local_ms"), 2) " ms after the first lock; " f(g("cache.warmup_server_reqs"), 0) " requests", "", "", "reported", "")
        split("alt free", pm, " ")
        split("strict alternation|free, both contending", pmn, "|")
        for (i = 1; i <= 2; i++) {
            c = "cache.pp_" pm[i] "_caching"; p = "cache.pp_" pm[i] "_plain"
            if (!((c ".acq_per_s") in have)) continue
            hc = g(c ".handoff_p50_us"); hpl = g(p ".handoff_p50_us")
            if (pm[i] == "alt") {
                row("10", "ping-pong, 2 processes, " pmn[i] ", CACHING: handoffs/s; handoff p50/p99 (release -> other process holds)",
                    f(g(c ".acq_per_s"), 0) "/s; " f(hc, 0) "/" f(g(c ".handoff_p99_us"), 0) " us = " f(g(c ".handoff_p50_rt"), 1) "/" f(g(c ".handoff_p99_rt"), 1) " RT",
                    "plain mutex: " f(g(p ".acq_per_s"), 0) "/s; " f(hpl, 0) "/" f(g(p ".handoff_p99_us"), 0) " us = " f(g(p ".handoff_p50_rt"), 1) "/" f(g(p ".handoff_p99_rt"), 1) " RT (RT = PING of 1; PING just before: caching run " f(g(c ".ping_local_p50_us"), 0) " us, plain run " f(g(p ".ping_local_p50_us"), 0) " us)",
                    (hpl > 0) ? f(hc / hpl, 2) "x (p50)" : "n/a", "reported", "")
                row("10", "ping-pong, " pmn[i] ": requests/acq (INFO commandstats); lock call p50; unlock call p50",
                    "CACHING: " f(g(c ".server_reqs_per_acq"), 2) "; " f(g(c ".lock_p50_us"), 0) " us; " f(g(c ".unlock_call_p50_us"), 2) " us",
                    "plain: " f(g(p ".server_reqs_per_acq"), 2) "; " f(g(p ".lock_p50_us"), 0) " us; " f(g(p ".unlock_call_p50_us"), 1) " us", "", "reported", "")
            } else {
                row("10", "ping-pong, 2 processes, " pmn[i] ", CACHING: acquisitions/s; longest run by one process; handoff p50/p99; direct handoff p50; longest wait",
                    f(g(c ".acq_per_s"), 0) "/s; " f(g(c ".longest_run_one_worker"), 0) "; " f(hc, 0) "/" f(g(c ".handoff_p99_us"), 0) " us; " f(g(c ".direct_handoff_p50_us"), 0) " us; " f(g(c ".max_wait_ms"), 1) " ms",
                    (((p ".acq_per_s") in have) ? "plain: " f(g(p ".acq_per_s"), 0) "/s; " f(g(p ".longest_run_one_worker"), 0) "; " f(hpl, 0) "/" f(g(p ".handoff_p99_us"), 0) " us; " f(g(p ".direct_handoff_p50_us"), 0) " us; " f(g(p ".max_wait_ms"), 1) " ms" : ""),
                    "", "reported", "")
                row("10", "ping-pong, " pmn[i] ": requests/acq (INFO commandstats)",
                    "CACHING: " f(g(c ".server_reqs_per_acq"), 4), (((p ".acq_per_s") in have) ? "plain: " f(g(p ".server_reqs_per_acq"), 2) : ""), "", "reported", "")
            }
        }
        bad = 0; runs = 0; acqs = 0
        for (k in have) if (k ~ /^cache\.pp_.*\.(counter_mismatch|fence_violations|exclusion_violations|timestamp_overlaps|errors)$/) { if (v[k] + 0 > 0) bad++; if (k ~ /errors$/) runs++ }
        for (k in have) if (k ~ /^cache\.pp_.*\.acquisitions$/) acqs += v[k]
        row("10", "ping-pong: mutual exclusion (shared counter, overlaps, fences in order), all runs",
            runs " runs, " acqs " acquisitions: " ((bad == 0) ? "no violation" : bad " violation rows"), "", "", "must hold", (bad == 0) ? "MET" : "BROKEN")
    }
    server_work()
    if ("redlock.pair_us" in have) {
        row("12", "Redlock (3 masters) lock+unlock, 1 thread, free lock: p50 per pair",
            f(g("redlock.pair_us"), 1) " us", "one server " f(g("redlock.single_pair_us"), 1) " us", f(g("redlock.pair_vs_single"), 2) "x", "report", "")
        row("12", "Redlock, 4 processes, 1 ms hold: acquisitions/s; longest wait",
            f(g("redlock.rl_contend_acq_per_s"), 0) "; " f(g("redlock.rl_contend_max_wait_ms"), 1) " ms",
            "one server " f(g("redlock.single_contend_acq_per_s"), 0) "; " f(g("redlock.single_contend_max_wait_ms"), 1) " ms",
            x(g("redlock.rl_contend_acq_per_s"), g("redlock.single_contend_acq_per_s"), 2), "report", "")
        tw = g("redlock.rl_contend_two_holders") + g("redlock.single_contend_two_holders")
        row("12", "Redlock and one server, contended: mutual exclusion", (tw == 0) ? "no second holder" : tw " second holders", "", "", "must hold", (tw == 0) ? "MET" : "BROKEN")
    }
    if (smoke) print "(smoke pass: counts and times are tiny; the figures are not measurements)"
}

# The server's work: each figure beside the raw hiredis pair (SET key tok
# NX PX, EVALSHA compare-and-delete) or the ideal measured in the same
# run, the ratio and its target.  The handoff's target is half of 366k
# instructions, what a handoff cost in an earlier design.
function server_work(   raw, dl, r, k, t, n, hs, hi, rawi, rt, ca, de) {
    print ""
    print "The server's work, each figure against the raw pair or the ideal of the same run:"
    print ""
    print "| figure | dlock | raw pair / floor (same run) | ratio | target | verdict |"
    print "|---|---|---|---|---|---|"
    raw = g("floor.raw_pair_per_s"); dl = g("seq.lock_unlock_per_s"); r = g("seq.lock_unlock_vs_raw")
    row21("uncontended lock+unlock pairs/s, one client (median of per-round ratios)", f(dl, 0), f(raw, 0), (r >= 0) ? f(r, 2) "x" : "n/a", ">= 0.95x", verdict2(r >= 0, r >= 0.95))
    row21("round trips per pair (dlock: its send() calls; raw: its blocking commands) / server requests",
        f(g("seq.lock_unlock_client_sends"), 2) " / " f(g("seq.lock_unlock_server_reqs"), 2), f(g("floor.raw_pair_server_reqs"), 2) " / " f(g("floor.raw_pair_server_reqs"), 2),
        "", "no more than raw", verdict2(g("seq.lock_unlock_client_sends") >= 0, g("seq.lock_unlock_client_sends") <= g("floor.raw_pair_server_reqs") + 0.01))
    rawi = g("cg.raw_pair_instr")
    row21("Redis instructions per pair (callgrind, the server's idle rate taken off)", fk(g("cg.dlock_pair_instr")), fk(rawi),
        x(g("cg.dlock_pair_instr"), rawi, 1), "reported (time: <= 2x)", "")
    row21("Redis command time per pair, warm (INFO commandstats usec of the top-level commands)", f(g("seq.lock_unlock_server_us"), 1) " us", f(g("floor.raw_pair_server_us"), 1) " us",
        x(g("seq.lock_unlock_server_us"), g("floor.raw_pair_server_us"), 1), "<= 2x", verdict2(g("seq.lock_unlock_server_us") >= 0, g("seq.lock_unlock_server_us") <= 2 * g("floor.raw_pair_server_us")))
    row21("commands the server runs per pair, scripts' calls included", f(g("seq.lock_unlock_cmds_incl_script"), 1), f(g("floor.raw_pair_cmds_incl_script"), 1),
        x(g("seq.lock_unlock_cmds_incl_script"), g("floor.raw_pair_cmds_incl_script"), 1), "reported", "")
    row21("bytes sent per pair (server's total_net_input_bytes; dlock's send()s: " f(g("seq.lock_unlock_client_bytes"), 0) ")", f(g("seq.lock_unlock_bytes_in"), 0) " B", f(g("floor.raw_pair_bytes_in"), 0) " B",
        x(g("seq.lock_unlock_bytes_in"), g("floor.raw_pair_bytes_in"), 1), "reported (fewer arguments)", "")
    row21("bytes received per pair (total_net_output_bytes)", f(g("seq.lock_unlock_bytes_out"), 0) " B", f(g("floor.raw_pair_bytes_out"), 0) " B",
        x(g("seq.lock_unlock_bytes_out"), g("floor.raw_pair_bytes_out"), 1), "reported", "")
    split("1 4 16 64", t, " ")
    for (k = 1; k <= 4; k++) {
        n = "carry." t[k]
        if (!((n ".ratio") in have)) continue
        r = g(n ".ratio")
        row21("pairs/s one Redis core carries, " t[k] " thread(s) on their own names (server CPU share; server us/pair; connections opened per 1000 pairs)",
            f(g(n ".dlock_per_s"), 0) " (" f(g(n ".dlock_server_cpu") * 100, 0) "%; " f(g(n ".dlock_server_us"), 1) " us; " f(g(n ".dlock_conns_per_1000"), 2) ")",
            f(g(n ".raw_per_s"), 0) " (" f(g(n ".raw_server_cpu") * 100, 0) "%; " f(g(n ".raw_server_us"), 1) " us; " f(g(n ".raw_conns_per_1000"), 2) ")",
            f(r, 2) "x", (t[k] == 16) ? ">= 0.85x" : "reported", (t[k] == 16) ? verdict(r >= 0.85) : "")
    }
    hs = g("contend.dlock_proc.server_usec_per_handoff")
    row21("contended handoff, 4 processes, 1 ms hold: server us per handoff (commandstats); requests per handoff",
        f(hs, 1) " us; " f(g("contend.dlock_proc.server_calls_per_handoff"), 2), "a raw pair (the least a handoff needs: an acquire, a release): " f(g("floor.raw_pair_server_us"), 1) " us; 2",
        x(hs, g("floor.raw_pair_server_us"), 1), "reported", "")
    hi = g("cg.handoff_instr")
    row21("contended handoff: Redis instructions per handoff (callgrind)", fk(hi), "raw pair " fk(rawi) "; the floor of a script handoff (10 calls, no guarantee) " fk(g("cg.handoff_floor_instr")) "; a lean script handoff with the guarantees (21 calls) " fk(g("cg.handoff_lean_instr")) "; an earlier design 366k",
        x(hi, rawi, 1) " raw; " x(hi, 366000, 2) " the earlier design", "reported", "")
    if (("cg.handoff_2procs_instr") in have)
        row21("contended handoff, 2 processes (one waiter at a time): Redis instructions per handoff (callgrind)", fk(g("cg.handoff_2procs_instr")), "the floor of a script handoff " fk(g("cg.handoff_floor_instr")), "", "reported", "")
    rt = g("floor.ping_p50_us")
    r = g("contend.dlock_proc.vs_ideal")
    row21("contended throughput, 4 processes, 1 ms hold: acquisitions/s", f(g("contend.dlock_proc.acq_per_s"), 0),
        "ideal 1/(hold + 2 RT) = " f(g("contend.dlock_proc.ideal_per_s"), 0) " (RT " f(rt, 1) " us, PING p50 of this run)", (r >= 0) ? f(r, 2) "x" : "n/a", ">= 0.95x", verdict2(r >= 0, r >= 0.95))
    ca = g("contend.dlock_caching_proc.acq_per_s"); de = g("contend.dlock_proc.acq_per_s")
    if (ca >= 0) {
        row21("caching under contention, 4 processes, 1 ms hold: acquisitions/s (requests/acq)", f(ca, 0) " (" f(g("contend.dlock_caching_proc.server_reqs_per_acq"), 2) ")",
            "default mutex " f(de, 0) " (" f(g("contend.dlock_proc.server_reqs_per_acq"), 2) ")", x(ca, de, 2), ">= 0.95x", verdict2(de > 0, ca >= 0.95 * de))
        row21("caching under contention: longest run of one process", f(g("contend.dlock_caching_proc.longest_run_one_worker"), 0),
            "default mutex " f(g("contend.dlock_proc.longest_run_one_worker"), 0), "", "<= 4", verdict(g("contend.dlock_caching_proc.longest_run_one_worker") <= 4))
    }
}
function row21(what, dl, ref, ratio, target, verd) {
    printf "| %s | %s | %s | %s | %s | %s |\n", what, dl, ref, ratio, target, verd
}
