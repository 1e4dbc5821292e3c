/* fixture_multi.c -- deployments of several redis-servers (a Redis
 * Cluster, a Sentinel deployment, Redlock masters, a TLS-only server with
 * passwords), every server started and ended by fixture.c's launcher. */
#include "fixture_multi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ========================================================================
 * Any server
 * ====================================================================== */

int dlt_reply_ok(redisReply *r) {
    int ok = r != NULL && r->type == REDIS_REPLY_STATUS;
    if (r != NULL && !ok)
        fprintf(stderr, "  unexpected reply: %s\n", r->type == REDIS_REPLY_ERROR ? r->str : "?");
    if (r != NULL) freeReplyObject(r);
    return ok;
}

int dlt_redis_exists(dlt_redis *r, const char *key) {
    redisReply *rep = dlt_redis_cmd(r, "EXISTS %s", key);
    int v = rep != NULL && rep->type == REDIS_REPLY_INTEGER ? (int)rep->integer : -1;
    if (rep != NULL) freeReplyObject(rep);
    return v;
}

int dlt_redis_lock_exists(dlt_redis *r, const char *name) {
    char key[600];
    dlt_lock_key(name, key, sizeof key);
    return dlt_redis_exists(r, key);
}

int dlt_redis_has(dlt_redis *r, const char *cmd, const char *needle) {
    redisReply *rep = r->pid > 0 ? dlt_redis_cmd(r, cmd) : NULL;
    int ok = rep != NULL && rep->type == REDIS_REPLY_STRING && strstr(rep->str, needle) != NULL;
    if (rep != NULL) freeReplyObject(rep);
    return ok;
}

int dlt_redis_role(dlt_redis *r, char *buf, size_t cap) {
    redisReply *rep = r->pid > 0 ? dlt_redis_cmd(r, "ROLE") : NULL;
    int ok = rep != NULL && rep->type == REDIS_REPLY_ARRAY && rep->elements > 0 &&
             rep->element[0]->type == REDIS_REPLY_STRING;
    buf[0] = '\0';
    if (ok) snprintf(buf, cap, "%s", rep->element[0]->str);
    if (rep != NULL) freeReplyObject(rep);
    return ok ? 0 : -1;
}

/* ========================================================================
 * Hash slots
 * ====================================================================== */

static unsigned crc16(const char *s, size_t n) {
    unsigned crc = 0;
    for (size_t i = 0; i < n; i++) {
        crc ^= (unsigned)(unsigned char)s[i] << 8;
        for (int b = 0; b < 8; b++) crc = (crc & 0x8000 ? crc << 1 ^ 0x1021 : crc << 1) & 0xffff;
    }
    return crc;
}

int dlt_key_slot(const char *key) {
    const char *open = strchr(key, '{');
    if (open != NULL) {
        const char *close = strchr(open + 1, '}');
        if (close != NULL && close > open + 1)
            return (int)(crc16(open + 1, (size_t)(close - open - 1)) & (DLT_SLOTS - 1));
    }
    return (int)(crc16(key, strlen(key)) & (DLT_SLOTS - 1));
}

int dlt_lock_slot(const char *name) {
    char key[600];
    dlt_lock_key(name, key, sizeof key);
    return dlt_key_slot(key);
}

int dlt_slot_name(char *buf, size_t cap, const char *stem, int *next, const signed char *owner, int node,
                  int slot) {
    for (int k = *next; k < *next + 4000000; k++) {
        int s;
        snprintf(buf, cap, "%s%d", stem, k);
        s = dlt_lock_slot(buf);
        if ((slot >= 0 && s == slot) || (slot < 0 && (node < 0 || owner[s] == node))) {
            *next = k + 1;
            return 0;
        }
    }
    return -1;
}

/* ========================================================================
 * (a) A Redis Cluster
 * ====================================================================== */

#define CLUSTER_CONF "cluster-enabled yes\ncluster-node-timeout 2000\ncluster-require-full-coverage no"

/* Master i's slot range, as redis-cli splits 16384 slots over n masters. */
static void master_range(int i, int n, int *lo, int *hi) {
    double per = (double)DLT_SLOTS / n;
    *lo = i == 0 ? 0 : (int)(i * per - 1 + 0.5) + 1;
    *hi = i == n - 1 ? DLT_SLOTS - 1 : (int)((i + 1) * per - 1 + 0.5);
}

