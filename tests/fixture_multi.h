/* fixture_multi.h -- deployments of several redis-servers for the tests,
 * built on fixture.h's launcher (dlt_redis_start, dlt_redis_start_tls):
 *
 *   dlt_cluster   a Redis Cluster of N masters (and replicas)
 *   dlt_sentinel  a master, its replicas and the sentinels watching it
 *   dlt_masters   N independent masters (Redlock)
 *   dlt_tls_server_start  a TLS-only server, with a password or ACL user
 *
 * Every server is one of the fixture's: started on a free loopback port in
 * a folder of its own, killed by pid (and its folder removed) at the end of
 * the test process whatever ends it.  A struct of these may be static and
 * zero: its cleanup is then safe before any start, and twice.
 */
#ifndef DLT_FIXTURE_MULTI_H
#define DLT_FIXTURE_MULTI_H

#include "fixture.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
 * Any server.
 * ---------------------------------------------------------------------- */
/* 1 if r is a status reply (+OK); else 0, the error said on stderr.  Frees r. */
int dlt_reply_ok(redisReply *r);
/* EXISTS key on r: 1, 0, or -1 (no answer, or an error reply such as
 * MOVED). */
int dlt_redis_exists(dlt_redis *r, const char *key);
/* The same for the lock key of name ("dlock:{name}"). */
int dlt_redis_lock_exists(dlt_redis *r, const char *name);
/* 1 if r runs and its answer to cmd (no arguments: "CLUSTER INFO", "INFO
 * replication") contains needle. */
int dlt_redis_has(dlt_redis *r, const char *cmd, const char *needle);
/* The first element of ROLE ("master", "slave", ...) into buf: 0, or -1 (buf "")
 * when r does not run or answer. */
int dlt_redis_role(dlt_redis *r, char *buf, size_t cap);

/* ------------------------------------------------------------------------
 * Hash slots, computed here (CRC16/XModem, as the cluster does),
 * independently of the library.
 * ---------------------------------------------------------------------- */
#define DLT_SLOTS 16384
/* The slot of key (its {hash tag} if it has a non-empty one). */
int dlt_key_slot(const char *key);
/* The slot of the lock key of name ("dlock:{name}"). */
int dlt_lock_slot(const char *name);
/* Writes into buf the first name "<stem><k>" (k >= *next) whose lock slot
 * the node `node` owns in the map owner (node < 0: any) -- or, with
 * slot >= 0, whose lock slot is exactly slot.  *next moves past it.  0, or
 * -1 if none was found. */
int dlt_slot_name(char *buf, size_t cap, const char *stem, int *next, const signed char *owner, int node,
                  int slot);

/* ------------------------------------------------------------------------
 * (a) A Redis Cluster: masters nodes 0 .. masters-1 with the slots split
 * as redis-cli splits them (3 masters: 0-5460, 5461-10922, 10923-16383),
 * then replicas: node masters + k replicates master k % masters.
 * ---------------------------------------------------------------------- */
#define DLT_CLUSTER_MAX 8

typedef struct dlt_cluster {
    int n, masters, tls;           /* nodes; of them masters; TLS-only */
    dlt_redis node[DLT_CLUSTER_MAX];
    char id[DLT_CLUSTER_MAX][64];  /* CLUSTER MYID of each */
} dlt_cluster;

/* Starts masters + masters * replicas cluster-enabled servers (TLS-only
 * ones with tls, the certificates of dlt_tls_dir()), gives the masters
 * their slots, makes them meet, sets the replicas, and waits up to 20 s
 * until dlt_cluster_healthy.  The config: "cluster-enabled yes",
 * "cluster-node-timeout 2000", "cluster-require-full-coverage no", then
 * extra_conf (may be NULL), which may override them.  0, or -1 with
 * nothing left running. */
int dlt_cluster_start(dlt_cluster *c, int masters, int replicas, int tls, const char *extra_conf);
/* Every node up, cluster_state:ok, knowing every node, every slot
 * assigned, none migrating or importing; every master with its replicas
 * online, every replica linked to its master, CLUSTER NODES agreeing on
 * the roles; every node's slot map as formed.  quiet 0: why not, on
 * stderr.  1 or 0. */
