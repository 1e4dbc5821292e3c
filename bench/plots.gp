# plots.gp -- the plots of bench/README.md, drawn by bench/run:
#   gnuplot -e "outdir='bench/results'" bench/plots.gp
# handoff.png: distribution (CDF) of handoff latency, release issued -> next
#              holder in another process (or thread), for dlock (default and
#              fair mutexes) and its peers
# wait.png:    distribution (CDF) of every wait, lock called -> returned:
#              the fair mutex's longest wait against the default one's
# handoff-direct.png: the same for the releases whose very next holder was
#              another contender (propagation only: barging left out)
# pingpong.png: handoff latency CDF of the two-process ping-pong in strict
#              alternation, caching mutex against plain
# waiters.png: acquisitions/s and server requests per acquisition as the
#              number of waiters on one lock grows, default and fair
set terminal pngcairo size 900,540 font ",10" noenhanced
fileok(f) = system("test -s '" . f . "' && echo 1 || echo 0") + 0

set output outdir . "/handoff.png"
set title "Handoff latency: release issued -> next holder (1 ms hold, 4 contenders)"
set xlabel "handoff latency (microseconds, log scale)"
set ylabel "fraction of handoffs <= x"
set logscale x
set grid xtics ytics mxtics
set key bottom right
set yrange [0:1]
names = "dlock-proc dlock-fair-proc dlock-thread dlock-fair-thread poll redlock redispy"
titles = "dlock_(4_processes) dlock_fair_(4_processes) dlock_(4_threads) dlock_fair_(4_threads) naive_1_ms_poll node-redlock_defaults redis-py_Lock_defaults"
plotcmd = ""
do for [i=1:words(names)] {
    f = outdir . "/cdf-" . word(names, i) . ".dat"
    if (fileok(f)) {
        t = system("echo '" . word(titles, i) . "' | tr _ ' '")
        plotcmd = plotcmd . (strlen(plotcmd) ? ", " : "") . "'" . f . "' using 1:2 with lines lw 2 title '" . t . "'"
    }
}
if (strlen(plotcmd)) { eval("plot " . plotcmd) }

set output outdir . "/handoff-direct.png"
set title "Direct handoffs only: releases whose very next holder was another contender"
set xlabel "release issued -> next holder (microseconds, log scale)"
plotcmd = ""
do for [i=1:words(names)] {
    f = outdir . "/cdfd-" . word(names, i) . ".dat"
    if (fileok(f)) {
        t = system("echo '" . word(titles, i) . "' | tr _ ' '")
        plotcmd = plotcmd . (strlen(plotcmd) ? ", " : "") . "'" . f . "' using 1:2 with lines lw 2 title '" . t . "'"
    }
}
if (strlen(plotcmd)) { eval("plot " . plotcmd) }

set output outdir . "/wait.png"
set title "Waits: lock called -> lock returned, every acquisition (1 ms hold, 4 contenders)"
set xlabel "wait (microseconds, log scale)"
set ylabel "fraction of acquisitions waiting <= x"
plotcmd = ""
do for [i=1:words(names)] {
    f = outdir . "/cdfw-" . word(names, i) . ".dat"
    if (fileok(f)) {
        t = system("echo '" . word(titles, i) . "' | tr _ ' '")
        plotcmd = plotcmd . (strlen(plotcmd) ? ", " : "") . "'" . f . "' using 1:2 with lines lw 2 title '" . t . "'"
    }
}
if (strlen(plotcmd)) { eval("plot " . plotcmd) }

set output outdir . "/pingpong.png"
set title "Ping-pong, 2 processes in strict alternation, no hold: release issued -> lock returned in the other process"
set xlabel "handoff latency (microseconds, log scale)"
set ylabel "fraction of handoffs <= x"
names = "cache-alt-caching cache-alt-plain"
titles = "caching_mutex plain_mutex"
plotcmd = ""
do for [i=1:words(names)] {
    f = outdir . "/cdf-" . word(names, i) . ".dat"
    if (fileok(f)) {
        t = system("echo '" . word(titles, i) . "' | tr _ ' '")
        plotcmd = plotcmd . (strlen(plotcmd) ? ", " : "") . "'" . f . "' using 1:2 with lines lw 2 title '" . t . "'"
    }
}
if (strlen(plotcmd)) { eval("plot " . plotcmd) }

reset
set output outdir . "/waiters.png"
set title "One lock, 1 ms hold: throughput and server requests as waiters grow (4 processes x threads), default and fair"
set xlabel "waiters (threads contending, in min(W,4) processes)"
set ylabel "acquisitions/s"
set y2label "server requests per acquisition"
set logscale x 2
set ytics nomirror
set y2tics
set yrange [0:*]
set y2range [0:*]
set grid
set key below horizontal
f = outdir . "/waiters.dat"
ff = outdir . "/waiters-fair.dat"
if (fileok(f) && fileok(ff)) {
    plot f using 1:4 with linespoints lw 2 pt 7 lc 1 title "dlock acquisitions/s", \
         ff using 1:4 with linespoints lw 2 pt 6 lc 3 title "dlock fair acquisitions/s", \
         f using 1:5 with lines dt 2 lw 1 lc 1 title "ideal 1/(hold + 2 RT)", \
         f using 1:6 axes x1y2 with linespoints lw 2 pt 5 lc 2 title "server requests/acq (right)", \
         ff using 1:6 axes x1y2 with linespoints lw 2 pt 4 lc 4 title "fair: server requests/acq (right)", \
         4 axes x1y2 with lines dt 3 lc rgb "red" title "target: 4 requests/acq (right)"
} else {
    if (fileok(f)) {
        plot f using 1:4 with linespoints lw 2 pt 7 title "dlock acquisitions/s", \
             f using 1:5 with lines dt 2 lw 1 title "ideal 1/(hold + 2 RT)", \
             f using 1:6 axes x1y2 with linespoints lw 2 pt 5 title "server requests/acq (right)", \
             4 axes x1y2 with lines dt 3 lc rgb "red" title "target: 4 requests/acq (right)"
    }
}