/* The master of slot s as formed. */
static int formed_owner(const dlt_cluster *c, int s) {
    for (int i = 0; i < c->masters; i++) {
        int lo, hi;
        master_range(i, c->masters, &lo, &hi);
        if (s >= lo && s <= hi) return i;
    }
    return -1;
}

void dlt_cluster_cleanup(dlt_cluster *c) {
    for (int i = 0; i < DLT_CLUSTER_MAX; i++) dlt_redis_cleanup(&c->node[i]);
    memset(c, 0, sizeof *c);
}

int dlt_cluster_node_of(const dlt_cluster *c, long long port) {
    for (int i = 0; i < c->n; i++)
        if (c->node[i].port == port) return i;
    return -1;
}

int dlt_cluster_slot_map(dlt_cluster *c, int i, signed char owner[DLT_SLOTS]) {
    redisReply *rep;
    int ranges;
    memset(owner, -1, DLT_SLOTS);
    if (c->node[i].pid <= 0) return -1;
    rep = dlt_redis_cmd(&c->node[i], "CLUSTER SLOTS");
    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY) {
        if (rep != NULL) freeReplyObject(rep);
        return -1;
    }
    ranges = (int)rep->elements;
    for (size_t k = 0; k < rep->elements; k++) {
        const redisReply *e = rep->element[k];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || e->element[2]->type != REDIS_REPLY_ARRAY ||
            e->element[2]->elements < 2)
            continue;
        long long lo = e->element[0]->integer, hi = e->element[1]->integer;
        int who = dlt_cluster_node_of(c, e->element[2]->element[1]->integer);
        for (long long sl = lo; sl <= hi && sl < DLT_SLOTS; sl++) owner[sl] = (signed char)who;
    }
    freeReplyObject(rep);
    return ranges;
}

int dlt_cluster_slot_owner(dlt_cluster *c, int slot) {
    static signed char owner[DLT_SLOTS];
    for (int i = 0; i < c->n; i++)
        if (dlt_cluster_slot_map(c, i, owner) > 0) return owner[slot];
    return -1;
}

/* 1 if node i's CLUSTER NODES names every master a master and every
 * replica a replica of its master, none of them failing. */
static int roles_ok(dlt_cluster *c, int i) {
    redisReply *r = c->node[i].pid > 0 ? dlt_redis_cmd(&c->node[i], "CLUSTER NODES") : NULL;
    unsigned seen = 0;
    if (r == NULL || r->type != REDIS_REPLY_STRING) {
        if (r != NULL) freeReplyObject(r);
        return 0;
    }
    for (char *line = r->str, *end; line != NULL && *line; line = end ? end + 1 : NULL) {
        char id[64], addr[128], flags[128], master[64];
        int k;
        end = strchr(line, '\n');
        if (sscanf(line, "%63s %127s %127s %63s", id, addr, flags, master) != 4) continue;
        for (k = 0; k < c->n && strcmp(id, c->id[k]) != 0; k++)
            ;
        if (k == c->n || strstr(flags, "fail") != NULL) continue;
        const char *want_master = k < c->masters ? NULL : c->id[(k - c->masters) % c->masters];
        if (want_master == NULL ? strstr(flags, "master") != NULL
                                : strstr(flags, "slave") != NULL && strcmp(master, want_master) == 0)
            seen |= 1u << k;
    }
    freeReplyObject(r);
    return seen == (1u << c->n) - 1;
}

