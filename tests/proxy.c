/* proxy.c -- a small fault-injecting TCP proxy for the tests (see proxy.h).
 *
 * One accept thread, and one thread per proxied connection that polls both
 * sockets and applies the mode in force when a chunk arrives.  Threads
 * poll with a short timeout, so a mode switch, dlt_proxy_close_all and
 * dlt_proxy_stop take effect within a few tens of milliseconds.
 */
#include "proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define POLL_MS 20
#define PAYLOAD_MAX 1024
#define CHUNK 16384

typedef struct pconn {
    struct dlt_proxy *p;
    int cfd, sfd;
    unsigned long kill_gen; /* dlt_proxy_close_all generation at accept */
    unsigned long stall_gen; /* STALL: the dlt_proxy_stall its count is of */
    size_t stall_sent;       /* bytes forwarded since */
    double deaf_next;        /* DEAF: when it reads the next bytes of the requests */
    pthread_t th;
    int done; /* guarded by p->mu */
    struct pconn *next;
} pconn;

struct dlt_proxy {
    int lfd;
    int port, target_port;
    char url[64];
    pthread_t acceptor;
    pthread_mutex_t mu;
    /* guarded by mu */
    int stopping;
    enum dlt_proxy_mode mode;
    unsigned delay_ms;
    char payload[PAYLOAD_MAX];
    size_t payload_len;
    unsigned long kill_gen;
    unsigned long stall_gen; /* dlt_proxy_stall calls */
    size_t stall_bytes;
    size_t deaf_bytes; /* DEAF: bytes of the requests read each delay_ms */
    unsigned long accepted, faults;
    uint64_t rng;
    pconn *conns;
};

typedef struct snapshot {
    int stop;
    enum dlt_proxy_mode mode;
    unsigned delay_ms;
    char payload[PAYLOAD_MAX];
    size_t payload_len;
    unsigned long stall_gen;
    size_t stall_bytes;
    size_t deaf_bytes;
} snapshot;

static void snap(dlt_proxy *p, const pconn *pc, snapshot *s) {
    pthread_mutex_lock(&p->mu);
    s->stop = p->stopping || (pc != NULL && pc->kill_gen != p->kill_gen);
    s->mode = p->mode;
    s->delay_ms = p->delay_ms;
    s->payload_len = p->payload_len;
    memcpy(s->payload, p->payload, p->payload_len);
    s->stall_gen = p->stall_gen;
    s->stall_bytes = p->stall_bytes;
    s->deaf_bytes = p->deaf_bytes;
    pthread_mutex_unlock(&p->mu);
}

static void count_fault(dlt_proxy *p) {
    pthread_mutex_lock(&p->mu);
    p->faults++;
    pthread_mutex_unlock(&p->mu);
}

static size_t random_bytes(dlt_proxy *p, char *out, size_t max) {
    size_t n = 1, i;
    pthread_mutex_lock(&p->mu);
    /* xorshift64: reproducible for a given DLT_PROXY_SEED (thread
     * interleaving aside) */
    for (i = 0; i <= max; i++) {
        p->rng ^= p->rng << 13;
        p->rng ^= p->rng >> 7;
        p->rng ^= p->rng << 17;
        if (i == 0) n = 1 + (size_t)(p->rng % max);
        else out[i - 1] = (char)(p->rng >> 24);
    }
    pthread_mutex_unlock(&p->mu);
    return n;
}

