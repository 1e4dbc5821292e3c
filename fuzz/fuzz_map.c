/* fuzz_map.c -- libFuzzer target: the LD_PRELOAD mode's mapping rules.
 *
 * The input's first byte chooses the separator (';' as in DLOCK_MAP, or a
 * newline as in a DLOCK_MAP_FILE, where '#' starts a comment) and whether
 * DLOCK_ROOT is set (relative file globs need it); the rest is the rules'
 * text, given to the preload's own parser, dlpl_parse_map
 * (preload/preload.c, compiled into this target as it is).  Then a few
 * paths made of the input go through dlpl_map_path.  Besides memory and UB
 * errors it checks what the parser promises: an accepted rule has a known
 * kind, a non-empty pattern (a mutex's a symbol name), a lock name of at
 * most DLOCK_NAME_MAX bytes, a relative file glob only with DLOCK_ROOT;
 * a refusal says why; a mapped path gets a non-empty name that fits.
 *
 * preload.c's neighbours (the loader and the hooks) are not linked: the
 * few functions of theirs it calls are stubs here, never reached by the
 * parser.  Its constructor runs once and finds no DLOCK_MAP.
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "preload.h"

int dlpl_mutex_init(void) { return 0; }
void dlpl_neg_atfork(int phase) { (void)phase; }
int dlpl_posix_locks_held(void) { return 0; }
const struct dlpl_impl *dlpl_impl(void) { return NULL; }

static char fuzz_map_root[] = "/srv/root";

static void fuzz_map_check_rules(void) {
    size_t i, nfile = 0;
    for (i = 0; i < dlpl_conf.nrules; i++) {
        const struct dlpl_rule *r = &dlpl_conf.rules[i];
        if (r->kind != DLPL_RULE_FILE && r->kind != DLPL_RULE_MUTEX && r->kind != DLPL_RULE_SEM) abort();
        if (r->pattern == NULL || r->pattern[0] == '\0') abort();
        if (r->name != NULL && (r->name[0] == '\0' || strlen(r->name) > DLOCK_NAME_MAX)) abort();
        if (r->kind == DLPL_RULE_MUTEX && strpbrk(r->pattern, " /*;=") != NULL) abort();
        if (r->relative && (r->kind != DLPL_RULE_FILE || dlpl_conf.root == NULL || r->pattern[0] == '/')) abort();
        if (r->undo && r->kind != DLPL_RULE_SEM) abort();
        if (r->kind == DLPL_RULE_FILE) nfile++;
    }
    if (nfile != dlpl_conf.nfile) abort();
}

/* A path made of the input: under the root or not, with its bytes. */
static void fuzz_map_path(const char *text, size_t n, int under_root) {
    char path[PATH_MAX], name[DLOCK_NAME_MAX + 1];
    size_t k;
    int w = snprintf(path, sizeof path, "%s/", under_root ? fuzz_map_root : "/tmp");
    for (k = 0; k < n && (size_t)w + 1 < sizeof path; k++)
        if (text[k] != '\0') path[w++] = text[k];
    path[w] = '\0';
    if (dlpl_map_path(path, name, sizeof name) == 1 && (name[0] == '\0' || strlen(name) > DLOCK_NAME_MAX)) abort();
}

static void fuzz_map_free(void) {
    size_t i;
    for (i = 0; i < dlpl_conf.nrules; i++) {
        free(dlpl_conf.rules[i].pattern);
        free(dlpl_conf.rules[i].name);
    }
    dlpl_conf.nrules = dlpl_conf.nfile = 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512], *text;
    int sep, rc;
    if (size == 0) return 0;
    sep = data[0] & 1 ? '\n' : ';';
    dlpl_conf.root = data[0] & 2 ? fuzz_map_root : NULL;
    dlpl_conf.rootlen = dlpl_conf.root ? strlen(dlpl_conf.root) : 0;
    if ((text = malloc(size)) == NULL) return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0'; /* the parser takes a string: a NUL ends it, as in the environment */
    err[0] = '\0';
    rc = dlpl_parse_map(text, sep, sep == ';' ? "DLOCK_MAP" : "DLOCK_MAP_FILE", err, sizeof err);
    if (rc != 0 && (rc != -1 || err[0] == '\0')) abort();
    fuzz_map_check_rules();
    fuzz_map_path(text, strlen(text), 0);
    fuzz_map_path(text, strlen(text), 1);
    fuzz_map_path(text + strlen(text) / 2, strlen(text) - strlen(text) / 2, 1);
    fuzz_map_free();
    free(text);
    return 0;
}
