/* labels: unit; timeout: 120 */
/* test_fuzz_replay.c -- the libFuzzer targets of fuzz/ without libFuzzer:
 * every seed of fuzz/corpus/url and fuzz/corpus/reply, and a fixed number
 * of deterministic mutations of each (bit flips, byte changes, cuts,
 * insertions, splices), go through the same entry points and the same
 * invariant checks.  So the normal and sanitizer builds of scripts/test
 * keep the targets compiling with GCC and catch a regression on any input
 * that was once added to a corpus (add crash inputs there).  The real
 * coverage-guided fuzzing is scripts/fuzz (Clang, -DDLOCK_FUZZ=ON).
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>

#include "fixture.h"

/* Both targets in one program, each under its own name. */
#define LLVMFuzzerTestOneInput fuzz_url_one
#include "../fuzz/fuzz_url.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_reply_one
#include "../fuzz/fuzz_reply.c"
#undef LLVMFuzzerTestOneInput

int fuzz_url_one(const uint8_t *data, size_t size);
int fuzz_reply_one(const uint8_t *data, size_t size);

#define MUTATIONS 20000
#define MAXLEN 8192

typedef struct seedset {
    unsigned char **data;
    size_t *len;
    size_t n;
} seedset;

static char corpus_root[1024];

static void load(const char *sub, seedset *s) {
    char dir[1200];
    DIR *d;
    struct dirent *e;
    memset(s, 0, sizeof *s);
    snprintf(dir, sizeof dir, "%s/%s", corpus_root, sub);
    if ((d = opendir(dir)) == NULL) return;
    while ((e = readdir(d)) != NULL) {
        char path[1500];
        FILE *f;
        unsigned char *buf;
        size_t n;
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if ((f = fopen(path, "rb")) == NULL) continue;
        buf = malloc(MAXLEN);
        n = buf ? fread(buf, 1, MAXLEN, f) : 0;
        fclose(f);
        if (buf == NULL) continue;
        s->data = realloc(s->data, (s->n + 1) * sizeof *s->data);
        s->len = realloc(s->len, (s->n + 1) * sizeof *s->len);
        s->data[s->n] = buf;
        s->len[s->n] = n;
        s->n++;
    }
    closedir(d);
}

static void unload(seedset *s) {
    size_t i;
    for (i = 0; i < s->n; i++) free(s->data[i]);
    free(s->data);
    free(s->len);
}

static uint64_t rng = 0x243f6a8885a308d3ull;

static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static const char *const dict[] = { "\r\n", "redis://", "@", ":", "%", "%00", "%7B", "[", "]", "?", "&", "=",
                                    "/", "*2\r\n", ":1\r\n", ":0\r\n", "$-1\r\n", "*-1\r\n", "$3\r\n", "-ERR ",
                                    "+OK", "prefix=", "drift_ms=", "99999999999999999999", "-2" };

/* One mutation of seed `i` (or a splice with seed `j`) into out. */
static size_t mutate(const seedset *s, unsigned char *out) {
    size_t i = next() % s->n, n = s->len[i], k, ops = 1 + next() % 4;
    memcpy(out, s->data[i], n);
    for (k = 0; k < ops; k++) {
        size_t pos = n ? next() % (n + 1) : 0;
        switch (next() % 6) {
        case 0: /* flip a bit */
            if (n) out[pos % n] ^= (unsigned char)(1u << (next() % 8));
            break;
        case 1: /* set a byte */
            if (n) out[pos % n] = (unsigned char)next();
            break;
        case 2: /* cut */
            n = pos;
            break;
        case 3: { /* insert a dictionary token */
            const char *t = dict[next() % (sizeof dict / sizeof dict[0])];
            size_t tl = strlen(t);
            if (n + tl < MAXLEN) {
                memmove(out + pos + tl, out + pos, n - pos);
                memcpy(out + pos, t, tl);
                n += tl;
            }
            break;
        }
        case 4: { /* splice: the tail of another seed */
            size_t j = next() % s->n, from = s->len[j] ? next() % s->len[j] : 0;
            size_t tl = s->len[j] - from;
            if (pos + tl < MAXLEN) {
                memcpy(out + pos, s->data[j] + from, tl);
                n = pos + tl;
            }
            break;
        }
        default: /* duplicate a run */
            if (n && n * 2 < MAXLEN) {
                memcpy(out + n, out, n);
                n *= 2;
            }
        }
    }
    return n;
}

static void replay(const char *sub, int (*fn)(const uint8_t *, size_t)) {
    seedset s;
    unsigned char *buf = malloc(MAXLEN);
    size_t i;
    CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
    load(sub, &s);
    if (s.n == 0) {
        fprintf(stderr, "  no seeds in %s/%s\n", corpus_root, sub);
        CU_FAIL("empty corpus");
        free(buf);
        return;
    }
    for (i = 0; i < s.n; i++) fn(s.data[i], s.len[i]); /* a broken invariant aborts */
    for (i = 0; i < MUTATIONS * s.n; i++) fn(buf, mutate(&s, buf));
    printf("  %zu seeds, %zu mutations ", s.n, (size_t)MUTATIONS * s.n);
    CU_PASS("replayed");
    unload(&s);
    free(buf);
}

static void test_url_corpus(void) {
    replay("url", fuzz_url_one);
}

static void test_reply_corpus(void) {
    replay("reply", fuzz_reply_one);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_url_corpus),
    DLT_TEST(test_reply_corpus),
    { NULL, NULL }
};

int main(int argc, char **argv) {
    const char *slash;

    /* fuzz/corpus next to this file's tests/ */
    slash = strrchr(__FILE__, '/');
    if (slash == NULL) snprintf(corpus_root, sizeof corpus_root, "../fuzz/corpus");
    else snprintf(corpus_root, sizeof corpus_root, "%.*s/../fuzz/corpus", (int)(slash - __FILE__), __FILE__);
    return dlt_main_unit(argc, argv, "fuzz_replay", tests, 600);
}