static int send_all(int fd, const char *b, size_t n) {
    while (n > 0) {
        ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Sleeps ms, in short steps: 0, or -1 when the connection must end. */
static int nap(dlt_proxy *p, const pconn *pc, unsigned ms) {
    while (ms > 0) {
        unsigned step = ms < POLL_MS ? ms : POLL_MS;
        struct timespec ts = { 0, (long)step * 1000000L };
        snapshot s;
        nanosleep(&ts, NULL);
        ms -= step;
        snap(p, pc, &s);
        if (s.stop || s.mode == DLT_PROXY_CLOSE) return -1;
    }
    return 0;
}

/* STALL: forwards what is left of the connection's allowance of the n
 * bytes at buf (after the delay), holds back the rest.  0, or -1 when
 * the connection must end. */
static int stall_forward(dlt_proxy *p, pconn *pc, const snapshot *s, const char *buf, size_t n) {
    size_t k;
    if (pc->stall_gen != s->stall_gen) {
        pc->stall_gen = s->stall_gen;
        pc->stall_sent = 0;
    }
    k = s->stall_bytes > pc->stall_sent ? s->stall_bytes - pc->stall_sent : 0;
    if (k > n) k = n;
    pc->stall_sent += k;
    if (k < n) count_fault(p);
    if (k == 0) return 0;
    return nap(p, pc, s->delay_ms) != 0 || send_all(pc->cfd, buf, k) != 0 ? -1 : 0;
}

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* DEAF: reads the connection's requests no more, or deaf_bytes of them
 * each delay_ms (forwarded to the server).  0, or -1 when the connection
 * must end. */
static int deaf_trickle(dlt_proxy *p, pconn *pc, const snapshot *s, char *buf) {
    ssize_t n;
    if (s->deaf_bytes == 0 || mono_s() < pc->deaf_next) return 0;
    pc->deaf_next = mono_s() + s->delay_ms / 1000.0;
    n = recv(pc->cfd, buf, s->deaf_bytes < CHUNK ? s->deaf_bytes : CHUNK, MSG_DONTWAIT);
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
    if (n == 0) return -1;
    count_fault(p);
    return send_all(pc->sfd, buf, (size_t)n);
}

static void *conn_main(void *arg) {
    pconn *pc = arg;
    dlt_proxy *p = pc->p;
    char *buf = malloc(CHUNK);
    snapshot *s = malloc(sizeof *s);

    while (buf != NULL && s != NULL) {
        struct pollfd pfd[2];
        ssize_t n;
        snap(p, pc, s);
        if (s->stop || s->mode == DLT_PROXY_CLOSE) break;
        if (s->mode == DLT_PROXY_DEAF && deaf_trickle(p, pc, s, buf) != 0) break;
        pfd[0].fd = pc->cfd;
        pfd[0].events = s->mode == DLT_PROXY_DEAF ? 0 : POLLIN;
        pfd[1].fd = pc->sfd;
        pfd[1].events = POLLIN;
        pfd[0].revents = pfd[1].revents = 0;
        if (poll(pfd, 2, POLL_MS) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (pfd[0].revents) { /* client -> server */
            n = recv(pc->cfd, buf, CHUNK, 0);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            snap(p, pc, s);
            if (s->stop || s->mode == DLT_PROXY_CLOSE) break;
            if (s->mode == DLT_PROXY_TURNAWAY && (unsigned char)buf[0] != 22) break;
            if (s->mode == DLT_PROXY_DROP || s->mode == DLT_PROXY_TURNAWAY) {
                count_fault(p);
            } else if (send_all(pc->sfd, buf, (size_t)n) != 0) {
                break;
            }
        }
        if (pfd[1].revents) { /* server -> client */
            n = recv(pc->sfd, buf, CHUNK, 0);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            snap(p, pc, s);
            if (s->stop || s->mode == DLT_PROXY_CLOSE) break;
            switch (s->mode) {
            case DLT_PROXY_PASS:
            case DLT_PROXY_DEAF:
                if (send_all(pc->cfd, buf, (size_t)n) != 0) goto out;
                break;
            case DLT_PROXY_DELAY:
                count_fault(p);
                if (nap(p, pc, s->delay_ms) != 0 || send_all(pc->cfd, buf, (size_t)n) != 0) goto out;
                break;
            case DLT_PROXY_DROP:
                count_fault(p);
                break;
            case DLT_PROXY_CUT:
                count_fault(p);
                (void)send_all(pc->cfd, buf, (size_t)n / 2);
                goto out;
            case DLT_PROXY_REPLACE:
                count_fault(p);
                if (send_all(pc->cfd, s->payload, s->payload_len) != 0) goto out;
                break;
            case DLT_PROXY_RANDOM: {
                size_t k = random_bytes(p, buf, 64);
                count_fault(p);
                if (send_all(pc->cfd, buf, k) != 0) goto out;
                break;
            }
            case DLT_PROXY_DUPLICATE:
                count_fault(p);
                if (send_all(pc->cfd, buf, (size_t)n) != 0 || nap(p, pc, s->delay_ms) != 0 ||
                    send_all(pc->cfd, buf, (size_t)n) != 0)
                    goto out;
                break;
            case DLT_PROXY_SPLIT:
                count_fault(p);
                if (send_all(pc->cfd, buf, 1) != 0 || nap(p, pc, s->delay_ms) != 0 ||
                    send_all(pc->cfd, buf + 1, (size_t)n - 1) != 0)
                    goto out;
                break;
            case DLT_PROXY_STALL:
                if (stall_forward(p, pc, s, buf, (size_t)n) != 0) goto out;
                break;
            case DLT_PROXY_CLOSE:
            case DLT_PROXY_TURNAWAY:
                goto out;
            }
        }
    }
out:
    free(buf);
    free(s);
    close(pc->cfd);
    close(pc->sfd);
    pthread_mutex_lock(&p->mu);
    pc->done = 1;
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Joins and frees the connection threads that ended (all of them when
 * `all`: after stopping is set).  Called by the accept thread or by stop. */
static void reap_conns(dlt_proxy *p, int all) {
    for (;;) {
        pconn **pp, *pc = NULL;
        pthread_mutex_lock(&p->mu);
        for (pp = &p->conns; *pp != NULL; pp = &(*pp)->next) {
            if ((*pp)->done || all) {
                pc = *pp;
                *pp = pc->next;
                break;
            }
        }
        pthread_mutex_unlock(&p->mu);
        if (pc == NULL) return;
        pthread_join(pc->th, NULL);
        free(pc);
    }
}

static int connect_target(int port) {
    struct sockaddr_in sa;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd < 0) return -1;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static void *accept_main(void *arg) {
    dlt_proxy *p = arg;
    for (;;) {
        struct pollfd pfd = { p->lfd, POLLIN, 0 };
        snapshot s;
        int cfd, sfd, one = 1;
        pconn *pc;

        reap_conns(p, 0);
        snap(p, NULL, &s);
        if (s.stop) break;
        if (poll(&pfd, 1, POLL_MS) <= 0) continue;
        cfd = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (cfd < 0) continue;
        pthread_mutex_lock(&p->mu);
        p->accepted++;
        pthread_mutex_unlock(&p->mu);
        snap(p, NULL, &s);
        if (s.stop || s.mode == DLT_PROXY_CLOSE) {
            close(cfd);
            continue;
        }
        setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if ((sfd = connect_target(p->target_port)) < 0) {
            close(cfd);
            continue;
        }
        if ((pc = calloc(1, sizeof *pc)) == NULL) {
            close(cfd);
            close(sfd);
            continue;
        }
        pc->p = p;
        pc->cfd = cfd;
        pc->sfd = sfd;
        pthread_mutex_lock(&p->mu);
        pc->kill_gen = p->kill_gen;
        if (pthread_create(&pc->th, NULL, conn_main, pc) != 0) {
            pthread_mutex_unlock(&p->mu);
            close(cfd);
            close(sfd);
            free(pc);
            continue;
        }
        pc->next = p->conns;
        p->conns = pc;
        pthread_mutex_unlock(&p->mu);
    }
    return NULL;
}

dlt_proxy *dlt_proxy_start(int target_port) {
    struct sockaddr_in sa;
    socklen_t len = sizeof sa;
    dlt_proxy *p = calloc(1, sizeof *p);
    const char *seed = getenv("DLT_PROXY_SEED");
    int one = 1;

    if (p == NULL) return NULL;
    p->target_port = target_port;
    p->rng = seed != NULL ? strtoull(seed, NULL, 0) : 0x9e3779b97f4a7c15ull;
    if (p->rng == 0) p->rng = 1;
    pthread_mutex_init(&p->mu, NULL);
    p->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (p->lfd < 0) goto fail;
    setsockopt(p->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = 0;
    if (bind(p->lfd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(p->lfd, 64) != 0 ||
        getsockname(p->lfd, (struct sockaddr *)&sa, &len) != 0)
        goto fail;
    p->port = ntohs(sa.sin_port);
    snprintf(p->url, sizeof p->url, "redis://127.0.0.1:%d", p->port);
    if (pthread_create(&p->acceptor, NULL, accept_main, p) != 0) goto fail;
    return p;
fail:
    fprintf(stderr, "dlt_proxy_start: %s\n", strerror(errno));
    if (p->lfd >= 0) close(p->lfd);
    pthread_mutex_destroy(&p->mu);
    free(p);
    return NULL;
}

void dlt_proxy_stop(dlt_proxy *p) {
    if (p == NULL) return;
    pthread_mutex_lock(&p->mu);
    p->stopping = 1;
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->acceptor, NULL);
    reap_conns(p, 1);
    close(p->lfd);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

int dlt_proxy_port(const dlt_proxy *p) {
    return p->port;
}

const char *dlt_proxy_url(const dlt_proxy *p) {
    return p->url;
}

void dlt_proxy_set(dlt_proxy *p, enum dlt_proxy_mode mode, unsigned ms, const void *payload, size_t len) {
    pthread_mutex_lock(&p->mu);
    p->mode = mode;
    p->delay_ms = ms;
    if (len > PAYLOAD_MAX) len = PAYLOAD_MAX;
    if (payload != NULL && len > 0) memcpy(p->payload, payload, len);
    else len = 0;
    p->payload_len = len;
    pthread_mutex_unlock(&p->mu);
}

void dlt_proxy_pass(dlt_proxy *p) {
    dlt_proxy_set(p, DLT_PROXY_PASS, 0, NULL, 0);
}

void dlt_proxy_replace(dlt_proxy *p, const char *payload) {
    dlt_proxy_set(p, DLT_PROXY_REPLACE, 0, payload, strlen(payload));
}

void dlt_proxy_stall(dlt_proxy *p, size_t bytes, unsigned ms) {
    pthread_mutex_lock(&p->mu);
    p->mode = DLT_PROXY_STALL;
    p->delay_ms = ms;
    p->stall_bytes = bytes;
    p->stall_gen++;
    pthread_mutex_unlock(&p->mu);
}

void dlt_proxy_deaf(dlt_proxy *p, size_t bytes, unsigned ms) {
    pthread_mutex_lock(&p->mu);
    p->mode = DLT_PROXY_DEAF;
    p->delay_ms = ms;
    p->deaf_bytes = bytes;
    pthread_mutex_unlock(&p->mu);
}

int dlt_proxy_rcvbuf(dlt_proxy *p, int bytes) {
    return setsockopt(p->lfd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
}

/* The local port of this process's socket fd when it is connected to the
 * proxy's port (a client's end of a proxied connection), else 0. */
static int client_port(const dlt_proxy *p, int fd) {
    struct sockaddr_in sa;
    socklen_t len = sizeof sa;
    if (getpeername(fd, (struct sockaddr *)&sa, &len) != 0 || sa.sin_family != AF_INET || ntohs(sa.sin_port) != p->port)
        return 0;
    len = sizeof sa;
    if (getsockname(fd, (struct sockaddr *)&sa, &len) != 0) return 0;
    return ntohs(sa.sin_port);
}

#define FDS_MAX 4096 /* descriptors looked at (a test process opens far fewer) */

int dlt_proxy_shrink_clients(const dlt_proxy *p, int *ports, int max) {
    int fd, n = 0, one = 1;
    for (fd = 0; fd < FDS_MAX; fd++) {
        int port = client_port(p, fd);
        if (port == 0) continue;
        if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &one, sizeof one) != 0) continue;
        if (n < max) ports[n] = port;
        n++;
    }
    return n;
}

int dlt_proxy_client_open(const dlt_proxy *p, int port) {
    int fd;
    for (fd = 0; fd < FDS_MAX; fd++)
        if (client_port(p, fd) == port) return 1;
    return 0;
}

void dlt_proxy_close_all(dlt_proxy *p) {
    pthread_mutex_lock(&p->mu);
    p->kill_gen++;
    pthread_mutex_unlock(&p->mu);
}

unsigned long dlt_proxy_accepted(const dlt_proxy *p) {
    unsigned long n;
    pthread_mutex_lock((pthread_mutex_t *)&p->mu);
    n = p->accepted;
    pthread_mutex_unlock((pthread_mutex_t *)&p->mu);
    return n;
}

unsigned long dlt_proxy_faults(const dlt_proxy *p) {
    unsigned long n;
    pthread_mutex_lock((pthread_mutex_t *)&p->mu);
    n = p->faults;
    pthread_mutex_unlock((pthread_mutex_t *)&p->mu);
    return n;
}

const char *dlt_proxy_mode_name(enum dlt_proxy_mode mode) {
    switch (mode) {
    case DLT_PROXY_PASS: return "pass";
    case DLT_PROXY_DELAY: return "delay";
    case DLT_PROXY_DROP: return "drop";
    case DLT_PROXY_CUT: return "cut";
    case DLT_PROXY_REPLACE: return "replace";
    case DLT_PROXY_RANDOM: return "random";
    case DLT_PROXY_CLOSE: return "close";
    case DLT_PROXY_DUPLICATE: return "duplicate";
    case DLT_PROXY_TURNAWAY:
        return "turnaway";
    case DLT_PROXY_SPLIT:
        return "split";
    case DLT_PROXY_STALL:
        return "stall";
    case DLT_PROXY_DEAF:
        return "deaf";
    }
    return "?";
}
