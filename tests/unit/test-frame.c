/*
 * test-frame.c — control frames round-trip, and every truncation, extension or oversized count of
 * a valid frame is rejected cleanly (invariant I3: decoders never trust input).
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <tdm/frame.h>

#include "tap.h"

static tdm_layout_record_t sample_layout(void)
{
    tdm_layout_record_t l;
    memset(&l, 0, sizeof(l));
    l.kv_dtype = TDM_DTYPE_BF16;
    l.n_sub = 2;
    l.tp_size = 2;
    l.tp_rank = 0;
    l.num_layers = 22;
    l.num_kv_heads = 2;
    l.head_dim = 64;
    l.page_size = 16;
    l.num_pages = 1000;
    l.sub[0] = (tdm_layout_sub_t){TDM_KV_SUB_K, TDM_DTYPE_BF16, 256, 4096};
    l.sub[1] = (tdm_layout_sub_t){TDM_KV_SUB_V, TDM_DTYPE_BF16, 256, 4096};
    return l;
}

typedef tdm_status_t (*decode_fn)(const uint8_t *, size_t, void *, char *, size_t);

/* Every proper prefix and a one-byte extension of the body must fail to decode. */
static int all_truncations_fail(const uint8_t *frame, size_t len, decode_fn dec, void *out)
{
    const uint8_t *body = frame + TDM_FRAME_HDR_BYTES;
    size_t blen = len - TDM_FRAME_HDR_BYTES;
    for (size_t n = 0; n < blen; n++) {
        uint8_t *copy = malloc(n ? n : 1);
        memcpy(copy, body, n);
        char why[128] = "";
        tdm_status_t st = dec(copy, n, out, why, sizeof(why));
        free(copy);
        if (st != TDM_ERR_FORMAT || why[0] == '\0')
            return 0;
    }
    uint8_t *ext = malloc(blen + 1);
    memcpy(ext, body, blen);
    ext[blen] = 0;
    char why[128];
    tdm_status_t st = dec(ext, blen + 1, out, why, sizeof(why));
    free(ext);
    return st == TDM_ERR_FORMAT && strstr(why, "trailing") != NULL;
}

