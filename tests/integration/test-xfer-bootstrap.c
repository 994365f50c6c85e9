/*
 * test-xfer-bootstrap.c — hostile input at a real prefill bootstrap port (invariant I3): random
 * bytes, bad magic, oversized and truncated frames, unknown types, a garbage REGISTER, idle and
 * excess connections; then on a registered channel unknown/malformed/unexpected frames (counted,
 * dropped, channel kept) and a bad header (channel closed); REGISTERs with a sub-buffer stride
 * and a CUDA IPC memory kind refused by name. Afterwards a real decode engine registers and a
 * room transfers: the server kept serving.
 */
#include "config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dataplane/xfer/xfer_int.h"
#include "tap.h"
#include "unit/xfer-testutil.h"

#define T_S 5000000ull

static int dial(uint16_t port)
{
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void send_all(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n <= 0)
            return;
        p += n;
        len -= (size_t)n;
    }
}

/* 1 if the server closed the connection within timeout_ms (reads and discards). */
static int closed_by_server(int fd, int timeout_ms)
{
    uint8_t buf[4096];
    uint64_t end = tdm_time_mono_us() + (uint64_t)timeout_ms * 1000;
    while (tdm_time_mono_us() < end) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 50) == 1) {
            ssize_t n = recv(fd, buf, sizeof(buf), 0);
            if (n <= 0)
                return 1;
        }
    }
    return 0;
}

/* Read one frame (blocking, with a deadline) into buf; returns the header type or -1. */
static int read_frame(int fd, uint8_t *buf, size_t cap, tdm_frame_hdr_t *h)
{
    size_t have = 0;
    uint64_t end = tdm_time_mono_us() + T_S;
    while (tdm_time_mono_us() < end) {
        if (have >= TDM_FRAME_HDR_BYTES &&
            tdm_frame_hdr_parse(buf, have, (uint32_t)cap, h) == TDM_OK &&
            have >= TDM_FRAME_HDR_BYTES + h->length)
            return h->type;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 50) != 1)
            continue;
        ssize_t n = recv(fd, buf + have, cap - have, 0);
        if (n <= 0)
            return -1;
        have += (size_t)n;
    }
    return -1;
}

static void hdr(uint8_t *p, uint32_t magic, uint16_t version, uint16_t type, uint32_t len)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(magic >> (8 * i));
    p[4] = (uint8_t)version;
    p[5] = (uint8_t)(version >> 8);
    p[6] = (uint8_t)type;
    p[7] = (uint8_t)(type >> 8);
    for (int i = 0; i < 4; i++)
        p[8 + i] = (uint8_t)(len >> (8 * i));
}

/* Send a REGISTER on a fresh connection; returns the verdict message (or "" on success). */
static int do_register(uint16_t port, const uint8_t *frame, size_t len, char *msg, size_t cap,
                       int *ret_fd)
{
    uint8_t buf[8192];
    tdm_frame_hdr_t h;
    tdm_frame_status_t st;
    int fd = dial(port);
    if (fd < 0)
        return -1;
    send_all(fd, frame, len);
    if (read_frame(fd, buf, sizeof(buf), &h) != TDM_FRAME_STATUS ||
        tdm_frame_decode_status(buf + TDM_FRAME_HDR_BYTES, h.length, &st, NULL, 0) != TDM_OK) {
        close(fd);
        return -1;
    }
    snprintf(msg, cap, "%.*s", (int)st.message.len, (const char *)st.message.data);
    if (ret_fd && st.state == TDM_KVPOLL_SUCCESS)
        *ret_fd = fd;
    else
        close(fd);
    return st.state;
}

/* Re-encode a REGISTER after `edit` changed it. */
static size_t edit_register(const uint8_t *frame, size_t len, uint8_t *out, size_t cap,
                            void (*edit)(tdm_frame_register_t *))
{
    static tdm_frame_register_t f;
    size_t n = 0;
    if (tdm_frame_decode_register(frame + TDM_FRAME_HDR_BYTES, len - TDM_FRAME_HDR_BYTES, &f, NULL,
                                  0) != TDM_OK)
        return 0;
    edit(&f);
    return tdm_frame_encode_register(&f, out, cap, &n) == TDM_OK ? n : 0;
}

static void edit_stride(tdm_frame_register_t *f)
{
    f->layout.sub[TDM_KV_SUB_V].page_stride += 4;
}

static void edit_memkind(tdm_frame_register_t *f)
{
    f->ranks[0].mem_kind = TDM_XFER_MEM_CUDA_IPC;
}