int dlt_cluster_healthy(dlt_cluster *c, int quiet);
/* Polls dlt_cluster_healthy up to timeout_ms: 1, or 0 (why on stderr). */
int dlt_cluster_wait_ok(dlt_cluster *c, int timeout_ms);
/* FLUSHALL and CONFIG RESETSTAT on every node: 0, or -1. */
int dlt_cluster_flush(dlt_cluster *c);
/* Every node cleaned up (dlt_redis_cleanup); c zeroed. */
void dlt_cluster_cleanup(dlt_cluster *c);
/* Node i SIGKILLed, SIGTERMed, started again (same port, folder and
 * nodes.conf: it rejoins).  0 or -1. */
int dlt_cluster_kill(dlt_cluster *c, int i);
int dlt_cluster_stop(dlt_cluster *c, int i);
int dlt_cluster_restart(dlt_cluster *c, int i);
/* "redis+cluster://127.0.0.1:P,..." ("rediss+cluster://" for a TLS one)
 * for the nodes listed in which (digits: "0", "21"), then "?query" when
 * query is not NULL. */
void dlt_cluster_url(const dlt_cluster *c, char *buf, size_t cap, const char *which, const char *query);
/* A 3-master cluster (*cl, zeroed first) and a client on it (*out, an
 * unreachable bound of 5 s), its URL in url: 0, or -1 with nothing left
 * running. */
int dlt_cluster_client(dlt_cluster *cl, char *url, size_t cap, dlock_client_t **out);
/* The index of the node listening on port, or -1. */
int dlt_cluster_node_of(const dlt_cluster *c, long long port);
/* Node i's slot map (CLUSTER SLOTS): owner[s] = the index of the master
 * serving s, -1 none.  The number of ranges, or -1 (no answer). */
int dlt_cluster_slot_map(dlt_cluster *c, int i, signed char owner[DLT_SLOTS]);
/* The master of slot as the first node that answers names it, or -1. */
int dlt_cluster_slot_owner(dlt_cluster *c, int slot);
/* CLUSTER KEYSLOT key on node i, or -1. */
int dlt_cluster_keyslot(dlt_cluster *c, int i, const char *key);
/* The port node i names when it answers EXISTS key with MOVED; 0 if it
 * answered the EXISTS itself; -1 on no answer or another error. */
int dlt_cluster_moved_port(dlt_cluster *c, int i, const char *key);
/* Subscribers of channel on node i, classic (PUBSUB NUMSUB) plus sharded
 * (PUBSUB SHARDNUMSUB, alone with sharded_only); -1 on no answer. */
long long dlt_cluster_subs(dlt_cluster *c, int i, const char *channel, int sharded_only);
/* Polls (5 s) until channel has a subscriber on some running node: their
 * number over all of them, where ("node 0, node 2") into where. */
long long dlt_cluster_subs_wait(dlt_cluster *c, const char *channel, char *where, size_t cap);

/* ------------------------------------------------------------------------
 * (b) A Sentinel deployment: node 0 the first master, nodes 1.. its
 * replicas, sentinels monitoring it as DLT_SENTINEL_MASTER.
 * ---------------------------------------------------------------------- */
#define DLT_SENTINEL_MASTER "mymaster"
#define DLT_SENTINEL_MAXN 3 /* nodes: the master and up to 2 replicas */
#define DLT_SENTINEL_MAXS 3 /* sentinels */

typedef struct dlt_sentinel {
    int nnodes, nsents;
    dlt_redis node[DLT_SENTINEL_MAXN];
    dlt_redis sent[DLT_SENTINEL_MAXS];
    char url[512]; /* redis+sentinel://127.0.0.1:S1,...,127.0.0.1:Sn/mymaster */
} dlt_sentinel;

/* Starts 1 master, nrep replicas of it (replicaof, read-only) and nsent
 * sentinels (quorum 2, or 1 with a single sentinel; down after 1 s,
 * failover timeout 5 s), every one TLS-only with the certificates in
 * tls_dir when it is not NULL; sets s->url ("redis+sentinel://..." or
 * "rediss+sentinel://...", no query) and waits up to healthy_ms until
 * dlt_sentinel_wait_healthy (meanwhile the sentinels say hello every
 * 100 ms, to find each other, then every 2 s as Redis' do).  0, or -1
 * (what started is left for dlt_sentinel_cleanup, or for the fixture at
 * exit). */
