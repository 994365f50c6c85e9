/*
 * controlplane/console.h — the operator console's static files, compiled into tandemd.
 *
 * web/embed.sh turns web/console.{html,js,css} into tdm_cp_assets[] at build time, so the console
 * needs no files at run time. The page itself is public (it holds no data); every API call it
 * makes carries the bearer token the operator opened it with (/console?token=…).
 */
#ifndef TDM_CP_CONSOLE_H
#define TDM_CP_CONSOLE_H

#include <stddef.h>

typedef struct tdm_cp_asset {
    const char *path; /* "/console", "/console/console.js", ... */
    const char *content_type;
    const char *data;
    size_t len;
} tdm_cp_asset_t;

extern const tdm_cp_asset_t tdm_cp_assets[];
extern const size_t tdm_cp_assets_count;

/* The asset for a request path (query string ignored), or NULL. */
const tdm_cp_asset_t *tdm_cp_asset_find(const char *path, size_t len);

#ifdef TDM_CP_SERVER_H
/* Route handler for GET /console and GET /console/{file} (role: none). */
void tdm_cp_h_console(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *args,
                      const tdm_cp_token_t *who);
#endif

#endif
