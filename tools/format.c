/* format.c -- how the dlock command reads durations and writes times,
 * durations, lock names, hosts and JSON.
 *
 * Lock names are any bytes but NUL and host names come from the lock's
 * hash on the server: neither is trusted.  Everything shown on a terminal
 * goes through cli_fmt_safe (no control bytes, so a name cannot move the
 * cursor or retitle the terminal) and everything in JSON through
 * cli_json_str (always valid JSON, whatever the bytes).
 */
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli.h"

int64_t cli_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Durations are decimal, never locale-dependent: "2.5" is two and a half
 * seconds everywhere.  At most ten years, so that ms fits with room. */
int cli_parse_duration(const char *s, int64_t *ms) {
    static const struct {
        const char *unit;
        int64_t ms;
    } units[] = { { "", 1000 }, { "ms", 1 }, { "s", 1000 }, { "m", 60000 }, { "h", 3600000 } };
    int64_t whole = 0, frac = 0, scale = 1, unit = -1;
    const char *p = s;
    size_t i;
    int digits = 0;

    if (s == NULL) return -1;
    for (; isdigit((unsigned char)*p); p++, digits++) {
        whole = whole * 10 + (*p - '0');
        if (whole > 10LL * 366 * 24 * 3600 * 1000) return -1;
    }
    if (*p == '.') {
        for (p++; isdigit((unsigned char)*p); p++, digits++) {
            if (scale < 1000000000) {
                frac = frac * 10 + (*p - '0');
                scale *= 10;
            }
        }
    }
    if (digits == 0) return -1;
    for (i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcmp(p, units[i].unit) == 0) unit = units[i].ms;
    if (unit < 0) return -1;
    if (whole > 10LL * 366 * 24 * 3600 * 1000 / unit) return -1;
    *ms = whole * unit + frac * unit / scale;
    return 0;
}

char *cli_fmt_dur(char *buf, size_t n, int64_t ms) {
    if (ms < 0)
        snprintf(buf, n, "-");
    else if (ms < 1000)
        snprintf(buf, n, "%" PRId64 "ms", ms);
    else if (ms < 60000)
        snprintf(buf, n, "%" PRId64 ".%" PRId64 "s", ms / 1000, ms % 1000 / 100);
    else
        return cli_fmt_secs(buf, n, ms);
    return buf;
}

char *cli_fmt_secs(char *buf, size_t n, int64_t ms) {
    int64_t s = ms < 0 ? 0 : ms / 1000;
    if (s < 60)
        snprintf(buf, n, "%" PRId64 "s", s);
    else if (s < 3600)
        snprintf(buf, n, "%" PRId64 "m%02" PRId64 "s", s / 60, s % 60);
    else if (s < 86400)
        snprintf(buf, n, "%" PRId64 "h%02" PRId64 "m", s / 3600, s % 3600 / 60);
    else
        snprintf(buf, n, "%" PRId64 "d%02" PRId64 "h", s / 86400, s % 86400 / 3600);
    return buf;
}

char *cli_fmt_local(char *buf, size_t n, int64_t ms) {
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    if (ms <= 0 || localtime_r(&t, &tm) == NULL || strftime(buf, n, "%Y-%m-%d %H:%M:%S", &tm) == 0)
        snprintf(buf, n, "-");
    return buf;
}

