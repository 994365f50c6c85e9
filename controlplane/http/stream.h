/*
 * controlplane/http/stream.h — GET /api/v1/stream: tandemd's live state as server-sent events, for
 * the console (docs/contracts.md "tandemd event stream").
 *
 * A subscriber first gets the ring's recent samples of every rank that reported in the last
 * minute (the newest TDM_CP_STREAM_BACKLOG each; older incarnations only their latest), then,
 * every 200 ms, the samples that arrived since (`event: ranks`), the live alert list when it
 * changed (`event: alerts`), and each second the groups' status and tandemd's health when they
 * changed (`event: status`, `event: health`); a comment line every 10 s of silence.
 * A subscriber whose previous write is still in flight skips ticks: what it gets next covers them,
 * so a slow client costs memory for one write only. At most TDM_CP_STREAM_MAX subscribers (503
 * past that).
 *
 * Everything here runs on the loop thread.
 */
#ifndef TDM_CP_STREAM_H
#define TDM_CP_STREAM_H

#include <stdint.h>

#define TDM_CP_STREAM_MAX 32
#define TDM_CP_STREAM_BACKLOG 200
#define TDM_CP_STREAM_TICK_US 200000u

typedef struct tdm_cp_stream tdm_cp_stream_t;

#ifdef TDM_CP_SERVER_H
/* Route handlers (role: read). */
void tdm_cp_h_stream(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *args,
                     const tdm_cp_token_t *who);
/* From loop_tick: push what is due. */
void tdm_cp_stream_tick(tdm_cp_server_t *s, uint64_t now_mono_us);
/* At shutdown, before the connections are closed: end every stream. */
void tdm_cp_stream_close_all(tdm_cp_server_t *s);
#endif

#endif
