/* preload.c -- start-up of libdlock_preload.so: the real functions, the
 * configuration from the environment (DLOCK_MAP and friends, read once
 * with secure_getenv), path mapping and messages.
 *
 * Nothing here takes a lock.  A configuration that cannot be used is
 * reported in one line on stderr and the program runs on: with
 * DLOCK_ON_ERROR=open (the default) as without the library, with
 * DLOCK_ON_ERROR=closed with every file-lock request refused (ENOLCK),
 * since the paths that were meant to be cluster-wide cannot be told.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fnmatch.h>
#include <link.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h" /* the client's node: the host-wide outage record (net/hostrec.c) */
#include "preload.h"

int dlpl_state;
__thread int dlpl_guard DLPL_TLS;
struct dlpl_real dlpl_real;
volatile int dlpl_resolved;
struct dlpl_conf dlpl_conf;
dlock_client_t *dlpl_client;
char *dlpl_self_path;
char *dlpl_interp;

#define MAP_MAX (64 * 1024)
#define RULES_MAX 256

/* ------------------------------------------------------------------ real */

extern int flock(int, int);
int dlpl_fcntl(int fd, int cmd, ...) __asm__("fcntl");
int dlpl_lockf(int fd, int cmd, off_t len) __asm__("lockf");
int dlpl_fcntl64(int fd, int cmd, ...) __asm__("fcntl64");
int dlpl_lockf64(int fd, int cmd, off_t len) __asm__("lockf64");
extern int close(int);
int dlpl_close_range(unsigned first, unsigned last, int flags) __asm__("close_range");
void dlpl_closefrom(int from) __asm__("closefrom");
FILE *dlpl_freopen(const char *path, const char *mode, FILE *f) __asm__("freopen");
FILE *dlpl_freopen64(const char *path, const char *mode, FILE *f) __asm__("freopen64");

static void *next(const char *name, const char *version, void *self) {
    void *p = version ? dlvsym(RTLD_NEXT, name, version) : NULL;
    if (p == NULL) p = dlsym(RTLD_NEXT, name);
    if (p == self) {
        /* The next definition is this very hook: calling it would
         * recurse for ever.  Leave it unresolved (the hook fails with
         * ENOSYS) and say so. */
        dlpl_msg("%s resolves to the shim itself; it will fail with ENOSYS", name);
        return NULL;
    }
    return p;
}

/* Resolves every real function once.  Safe to run twice (from two
 * threads at start-up): both find the same addresses. */
