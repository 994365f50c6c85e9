/*
 * routes.c — tandemd's one route table: method, path pattern ({name} captures one segment), the
 * role it needs, its body limit and its handler (rest.h). cp_server.c's dispatcher matches it in
 * order, enforces the body limit and the role (no token → 401, too weak → 403); `tandemd
 * --print-routes` prints it (the auth test walks it).
 */
#include "config.h"

#include "controlplane/http/rest.h" /* before console.h: its handler needs the server's types */

#include "controlplane/http/console.h"
#include "controlplane/http/stream.h"

#define BODY_V1 (8u << 20) /* the workers' --max-request-bytes default */

/* clang-format off */
const tdm_cp_route_t tdm_cp_routes[] = {
    {"GET", "/health", TDM_CP_ROLE_NONE, 0, tdm_cp_h_health},
    {"GET", "/console", TDM_CP_ROLE_NONE, 0, tdm_cp_h_console},
    {"GET", "/console/{file}", TDM_CP_ROLE_NONE, 0, tdm_cp_h_console},
    {"GET", "/metrics", TDM_CP_ROLE_READ, 0, tdm_cp_h_metrics},
    {"POST", "/api/v1/telemetry", TDM_CP_ROLE_ADMIN, TDM_CP_BODY_TELEMETRY, tdm_cp_ingest_handle},
    {"POST", "/api/v1/workers/register", TDM_CP_ROLE_ADMIN, TDM_CP_BODY_SMALL, tdm_cp_h_register},
    {"POST", "/api/v1/workers/heartbeat", TDM_CP_ROLE_ADMIN, TDM_CP_BODY_SMALL, tdm_cp_h_heartbeat},
    {"GET", "/api/v1/groups", TDM_CP_ROLE_READ, 0, tdm_cp_h_groups},
    {"GET", "/api/v1/ranks", TDM_CP_ROLE_READ, 0, tdm_cp_h_ranks},
    {"GET", "/api/v1/ranks/{instance_id}/{rank}/history", TDM_CP_ROLE_READ, 0, tdm_cp_h_rank_history},
    {"GET", "/api/v1/transfers", TDM_CP_ROLE_READ, 0, tdm_cp_h_transfers},
    {"GET", "/api/v1/transfers/{room}", TDM_CP_ROLE_READ, 0, tdm_cp_h_room_events},
    {"GET", "/api/v1/stream", TDM_CP_ROLE_READ, 0, tdm_cp_h_stream},
    {"GET", "/api/v1/alerts", TDM_CP_ROLE_READ, 0, tdm_cp_h_alerts},
    {"GET", "/api/v1/actions", TDM_CP_ROLE_READ, 0, tdm_cp_h_actions},
    {"GET", "/api/v1/config", TDM_CP_ROLE_READ, 0, tdm_cp_h_config},
    {"GET", "/api/v1/tokens", TDM_CP_ROLE_ADMIN, 0, tdm_cp_h_tokens_list},
    {"POST", "/api/v1/tokens", TDM_CP_ROLE_ADMIN, TDM_CP_BODY_SMALL, tdm_cp_h_tokens_create},
    {"DELETE", "/api/v1/tokens/{name}", TDM_CP_ROLE_ADMIN, 0, tdm_cp_h_tokens_revoke},
    {"POST", "/api/v1/groups/{group}/drain", TDM_CP_ROLE_ADMIN, TDM_CP_BODY_SMALL, tdm_cp_h_drain},
    {"POST", "/api/v1/groups/{group}/resume", TDM_CP_ROLE_ADMIN, TDM_CP_BODY_SMALL, tdm_cp_h_resume},
    {"POST", "/api/v1/groups/{group}/restart", TDM_CP_ROLE_ADMIN, TDM_CP_BODY_SMALL, tdm_cp_h_restart},
    {"POST", "/api/v1/groups/{group}/reconfigure", TDM_CP_ROLE_ADMIN, TDM_CP_BODY_SMALL,
     tdm_cp_h_reconfigure},
    {"POST", "/api/v1/groups/{group}/faults", TDM_CP_ROLE_ADMIN, TDM_CP_BODY_SMALL, tdm_cp_h_fault},
    {"GET", "/api/v1/status", TDM_CP_ROLE_READ, 0, tdm_cp_h_status},
    {"POST", "/v1/completions", TDM_CP_ROLE_NONE, BODY_V1, tdm_cp_h_v1_proxy},
    {"POST", "/v1/chat/completions", TDM_CP_ROLE_NONE, BODY_V1, tdm_cp_h_v1_proxy},
    {"GET", "/v1/models", TDM_CP_ROLE_NONE, 0, tdm_cp_h_v1_models},
};
/* clang-format on */
const size_t tdm_cp_routes_count = sizeof(tdm_cp_routes) / sizeof(tdm_cp_routes[0]);