int main(void)
{
    uint8_t buf[8192];
    size_t len;
    tdm_frame_hdr_t h;

    /* REGISTER */
    tdm_frame_register_t reg;
    memset(&reg, 0, sizeof(reg));
    reg.instance_id = 0x7fedcba987654321ull;
    reg.tp_size = 2;
    reg.n_ranks = 2;
    reg.page_size = 16;
    reg.layout = sample_layout();
    static const uint8_t addr0[] = {1, 2, 3, 4, 5}, key0[] = {9, 9};
    for (int i = 0; i < 2; i++) {
        reg.ranks[i].rank = (uint16_t)i;
        reg.ranks[i].base_addr = 0x1000u * (unsigned)(i + 1);
        reg.ranks[i].pool_bytes = 1u << 20;
        reg.ranks[i].worker_addr = (tdm_blob_t){addr0, sizeof(addr0)};
        reg.ranks[i].rkey = (tdm_blob_t){key0, sizeof(key0)};
    }
    tdm_status_t st = tdm_frame_encode_register(&reg, buf, sizeof(buf), &len);
    ok(st == TDM_OK, "REGISTER encodes (%s)", tdm_status_name(st));
    ok(tdm_frame_hdr_parse(buf, len, TDM_FRAME_MAX_BODY, &h) == TDM_OK &&
           h.type == TDM_FRAME_REGISTER && h.length == len - TDM_FRAME_HDR_BYTES,
       "REGISTER header");
    tdm_frame_register_t reg2;
    char why[128];
    st = tdm_frame_decode_register(buf + 12, h.length, &reg2, why, sizeof(why));
    ok(st == TDM_OK && reg2.instance_id == reg.instance_id && reg2.n_ranks == 2 &&
           reg2.ranks[1].base_addr == 0x2000 && reg2.ranks[1].worker_addr.len == 5 &&
           memcmp(reg2.ranks[1].worker_addr.data, addr0, 5) == 0,
       "REGISTER round-trips");
    ok(st == TDM_OK && tdm_layout_equal(&reg.layout, &reg2.layout, why, sizeof(why)),
       "REGISTER carries the layout record");
    ok(all_truncations_fail(buf, len, (decode_fn)tdm_frame_decode_register, &reg2),
       "REGISTER: every truncation and extension rejected with a reason");
    reg.ranks[1].rank = 5;
    tdm_frame_encode_register(&reg, buf, sizeof(buf), &len);
    ok(tdm_frame_decode_register(buf + 12, len - 12, &reg2, why, sizeof(why)) == TDM_ERR_FORMAT &&
           strstr(why, "rank"),
       "REGISTER rank >= tp_size rejected: %s", why);
    ok(tdm_frame_encode_register(&reg, buf, 40, &len) == TDM_ERR_OVERFLOW,
       "encode into a short buffer is OVERFLOW");

    /* TRANSFER_INFO */
    uint32_t prompt[5] = {1, 22, 333, 4444, 55555}, pages[3] = {7, 8, 9};
    tdm_frame_transfer_info_t ti;
    memset(&ti, 0, sizeof(ti));
    ti.room = 0x123456789abcdefull;
    ti.n_prompt = 5;
    ti.n_pages = 3;
    ti.aux_slot = 4;
    ti.sampling.seed = 42;
    ti.sampling.temperature = 0.7f;
    ti.sampling.top_k = -1;
    ti.sampling.top_logprobs = 5;
    ok(tdm_frame_encode_transfer_info(&ti, prompt, pages, buf, sizeof(buf), &len) == TDM_OK,
       "TRANSFER_INFO encodes");
    tdm_frame_transfer_info_t ti2;
    st = tdm_frame_decode_transfer_info(buf + 12, len - 12, &ti2, why, sizeof(why));
    ok(st == TDM_OK && ti2.room == ti.room && ti2.n_prompt == 5 &&
           tdm_frame_u32_at(ti2.prompt_ids, 4) == 55555 && tdm_frame_u32_at(ti2.page_ids, 2) == 9 &&
           ti2.sampling.temperature == 0.7f && ti2.sampling.top_k == -1 && ti2.aux_slot == 4,
       "TRANSFER_INFO round-trips");
    ok(all_truncations_fail(buf, len, (decode_fn)tdm_frame_decode_transfer_info, &ti2),
       "TRANSFER_INFO: every truncation and extension rejected");
    /* a huge count must be refused before any read */
    uint8_t evil[64];
    memset(evil, 0, sizeof(evil));
    evil[20] = 0xff, evil[21] = 0xff, evil[22] = 0xff, evil[23] = 0x7f; /* n_prompt */
    ok(tdm_frame_decode_transfer_info(evil, sizeof(evil), &ti2, why, sizeof(why)) == TDM_ERR_FORMAT,
       "TRANSFER_INFO with a 2^31 prompt count rejected: %s", why);

    /* STATUS */
    uint64_t sums[4] = {1, 0xffffffffffffffffull, 3, 4};
    tdm_frame_status_t s;
    memset(&s, 0, sizeof(s));
    s.room = 99;
    s.state = TDM_KVPOLL_SUCCESS;
    s.first_token = 1234;
    s.first_logprob = -0.25f;
    s.n_top = 2;
    s.top[0] = (tdm_frame_top_t){1234, -0.25f};
    s.top[1] = (tdm_frame_top_t){5, -2.0f};
    s.chunk_tokens = 16;
    s.n_checksums = 4;
    s.message = (tdm_blob_t){(const uint8_t *)"ok", 2};
    ok(tdm_frame_encode_status(&s, sums, NULL, buf, sizeof(buf), &len) == TDM_OK, "STATUS encodes");
    tdm_frame_status_t s2;
    st = tdm_frame_decode_status(buf + 12, len - 12, &s2, why, sizeof(why));
    ok(st == TDM_OK && s2.state == TDM_KVPOLL_SUCCESS && s2.n_top == 2 && s2.top[1].id == 5 &&
           tdm_frame_u64_at(s2.checksums, 1) == 0xffffffffffffffffull && s2.message.len == 2 &&
           s2.n_seg_sums == 0 && s2.seg_sums == NULL,
       "STATUS round-trips (no segment-sum trailer)");
    {
        /* every truncation fails; one byte more is a trailer too short for its count */
        int trunc_ok = 1;
        for (size_t n = 0; n < len - 12; n++) {
            why[0] = 0;
            trunc_ok &=
                tdm_frame_decode_status(buf + 12, n, &s2, why, sizeof(why)) == TDM_ERR_FORMAT &&
                why[0];
        }
        buf[len] = 0;
        ok(trunc_ok &&
               tdm_frame_decode_status(buf + 12, len - 12 + 1, &s2, why, sizeof(why)) ==
                   TDM_ERR_FORMAT &&
               strstr(why, "seg_sums count"),
           "STATUS: every truncation rejected, a 1-byte extension names the field: %s", why);
    }
    /* the segment-sum trailer (docs/contracts.md §d "Segment sums") */
    {
        uint64_t seg[6] = {11, 0x8000000000000001ull, 13, 14, 15, 0};
        uint8_t tb[8192], ev2[8192];
        size_t tlen, plain = len;
        s.n_seg_sums = 6;
        tlen = 0;
        st = tdm_frame_encode_status(&s, sums, seg, tb, sizeof(tb), &tlen);
        ok(st == TDM_OK && tlen == plain + 4 + 6 * 8,
           "STATUS with 6 segment sums encodes: 4 + 48 bytes after the message (%zu)",
           tlen - plain);
        st = tdm_frame_decode_status(tb + 12, tlen - 12, &s2, why, sizeof(why));
        ok(st == TDM_OK && s2.n_seg_sums == 6 &&
               tdm_frame_u64_at(s2.seg_sums, 1) == 0x8000000000000001ull &&
               tdm_frame_u64_at(s2.seg_sums, 5) == 0 && s2.n_checksums == 4 && s2.message.len == 2,
           "STATUS segment sums round-trip (%s)", tdm_status_name(st));
        /* truncated: every cut inside the trailer fails naming it; the cut at the message's end
         * is a STATUS without the trailer (what a prefill before the trailer sends) */
        int cut_ok = 1;
        for (size_t n = plain - 12 + 1; n < tlen - 12; n++) {
            why[0] = 0;
            cut_ok &=
                tdm_frame_decode_status(tb + 12, n, &s2, why, sizeof(why)) == TDM_ERR_FORMAT &&
                strstr(why, "seg_sums") != NULL;
        }
        ok(cut_ok, "STATUS: every truncation inside the trailer rejected naming seg_sums");
        ok(tdm_frame_decode_status(tb + 12, plain - 12, &s2, why, sizeof(why)) == TDM_OK &&
               s2.n_seg_sums == 0,
           "STATUS cut at the message's end decodes without segment sums");
        memcpy(ev2, tb, tlen);
        ev2[tlen] = 7;
        ok(tdm_frame_decode_status(ev2 + 12, tlen - 12 + 1, &s2, why, sizeof(why)) ==
                   TDM_ERR_FORMAT &&
               strstr(why, "trailing"),
           "STATUS: a byte after the trailer rejected: %s", why);
        /* the count: 0, more than the body holds, over the cap */
        uint32_t cases[3] = {0, 7, TDM_FRAME_MAX_SEG_SUMS + 1};
        const char *names[3] = {"zero", "7 for 6 values", "over the cap"};
        for (int c = 0; c < 3; c++) {
            memcpy(ev2, tb, tlen);
            for (int b = 0; b < 4; b++)
                ev2[plain + b] = (uint8_t)(cases[c] >> (8 * b));
            why[0] = 0;
            ok(tdm_frame_decode_status(ev2 + 12, tlen - 12, &s2, why, sizeof(why)) ==
                       TDM_ERR_FORMAT &&
                   strstr(why, "seg_sums"),
               "STATUS segment-sum count %s rejected naming the field: %s", names[c], why);
        }
        /* segment sums without page sums: refused by both ends */
        s.n_checksums = 0;
        ok(tdm_frame_encode_status(&s, sums, seg, tb, sizeof(tb), &tlen) == TDM_ERR_INVAL,
           "STATUS encoder refuses segment sums without page sums");
        s.n_seg_sums = 0;
        tdm_frame_encode_status(&s, NULL, NULL, ev2, sizeof(ev2), &tlen);
        ev2[tlen] = 1, ev2[tlen + 1] = 0, ev2[tlen + 2] = 0, ev2[tlen + 3] = 0;
        memset(ev2 + tlen + 4, 0, 8);
        ok(tdm_frame_decode_status(ev2 + 12, tlen - 12 + 12, &s2, why, sizeof(why)) ==
                   TDM_ERR_FORMAT &&
               strstr(why, "seg_sums count"),
           "STATUS decoder refuses segment sums without page sums: %s", why);
        s.n_checksums = 4;
        s.n_seg_sums = TDM_FRAME_MAX_SEG_SUMS + 1;
        ok(tdm_frame_encode_status(&s, sums, seg, tb, sizeof(tb), &tlen) == TDM_ERR_INVAL,
           "STATUS encoder refuses a count over the cap");
        s.n_seg_sums = 0;
    }
    buf[12 + 8] = 9; /* state out of range */
    ok(tdm_frame_decode_status(buf + 12, len - 12, &s2, why, sizeof(why)) == TDM_ERR_FORMAT &&
           strstr(why, "state"),
       "STATUS with state 9 rejected: %s", why);

    /* ABORT, ABORT_ACK, HEARTBEAT */
    tdm_frame_abort_t a = {.room = 5, .reason = 2, .message = {(const uint8_t *)"client gone", 11}};
    tdm_frame_abort_t a2;
    ok(tdm_frame_encode_abort(&a, buf, sizeof(buf), &len) == TDM_OK &&
           tdm_frame_decode_abort(buf + 12, len - 12, &a2, why, sizeof(why)) == TDM_OK &&
           a2.room == 5 && a2.message.len == 11,
       "ABORT round-trips");
    ok(all_truncations_fail(buf, len, (decode_fn)tdm_frame_decode_abort, &a2),
       "ABORT: every truncation and extension rejected");
    tdm_frame_abort_ack_t ack = {.room = 5, .flushed = 1, .known = 0}, ack2;
    ok(tdm_frame_encode_abort_ack(&ack, buf, sizeof(buf), &len) == TDM_OK &&
           tdm_frame_decode_abort_ack(buf + 12, len - 12, &ack2, why, sizeof(why)) == TDM_OK &&
           ack2.flushed == 1 && ack2.known == 0,
       "ABORT_ACK round-trips");
    tdm_frame_heartbeat_t hb = {.instance_id = 1, .seq = 2, .ts_us = 3}, hb2;
    ok(tdm_frame_encode_heartbeat(&hb, buf, sizeof(buf), &len) == TDM_OK &&
           tdm_frame_decode_heartbeat(buf + 12, len - 12, &hb2, why, sizeof(why)) == TDM_OK &&
           hb2.ts_us == 3,
       "HEARTBEAT round-trips");

    /* header checks */
    uint8_t bad[12];
    memcpy(bad, buf, 12);
    bad[0] ^= 1;
    ok(tdm_frame_hdr_parse(bad, 12, TDM_FRAME_MAX_BODY, &h) == TDM_ERR_FORMAT, "bad magic");
    memcpy(bad, buf, 12);
    bad[4] = 2;
    ok(tdm_frame_hdr_parse(bad, 12, TDM_FRAME_MAX_BODY, &h) == TDM_ERR_FORMAT, "bad version");
    memcpy(bad, buf, 12);
    bad[11] = 0x40;
    ok(tdm_frame_hdr_parse(bad, 12, TDM_FRAME_MAX_BODY, &h) == TDM_ERR_FORMAT, "oversize length");
    ok(tdm_frame_hdr_parse(buf, 11, TDM_FRAME_MAX_BODY, &h) == TDM_ERR_AGAIN, "short header");
    memcpy(bad, buf, 12);
    bad[6] = 77;
    ok(tdm_frame_hdr_parse(bad, 12, TDM_FRAME_MAX_BODY, &h) == TDM_OK && h.type == 77 &&
           strcmp(tdm_frame_type_name(h.type), "UNKNOWN") == 0,
       "unknown type parses (dropped at the body level)");

    /* stream reader: three frames fed one byte at a time */
    uint8_t stream[4096];
    size_t slen = 0, l1;
    tdm_frame_encode_heartbeat(&hb, stream, sizeof(stream), &l1);
    slen += l1;
    tdm_frame_encode_abort(&a, stream + slen, sizeof(stream) - slen, &l1);
    slen += l1;
    tdm_frame_encode_status(&s, sums, NULL, stream + slen, sizeof(stream) - slen, &l1);
    slen += l1;
    tdm_frame_reader_t rd;
    tdm_frame_reader_init(&rd, 1 << 16);
    int got = 0, order_ok = 1;
    uint16_t want[3] = {TDM_FRAME_HEARTBEAT, TDM_FRAME_ABORT, TDM_FRAME_STATUS};
    for (size_t i = 0; i < slen; i++) {
        uint8_t *p;
        size_t avail;
        tdm_frame_reader_space(&rd, &p, &avail);
        *p = stream[i];
        tdm_frame_reader_commit(&rd, 1);
        const uint8_t *body;
        while (tdm_frame_reader_next(&rd, &h, &body) == TDM_OK) {
            if (got >= 3 || h.type != want[got])
                order_ok = 0;
            got++;
        }
    }
    ok(got == 3 && order_ok, "reader reassembles 3 frames fed byte by byte, in order");
    uint8_t *p;
    size_t avail;
    tdm_frame_reader_space(&rd, &p, &avail);
    memset(p, 0xAB, 12);
    tdm_frame_reader_commit(&rd, 12);
    const uint8_t *body;
    ok(tdm_frame_reader_next(&rd, &h, &body) == TDM_ERR_FORMAT && rd.broken,
       "garbage header breaks the stream");
    tdm_frame_reader_free(&rd);
    ok(strcmp(tdm_kvpoll_name(TDM_KVPOLL_WAITING_FOR_INPUT), "WAITING_FOR_INPUT") == 0 &&
           TDM_KVPOLL_FAILED < TDM_KVPOLL_BOOTSTRAPPING &&
           TDM_KVPOLL_TRANSFERRING < TDM_KVPOLL_SUCCESS,
       "KVPoll order FAILED < BOOTSTRAPPING < ... < SUCCESS");
    return done_testing();
}