void dlpl_resolve(void) {
    struct dlpl_real r;
    memset(&r, 0, sizeof r);
    r.flock = (int (*)(int, int))next("flock", NULL, (void *)flock);
    r.fcntl = (int (*)(int, int, ...))next("fcntl", NULL, (void *)dlpl_fcntl);
    r.fcntl64 = (int (*)(int, int, ...))next("fcntl64", "GLIBC_2.28", (void *)dlpl_fcntl64);
    if (r.fcntl64 == NULL) r.fcntl64 = r.fcntl;
    r.lockf = (int (*)(int, int, off_t))next("lockf", NULL, (void *)dlpl_lockf);
    r.lockf64 = (int (*)(int, int, off_t))next("lockf64", NULL, (void *)dlpl_lockf64);
    r.close = (int (*)(int))next("close", NULL, (void *)close);
    r.dup = (int (*)(int))next("dup", NULL, (void *)dup);
    r.dup2 = (int (*)(int, int))next("dup2", NULL, (void *)dup2);
    r.dup3 = (int (*)(int, int, int))next("dup3", NULL, (void *)dup3);
    r.close_range = (int (*)(unsigned, unsigned, int))next("close_range", NULL, (void *)dlpl_close_range);
    r.closefrom = (void (*)(int))next("closefrom", NULL, (void *)dlpl_closefrom);
    r.fclose = (int (*)(FILE *))next("fclose", NULL, (void *)fclose);
    r.freopen = (FILE * (*)(const char *, const char *, FILE *)) next("freopen", NULL, (void *)dlpl_freopen);
    r.freopen64 = (FILE * (*)(const char *, const char *, FILE *)) next("freopen64", NULL, (void *)dlpl_freopen64);
    r.closedir = (int (*)(DIR *))next("closedir", NULL, (void *)closedir);
    r.mutex_lock = (int (*)(pthread_mutex_t *))next("pthread_mutex_lock", NULL, (void *)pthread_mutex_lock);
    r.mutex_trylock = (int (*)(pthread_mutex_t *))next("pthread_mutex_trylock", NULL, (void *)pthread_mutex_trylock);
    r.mutex_timedlock = (int (*)(pthread_mutex_t *, const struct timespec *))next(
        "pthread_mutex_timedlock", NULL, (void *)pthread_mutex_timedlock);
    r.mutex_clocklock = (int (*)(pthread_mutex_t *, clockid_t, const struct timespec *))next(
        "pthread_mutex_clocklock", NULL, (void *)pthread_mutex_clocklock);
    r.mutex_unlock = (int (*)(pthread_mutex_t *))next("pthread_mutex_unlock", NULL, (void *)pthread_mutex_unlock);
    r.mutex_consistent = (int (*)(pthread_mutex_t *))next("pthread_mutex_consistent", NULL,
                                                          (void *)pthread_mutex_consistent);
    r.cond_wait = (int (*)(pthread_cond_t *, pthread_mutex_t *))next("pthread_cond_wait", "GLIBC_2.3.2",
                                                                     (void *)pthread_cond_wait);
    r.cond_timedwait = (int (*)(pthread_cond_t *, pthread_mutex_t *, const struct timespec *))next(
        "pthread_cond_timedwait", "GLIBC_2.3.2", (void *)pthread_cond_timedwait);
    r.cond_clockwait = (int (*)(pthread_cond_t *, pthread_mutex_t *, clockid_t, const struct timespec *))next(
        "pthread_cond_clockwait", NULL, (void *)pthread_cond_clockwait);
    dlpl_real = r;
    atomic_thread_fence(memory_order_release);
    dlpl_resolved = 1;
}

/* -------------------------------------------------------------- messages */

static void vmsg(const char *fmt, va_list ap) {
    char buf[1024];
    const char *prog = program_invocation_short_name;
    int n = snprintf(buf, sizeof buf, "dlock: %s[%ld]: ", prog ? prog : "?", (long)getpid());
    if (n < 0) return;
    if ((size_t)n < sizeof buf) {
        int m = vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
        if (m > 0) n += m;
    }
    if ((size_t)n >= sizeof buf - 1) n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    (void)!write(2, buf, (size_t)n);
}

void dlpl_msg(const char *fmt, ...) {
    va_list ap;
    int saved = errno;
    va_start(ap, fmt);
    vmsg(fmt, ap);
    va_end(ap);
    errno = saved;
}

void dlpl_msg_rl(int key, const char *fmt, ...) {
    static _Atomic long last[8];
    struct timespec ts;
    long now, prev;
    va_list ap;
    int saved = errno;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    now = (long)ts.tv_sec + 1; /* never 0 */
    key &= 7;
    prev = atomic_load(&last[key]);
    if (prev != 0 && now - prev < 10) return;
    if (!atomic_compare_exchange_strong(&last[key], &prev, now)) return;
    va_start(ap, fmt);
    vmsg(fmt, ap);
    va_end(ap);
    errno = saved;
}

/* 0: the server answers; 1: down, and this program told it; 2: down, and
 * another program of this host had told it (the host-wide record). */
static atomic_int server_down;