int main(void)
{
    xt_geom_t g = {TDM_DTYPE_BF16, 1, 4, 2, 1, 16, 16};
    xt_side_t pre, dec, shadow;
    uint64_t seed = 31337;
    uint8_t buf[8192];
    tdm_xfer_stats_t s0, s1;
    if (xt_pools(&pre, &g) || xt_pools(&dec, &g) || xt_pools(&shadow, &g)) {
        ok(0, "pools");
        return exit_status();
    }
    pre.cfg.role = TDM_XFER_PREFILL;
    pre.cfg.peer_timeout_us = 500000; /* idle connections and silent peers go after 0.5 s */
    if (tdm_xfer_init(&pre.cfg, &pre.x) != TDM_OK) {
        ok(0, "prefill init");
        return exit_status();
    }
    uint16_t port = tdm_xfer_port(pre.x);

    /* random bytes: 40 connections */
    int closed = 0;
    for (int c = 0; c < 40; c++) {
        int fd = dial(port);
        size_t n = 1 + xt_rng(&seed) % sizeof(buf);
        for (size_t i = 0; i < n; i++)
            buf[i] = (uint8_t)xt_rng(&seed);
        send_all(fd, buf, n);
        closed += closed_by_server(fd, 1000);
        close(fd);
    }
    is_int(closed, 40, "random bytes: every connection closed by the server");

    int fd = dial(port);
    hdr(buf, 0xdeadbeef, 1, 1, 4);
    send_all(fd, buf, 16);
    ok(closed_by_server(fd, 1000), "bad magic: closed");
    close(fd);
    fd = dial(port);
    hdr(buf, TDM_FRAME_MAGIC, 7, 1, 4);
    send_all(fd, buf, 16);
    ok(closed_by_server(fd, 1000), "bad version: closed");
    close(fd);
    fd = dial(port);
    hdr(buf, TDM_FRAME_MAGIC, TDM_FRAME_VERSION, TDM_FRAME_REGISTER, TDM_FRAME_MAX_BODY + 1);
    send_all(fd, buf, 12);
    ok(closed_by_server(fd, 1000), "oversized length: closed");
    close(fd);
    fd = dial(port);
    hdr(buf, TDM_FRAME_MAGIC, TDM_FRAME_VERSION, TDM_FRAME_REGISTER, 100);
    send_all(fd, buf, 22); /* truncated: 10 of 100 body bytes, then hang up */
    close(fd);
    tdm_xfer_stats(pre.x, &s0);
    fd = dial(port);
    hdr(buf, TDM_FRAME_MAGIC, TDM_FRAME_VERSION, 99, 5);
    send_all(fd, buf, 17);
    tdm_time_sleep_us(200000);
    tdm_xfer_stats(pre.x, &s1);
    ok(s1.frames_unknown == s0.frames_unknown + 1, "unknown frame type counted");
    ok(!closed_by_server(fd, 100), "unknown type: connection kept");
    ok(closed_by_server(fd, 2000), "idle unregistered connection expired");
    close(fd);

    char msg[TDM_FRAME_MAX_MSG + 1];
    hdr(buf, TDM_FRAME_MAGIC, TDM_FRAME_VERSION, TDM_FRAME_REGISTER, 8);
    memset(buf + 12, 0xff, 8);
    is_int(do_register(port, buf, 20, msg, sizeof(msg), NULL), TDM_KVPOLL_FAILED,
           "garbage REGISTER refused");
    ok(strstr(msg, "malformed REGISTER") != NULL, "refusal names the problem: '%s'", msg);

    /* excess connections beyond the pending cap are closed */
    int many[XFER_MAX_PENDING_CONNS + 4], extra_closed = 0;
    for (int i = 0; i < XFER_MAX_PENDING_CONNS + 4; i++)
        many[i] = dial(port);
    tdm_time_sleep_us(300000);
    for (int i = 0; i < XFER_MAX_PENDING_CONNS + 4; i++) {
        extra_closed += closed_by_server(many[i], 20);
        close(many[i]);
    }
    ok(extra_closed >= 4, "connections beyond the cap closed (%d)", extra_closed);

    /* a decode engine that never reaches the server lends its real REGISTER bytes */
    int tmp = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t sl = sizeof(sa);
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    bind(tmp, (struct sockaddr *)&sa, sizeof(sa));
    getsockname(tmp, (struct sockaddr *)&sa, &sl);
    close(tmp);
    shadow.cfg.role = TDM_XFER_DECODE;
    shadow.cfg.host = "127.0.0.1";
    shadow.cfg.port = ntohs(sa.sin_port); /* nothing listens there */
    uint8_t *reg = NULL, edited[8192];
    size_t reg_len = 0, n;
    if (tdm_xfer_init(&shadow.cfg, &shadow.x) != TDM_OK ||
        tdm_xfer_decode_register_frame(shadow.x, &reg, &reg_len) != TDM_OK) {
        ok(0, "shadow decode");
        return exit_status();
    }
    n = edit_register(reg, reg_len, edited, sizeof(edited), edit_stride);
    is_int(do_register(port, edited, n, msg, sizeof(msg), NULL), TDM_KVPOLL_FAILED,
           "sub-buffer stride mismatch refused");
    ok(strstr(msg, "sub V page_stride") != NULL, "names the sub-buffer field: '%s'", msg);
    n = edit_register(reg, reg_len, edited, sizeof(edited), edit_memkind);
    is_int(do_register(port, edited, n, msg, sizeof(msg), NULL), TDM_KVPOLL_FAILED,
           "CUDA IPC memory kind refused");
    ok(strstr(msg, "mem_kind cuda_ipc") != NULL, "names mem_kind: '%s'", msg);

    /* a registered raw channel: junk is counted and dropped, the channel keeps working */
    int ch = -1;
    is_int(do_register(port, reg, reg_len, msg, sizeof(msg), &ch), TDM_KVPOLL_SUCCESS,
           "raw client registered with real UCX addresses");
    tdm_xfer_stats(pre.x, &s0);
    hdr(buf, TDM_FRAME_MAGIC, TDM_FRAME_VERSION, 77, 3);
    send_all(ch, buf, 15); /* unknown type */
    hdr(buf, TDM_FRAME_MAGIC, TDM_FRAME_VERSION, TDM_FRAME_TRANSFER_INFO, 6);
    send_all(ch, buf, 18); /* truncated TRANSFER_INFO body */
    hdr(buf, TDM_FRAME_MAGIC, TDM_FRAME_VERSION, TDM_FRAME_ABORT, 2);
    send_all(ch, buf, 14); /* truncated ABORT body */
    tdm_frame_abort_ack_t ack = {5, 1, 1};
    tdm_frame_encode_abort_ack(&ack, buf, sizeof(buf), &n);
    send_all(ch, buf, n); /* valid but unexpected at prefill */
    tdm_frame_abort_t ab = {0x777, 0, {NULL, 0}};
    tdm_frame_encode_abort(&ab, buf, sizeof(buf), &n);
    send_all(ch, buf, n); /* unknown room: must still be ACKed */
    tdm_frame_hdr_t h;
    int got_ack = 0;
    for (int i = 0; i < 10 && !got_ack; i++) {
        int t = read_frame(ch, buf, sizeof(buf), &h);
        if (t < 0)
            break;
        tdm_frame_abort_ack_t a;
        got_ack = t == TDM_FRAME_ABORT_ACK &&
                  tdm_frame_decode_abort_ack(buf + TDM_FRAME_HDR_BYTES, h.length, &a, NULL, 0) ==
                      TDM_OK &&
                  a.room == 0x777 && a.flushed && !a.known;
    }
    ok(got_ack, "after the junk, ABORT for an unknown room is ACKed on the same channel");
    tdm_xfer_stats(pre.x, &s1);
    ok(s1.frames_unknown > s0.frames_unknown && s1.frames_malformed >= s0.frames_malformed + 2 &&
           s1.frames_unexpected > s0.frames_unexpected,
       "counted: unknown +%llu, malformed +%llu, unexpected +%llu",
       (unsigned long long)(s1.frames_unknown - s0.frames_unknown),
       (unsigned long long)(s1.frames_malformed - s0.frames_malformed),
       (unsigned long long)(s1.frames_unexpected - s0.frames_unexpected));
    hdr(buf, 0x12345678, 1, 1, 0);
    send_all(ch, buf, 12);
    ok(closed_by_server(ch, 2000), "bad header on the channel: closed");
    close(ch);
    free(reg);
    tdm_xfer_free(shadow.x);
    shadow.x = NULL;

    /* the server keeps serving: a real decode registers and a room transfers */
    dec.cfg.role = TDM_XFER_DECODE;
    dec.cfg.host = "127.0.0.1";
    dec.cfg.port = port;
    char why[256] = "";
    if (tdm_xfer_init(&dec.cfg, &dec.x) != TDM_OK) {
        ok(0, "decode init");
        return exit_status();
    }
    is_int(tdm_xfer_wait_ready(dec.x, 10 * T_S, why, sizeof(why)), TDM_OK,
           "valid decode registers after the junk %s", why);
    xt_fill_random(&pre, 5);
    uint32_t prompt[8] = {1, 2, 3, 4, 5, 6, 7, 8}, dp[2] = {3, 9}, sp[2] = {1, 2};
    uint64_t room;
    tdm_xfer_request_t req;
    memset(&req, 0, sizeof(req));
    tdm_xfer_aux_t aux = {0, 11, 0, 0, {{0, 0}}}, got;
    int fine = tdm_xfer_decode_send_info(dec.x, prompt, 8, dp, 2, NULL, &room) == TDM_OK &&
               xt_next(pre.x, &req, T_S) == TDM_OK &&
               tdm_xfer_prefill_send(pre.x, room, sp, 2, &aux) == TDM_OK &&
               xt_wait(dec.x, room, TDM_KVPOLL_SUCCESS, T_S) == TDM_KVPOLL_SUCCESS &&
               tdm_xfer_decode_commit(dec.x, room, &got) == TDM_OK && got.first_token == 11;
    tdm_xfer_request_clear(&req);
    ok(fine, "a room transfers and verifies");
    tdm_xfer_stats(pre.x, &s1);
    diag("prefill: %llu conns, %llu closed bad, %llu refused, %llu malformed, %llu unknown",
         (unsigned long long)s1.conns_accepted, (unsigned long long)s1.conns_closed_bad,
         (unsigned long long)s1.register_refused, (unsigned long long)s1.frames_malformed,
         (unsigned long long)s1.frames_unknown);
    xt_side_free(&dec);
    xt_side_free(&pre);
    xt_side_free(&shadow);
    done_testing();
    return exit_status();
}
