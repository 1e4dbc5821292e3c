/* json.c -- just enough JSON for the tests (json.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

void jfree(jv *x) {
    size_t i;
    if (x == NULL) return;
    for (i = 0; i < x->n; i++) {
        jfree(x->v[i]);
        if (x->k) free(x->k[i]);
    }
    free(x->v);
    free(x->k);
    free(x->s);
    free(x);
}

static const char *jws(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}

static void put_utf8(char **o, unsigned cp) {
    char *q = *o;
    if (cp < 0x80) *q++ = (char)cp;
    else if (cp < 0x800) *q++ = (char)(0xC0 | cp >> 6), *q++ = (char)(0x80 | (cp & 0x3F));
    else if (cp < 0x10000)
        *q++ = (char)(0xE0 | cp >> 12), *q++ = (char)(0x80 | ((cp >> 6) & 0x3F)), *q++ = (char)(0x80 | (cp & 0x3F));
    else
        *q++ = (char)(0xF0 | cp >> 18), *q++ = (char)(0x80 | ((cp >> 12) & 0x3F)),
        *q++ = (char)(0x80 | ((cp >> 6) & 0x3F)), *q++ = (char)(0x80 | (cp & 0x3F));
    *o = q;
}

static const char *jstr(const char *p, char **out) {
    char *o = malloc(strlen(p) * 4 + 1), *q = o;
    if (*p++ != '"') {
        free(o);
        return NULL;
    }
    while (*p != '"') {
        if ((unsigned char)*p < 0x20) goto bad; /* raw control characters are not JSON */
        if (*p != '\\') {
            *q++ = *p++;
            continue;
        }
        p++;
        switch (*p++) {
        case '"': *q++ = '"'; break;
        case '\\': *q++ = '\\'; break;
        case '/': *q++ = '/'; break;
        case 'b': *q++ = '\b'; break;
        case 'f': *q++ = '\f'; break;
        case 'n': *q++ = '\n'; break;
        case 'r': *q++ = '\r'; break;
        case 't': *q++ = '\t'; break;
        case 'u': {
            unsigned cp = 0;
            int i;
            for (i = 0; i < 4; i++) {
                char c = *p++;
                cp <<= 4;
                if (c >= '0' && c <= '9') cp |= (unsigned)(c - '0');
                else if (c >= 'a' && c <= 'f') cp |= (unsigned)(c - 'a' + 10);
                else if (c >= 'A' && c <= 'F') cp |= (unsigned)(c - 'A' + 10);
                else goto bad;
            }
            put_utf8(&q, cp);
            break;
        }
        default:
            goto bad;
        }
    }
    *q = '\0';
    *out = o;
    return p + 1;
bad:
    free(o);
    return NULL;
}

static const char *jval(const char *p, jv **out);

static const char *jlist(const char *p, jv *x, char close, int keyed) {
    p = jws(p + 1);
    if (*p == close) return p + 1;
    for (;;) {
        jv *v = NULL;
        char *key = NULL;
        x->v = realloc(x->v, (x->n + 1) * sizeof *x->v);
        if (keyed) {
            x->k = realloc(x->k, (x->n + 1) * sizeof *x->k);
            if ((p = jstr(jws(p), &key)) == NULL) return NULL;
            p = jws(p);
            if (*p++ != ':') {
                free(key);
                return NULL;
            }
        }
        if ((p = jval(p, &v)) == NULL) {
            free(key);
            return NULL;
        }
        if (keyed) x->k[x->n] = key;
        x->v[x->n++] = v;
        p = jws(p);
        if (*p == ',') {
            p++;
            continue;
        }
        if (*p == close) return p + 1;
        return NULL;
    }
}

static const char *jval(const char *p, jv **out) {
    jv *x = calloc(1, sizeof *x);
    p = jws(p);
    *out = x;
    if (*p == '{') {
        x->t = J_OBJ;
        return jlist(p, x, '}', 1);
    }
    if (*p == '[') {
        x->t = J_ARR;
        return jlist(p, x, ']', 0);
    }
    if (*p == '"') {
        x->t = J_STR;
        return jstr(p, &x->s);
    }
    if (strncmp(p, "true", 4) == 0 || strncmp(p, "false", 5) == 0) {
        x->t = J_BOOL;
        x->b = *p == 't';
        return p + (x->b ? 4 : 5);
    }
    if (strncmp(p, "null", 4) == 0) {
        x->t = J_NULL;
        return p + 4;
    }
    if (*p == '-' || (*p >= '0' && *p <= '9')) {
        const char *s = p;
        x->t = J_NUM;
        if (*p == '-') p++;
        while ((*p >= '0' && *p <= '9') || *p == '.' || *p == 'e' || *p == 'E' || *p == '+' || *p == '-') p++;
        x->s = strndup(s, (size_t)(p - s));
        return p;
    }
    return NULL;
}

/* The whole text as one JSON value, or NULL. */
jv *jparse(const char *text) {
    jv *x = NULL;
    const char *p = jval(text, &x);
    if (p == NULL || *jws(p) != '\0') {
        jfree(x);
        return NULL;
    }
    return x;
}

jv *jget(const jv *o, const char *key) {
    size_t i;
    if (o == NULL || o->t != J_OBJ) return NULL;
    for (i = 0; i < o->n; i++)
        if (strcmp(o->k[i], key) == 0) return o->v[i];
    return NULL;
}

long long jnum(const jv *x) {
    return x != NULL && x->t == J_NUM ? strtoll(x->s, NULL, 10) : -999;
}

unsigned long long jnumu(const jv *x) {
    return x != NULL && x->t == J_NUM ? strtoull(x->s, NULL, 10) : 0;
}

const char *jtext(const jv *x) {
    return x != NULL && x->t == J_STR ? x->s : "";
}

int jis(const jv *x, jtype t) {
    return x != NULL && x->t == t;
}