char *cli_fmt_iso(char *buf, size_t n, int64_t ms) {
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    char day[32];
    if (ms <= 0 || gmtime_r(&t, &tm) == NULL || strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", &tm) == 0)
        snprintf(buf, n, "-");
    else
        snprintf(buf, n, "%s.%03dZ", day, (int)(ms % 1000));
    return buf;
}

/* The length of the valid UTF-8 sequence at s (1-4), with its code point
 * in *cp; 0 if the bytes there are not valid UTF-8 (overlong forms,
 * surrogates and values past U+10FFFF are not). */
static size_t utf8_seq(const unsigned char *s, uint32_t *cp) {
    uint32_t c = s[0], min;
    size_t len, i;
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if ((c & 0xE0) == 0xC0) len = 2, c &= 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0) len = 3, c &= 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0) len = 4, c &= 0x07, min = 0x10000;
    else return 0;
    for (i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        c = (c << 6) | (s[i] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
    *cp = c;
    return len;
}

char *cli_fmt_safe(char *buf, size_t n, const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    size_t o = 0;
    if (n == 0) return buf;
    while (*p && o + 5 < n) {
        uint32_t cp;
        size_t len = utf8_seq(p, &cp);
        if (len == 1 && cp >= 0x20 && cp != 0x7F && cp != '\\') {
            buf[o++] = (char)*p++;
        } else if (len == 1 && cp == '\\') {
            buf[o++] = '\\';
            buf[o++] = '\\';
            p++;
        } else if (len > 1 && !(cp >= 0x80 && cp <= 0x9F)) { /* not a C1 control */
            if (o + len >= n) break;
            memcpy(buf + o, p, len);
            o += len;
            p += len;
        } else {
            o += (size_t)snprintf(buf + o, n - o, "\\x%02X", *p++);
        }
    }
    if (*p && o + 3 < n) {
        strcpy(buf + o, "...");
        o += 3;
    }
    buf[o] = '\0';
    return buf;
}

void cli_json_str(FILE *f, const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    fputc('"', f);
    while (*p) {
        uint32_t cp;
        size_t len = utf8_seq(p, &cp);
        if (len == 0) {
            fprintf(f, "\\u%04X", *p++); /* not UTF-8: the byte, read as Latin-1 */
        } else if (len > 1) {
            fwrite(p, 1, len, f);
            p += len;
        } else {
            switch (cp) {
            case '"': fputs("\\\"", f); break;
            case '\\': fputs("\\\\", f); break;
            case '\n': fputs("\\n", f); break;
            case '\r': fputs("\\r", f); break;
            case '\t': fputs("\\t", f); break;
            default:
                if (cp < 0x20 || cp == 0x7F)
                    fprintf(f, "\\u%04X", (unsigned)cp);
                else
                    fputc((int)cp, f);
            }
            p++;
        }
    }
    fputc('"', f);
}

char *cli_fmt_lvb(char *buf, size_t n, const cli_lock *l) {
    size_t at = 0;
    if (l->lvb_valid < 0) {
        snprintf(buf, n, "none");
        return buf;
    }
    for (size_t b = 0; b < l->lvblen && at + 4 < n; b++) at += (size_t)snprintf(buf + at, n - at, "%02x ", l->lvb[b]);
    snprintf(buf + at, n - at, "(%zu bytes, %s)", l->lvblen,
             l->lvb_valid ? "valid" : "invalid: a hold ended without a release since it was written");
    return buf;
}

const char *cli_state(const dlock_lock_info_t *i) {
    return i->held ? "exclusive" : i->readers > 0 ? "shared" : "free";
}

const char *cli_robust(const dlock_lock_info_t *i) {
    switch (i->robust_state) {
    case 1: return i->held ? "robust" : "ownerdead";
    case 2: return "notrecoverable";
    default: return "none";
    }
}

char *cli_fmt_holder(char *buf, size_t n, const dlock_lock_info_t *i) {
    char host[160];
    snprintf(buf, n, "%s, pid %ld, thread %lu", cli_fmt_safe(host, sizeof host, i->host[0] ? i->host : "?"),
             i->pid, i->tid);
    return buf;
}

int64_t cli_held_ms(const dlock_lock_info_t *i) {
    int64_t now = i->server_now_ms > 0 ? i->server_now_ms : cli_now_ms(), d;
    if (i->since_ms <= 0) return 0;
    d = now - i->since_ms;
    return d < 0 ? 0 : d;
}

void cli_json_lock(FILE *f, const cli_lock *l) {
    fputc('{', f);
    cli_json_lock_fields(f, l);
    fputc('}', f);
}

void cli_json_lock_fields(FILE *f, const cli_lock *l) {
    const dlock_lock_info_t *i = &l->info;
    char iso[64];
    fputs("\"name\":", f);
    cli_json_str(f, l->name);
    fprintf(f, ",\"state\":\"%s\",\"holder\":", cli_state(i));
    if (i->held) {
        fputs("{\"host\":", f);
        cli_json_str(f, i->host);
        fprintf(f, ",\"pid\":%ld,\"tid\":%lu}", i->pid, i->tid);
        if (i->since_ms > 0) {
            fprintf(f, ",\"acquired_ms\":%" PRId64 ",\"acquired\":\"%s\",\"held_ms\":%" PRId64, i->since_ms,
                    cli_fmt_iso(iso, sizeof iso, i->since_ms), cli_held_ms(i));
        } else {
            fputs(",\"acquired_ms\":null,\"acquired\":null,\"held_ms\":null", f);
        }
        if (i->lease_left_ms >= 0)
            fprintf(f, ",\"lease_left_ms\":%" PRId64, i->lease_left_ms);
        else
            fputs(",\"lease_left_ms\":null", f);
        if (i->fence != 0) fprintf(f, ",\"fence\":%" PRIu64, i->fence);
        else fputs(",\"fence\":null", f); /* not kept yet: taken on the uncontended path, recorded at its first renewal */
    } else {
        fputs("null,\"acquired_ms\":null,\"acquired\":null,\"held_ms\":null,\"lease_left_ms\":null,\"fence\":null", f);
    }
    fprintf(f, ",\"shared_holders\":%u,\"writers_waiting\":%u,\"robust\":\"%s\"", i->readers, i->writers_waiting,
            cli_robust(i));
    if (i->server_now_ms > 0) fprintf(f, ",\"server_time_ms\":%" PRId64, i->server_now_ms);
    if (l->lvb_read && l->lvb_valid < 0) {
        fputs(",\"lvb\":null", f);
    } else if (l->lvb_read) { /* the value block, in hex */
        fputs(",\"lvb\":{\"hex\":\"", f);
        for (size_t b = 0; b < l->lvblen; b++) fprintf(f, "%02x", l->lvb[b]);
        fprintf(f, "\",\"valid\":%s}", l->lvb_valid ? "true" : "false");
    }
    /* in its lock-delay: its last hold ended without a release */
    if (i->delay_left_ms > 0)
        fprintf(f, ",\"delay_left_ms\":%" PRId64 ",\"delay_until\":\"%s\"", i->delay_left_ms,
                cli_fmt_iso(iso, sizeof iso, i->server_now_ms + i->delay_left_ms));
    else
        fputs(",\"delay_left_ms\":0,\"delay_until\":null", f);
}

/* ------------------------------------------------------------ semaphores */

char *cli_fmt_person(char *buf, size_t n, const dlock_sem_owner_t *o) {
    char host[160];
    if (o->pid == 0 && o->host[0] == '\0')
        snprintf(buf, n, "(not named)");
    else
        snprintf(buf, n, "%s, pid %ld, thread %lu", cli_fmt_safe(host, sizeof host, o->host[0] ? o->host : "?"),
                 o->pid, o->tid);
    return buf;
}

int64_t cli_waited_ms(const dlock_lock_waiter_t *w) {
    int64_t d = w->server_now_ms - w->since_ms;
    return d < 0 ? 0 : d;
}

void cli_json_waiter_open(FILE *f, const dlock_lock_waiter_t *w) {
    fputs("{\"host\":", f);
    cli_json_str(f, w->host);
    fprintf(f, ",\"pid\":%ld,\"tid\":%lu,\"since_ms\":%lld,\"waited_ms\":%lld,\"mode\":\"%s\",\"deadlock\":%s", w->pid,
            w->tid, (long long)w->since_ms, (long long)cli_waited_ms(w), w->shared ? "shared" : "exclusive",
            w->deadlock ? "true" : "false");
}

int64_t cli_since_ms(const dlock_sem_info_t *i, const dlock_sem_owner_t *o) {
    int64_t now = i->server_now_ms > 0 ? i->server_now_ms : cli_now_ms(), d;
    if (o->since_ms <= 0) return 0;
    d = now - o->since_ms;
    return d < 0 ? 0 : d;
}

/* One person as a JSON object: "waiters" or "units" entries. */
static void json_person(FILE *f, const dlock_sem_info_t *i, const dlock_sem_owner_t *o) {
    char iso[64];
    fputs("{\"host\":", f);
    cli_json_str(f, o->host);
    fprintf(f, ",\"pid\":%ld,\"tid\":%lu", o->pid, o->tid);
    if (o->since_ms > 0)
        fprintf(f, ",\"since_ms\":%" PRId64 ",\"since\":\"%s\",\"%s\":%" PRId64, o->since_ms,
                cli_fmt_iso(iso, sizeof iso, o->since_ms), o->kind == DLOCK_SEM_WAITING ? "waited_ms" : "held_ms",
                cli_since_ms(i, o));
    else
        fprintf(f, ",\"since_ms\":null,\"since\":null,\"%s\":null", o->kind == DLOCK_SEM_WAITING ? "waited_ms" : "held_ms");
    if (o->kind == DLOCK_SEM_WAITING) {
        if (o->place >= 0) fprintf(f, ",\"place\":%ld,\"handed\":false", o->place);
        else fputs(",\"place\":null,\"handed\":true", f);
    } else {
        fprintf(f, ",\"lease_left_ms\":%" PRId64, o->lease_left_ms);
    }
    fputc('}', f);
}

/* The people of one kind as a JSON array. */
static void json_people(FILE *f, const cli_sem *s, int kind) {
    size_t k;
    int first = 1;
    fputc('[', f);
    for (k = 0; k < s->npeople; k++) {
        if (s->people[k].kind != kind) continue;
        if (!first) fputc(',', f);
        first = 0;
        json_person(f, &s->info, &s->people[k]);
    }
    fputc(']', f);
}

void cli_json_sem(FILE *f, const cli_sem *s) {
    const dlock_sem_info_t *i = &s->info;
    fputs("{\"name\":", f);
    cli_json_str(f, s->name);
    fprintf(f, ",\"kind\":\"semaphore\",\"exists\":%s,\"value\":%d,\"waiting\":%u,\"leased\":%u",
            i->exists ? "true" : "false", i->value, i->waiters, i->leased);
    /* when it was made again after the server lost it: null never */
    if (i->remade_ms > 0) {
        char iso[64];
        fprintf(f, ",\"remade_ms\":%" PRId64 ",\"remade\":\"%s\"", i->remade_ms,
                cli_fmt_iso(iso, sizeof iso, i->remade_ms));
    } else {
        fputs(",\"remade_ms\":null,\"remade\":null", f);
    }
    if (s->have_people) {
        fputs(",\"waiters\":", f);
        json_people(f, s, DLOCK_SEM_WAITING);
        fputs(",\"units\":", f);
        json_people(f, s, DLOCK_SEM_LEASED);
    }
    if (i->server_now_ms > 0) fprintf(f, ",\"server_time_ms\":%" PRId64, i->server_now_ms);
    fputc('}', f);
}

/* Prometheus label values and Graphviz quoted strings share their escapes
 * (\\, \", \n) and both want UTF-8: a byte that is not part of valid
 * UTF-8 becomes U+FFFD, and other control bytes a space, so that the
 * label or the picture stays readable whatever the name holds. */
void cli_quoted_str(FILE *f, const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        uint32_t cp;
        size_t len = utf8_seq(p, &cp);
        if (len == 0) {
            fputs("\xEF\xBF\xBD", f);
            p++;
            continue;
        }
        if (len > 1) fwrite(p, 1, len, f);
        else if (cp == '"' || cp == '\\') fprintf(f, "\\%c", (int)cp);
        else if (cp == '\n') fputs("\\n", f);
        else fputc(cp < 0x20 || cp == 0x7F ? ' ' : (int)cp, f);
        p += len;
    }
}
