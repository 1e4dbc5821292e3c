/* json.h -- just enough JSON to read the dlock program's --json output
 * back in the tests (test_cli, test_cli_sem): a tree of values, numbers
 * kept as text too (fences are 64-bit). */
#ifndef DLT_JSON_H
#define DLT_JSON_H

#include <stddef.h>

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jtype;
typedef struct jv {
    jtype t;
    int b;
    char *s;          /* J_STR: the decoded string; J_NUM: the text */
    struct jv **v;    /* J_ARR, J_OBJ: values */
    char **k;         /* J_OBJ: keys */
    size_t n;
} jv;

/* The value of text, or NULL if it is not one JSON value. */
jv *jparse(const char *text);
void jfree(jv *x);
/* Member key of object o, or NULL. */
jv *jget(const jv *o, const char *key);
/* A number's value (jnum: -999, jnumu: 0 when x is not a number). */
long long jnum(const jv *x);
unsigned long long jnumu(const jv *x);
/* A string's text, "" when x is not a string. */
const char *jtext(const jv *x);
int jis(const jv *x, jtype t);

#endif
