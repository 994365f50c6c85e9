/* fuzz-frame.c — the control-frame parser on arbitrary bytes: header, every body decoder, and the
 * stream reader fed in random-sized pieces. Nothing may crash, hang or read out of bounds. */
#include "config.h"

#include <stdint.h>
#include <string.h>

#include <tdm/frame.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char why[128];
    static tdm_frame_register_t reg;
    tdm_frame_transfer_info_t ti;
    tdm_frame_status_t st;
    tdm_frame_abort_t ab;
    tdm_frame_abort_ack_t ack;
    tdm_frame_heartbeat_t hb;
    /* every decoder on the raw bytes as a body */
    tdm_frame_decode_register(data, size, &reg, why, sizeof(why));
    tdm_frame_decode_transfer_info(data, size, &ti, why, sizeof(why));
    tdm_frame_decode_status(data, size, &st, why, sizeof(why));
    tdm_frame_decode_abort(data, size, &ab, why, sizeof(why));
    tdm_frame_decode_abort_ack(data, size, &ack, why, sizeof(why));
    tdm_frame_decode_heartbeat(data, size, &hb, why, sizeof(why));
    /* and as a stream: the first byte picks the piece size */
    tdm_frame_reader_t rd;
    if (tdm_frame_reader_init(&rd, 1 << 16) != TDM_OK)
        return 0;
    size_t piece = size ? (size_t)(data[0] % 13) + 1 : 1;
    for (size_t off = 0; off < size;) {
        uint8_t *p;
        size_t avail;
        tdm_frame_reader_space(&rd, &p, &avail);
        size_t n = size - off < piece ? size - off : piece;
        if (n > avail)
            n = avail;
        if (n == 0)
            break;
        memcpy(p, data + off, n);
        tdm_frame_reader_commit(&rd, n);
        off += n;
        tdm_frame_hdr_t h;
        const uint8_t *body;
        tdm_status_t s;
        while ((s = tdm_frame_reader_next(&rd, &h, &body)) == TDM_OK) {
            switch (h.type) {
            case TDM_FRAME_REGISTER:
                tdm_frame_decode_register(body, h.length, &reg, why, sizeof(why));
                break;
            case TDM_FRAME_TRANSFER_INFO:
                tdm_frame_decode_transfer_info(body, h.length, &ti, why, sizeof(why));
                break;
            case TDM_FRAME_STATUS:
                tdm_frame_decode_status(body, h.length, &st, why, sizeof(why));
                break;
            default:
                break;
            }
        }
        if (s == TDM_ERR_FORMAT)
            break;
    }
    tdm_frame_reader_free(&rd);
    return 0;
}