int dlt_sentinel_start(dlt_sentinel *s, int nrep, int nsent, const char *tls_dir, int healthy_ms);
/* Every server cleaned up; s zeroed. */
void dlt_sentinel_cleanup(dlt_sentinel *s);
/* Polls until the master (the node every sentinel names) has nrep online
 * replicas and every sentinel knows them and the other sentinels, within
 * timeout_ms.  The master's node index, or -1 (why on stderr). */
int dlt_sentinel_wait_healthy(dlt_sentinel *s, int nrep, int timeout_ms);
/* The master port every sentinel names, or -1 while they disagree (or one
 * is silent). */
int dlt_sentinel_agreed_port(dlt_sentinel *s);
/* The index of the node listening on port, or -1. */
int dlt_sentinel_node_of(const dlt_sentinel *s, int port);
/* SENTINEL FAILOVER mymaster on sentinel k, asked again every 200 ms
 * (each refusal on stderr) until it says OK, at most 50 times: 1 if it
 * did, else 0. */
int dlt_sentinel_failover(dlt_sentinel *s, int k);
/* Polls until every sentinel names one master other than node old and
 * that node answers ROLE master, within timeout_ms.  Its index, or -1. */
int dlt_sentinel_wait_new_master(dlt_sentinel *s, int old, int timeout_ms);
/* s->url with "?query" appended (query "" or NULL: none). */
void dlt_sentinel_url(const dlt_sentinel *s, char *buf, size_t cap, const char *query);
/* Replicas node i reports online (INFO replication), or -1. */
int dlt_sentinel_replicas_online(dlt_sentinel *s, int i);

/* ------------------------------------------------------------------------
 * (c) Independent masters (Redlock).
 * ---------------------------------------------------------------------- */
#define DLT_MASTERS_MAX 8

typedef struct dlt_masters {
    int n, tls;
    dlt_redis srv[DLT_MASTERS_MAX];
    char url[512]; /* "redlock://127.0.0.1:P1,...,127.0.0.1:Pn"; TLS:
                       "rediss+redlock://...?tls_ca_file=DIR/ca.crt" */
} dlt_masters;

/* Cleans m up, then starts n fresh masters (TLS-only ones with tls, the
 * certificates of dlt_tls_dir()) and sets m->url.  0, or -1 with none left. */
int dlt_masters_start(dlt_masters *m, int n, int tls);
/* dlt_masters_start in a test: if the masters do not start, the test
 * fails there and returns. */
#define DLT_MASTERS_UP(m, n, tls)                          \
    do {                                                   \
        int ok_ = dlt_masters_start((m), (n), (tls)) == 0; \
        CU_ASSERT_TRUE(ok_);                               \
        if (!ok_) return;                                  \
    } while (0)
/* Every master cleaned up; m zeroed. */
void dlt_masters_cleanup(dlt_masters *m);
/* How many masters (of those that answer) have the lock key of name. */
int dlt_masters_lock_count(dlt_masters *m, const char *name);

/* ------------------------------------------------------------------------
 * (d) A TLS-only server (dlt_redis_start_tls, the certificates of
 * dlt_tls_dir(): its path is r->tls_dir).
 * ---------------------------------------------------------------------- */
/* auth_clients: "tls-auth-clients yes" (a client certificate required)
 * or "no".  requirepass: the default user's password, or NULL.  user and
 * user_password: an ACL user with every right ("on >PW ~* &* +@all"), or
 * NULL.  The fixture's own connections authenticate as the default user.
 * 0 or -1. */
int dlt_tls_server_start(dlt_redis *r, int auth_clients, const char *requirepass, const char *user,
                         const char *user_password);
/* "rediss://[userinfo]HOST:PORT[?query]" for r. */
void dlt_tls_server_url(const dlt_redis *r, char *buf, size_t cap, const char *userinfo, const char *host,
                        const char *query);

#ifdef __cplusplus
}
#endif
#endif /* DLT_FIXTURE_MULTI_H */