void dlpl_server_down(const char *name, int rc) {
    int first;
    if (atomic_load(&server_down) != 0) return;
    /* one notice per host per outage: the first program to find it out */
    first = dlock_client_outage_notice(dlpl_client, dlpl_conf.on_error == DLPL_ON_ERROR_CLOSED
                                                        ? DLOCK_OUTAGE_DOWN_CLOSED : DLOCK_OUTAGE_DOWN);
    if (atomic_exchange(&server_down, first ? 1 : 2) != 0 || (!first && !dlpl_conf.verbose)) return;
    if (dlpl_conf.on_error == DLPL_ON_ERROR_CLOSED)
        dlpl_msg("'%s': no cluster-wide lock (%s); DLOCK_ON_ERROR=closed: mapped file locks fail with ENOLCK, "
                 "mapped semaphores' tries with EAGAIN, and mapped mutexes and semaphores wait until the server "
                 "answers again (asked at most once a second)",
                 name, dlock_strerror(rc));
    else
        dlpl_msg("'%s': no cluster-wide lock (%s); DLOCK_ON_ERROR=open: mapped locks take the local lock only "
                 "(this host) until the server answers again (asked at most once a second)", name,
                 dlock_strerror(rc));
}

static void server_back(void) {
    dlpl_msg("the server answers again: mapped locks are cluster-wide again");
}

void dlpl_server_up(void) {
    int was;
    if (DLPL_LIKELY(atomic_load(&server_down) == 0)) {
        /* a return another program got the answer of, and nobody told */
        if (dlpl_client != NULL && dlock__breaker_host_back(&dlpl_client->be.node)) dlpl_server_returned();
        return;
    }
    if ((was = atomic_exchange(&server_down, 0)) == 0) return;
    if (dlock_client_outage_notice(dlpl_client, DLOCK_OUTAGE_UP) || (was == 1 && dlpl_conf.verbose)) server_back();
}

void dlpl_server_returned(void) {
    if (atomic_load(&server_down) != 0) {
        dlpl_server_up();
    } else if (dlock_client_outage_notice(dlpl_client, DLOCK_OUTAGE_UP)) {
        server_back(); /* an outage another program of this host told of */
    }
}

const char *dlpl_policy_text(void) {
    return dlpl_conf.on_error == DLPL_ON_ERROR_CLOSED ? "DLOCK_ON_ERROR=closed" : "DLOCK_ON_ERROR=open";
}

/* ---------------------------------------------------------------- rules */

static char *trim(char *s) {
    char *e;
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') s++;
    e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r')) *--e = '\0';
    return s;
}

static int symbol_ok(const char *s) {
    if (*s == '\0' || (*s >= '0' && *s <= '9')) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
              *s == '.' || *s == '$'))
            return 0;
    return 1;
}

/* The rule's kind, from its "file:", "mutex:", "sem:" or "sem+undo:"
 * prefix (r->kind, r->undo): the text after it, or NULL. */
static char *rule_kind(char *text, struct dlpl_rule *r) {
    static const struct {
        const char *prefix;
        int kind, undo;
    } kinds[] = { { "file:", DLPL_RULE_FILE, 0 },
                  { "mutex:", DLPL_RULE_MUTEX, 0 },
                  { "sem:", DLPL_RULE_SEM, 0 },
                  { "sem+undo:", DLPL_RULE_SEM, 1 } };
    size_t i;
    for (i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        size_t n = strlen(kinds[i].prefix);
        if (strncmp(text, kinds[i].prefix, n) == 0) {
            r->kind = kinds[i].kind;
            r->undo = kinds[i].undo;
            return text + n;
        }
    }
    return NULL;
}

/* A glob that fnmatch(3) would read otherwise than its author meant:
 * NULL if none, else why.  `**` (a file: glob is matched with
 * FNM_PATHNAME, so `**` is `*` and stays inside one path component: a
 * whole tree is not what it maps); a bracket expression holding `/`
 * (never matches with FNM_PATHNAME); an unclosed `[` (taken as a literal
 * bracket); a trailing `\` (matches nothing); `{a,b}` (fnmatch has no
 * brace expansion: it is taken literally).  file: globs are checked for
 * all of them, sem: globs (matched without FNM_PATHNAME, on names with
 * no `/` but the leading one) for the last three. */
