/* fuzz_url.c -- libFuzzer target: URL and configuration parsing.
 *
 * The first byte of the input picks one of two modes; the rest is text:
 *
 *   even  the text, NUL-terminated, is the url of a dlock_config_t;
 *   odd   the url is "redis://u:" SECRET text: a password that starts with
 *         a known secret and goes on however the text says (an unescaped
 *         '/', '?', '@', '%'...), or no '@' at all (redis://u:SECRET, the
 *         "@host" forgotten: SECRET stands where a port goes).  Not used
 *         when the text holds the secret again (in a host it may be shown).
 *
 * The url goes to dlock__conf_parse (then dlock__conf_free).  Besides
 * memory and UB errors (ASan, UBSan), it checks what a parse promises:
 *   - failure: EINVAL (or ENOMEM) with a message in dlock_last_error();
 *   - success: a port in 1..65535, a terminated host, a valid prefix, a
 *     redacted URL without a query, which hides any password ("***");
 *   - never the password in a message or the redacted URL: in the odd
 *     mode the secret, in the even mode a decoded password of 4 bytes or
 *     more typed as is in the userinfo (and nowhere else in the url).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

#define SECRET "Zx7SeCrEt7xZ"
#define SECRET_CORE "SeCrEt"

static void fail(const char *what, const char *url) {
    fprintf(stderr, "fuzz_url: %s (url \"%s\")\n", what, url);
    abort();
}

static size_t count(const char *hay, const char *needle) {
    size_t n = 0;
    const char *s = hay;
    if (needle[0] == '\0') return 0;
    while ((s = strstr(s, needle)) != NULL) {
        n++;
        s++;
    }
    return n;
}

/* 1 if pw was typed as is (unescaped) in the URL's userinfo, and appears
 * nowhere else in it. */
static int typed_in_userinfo(const char *url, const char *pw) {
    const char *p = strstr(url, "://"), *q, *at = NULL, *s, *hit;
    if (p == NULL || pw[0] == '\0') return 0;
    p += 3;
    q = strchr(p, '?');
    if (q == NULL) q = p + strlen(p);
    for (s = p; s < q && *s != '/'; s++)
        if (*s == '@') at = s;
    hit = strstr(url, pw);
    return at != NULL && hit != NULL && hit >= p && hit + strlen(pw) <= at && count(url, pw) == 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char head[] = "redis://u:" SECRET;
    dlock_config_t cfg;
    dlock__conf conf;
    char *url, *text;
    int rc, secret_mode;

    if (size == 0) return 0;
    secret_mode = data[0] & 1;
    if ((text = malloc(size)) == NULL) return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    if (secret_mode) {
        if ((url = malloc(sizeof head + strlen(text))) == NULL) {
            free(text);
            return 0;
        }
        memcpy(url, head, sizeof head - 1);
        strcpy(url + sizeof head - 1, text);
        free(text);
        if (count(url, SECRET_CORE) != 1) { /* the secret also outside the password: may be shown */
            free(url);
            return 0;
        }
    } else {
        url = text;
    }

    dlock_config_init(&cfg);
    cfg.url = url; /* "" falls back to the default URL */
    dlock__clearerr();
    rc = dlock__conf_parse(&conf, &cfg);
    if (rc != 0) {
        if (rc != EINVAL && rc != ENOMEM) fail("a parse failed with neither EINVAL nor ENOMEM", url);
        if (dlock_last_error()[0] == '\0') fail("a parse failed without a message", url);
        if (secret_mode && strstr(dlock_last_error(), SECRET_CORE) != NULL)
            fail("the message shows the password", url);
        /* a failed parse leaves nothing allocated (LeakSanitizer checks) */
    } else {
        if (conf.ep.port < 1 || conf.ep.port > 65535) fail("port out of range", url);
        if (conf.ep.host[0] == '\0' || memchr(conf.ep.host, '\0', sizeof conf.ep.host) == NULL)
            fail("no host, or host not terminated", url);
        if (conf.prefix == NULL || strlen(conf.prefix) > 128 || strpbrk(conf.prefix, "{}") != NULL)
            fail("bad prefix accepted", url);
        if (conf.redacted_url == NULL) fail("no redacted URL", url);
        if (strchr(conf.redacted_url, '?') != NULL) fail("the redacted URL keeps the query", url);
        if (conf.db < 0) fail("negative database", url);
        if (conf.password != NULL) {
            if (strstr(conf.redacted_url, "***") == NULL) fail("a password is set but not redacted", url);
            if (strlen(conf.password) >= 4 && typed_in_userinfo(url, conf.password) &&
                strstr(conf.redacted_url, conf.password) != NULL)
                fail("the redacted URL shows the password", url);
        }
        if (secret_mode && strstr(conf.redacted_url, SECRET_CORE) != NULL)
            fail("the redacted URL shows the password", url);
        dlock__conf_free(&conf);
        if (conf.prefix != NULL || conf.password != NULL || conf.redacted_url != NULL)
            fail("dlock__conf_free left pointers behind", url);
    }
    free(url);
    return 0;
}