/* Why node i is not healthy yet, or NULL. */
static const char *node_unhealthy(dlt_cluster *c, int i) {
    static signed char own[DLT_SLOTS];
    char want[64];
    dlt_redis *r = &c->node[i];
    int replicas = (c->n - c->masters) / c->masters;
    if (r->pid <= 0) return "not running";
    if (!dlt_redis_has(r, "CLUSTER INFO", "cluster_state:ok")) return "cluster_state not ok";
    snprintf(want, sizeof want, "cluster_known_nodes:%d\r\n", c->n);
    if (!dlt_redis_has(r, "CLUSTER INFO", want)) return "does not know every node";
    if (!dlt_redis_has(r, "CLUSTER INFO", "cluster_slots_assigned:16384")) return "not every slot assigned";
    redisReply *rep = dlt_redis_cmd(r, "CLUSTER NODES");
    int clean = rep != NULL && rep->type == REDIS_REPLY_STRING && strchr(rep->str, '[') == NULL;
    if (rep != NULL) freeReplyObject(rep);
    if (!clean) return "a slot migrating or importing";
    snprintf(want, sizeof want, "connected_slaves:%d", replicas);
    if (i < c->masters && replicas > 0 &&
        !(dlt_redis_has(r, "INFO replication", want) && dlt_redis_has(r, "INFO replication", "state=online")))
        return "its replicas are not online";
    if (i >= c->masters && !dlt_redis_has(r, "INFO replication", "master_link_status:up"))
        return "link to its master down";
    if (!roles_ok(c, i)) return "CLUSTER NODES does not show the roles yet";
    if (dlt_cluster_slot_map(c, i, own) != c->masters) return "not one slot range per master";
    for (int s = 0; s < DLT_SLOTS; s++)
        if (own[s] != formed_owner(c, s)) return "slot map not as formed";
    return NULL;
}

int dlt_cluster_healthy(dlt_cluster *c, int quiet) {
    if (c->n <= 0) return 0;
    for (int i = 0; i < c->n; i++) {
        const char *why = node_unhealthy(c, i);
        if (why != NULL) {
            if (!quiet) fprintf(stderr, "  cluster: node %d: %s\n", i, why);
            return 0;
        }
    }
    return 1;
}

int dlt_cluster_wait_ok(dlt_cluster *c, int timeout_ms) {
    for (double end = dlt_now() + timeout_ms / 1000.0; dlt_now() < end; dlt_sleep_ms(100))
        if (dlt_cluster_healthy(c, 1)) return 1;
    fprintf(stderr, "cluster: not healthy within %d ms\n", timeout_ms);
    (void)dlt_cluster_healthy(c, 0);
    return 0;
}

/* Slots, ids, meetings and replication for the started nodes: 0 or -1. */
static int cluster_join(dlt_cluster *c) {
    char want[64];
    for (int i = 0; i < c->n; i++) {
        int lo, hi;
        redisReply *r;
        master_range(i, c->masters, &lo, &hi);
        if (i < c->masters && !dlt_reply_ok(dlt_redis_cmd(&c->node[i], "CLUSTER ADDSLOTSRANGE %d %d", lo, hi)))
            return -1;
        r = dlt_redis_cmd(&c->node[i], "CLUSTER MYID");
        if (r == NULL || r->type != REDIS_REPLY_STRING) {
            if (r != NULL) freeReplyObject(r);
            return -1;
        }
        snprintf(c->id[i], sizeof c->id[i], "%s", r->str);
        freeReplyObject(r);
    }
    for (int i = 1; i < c->n; i++)
        if (!dlt_reply_ok(dlt_redis_cmd(&c->node[0], "CLUSTER MEET 127.0.0.1 %d", c->node[i].port))) return -1;
    if (c->n == c->masters) return 0;
    /* A replica must know its master before it can replicate it. */
    snprintf(want, sizeof want, "cluster_known_nodes:%d\r\n", c->n);
    for (double end = dlt_now() + 10.0;; dlt_sleep_ms(50)) {
        int known = 1;
        for (int i = 0; i < c->n && known; i++) known = dlt_redis_has(&c->node[i], "CLUSTER INFO", want);
        if (known) break;
        if (dlt_now() > end) {
            fprintf(stderr, "cluster: the nodes do not all know each other within 10 s\n");
            return -1;
        }
    }
    for (int i = c->masters; i < c->n; i++)
        if (!dlt_reply_ok(dlt_redis_cmd(&c->node[i], "CLUSTER REPLICATE %s", c->id[(i - c->masters) % c->masters])))
            return -1;
    return 0;
}

