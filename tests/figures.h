/* figures.h -- live figures (DLOCK_STATS) for the tests that read them
 * back through the dlock program (test_cli_top, test_cli_exporter).  Each
 * helper works on a client of its own with figures on, whose destruction
 * flushes them; the suite's clients keep them off (fixture.c). */
#ifndef DLT_FIGURES_H
#define DLT_FIGURES_H

#include <dlock.h>

/* A client of the suite's server with live figures on (DLOCK_STATS=1 at
 * its creation only, then as it was): 0, or an errno value. */
int dlt_figures_client(dlock_client_t **out);
/* na holds of `a` of hold_ms each, then nb of `b` (released at once). */
void dlt_figures_workload(const char *a, int na, unsigned hold_ms, const char *b, int nb);
/* A hold of `lost` lost (broken under it with DLOCK_BREAK_RESET: its
 * next renewal, within a third of its 600 ms lease, is refused) and ndead
 * EDEADLK answers (an ERRORCHECK relock) of `dead`.  0, or the failing
 * step (DLT_CK). */
int dlt_figures_trouble(const char *lost, const char *dead, int ndead);
/* A hold of `name` (a 1.5 s lease, a risk handler with a 500 ms margin)
 * whose renewals go unanswered through a fault proxy until it is told it
 * is at risk, then answered again until it is told it recovered, then
 * released: one lease-at-risk warning.  0, or the failing step. */
int dlt_figures_risk(const char *name);

#endif
