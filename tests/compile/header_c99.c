/* header_c99.c -- dlock.h as a strict C99 (or C11) program sees it: no
 * warning under -std=c99 -pedantic -Wall -Wextra -Werror (as a struct
 * timespec first seen in a parameter list would give).  Built by the ctest
 * test_header_c99 and, through pkg-config, by test_pkgconfig. */
#include <dlock.h>

int main(void) {
    dlock_mutex_t m = DLOCK_MUTEX_INITIALIZER("c99");
    const struct timespec *none = 0;
    return dlock_mutex_timedlock(&m, none) == 0 ? 0 : 1;
}