int dlt_cluster_start(dlt_cluster *c, int masters, int replicas, int tls, const char *extra_conf) {
    char conf[1024];
    dlt_cluster_cleanup(c);
    if (masters < 1 || replicas < 0 || masters * (1 + replicas) > DLT_CLUSTER_MAX) return -1;
    snprintf(conf, sizeof conf, "%s%s%s", CLUSTER_CONF, extra_conf ? "\n" : "", extra_conf ? extra_conf : "");
    c->masters = masters;
    c->tls = tls;
    for (int i = 0; i < masters * (1 + replicas); i++) {
        if ((tls ? dlt_redis_start_tls(&c->node[i], NULL, conf) : dlt_redis_start(&c->node[i], conf)) != 0) {
            fprintf(stderr, "cluster: node %d did not start\n", i);
            dlt_cluster_cleanup(c);
            return -1;
        }
        c->n = i + 1;
    }
    if (cluster_join(c) != 0 || !dlt_cluster_wait_ok(c, 20000)) {
        dlt_cluster_cleanup(c);
        return -1;
    }
    return 0;
}

int dlt_cluster_flush(dlt_cluster *c) {
    for (int i = 0; i < c->n; i++) {
        if (!dlt_reply_ok(dlt_redis_cmd(&c->node[i], "FLUSHALL"))) return -1;
        if (dlt_redis_reset_stats(&c->node[i]) != 0) return -1;
    }
    return 0;
}

int dlt_cluster_kill(dlt_cluster *c, int i) {
    return i >= 0 && i < c->n ? dlt_redis_kill(&c->node[i]) : -1;
}

int dlt_cluster_stop(dlt_cluster *c, int i) {
    return i >= 0 && i < c->n ? dlt_redis_stop(&c->node[i]) : -1;
}

int dlt_cluster_restart(dlt_cluster *c, int i) {
    return i >= 0 && i < c->n ? dlt_redis_restart(&c->node[i]) : -1;
}

void dlt_cluster_url(const dlt_cluster *c, char *buf, size_t cap, const char *which, const char *query) {
    size_t n = (size_t)snprintf(buf, cap, "%s", c->tls ? "rediss+cluster://" : "redis+cluster://");
    for (const char *p = which; *p; p++)
        n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s127.0.0.1:%d", p == which ? "" : ",",
                              c->node[*p - '0'].port);
    if (query != NULL) snprintf(buf + n, n < cap ? cap - n : 0, "?%s", query);
}

int dlt_cluster_client(dlt_cluster *cl, char *url, size_t cap, dlock_client_t **out) {
    memset(cl, 0, sizeof *cl);
    *out = NULL;
    if (dlt_cluster_start(cl, 3, 0, 0, NULL) != 0) {
        dlt_cluster_cleanup(cl);
        return -1;
    }
    dlt_cluster_url(cl, url, cap, "0", NULL);
    if (dlt_client_make(out, url, 5000) != 0) {
        dlt_cluster_cleanup(cl);
        return -1;
    }
    return 0;
}

int dlt_cluster_keyslot(dlt_cluster *c, int i, const char *key) {
    long long v = dlt_reply_int(dlt_redis_cmd(&c->node[i], "CLUSTER KEYSLOT %s", key));
    return v < 0 ? -1 : (int)v;
}

int dlt_cluster_moved_port(dlt_cluster *c, int i, const char *key) {
    redisReply *r = dlt_redis_cmd(&c->node[i], "EXISTS %s", key);
    int port = -1;
    if (r != NULL && r->type == REDIS_REPLY_INTEGER) port = 0;
    if (r != NULL && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "MOVED ", 6) == 0) {
        const char *colon = strrchr(r->str, ':');
        if (colon != NULL) port = atoi(colon + 1);
    }
    if (r != NULL) freeReplyObject(r);
    return port;
}

long long dlt_cluster_subs(dlt_cluster *c, int i, const char *channel, int sharded_only) {
    long long n = -1;
    if (c->node[i].pid <= 0) return -1;
    for (int sharded = sharded_only ? 1 : 0; sharded < 2; sharded++) {
        redisReply *r =
            dlt_redis_cmd(&c->node[i], sharded ? "PUBSUB SHARDNUMSUB %s" : "PUBSUB NUMSUB %s", channel);
        if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
            r->element[1]->type == REDIS_REPLY_INTEGER)
            n = (n < 0 ? 0 : n) + r->element[1]->integer;
        if (r != NULL) freeReplyObject(r);
    }
    return n;
}

