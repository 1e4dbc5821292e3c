/* preload_startup.c -- the timer of bench/preload-startup: runs a program
 * again and again under several environments, interleaved (each round
 * runs every variant once, in turn), and prints for each variant the
 * median wall time of a run and the median CPU time (user + system, from
 * wait4) of the process, in microseconds.
 *
 *   preload_startup ROUNDS PROGRAM 'LABEL|VAR=VALUE ...' ...
 *
 * Each variant's VAR=VALUE words are added to this program's environment
 * for its runs (none: the program as it is).  Prints one line per
 * variant: "LABEL<TAB>wall<TAB>cpu".
 */
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>

extern char **environ;

#define MAX_VARIANTS 8
#define MAX_VARS 8

struct variant {
    char label[128];
    char *env[256 + MAX_VARS + 1];
    double *wall, *cpu;
};

static double startup_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int startup_by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double startup_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, startup_by_value);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* "LABEL|VAR=VALUE ..." into v: the environment is ours plus the words. */
static int startup_parse(char *spec, struct variant *v, int rounds) {
    char *bar = strchr(spec, '|'), *w, *save = NULL;
    int n = 0, k;
    if (bar == NULL) return -1;
    *bar = '\0';
    snprintf(v->label, sizeof v->label, "%s", spec);
    for (k = 0; environ[k] != NULL && n < 256; k++) v->env[n++] = environ[k];
    for (w = strtok_r(bar + 1, " ", &save); w != NULL && n < 256 + MAX_VARS; w = strtok_r(NULL, " ", &save))
        v->env[n++] = w;
    v->env[n] = NULL;
    v->wall = calloc((size_t)rounds, sizeof *v->wall);
    v->cpu = calloc((size_t)rounds, sizeof *v->cpu);
    return v->wall != NULL && v->cpu != NULL ? 0 : -1;
}

/* One run of prog under v: its wall and CPU time into round r. */
static int startup_run(const char *prog, struct variant *v, int r) {
    char *argv[] = { (char *)prog, NULL };
    struct rusage ru;
    double t0 = startup_now_us();
    pid_t pid;
    int st;
    if (posix_spawn(&pid, prog, NULL, NULL, argv, v->env) != 0) return -1;
    if (wait4(pid, &st, 0, &ru) != pid || !WIFEXITED(st)) return -1;
    v->wall[r] = startup_now_us() - t0;
    v->cpu[r] = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
                (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
    return 0;
}

int main(int argc, char **argv) {
    static struct variant vs[MAX_VARIANTS];
    int rounds, nv = argc - 3, r, i;
    if (argc < 4 || nv > MAX_VARIANTS || (rounds = atoi(argv[1])) < 1) {
        fprintf(stderr, "usage: preload_startup ROUNDS PROGRAM 'LABEL|VAR=VALUE ...' ...\n");
        return 2;
    }
    for (i = 0; i < nv; i++)
        if (startup_parse(argv[3 + i], &vs[i], rounds) != 0) return 2;
    for (r = 0; r < rounds; r++)
        for (i = 0; i < nv; i++)
            if (startup_run(argv[2], &vs[i], r) != 0) {
                fprintf(stderr, "preload_startup: %s failed under %s\n", argv[2], vs[i].label);
                return 1;
            }
    for (i = 0; i < nv; i++)
        printf("%s\t%.0f\t%.0f\n", vs[i].label, startup_median(vs[i].wall, rounds),
               startup_median(vs[i].cpu, rounds));
    return 0;
}
