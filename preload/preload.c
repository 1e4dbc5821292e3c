/* preload.c -- start-up of libdlock_preload.so, the thin interposer: the
 * real functions, the configuration from the environment (DLOCK_MAP and
 * friends, read once with secure_getenv), path and name mapping, and
 * messages.  Start-up costs what parsing the map costs (and resolving
 * mutex symbols, when there are mutex rules): no client, no thread, no
 * connection, no message -- the implementation is loaded with the first
 * mapped lock (load.c).
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
#include <signal.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "preload.h"

int dlpl_state;
__thread int dlpl_guard DLPL_TLS;
struct dlpl_real dlpl_real;
struct dlpl_conf dlpl_conf;
char *dlpl_self_path;

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

/* The real functions, each resolved at its first use (a process pays
 * for the lookups it needs, not for all of them at start-up), with the
 * version the program's own references have where glibc has several. */
#define REAL(fn, name, version, hook) { offsetof(struct dlpl_real, fn), name, version, (void *)(hook) }
static const struct {
    size_t off;
    const char *name, *version;
    void *self;
} reals[] = {
    REAL(flock, "flock", NULL, flock),
    REAL(fcntl, "fcntl", NULL, dlpl_fcntl),
    REAL(fcntl64, "fcntl64", "GLIBC_2.28", dlpl_fcntl64),
    REAL(lockf, "lockf", NULL, dlpl_lockf),
    REAL(lockf64, "lockf64", NULL, dlpl_lockf64),
    REAL(close, "close", NULL, close),
    REAL(dup, "dup", NULL, dup),
    REAL(dup2, "dup2", NULL, dup2),
    REAL(dup3, "dup3", NULL, dup3),
    REAL(close_range, "close_range", NULL, dlpl_close_range),
    REAL(closefrom, "closefrom", NULL, dlpl_closefrom),
    REAL(fclose, "fclose", NULL, fclose),
    REAL(freopen, "freopen", NULL, dlpl_freopen),
    REAL(freopen64, "freopen64", NULL, dlpl_freopen64),
    REAL(closedir, "closedir", NULL, closedir),
    REAL(mutex_lock, "pthread_mutex_lock", NULL, pthread_mutex_lock),
    REAL(mutex_trylock, "pthread_mutex_trylock", NULL, pthread_mutex_trylock),
    REAL(mutex_timedlock, "pthread_mutex_timedlock", NULL, pthread_mutex_timedlock),
    REAL(mutex_clocklock, "pthread_mutex_clocklock", NULL, pthread_mutex_clocklock),
    REAL(mutex_unlock, "pthread_mutex_unlock", NULL, pthread_mutex_unlock),
    REAL(mutex_consistent, "pthread_mutex_consistent", NULL, pthread_mutex_consistent),
    REAL(cond_wait, "pthread_cond_wait", "GLIBC_2.3.2", pthread_cond_wait),
    REAL(cond_timedwait, "pthread_cond_timedwait", "GLIBC_2.3.2", pthread_cond_timedwait),
    REAL(cond_clockwait, "pthread_cond_clockwait", NULL, pthread_cond_clockwait),
    REAL(sem_open, "sem_open", "GLIBC_2.34", sem_open),
    REAL(sem_close, "sem_close", "GLIBC_2.34", sem_close),
    REAL(sem_unlink, "sem_unlink", "GLIBC_2.34", sem_unlink),
    REAL(sem_wait, "sem_wait", "GLIBC_2.34", sem_wait),
    REAL(sem_trywait, "sem_trywait", "GLIBC_2.34", sem_trywait),
    REAL(sem_timedwait, "sem_timedwait", "GLIBC_2.34", sem_timedwait),
    REAL(sem_clockwait, "sem_clockwait", "GLIBC_2.34", sem_clockwait),
    REAL(sem_post, "sem_post", "GLIBC_2.34", sem_post),
    REAL(sem_getvalue, "sem_getvalue", "GLIBC_2.34", sem_getvalue),
    REAL(fork, "fork", NULL, fork),
};

/* Resolves the real function at offset off of struct dlpl_real.  Two
 * threads may race here: both find the same address. */
