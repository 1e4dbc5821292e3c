#!/usr/bin/python3
"""redispy_bench.py -- redis-py's Lock (Debian's python3-redis), doing the same
work as dlock-bench, for bench/run.  Lock defaults (sleep=0.1 s between tries,
blocking) with a 10 s lease (timeout=10), as dlock's default lease.

  redispy_bench.py seq PORT COUNT SECONDS
  redispy_bench.py contend PORT HOLD_MS START_NS SECONDS OUTFILE
      (START_NS on CLOCK_MONOTONIC; lines of t_call t_acq t_rel in ns)

Traffic goes only to 127.0.0.1:PORT; every loop is bounded in count and time.
"""
import sys
import time

import redis

now = time.monotonic_ns  # CLOCK_MONOTONIC
LEASE_S = 10


def pct(v, p):
    if not v:
        return 0
    return v[min(len(v) - 1, round(p / 100 * (len(v) - 1)))]


def seq(port, count, seconds):
    r = redis.Redis(host="127.0.0.1", port=port)
    lock = r.lock("bench:redispy:seq", timeout=LEASE_S)
    for _ in range(100):
        lock.acquire()
        lock.release()
    lat = []
    end = now() + int(seconds * 1e9)
    t0 = now()
    i = 0
    while i < count and now() < end:
        a = now()
        lock.acquire()
        lock.release()
        lat.append((now() - a) / 1e3)
        i += 1
    el = (now() - t0) / 1e9
    lat.sort()
    print("pairs %d" % i)
    print("pair_per_s %.1f" % (i / el))
    print("pair_p50_us %.1f" % pct(lat, 50))
    print("pair_p99_us %.1f" % pct(lat, 99))


def contend(port, hold_ms, start_ns, seconds, out):
    r = redis.Redis(host="127.0.0.1", port=port)
    lock = r.lock("bench:redispy:contend", timeout=LEASE_S)
    hold = int(hold_ms * 1e6)
    stop = start_ns + int(seconds * 1e9)
    hard = stop + 20 * 10**9
    lines = []
    r.ping()
    while now() < start_ns:
        time.sleep(0.001)
    while now() < stop and len(lines) < 1000000:
        t_call = now()
        if not lock.acquire(blocking_timeout=(hard - now()) / 1e9):
            raise SystemExit("no acquisition within 20 s of the end")
        t_acq = now()
        # the hold: sleep until 150 us before its end, then spin (as dlock-bench)
        if hold > 150000:
            time.sleep((hold - 150000) / 1e9)
        while now() < t_acq + hold:
            pass
        t_rel = now()
        lines.append("%d %d %d" % (t_call, t_acq, t_rel))
        lock.release()
    with open(out, "w") as f:
        f.write("# redispy contend\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    mode, port = sys.argv[1], int(sys.argv[2])
    if mode == "seq":
        seq(port, int(sys.argv[3]), float(sys.argv[4]))
    else:
        contend(port, float(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), sys.argv[6])
