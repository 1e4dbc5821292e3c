/* lock-live.pml -- lock.pml with no clock and no faults, both clients fair
 * waiters: a queued waiter is granted the lock when its holder releases
 * (no lost wakeup).  Checked under weak fairness:
 *   spin -search -a -f -ltl wake lock-live.pml */
#define LIVE
#define NOGUARD             /* its busy answer needs the clock to end */
#define ROUNDS2 2
#include "lock.pml"

#define WAITS(c) (ph[c] == WAITQ)
ltl wake { [] ((WAITS(1) -> <> (ph[1] == HOLD)) && (WAITS(2) -> <> (ph[2] == HOLD))) }