void dlpl_resolve_one(size_t off) {
    size_t i;
    for (i = 0; i < sizeof reals / sizeof reals[0]; i++) {
        void *p;
        if (reals[i].off != off) continue;
        p = next(reals[i].name, reals[i].version, reals[i].self);
        if (p == NULL && off == offsetof(struct dlpl_real, fcntl64)) p = next("fcntl", NULL, (void *)dlpl_fcntl);
        __atomic_store_n((void **)((char *)&dlpl_real + off), p, __ATOMIC_RELEASE);
        return;
    }
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
    if (r.kind == DLPL_RULE_SEM) dlpl_conf.nsem++;
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

/* The dlock name for a semaphore name, or 0 when no sem: rule matches
 * (*undo: the rule is sem+undo).  Names are matched as given and without
 * their leading '/', so that `sem:jobs` and `sem:/jobs` both match
 * sem_open("/jobs"); the default lock name is the name as given (*own). */
int dlpl_map_sem(const char *sname, char *out, size_t cap, int *undo, int *own) {
    const char *bare = sname[0] == '/' ? sname + 1 : sname;
    size_t i;
    for (i = 0; i < dlpl_conf.nrules; i++) {
        const struct dlpl_rule *r = &dlpl_conf.rules[i];
        const char *pat, *n;
        if (r->kind != DLPL_RULE_SEM) continue;
        pat = r->pattern[0] == '/' ? r->pattern + 1 : r->pattern;
        if (fnmatch(pat, bare, 0) != 0) continue;
        n = r->name != NULL ? r->name : sname;
        if (*n == '\0' || strlen(n) >= cap) return 0;
        strcpy(out, n);
        *undo = r->undo;
        *own = r->name == NULL;
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

static void free_rules(void) {
    size_t i;
    for (i = 0; i < dlpl_conf.nrules; i++) {
        free(dlpl_conf.rules[i].pattern);
        free(dlpl_conf.rules[i].name);
    }
    dlpl_conf.nrules = dlpl_conf.nfile = dlpl_conf.nsem = 0;
}

static void refuse(const char *why) {
    free_rules();
    dlpl_conf.bad = 1;
    if (dlpl_conf.on_error == DLPL_ON_ERROR_CLOSED)
        dlpl_msg("%s; DLOCK_ON_ERROR=closed: every file lock will fail with ENOLCK", why);
    else
        dlpl_msg("%s; nothing is cluster-wide (DLOCK_ON_ERROR=open: locks stay local)", why);
}

/* Through fork: the unmapped-file cache's mutex (the loader's is the
 * fork hook's, load.c; the implementation, once loaded, has handlers of
 * its own). */
static void atfork_prepare(void) {
    dlpl_neg_atfork(0);
}
static void atfork_parent(void) {
    dlpl_neg_atfork(1);
}
static void atfork_child(void) {
    dlpl_neg_atfork(2);
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

/* SIG of "signal:SIG" (a name, with or without SIG, or a number); 0 if
 * it is none. */
static int risk_signal_of(const char *v) {
    static const struct {
        const char *name;
        int sig;
    } names[] = { { "HUP", SIGHUP },   { "INT", SIGINT },   { "QUIT", SIGQUIT }, { "USR1", SIGUSR1 },
                  { "USR2", SIGUSR2 }, { "ALRM", SIGALRM }, { "TERM", SIGTERM }, { "KILL", SIGKILL } };
    char *end;
    long n;
    size_t i;
    if (strncmp(v, "signal:", 7) != 0) return 0;
    v += 7;
    if (strncmp(v, "SIG", 3) == 0) v += 3;
    for (i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(v, names[i].name) == 0) return names[i].sig;
    n = strtol(v, &end, 10);
    return end != v && *end == '\0' && n >= 1 && n <= SIGRTMAX ? (int)n : 0;
}

/* A bad value is kept as bad, not said here: it is said (once) where a
 * mapped lock's attributes would have taken it (mutex.c). */
void dlpl_conf_lock_opts(void) {
    const char *d = secure_getenv("DLOCK_LOCK_DELAY_MS"), *r = secure_getenv("DLOCK_ON_RISK");
    char *end;
    unsigned long ms;
    dlpl_conf.lock_delay = d;
    dlpl_conf.on_risk = r;
    dlpl_conf.lock_delay_ms = -1;
    if (d != NULL && *d != '\0') {
        errno = 0;
        ms = strtoul(d, &end, 10);
        dlpl_conf.lock_delay_ms = errno == 0 && *end == '\0' && *d != '-' && ms <= DLOCK_LOCK_DELAY_MAX_MS ? (int)ms
                                                                                                           : -2;
    }
    dlpl_conf.risk_sig = 0;
    if (r != NULL && *r != '\0' && strcmp(r, "ignore") != 0 && (dlpl_conf.risk_sig = risk_signal_of(r)) == 0)
        dlpl_conf.risk_sig = -1;
}

/* The rules from DLOCK_MAP, then DLOCK_MAP_FILE (one of them is set).
 * 0, or -1 with the reason in err.  A map without a rule (empty, or only
 * separators and comments) is no error: nothing is mapped. */
static int load_rules(const char *map, const char *mapfile, char *err, size_t errlen) {
    int rc = 0;
    if (map != NULL && *map != '\0') rc = dlpl_parse_map(map, ';', "DLOCK_MAP", err, errlen);
    if (rc == 0 && mapfile != NULL && *mapfile != '\0') {
        char *text = read_file(mapfile, err, errlen);
        rc = text == NULL ? -1 : dlpl_parse_map(text, '\n', "DLOCK_MAP_FILE", err, errlen);
        free(text);
    }
    return rc;
}

/* The configuration from the environment into dlpl_conf: 1 if there is
 * a map with rules, 0 if there is none (unset, empty: nothing is mapped,
 * nothing said), -1 if it is refused (said once, by refuse()). */
static int configure(void) {
    const char *map = secure_getenv("DLOCK_MAP"), *mapfile = secure_getenv("DLOCK_MAP_FILE");
    const char *verbose = secure_getenv("DLOCK_VERBOSE");
    char err[512];

    dlpl_conf.url = secure_getenv("DLOCK_URL");
    dlpl_conf.prefix = secure_getenv("DLOCK_PREFIX");
    dlpl_conf_lock_opts();
    dlpl_conf.verbose = verbose != NULL && *verbose != '\0' && strcmp(verbose, "0") != 0;
    if ((map == NULL || *map == '\0') && (mapfile == NULL || *mapfile == '\0')) {
        /* Unconfigured: LD_PRELOAD may reach programs that nobody meant
         * to map (a service tree); they run as without the library. */
        if (dlpl_conf.verbose) dlpl_msg("neither DLOCK_MAP nor DLOCK_MAP_FILE is set: nothing is mapped");
        return 0;
    }
    err[0] = '\0';
    if (read_policy(secure_getenv("DLOCK_ON_ERROR"), secure_getenv("DLOCK_ON_LOST"), secure_getenv("DLOCK_ROOT"), err,
                    sizeof err) != 0 ||
        load_rules(map, mapfile, err, sizeof err) != 0) {
        refuse(err);
        return -1;
    }
    if (dlpl_conf.nrules == 0 && dlpl_conf.verbose)
        dlpl_msg("DLOCK_MAP%s has no rule: nothing is mapped", map == NULL || *map == '\0' ? "_FILE" : "");
    return dlpl_conf.nrules > 0;
}

/* Start-up, in the order that keeps it safe: the real functions first
 * (every hook passes through while dlpl_guard is up), the configuration,
 * the fork handlers, the mutex rules; only then does a hook act.  An exec
 * that kept record locks of this process on mapped files loads the
 * implementation now, to take them over (range.c). */
__attribute__((constructor)) static void dlpl_init(void) {
    int n;
    if (dlpl_state != DLPL_OFF) return; /* keeper mode, or twice */
    dlpl_guard++;
    if (configure() > 0) {
        pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
        n = dlpl_mutex_init();
        if (dlpl_conf.verbose)
            dlpl_msg("%zu rule(s): %zu file, %d mutex mapped; server %s; %s", dlpl_conf.nrules, dlpl_conf.nfile, n,
                     dlpl_conf.url ? "from DLOCK_URL" : "redis://127.0.0.1:6379", dlpl_policy_text());
    }
    dlpl_state = DLPL_ACTIVE;
    if (dlpl_conf.nfile > 0 && dlpl_posix_locks_held()) (void)dlpl_impl();
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