static const char *glob_misread(const char *g, int file) {
    const char *p, *brace = NULL;
    for (p = g; *p; p++) {
        if (*p == '\\') {
            if (*++p == '\0') return "it ends in a lone '\\' (which matches nothing)";
        } else if (*p == '*' && p[1] == '*' && file) {
            return "'**' would match within one path component only, as '*' does (globs are fnmatch(3)'s with "
                   "FNM_PATHNAME); write one rule per directory level";
        } else if (*p == '[') {
            const char *q = p + 1;
            if (*q == '!' || *q == '^') q++;
            if (*q == ']') q++;
            while (*q && *q != ']') q++;
            if (*q == '\0') return "'[' is not closed (write '\\[' for a literal bracket)";
            if (file && memchr(p, '/', (size_t)(q - p)) != NULL)
                return "a bracket expression holds '/' (it never matches across '/')";
            p = q;
        } else if (*p == '{') {
            brace = p;
        } else if (*p == ',' && brace != NULL && strchr(p, '}') != NULL) {
            return "'{a,b}' is not expanded by fnmatch(3) (write one rule per alternative)";
        }
    }
    return NULL;
}

static int add_rule(char *text, int idx, const char *origin, char *err, size_t errlen) {
    struct dlpl_rule r;
    char *eq, *body;
    const char *why;
    memset(&r, 0, sizeof r);
    if ((body = rule_kind(text, &r)) == NULL) {
        snprintf(err, errlen,
                 "%s rule %d \"%.60s\": unknown kind (expected file:GLOB[=NAME], mutex:SYMBOL[=NAME], "
                 "sem:GLOB[=NAME] or sem+undo:GLOB[=NAME])",
                 origin, idx, text);
        return -1;
    }
    if ((eq = strchr(body, '=')) != NULL) {
        *eq++ = '\0';
        eq = trim(eq);
        if (*eq == '\0') {
            snprintf(err, errlen, "%s rule %d \"%.60s\": empty lock name after '='", origin, idx, text);
            return -1;
        }
        if (strlen(eq) > DLOCK_NAME_MAX) {
            snprintf(err, errlen, "%s rule %d: lock name longer than %d bytes", origin, idx, DLOCK_NAME_MAX);
            return -1;
        }
    }
    body = trim(body);
    if (*body == '\0') {
        snprintf(err, errlen, "%s rule %d \"%.60s\": empty %s", origin, idx, text,
                 r.kind == DLPL_RULE_MUTEX ? "symbol" : "glob");
        return -1;
    }
    if (r.kind == DLPL_RULE_MUTEX && !symbol_ok(body)) {
        snprintf(err, errlen, "%s rule %d: \"%.60s\" is not a symbol name", origin, idx, body);
        return -1;
    }
    if (r.kind != DLPL_RULE_MUTEX && (why = glob_misread(body, r.kind == DLPL_RULE_FILE)) != NULL) {
        snprintf(err, errlen, "%s rule %d: glob \"%.60s\": %s", origin, idx, body, why);
        return -1;
    }
    if (r.kind == DLPL_RULE_FILE && body[0] != '/') {
        if (dlpl_conf.root == NULL) {
            snprintf(err, errlen, "%s rule %d: relative glob \"%.60s\" needs DLOCK_ROOT", origin, idx, body);
            return -1;
        }
        r.relative = 1;
    }
    if (r.kind == DLPL_RULE_SEM && (strlen(body) > DLOCK_NAME_MAX || (!eq && strlen(body) >= 255))) {
        snprintf(err, errlen, "%s rule %d: semaphore glob longer than a semaphore name", origin, idx);
        return -1;
    }
    if (r.kind == DLPL_RULE_FILE && strlen(body) >= PATH_MAX) {
        snprintf(err, errlen, "%s rule %d: glob longer than %d bytes", origin, idx, PATH_MAX - 1);
        return -1;
    }
    if (dlpl_conf.nrules >= RULES_MAX) {
        snprintf(err, errlen, "%s: more than %d rules", origin, RULES_MAX);
        return -1;
    }
    r.pattern = strdup(body);
    r.name = eq ? strdup(eq) : NULL;
    if (r.pattern == NULL || (eq && r.name == NULL)) {
        free(r.pattern);
        free(r.name);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (dlpl_conf.rules == NULL) {
        dlpl_conf.rules = calloc(RULES_MAX, sizeof *dlpl_conf.rules);
        if (dlpl_conf.rules == NULL) {
            free(r.pattern);
            free(r.name);
            snprintf(err, errlen, "out of memory");
            return -1;
        }
    }
    dlpl_conf.rules[dlpl_conf.nrules++] = r;
    if (r.kind == DLPL_RULE_FILE) dlpl_conf.nfile++;
    return 0;
}

int dlpl_parse_map(const char *text, int sep, const char *origin, char *err, size_t errlen) {
    char *copy, *p, *end;
    int idx = 0, rc = 0;
    if (strlen(text) > MAP_MAX) {
        snprintf(err, errlen, "%s is longer than %d bytes", origin, MAP_MAX);
        return -1;
    }
    if ((copy = strdup(text)) == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (p = copy; p != NULL && rc == 0; p = end) {
        char *rule;
        if ((end = strchr(p, sep)) != NULL) *end++ = '\0';
        idx++;
        rule = trim(p);
        if (*rule == '\0' || (sep == '\n' && *rule == '#')) continue;
        rc = add_rule(rule, idx, origin, err, errlen);
    }
    free(copy);
    return rc;
}

int dlpl_map_path(const char *path, char *name, size_t cap) {
    const char *rel = NULL;
    size_t i;
    if (dlpl_conf.root != NULL && strncmp(path, dlpl_conf.root, dlpl_conf.rootlen) == 0 &&
        path[dlpl_conf.rootlen] == '/')
        rel = path + dlpl_conf.rootlen + 1;
    for (i = 0; i < dlpl_conf.nrules; i++) {
        const struct dlpl_rule *r = &dlpl_conf.rules[i];
        const char *subject = r->relative ? rel : path;
        const char *n;
        if (r->kind != DLPL_RULE_FILE || subject == NULL) continue;
        if (fnmatch(r->pattern, subject, FNM_PATHNAME) != 0) continue;
        n = r->name != NULL ? r->name : rel != NULL ? rel : path;
        if (strlen(n) >= cap || strlen(n) > DLOCK_NAME_MAX || *n == '\0') return 0;
        strcpy(name, n);
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------- start-up */

static char *read_file(const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "re");
    char *buf;
    size_t n;
    if (f == NULL) {
        snprintf(err, errlen, "DLOCK_MAP_FILE %.200s: %s", path, strerror(errno));
        return NULL;
    }
    if ((buf = malloc(MAP_MAX + 2)) == NULL) {
        fclose(f);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    n = fread(buf, 1, MAP_MAX + 1, f);
    fclose(f);
    if (n > MAP_MAX) {
        free(buf);
        snprintf(err, errlen, "DLOCK_MAP_FILE %.200s is longer than %d bytes", path, MAP_MAX);
        return NULL;
    }
    buf[n] = '\0';
    if (memchr(buf, '\0', n) != NULL) {
        free(buf);
        snprintf(err, errlen, "DLOCK_MAP_FILE %.200s contains a NUL byte", path);
        return NULL;
    }
    return buf;
}

static int interp_cb(struct dl_phdr_info *info, size_t size, void *arg) {
    int i;
    (void)size;
    for (i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type == PT_INTERP) {
            *(char **)arg = strdup((const char *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr));
            break;
        }
    }
    return 1; /* the first object is the program */
}

static void free_rules(void) {
    size_t i;
    for (i = 0; i < dlpl_conf.nrules; i++) {
        free(dlpl_conf.rules[i].pattern);
        free(dlpl_conf.rules[i].name);
    }
    dlpl_conf.nrules = dlpl_conf.nfile = 0;
}

static void refuse(const char *why) {
    free_rules();
    dlpl_conf.bad = 1;
    if (dlpl_conf.on_error == DLPL_ON_ERROR_CLOSED)
        dlpl_msg("%s; DLOCK_ON_ERROR=closed: every file lock will fail with ENOLCK", why);
    else
        dlpl_msg("%s; nothing is cluster-wide (DLOCK_ON_ERROR=open: locks stay local)", why);
}

static void atfork_prepare(void) {
    dlpl_file_atfork_prepare();
}
static void atfork_parent(void) {
    dlpl_file_atfork_parent();
}
static void atfork_child(void) {
    dlpl_file_atfork_child();
}

/* DLOCK_ON_ERROR, DLOCK_ON_LOST and DLOCK_ROOT into dlpl_conf.  0, or -1
 * with the first bad one said in err. */
static int read_policy(const char *onerr, const char *onlost, const char *root, char *err, size_t errlen) {
    int bad_policy = 0;
    if (onerr == NULL || *onerr == '\0' || strcmp(onerr, "open") == 0) {
        dlpl_conf.on_error = DLPL_ON_ERROR_OPEN;
    } else if (strcmp(onerr, "closed") == 0 || strcmp(onerr, "close") == 0) {
        dlpl_conf.on_error = DLPL_ON_ERROR_CLOSED;
    } else {
        /* Whoever sets it at all most likely meant "closed". */
        dlpl_conf.on_error = DLPL_ON_ERROR_CLOSED;
        snprintf(err, errlen, "DLOCK_ON_ERROR=\"%.40s\" is neither open nor closed", onerr);
        bad_policy = 1;
    }
    if (onlost == NULL || *onlost == '\0' || strcmp(onlost, "warn") == 0) {
        dlpl_conf.on_lost = DLPL_ON_LOST_WARN;
    } else if (strcmp(onlost, "abort") == 0) {
        dlpl_conf.on_lost = DLPL_ON_LOST_ABORT;
    } else if (!bad_policy) {
        snprintf(err, errlen, "DLOCK_ON_LOST=\"%.40s\" is neither abort nor warn", onlost);
        bad_policy = 1;
    }
    if (!bad_policy && root != NULL && *root != '\0') {
        size_t n = strlen(root);
        while (n > 1 && root[n - 1] == '/') n--;
        if (root[0] != '/' || n >= PATH_MAX) {
            snprintf(err, errlen, "DLOCK_ROOT=\"%.60s\" is not an absolute path", root);
            bad_policy = 1;
        } else if ((dlpl_conf.root = strndup(root, n)) != NULL) {
            dlpl_conf.rootlen = n == 1 ? 0 : n; /* "/" strips nothing but the slash */
        }
    }
    return bad_policy ? -1 : 0;
}

/* The program's client, for its circuit breaker and the mutex hooks.
 * 0, or -1 with the reason in err. */
static int open_client(char *err, size_t errlen) {
    dlock_config_t cfg;
    dlock_config_init(&cfg);
    cfg.breaker_ms = DLPL_BREAKER_MS; /* DLOCK_URL's breaker_ms, if any, wins */
    if (dlock_client_create(&dlpl_client, &cfg) != 0) {
        snprintf(err, errlen, "DLOCK_URL: %s", dlock_last_error());
        dlpl_client = NULL;
        return -1;
    }
    return 0;
}

/* The rules from DLOCK_MAP, then DLOCK_MAP_FILE (one of them is set),
 * and with them the client.  0, or -1 with the reason in err. */
static int load_rules(const char *map, const char *mapfile, char *err, size_t errlen) {
    int rc = 0;
    if (map != NULL && *map != '\0') rc = dlpl_parse_map(map, ';', "DLOCK_MAP", err, errlen);
    if (rc == 0 && mapfile != NULL && *mapfile != '\0') {
        char *text = read_file(mapfile, err, errlen);
        rc = text == NULL ? -1 : dlpl_parse_map(text, '\n', "DLOCK_MAP_FILE", err, errlen);
        free(text);
    }
    if (rc == 0 && dlpl_conf.nrules == 0) {
        snprintf(err, errlen, "DLOCK_MAP%s has no rule", mapfile != NULL && *mapfile != '\0' ? "_FILE" : "");
        rc = -1;
    }
    if (rc == 0 && dlpl_conf.nrules > 0) rc = open_client(err, errlen);
    return rc;
}

/* What the file hooks need to start keepers: this .so's own path and the
 * program's dynamic loader (a keeper is `ld.so libdlock_preload.so
 * --dlock-keeper ...`, keeper.c). */
static void start_files(void) {
    Dl_info info;
    if (dladdr((void *)start_files, &info) != 0 && info.dli_fname != NULL)
        dlpl_self_path = realpath(info.dli_fname, NULL);
    dl_iterate_phdr(interp_cb, &dlpl_interp);
    dlpl_file_init();
}

/* Start-up, in the order that keeps it safe: the real functions first
 * (every hook passes through while dlpl_guard is up), the configuration,
 * the file hooks' needs, the fork handlers, the mutex rules; only then
 * does a hook act. */
__attribute__((constructor)) static void dlpl_init(void) {
    const char *map, *mapfile, *verbose;
    char err[512];

    if (dlpl_state != DLPL_OFF) return; /* keeper mode, or twice */
    dlpl_guard++;
    if (!dlpl_resolved) dlpl_resolve();

    map = secure_getenv("DLOCK_MAP");
    mapfile = secure_getenv("DLOCK_MAP_FILE");
    verbose = secure_getenv("DLOCK_VERBOSE");
    dlpl_conf.url = secure_getenv("DLOCK_URL");
    dlpl_conf.prefix = secure_getenv("DLOCK_PREFIX");
    dlpl_conf.verbose = verbose != NULL && *verbose != '\0' && strcmp(verbose, "0") != 0;

    err[0] = '\0';
    if (read_policy(secure_getenv("DLOCK_ON_ERROR"), secure_getenv("DLOCK_ON_LOST"), secure_getenv("DLOCK_ROOT"), err,
                    sizeof err) != 0)
        refuse(err);
    else if ((map == NULL || *map == '\0') && (mapfile == NULL || *mapfile == '\0'))
        refuse("neither DLOCK_MAP nor DLOCK_MAP_FILE is set");
    else if (load_rules(map, mapfile, err, sizeof err) != 0)
        refuse(err);
    if (dlpl_conf.nfile > 0 || dlpl_conf.bad) start_files();
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
    if (!dlpl_conf.bad) {
        int n = dlpl_mutex_init();
        if (dlpl_conf.verbose)
            dlpl_msg("%zu rule(s): %zu file, %d mutex mapped; server %s; %s", dlpl_conf.nrules, dlpl_conf.nfile, n,
                     dlpl_conf.url ? "from DLOCK_URL" : "redis://127.0.0.1:6379", dlpl_policy_text());
    }
    dlpl_state = DLPL_ACTIVE;
    dlpl_guard--;
}

int dlpl_restartable(const sigset_t *mask) {
    int s;
    for (s = 1; s < NSIG; s++) {
        struct sigaction sa;
        if (sigismember(mask, s) == 1) continue;
        if (sigaction(s, NULL, &sa) != 0) continue;
        if (sa.sa_handler == SIG_DFL || sa.sa_handler == SIG_IGN) continue;
        if (!(sa.sa_flags & SA_RESTART)) return 0;
    }
    return 1;
}