/* Subscribers of channel on all running nodes, and where. */
static long long subs_all(dlt_cluster *c, const char *channel, char *where, size_t cap) {
    long long n = 0;
    size_t len = 0;
    where[0] = '\0';
    for (int i = 0; i < c->n; i++) {
        long long k = c->node[i].pid > 0 ? dlt_cluster_subs(c, i, channel, 0) : 0;
        if (k > 0) {
            n += k;
            len += (size_t)snprintf(where + len, len < cap ? cap - len : 0, "%snode %d", len ? ", " : "", i);
        }
    }
    return n;
}

long long dlt_cluster_subs_wait(dlt_cluster *c, const char *channel, char *where, size_t cap) {
    long long n = 0;
    for (double end = dlt_now() + 5.0; dlt_now() < end; dlt_sleep_ms(20))
        if ((n = subs_all(c, channel, where, cap)) >= 1) break;
    return n;
}

/* ========================================================================
 * (b) A Sentinel deployment
 * ====================================================================== */

void dlt_sentinel_cleanup(dlt_sentinel *s) {
    for (int i = 0; i < DLT_SENTINEL_MAXS; i++) dlt_redis_cleanup(&s->sent[i]);
    for (int i = 0; i < DLT_SENTINEL_MAXN; i++) dlt_redis_cleanup(&s->node[i]);
    memset(s, 0, sizeof *s);
}

int dlt_sentinel_replicas_online(dlt_sentinel *s, int i) {
    redisReply *r = dlt_redis_cmd(&s->node[i], "INFO replication");
    int n = -1;
    if (r != NULL && r->type == REDIS_REPLY_STRING) {
        n = 0;
        for (const char *p = r->str; (p = strstr(p, "state=online")) != NULL; p++) n++;
    }
    if (r) freeReplyObject(r);
    return n;
}

/* The master's port sentinel k names; -1 when it names none or is silent. */
static int named_port(dlt_sentinel *s, int k) {
    redisReply *r = dlt_redis_cmd(&s->sent[k], "SENTINEL get-master-addr-by-name %s", DLT_SENTINEL_MASTER);
    int port = -1;
    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->type == REDIS_REPLY_STRING)
        port = atoi(r->element[1]->str);
    if (r) freeReplyObject(r);
    return port;
}

int dlt_sentinel_agreed_port(dlt_sentinel *s) {
    int port = -1;
    for (int k = 0; k < s->nsents; k++) {
        int p = named_port(s, k);
        if (p <= 0 || (k > 0 && p != port)) return -1;
        port = p;
    }
    return port;
}

/* The value of field in a SENTINEL replicas/sentinels entry (a flat
 * array of names and values); NULL if absent. */
static const char *entry_field(const redisReply *e, const char *field) {
    if (e->type != REDIS_REPLY_ARRAY) return NULL;
    for (size_t i = 0; i + 1 < e->elements; i += 2)
        if (e->element[i]->type == REDIS_REPLY_STRING && strcmp(e->element[i]->str, field) == 0 &&
            e->element[i + 1]->type == REDIS_REPLY_STRING)
            return e->element[i + 1]->str;
    return NULL;
}

/* Entries of "SENTINEL <what> mymaster" on sentinel k whose flags are
 * exactly want (healthy: no s_down, disconnected...); -1 on no answer. */
static int sentinel_count(dlt_sentinel *s, int k, const char *what, const char *want) {
    redisReply *r = dlt_redis_cmd(&s->sent[k], "SENTINEL %s %s", what, DLT_SENTINEL_MASTER);
    int n = -1;
    if (r != NULL && r->type == REDIS_REPLY_ARRAY) {
        n = 0;
        for (size_t i = 0; i < r->elements; i++) {
            const char *f = entry_field(r->element[i], "flags");
            if (f != NULL && strcmp(f, want) == 0) n++;
        }
    }
    if (r) freeReplyObject(r);
    return n;
}

int dlt_sentinel_node_of(const dlt_sentinel *s, int port) {
    for (int i = 0; i < s->nnodes; i++)
        if (s->node[i].port == port) return i;
    return -1;
}

