// redlock_bench.cjs -- node-redlock 5.0.0-beta.2 + ioredis, doing the same work
// as dlock-bench, for bench/run.  Default Redlock settings throughout
// (retryDelay 200 ms, retryJitter 100 ms, retryCount 10, driftFactor 0.01);
// when acquire gives up after its retries (ExecutionError) the worker simply
// calls it again, keeping the time of its first call, and counts a give-up.
//
//   node redlock_bench.cjs seq PORT COUNT SECONDS
//       sequential acquire+release pairs on a free lock; prints key value lines
//   node redlock_bench.cjs contend PORT HOLD_MS START_NS SECONDS OUTFILE
//       one contending process: from START_NS (CLOCK_MONOTONIC) for SECONDS,
//       acquire, hold HOLD_MS (sleep, then spin the last 150 us), release; writes one line per
//       acquisition: t_call t_acq t_rel (CLOCK_MONOTONIC ns)
// Traffic goes only to 127.0.0.1:PORT; every loop is bounded in count and time.
"use strict";
const fs = require("fs");
const Redis = require("ioredis");
const Redlock = require("redlock").default;
const { ExecutionError } = require("redlock");

const now = () => process.hrtime.bigint(); // CLOCK_MONOTONIC on Linux
const sleeper = new Int32Array(new SharedArrayBuffer(4));
const LEASE = 10000;

function pct(sorted, p) {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.round((p / 100) * (sorted.length - 1)))];
}

async function seq(port, count, seconds) {
  const client = new Redis({ host: "127.0.0.1", port, lazyConnect: false });
  const redlock = new Redlock([client]);
  const key = "bench:redlock:seq";
  for (let i = 0; i < 100; i++) await (await redlock.acquire([key], LEASE)).release();
  const lat = [];
  const end = now() + BigInt(Math.round(seconds * 1e9));
  const t0 = now();
  let i = 0;
  for (; i < count && now() < end; i++) {
    const a = now();
    const lock = await redlock.acquire([key], LEASE);
    await lock.release();
    lat.push(Number(now() - a) / 1e3);
  }
  const el = Number(now() - t0) / 1e9;
  lat.sort((x, y) => x - y);
  console.log(`pairs ${i}`);
  console.log(`pair_per_s ${(i / el).toFixed(1)}`);
  console.log(`pair_p50_us ${pct(lat, 50).toFixed(1)}`);
  console.log(`pair_p99_us ${pct(lat, 99).toFixed(1)}`);
  client.disconnect();
}

async function contend(port, holdMs, startNs, seconds, out) {
  const client = new Redis({ host: "127.0.0.1", port });
  const redlock = new Redlock([client]);
  const key = "bench:redlock:contend";
  const hold = BigInt(Math.round(holdMs * 1e6));
  const start = BigInt(startNs);
  const stop = start + BigInt(Math.round(seconds * 1e9));
  const lines = [];
  let gaveUp = 0;
  await client.ping();
  while (now() < start) await new Promise((r) => setTimeout(r, 1));
  while (now() < stop && lines.length < 1000000) {
    const tCall = now();
    let lock;
    for (;;) {
      try {
        lock = await redlock.acquire([key], LEASE);
        break;
      } catch (e) {
        if (!(e instanceof ExecutionError)) throw e;
        gaveUp++;
        if (now() > stop + 20000000000n) throw new Error("no acquisition within 20 s of the end");
      }
    }
    const tAcq = now();
    // the hold: sleep (Atomics.wait takes fractional ms) until 150 us before
    // its end, then spin, as dlock-bench does
    const sleepMs = Number(hold - 150000n) / 1e6;
    if (sleepMs > 0) Atomics.wait(sleeper, 0, 0, sleepMs);
    while (now() < tAcq + hold);
    const tRel = now();
    lines.push(`${tCall} ${tAcq} ${tRel}`);
    await lock.release();
  }
  fs.writeFileSync(out, `# redlock contend gave_up=${gaveUp}\n` + lines.join("\n") + "\n");
  client.disconnect();
}

const [mode, port, ...rest] = process.argv.slice(2);
const deadline = setTimeout(() => {
  console.error("redlock_bench: time limit reached");
  process.exit(3);
}, 120000);
deadline.unref();
(mode === "seq"
  ? seq(Number(port), Number(rest[0]), Number(rest[1]))
  : contend(Number(port), Number(rest[0]), rest[1], Number(rest[2]), rest[3])
).catch((e) => {
  console.error(e);
  process.exit(1);
});
