/*
 * controlplane/http/console.h — the operator console's static files, compiled into tandemd.
 *
 * web/embed.sh turns web/console.{html,js,css} into tdm_cp_assets[] at build time, so the console
 * needs no files at run time. The page itself is public (it holds no data); every API call it
 * makes carries the bearer token the operator signs in with (kept in sessionStorage, never in a
 * URL). The page is served with a strict Content-Security-Policy (scripts and styles from tandemd
 * only, no inline script) and revalidated on every load; an asset requested with this build's
 * ?v=<tdm_cp_asset_version> is cached as immutable, any other request for it revalidates.
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
extern const char tdm_cp_asset_version[]; /* the ?v= of this build's asset URLs */
extern const size_t tdm_cp_assets_count;

/* The asset for a request path (query string ignored), or NULL. */
const tdm_cp_asset_t *tdm_cp_asset_find(const char *path, size_t len);

#ifdef TDM_CP_SERVER_H
/* Route handler for GET /console and GET /console/{file} (role: none). */
void tdm_cp_h_console(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *args,
                      const tdm_cp_token_t *who);
#endif

#endif