int dlt_sentinel_wait_healthy(dlt_sentinel *s, int nrep, int timeout_ms) {
    double end = dlt_now() + timeout_ms / 1000.0;
    int m = -1, online = -1, k = 0, reps = -1, sents = -1;
    for (int round = 0; round < 100000; round++) {
        int ok = 0;
        m = dlt_sentinel_node_of(s, dlt_sentinel_agreed_port(s));
        if (m >= 0 && (online = dlt_sentinel_replicas_online(s, m)) >= nrep) {
            for (k = 0; k < s->nsents; k++) {
                if ((reps = sentinel_count(s, k, "replicas", "slave")) < nrep) break;
                if ((sents = sentinel_count(s, k, "sentinels", "sentinel")) < s->nsents - 1) break;
            }
            ok = k == s->nsents;
        }
        if (ok) return m;
        if (dlt_now() > end) break;
        dlt_sleep_ms(100);
    }
    fprintf(stderr,
            "dlt_sentinel_wait_healthy: not healthy within %d ms: master node %d, %d replicas online, "
            "sentinel %d knows %d replicas and %d sentinels\n",
            timeout_ms, m, online, k, reps, sents);
    return -1;
}

static int start_one(dlt_redis *r, const char *tls_dir, const char *conf) {
    return tls_dir != NULL ? dlt_redis_start_tls(r, tls_dir, conf) : dlt_redis_start(r, conf);
}

#define SENTINEL_PUBLISH_MS 2000 /* Redis' period of a sentinel's hello messages */

/* Sets how often sentinel r says hello (SENTINEL DEBUG, Redis 7.0 on):
 * the sentinels of a deployment find each other by these messages, so
 * the deployment starts with a short period, then has Redis' own for the
 * test.  A server that refuses the command starts in Redis' time. */
static void publish_period(dlt_redis *r, int ms) {
    redisReply *rep = dlt_redis_cmd(r, "SENTINEL DEBUG publish-period %d", ms);
    if (rep != NULL) freeReplyObject(rep);
}

int dlt_sentinel_start(dlt_sentinel *s, int nrep, int nsent, const char *tls_dir, int healthy_ms) {
    char conf[512];
    int n, healthy;
    dlt_sentinel_cleanup(s);
    if (nrep < 0 || nrep >= DLT_SENTINEL_MAXN || nsent < 1 || nsent > DLT_SENTINEL_MAXS) return -1;
    if (start_one(&s->node[0], tls_dir, NULL) != 0) return -1;
    s->nnodes = 1;
    snprintf(conf, sizeof conf, "replicaof 127.0.0.1 %d\nreplica-read-only yes", s->node[0].port);
    for (int i = 1; i <= nrep; i++) {
        if (start_one(&s->node[i], tls_dir, conf) != 0) return -1;
        s->nnodes++;
    }
    snprintf(conf, sizeof conf,
             "sentinel monitor %s 127.0.0.1 %d %d\n"
             "sentinel down-after-milliseconds %s 1000\n"
             "sentinel failover-timeout %s 5000\n"
             "sentinel parallel-syncs %s 2",
             DLT_SENTINEL_MASTER, s->node[0].port, nsent > 1 ? 2 : 1, DLT_SENTINEL_MASTER, DLT_SENTINEL_MASTER,
             DLT_SENTINEL_MASTER);
    for (int k = 0; k < nsent; k++) {
        if (start_one(&s->sent[k], tls_dir, conf) != 0) return -1;
        s->nsents++;
        publish_period(&s->sent[k], 100);
    }
    n = snprintf(s->url, sizeof s->url, "%s", tls_dir != NULL ? "rediss+sentinel://" : "redis+sentinel://");
    for (int k = 0; k < nsent; k++)
        n += snprintf(s->url + n, sizeof s->url - (size_t)n, "%s127.0.0.1:%d", k ? "," : "", s->sent[k].port);
    snprintf(s->url + n, sizeof s->url - (size_t)n, "/%s", DLT_SENTINEL_MASTER);
    healthy = dlt_sentinel_wait_healthy(s, nrep, healthy_ms);
    for (int k = 0; k < nsent; k++) publish_period(&s->sent[k], SENTINEL_PUBLISH_MS);
    return healthy == 0 ? 0 : -1;
}

