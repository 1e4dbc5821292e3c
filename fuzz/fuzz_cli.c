/* fuzz_cli.c -- libFuzzer target: the dlock command's option parsing.
 *
 * The input is a command line: its first byte chooses the subcommand
 * (exec, status, list, break, graph, top, exporter), the rest is its
 * arguments, NUL-separated.  They go to that subcommand's own parser --
 * exec_parse, admin.c's parse, graph.c's parse, parse_top,
 * parse_exporter -- which are static, so
 * tools/'s sources are included here (the static names two of them
 * share renamed apart); --url, --prefix and -V go through cli_conn_opt as in the
 * program, and its exit(0) after -V is caught (longjmp).  Nothing is run
 * and no server is asked: only the parsing.  Besides memory and UB errors
 * it checks what each parser promises on success: exec has a lock name of
 * 1 to DLOCK_NAME_MAX bytes, a command, a lease in range, no -s with
 * --slots, exit codes 0-255; top a window and a count in range, not
 * --json with --prometheus; the exporter an address to listen on (not
 * resolved here) and a window and a count in range.
 */
#include <errno.h>
#include <getopt.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static jmp_buf fuzz_cli_exited;

__attribute__((noreturn)) static void fuzz_cli_exit(int code) {
    (void)code;
    longjmp(fuzz_cli_exited, 1);
}

/* Every exit of the included sources comes back here. */
#define exit(code) fuzz_cli_exit(code)
#define main fuzz_cli_main /* the program's own, never called */
#include "../tools/main.c"
#undef main
#define parse admin_parse
#include "../tools/admin.c"
#undef parse
#define parse graph_parse
#define collect graph_collect
#include "../tools/graph.c"
#undef collect
#undef parse
#include "../tools/exec.c"
#define print_table top_print_table
#define on_signal top_on_signal
#include "../tools/top.c"
#undef on_signal
#undef print_table
#include "../tools/format.c"
#include "../tools/metrics.c"
#include "../tools/exporter.c"
#include "../tools/ranges.c"
#undef exit

#define FUZZ_CLI_ARGS 64

static void fuzz_cli_exec(int argc, char **argv, cli_conn *conn) {
    exec_opts o;
    if (exec_parse(argc, argv, conn, &o) != 0) return;
    if (o.name == NULL || o.name[0] == '\0' || strlen(o.name) > DLOCK_NAME_MAX) abort();
    if (o.cmd == NULL || o.cmd[0] == NULL) abort();
    if (o.lease_ms < DLOCK_LEASE_MIN_MS || o.lease_ms > DLOCK_LEASE_MAX_MS) abort();
    if (o.slots != 0 && o.shared) abort();
    if (o.conflict_code < 0 || o.conflict_code > 255 || o.lost_code < 0 || o.lost_code > 255) abort();
    if (o.slots > DLOCK_SEM_VALUE_MAX) abort();
}

static void fuzz_cli_top(int argc, char **argv, cli_conn *conn) {
    top_opts o;
    if (parse_top(argc, argv, conn, &o) != 0) return;
    if (o.window_s < 1 || o.window_s > DLOCK_STATS_WINDOW_MAX || o.max < 1 || o.max > TOP_MAX) abort();
    if (o.json && o.prometheus) abort();
}

static void fuzz_cli_run(int which, int argc, char **argv) {
    static const char *const what[] = { "status", "list", "break" };
    cli_conn conn = { NULL, NULL };
    admin_opts ao;
    const char *glob = NULL;
    int json = 0;
    optind = 0; /* glibc: start afresh, as main does for each subcommand */
    switch (which) {
    case 0:
        fuzz_cli_exec(argc, argv, &conn);
        break;
    case 1:
    case 2:
    case 3:
        (void)admin_parse(argc, argv, &conn, what[which - 1], &ao);
        break;
    case 4:
        (void)graph_parse(argc, argv, &conn, &json, &glob);
        break;
    case 6: {
        exp_opts eo;
        if (parse_exporter(argc, argv, &conn, &eo) == 0 &&
            (eo.listen == NULL || eo.m.max < 1 || eo.m.window_s < 1 || eo.m.window_s > DLOCK_STATS_WINDOW_MAX))
            abort();
        break;
    }
    default:
        fuzz_cli_top(argc, argv, &conn);
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const names[] = { "exec", "status", "list", "break", "graph", "top", "exporter" };
    char *argv[FUZZ_CLI_ARGS + 2], *buf;
    int argc = 0, which;
    size_t i, start;
    if (size == 0) return 0;
    which = data[0] % 7;
    if ((buf = malloc(size)) == NULL) return 0;
    memcpy(buf, data + 1, size - 1);
    buf[size - 1] = '\0';
    argv[argc++] = (char *)names[which];
    for (i = 0, start = 0; i < size && argc <= FUZZ_CLI_ARGS; i++) /* buf[size - 1] ends the last */
        if (buf[i] == '\0') {
            argv[argc++] = buf + start;
            start = i + 1;
        }
    argv[argc] = NULL;
    cli_prog = names[which];
    if (setjmp(fuzz_cli_exited) == 0) fuzz_cli_run(which, argc, argv);
    free(buf);
    return 0;
}