int dlt_sentinel_failover(dlt_sentinel *s, int k) {
    for (int i = 0; i < 50; i++) {
        redisReply *r = dlt_redis_cmd(&s->sent[k], "SENTINEL FAILOVER %s", DLT_SENTINEL_MASTER);
        int ok = r != NULL && r->type == REDIS_REPLY_STATUS;
        if (!ok) fprintf(stderr, "SENTINEL FAILOVER: %s\n", r && r->str ? r->str : "no answer");
        if (r) freeReplyObject(r);
        if (ok) return 1;
        dlt_sleep_ms(200);
    }
    return 0;
}

int dlt_sentinel_wait_new_master(dlt_sentinel *s, int old, int timeout_ms) {
    double end = dlt_now() + timeout_ms / 1000.0;
    for (int round = 0; round < 100000; round++) {
        char role[32];
        int m = dlt_sentinel_node_of(s, dlt_sentinel_agreed_port(s));
        if (m >= 0 && m != old && dlt_redis_role(&s->node[m], role, sizeof role) == 0 &&
            strcmp(role, "master") == 0)
            return m;
        if (dlt_now() > end) break;
        dlt_sleep_ms(100);
    }
    fprintf(stderr, "dlt_sentinel_wait_new_master: no new master within %d ms\n", timeout_ms);
    return -1;
}

void dlt_sentinel_url(const dlt_sentinel *s, char *buf, size_t cap, const char *query) {
    snprintf(buf, cap, "%s%s%s", s->url, query && *query ? "?" : "", query ? query : "");
}

/* ========================================================================
 * (c) Independent masters
 * ====================================================================== */

void dlt_masters_cleanup(dlt_masters *m) {
    for (int i = 0; i < DLT_MASTERS_MAX; i++) dlt_redis_cleanup(&m->srv[i]);
    memset(m, 0, sizeof *m);
}

int dlt_masters_start(dlt_masters *m, int n, int tls) {
    size_t len;
    dlt_masters_cleanup(m);
    if (n < 1 || n > DLT_MASTERS_MAX) return -1;
    m->tls = tls;
    for (int i = 0; i < n; i++) {
        if ((tls ? dlt_redis_start_tls(&m->srv[i], NULL, NULL) : dlt_redis_start(&m->srv[i], NULL)) != 0) {
            fprintf(stderr, "master %d did not start\n", i);
            dlt_masters_cleanup(m);
            return -1;
        }
        m->n = i + 1;
    }
    len = (size_t)snprintf(m->url, sizeof m->url, "%s", tls ? "rediss+redlock://" : "redlock://");
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(m->url + len, len < sizeof m->url ? sizeof m->url - len : 0, "%s127.0.0.1:%d",
                                i ? "," : "", m->srv[i].port);
    if (tls)
        snprintf(m->url + len, len < sizeof m->url ? sizeof m->url - len : 0, "?tls_ca_file=%s/ca.crt",
                 m->srv[0].tls_dir);
    return 0;
}

int dlt_masters_lock_count(dlt_masters *m, const char *name) {
    int n = 0;
    for (int i = 0; i < m->n; i++)
        if (dlt_redis_lock_exists(&m->srv[i], name) == 1) n++;
    return n;
}

/* ========================================================================
 * (d) A TLS-only server with passwords
 * ====================================================================== */

int dlt_tls_server_start(dlt_redis *r, int auth_clients, const char *requirepass, const char *user,
                         const char *user_password) {
    char conf[1024];
    size_t n = (size_t)snprintf(conf, sizeof conf, "tls-auth-clients %s", auth_clients ? "yes" : "no");
    if (requirepass != NULL) n += (size_t)snprintf(conf + n, sizeof conf - n, "\nrequirepass \"%s\"", requirepass);
    if (user != NULL && user_password != NULL)
        snprintf(conf + n, sizeof conf - n, "\nuser %s on >%s ~* &* +@all", user, user_password);
    return dlt_redis_start_tls(r, NULL, conf);
}

void dlt_tls_server_url(const dlt_redis *r, char *buf, size_t cap, const char *userinfo, const char *host,
                        const char *query) {
    snprintf(buf, cap, "rediss://%s%s:%d%s%s", userinfo ? userinfo : "", host, r->port, query && *query ? "?" : "",
             query ? query : "");
}
