/*
 * console.c — serves the embedded console (controlplane/http/console.h): GET /console and its
 * assets, with the page's Content-Security-Policy, cache headers by asset version, and no-sniff.
 */
#include "config.h"

#include <string.h>

#include "controlplane/http/cp_server.h"
#include "controlplane/http/console.h"

const tdm_cp_asset_t *tdm_cp_asset_find(const char *path, size_t len)
{
    const char *q = memchr(path, '?', len);
    if (q)
        len = (size_t)(q - path);
    for (size_t i = 0; i < tdm_cp_assets_count; i++)
        if (strlen(tdm_cp_assets[i].path) == len && memcmp(tdm_cp_assets[i].path, path, len) == 0)
            return &tdm_cp_assets[i];
    return NULL;
}

void tdm_cp_h_console(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *args,
                      const tdm_cp_token_t *who)
{
    (void)s, (void)args, (void)who;
    const tdm_cp_asset_t *a = tdm_cp_asset_find(req->path.base, req->path.len);
    if (!a) {
        tdm_httpd_send_error(req, 404, "not_found", "not_found_error", "no such console file");
        return;
    }
    req->res.status = 200;
    req->res.reason = "OK";
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, a->content_type,
                   strlen(a->content_type));
    int page = strcmp(a->path, "/console") == 0;
    char v[32];
    int current = tdm_cp_query_get(req, "v", v, sizeof(v)) && strcmp(v, tdm_cp_asset_version) == 0;
    if (!page && current)
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL,
                       H2O_STRLIT("public, max-age=31536000, immutable"));
    else
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL,
                       H2O_STRLIT("no-cache"));
    if (page) {
        h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("content-security-policy"),
                              0, NULL,
                              H2O_STRLIT("default-src 'none'; script-src 'self'; style-src 'self'; "
                                         "img-src 'self' data:; connect-src 'self'; "
                                         "base-uri 'none'; form-action 'none'; "
                                         "frame-ancestors 'none'"));
        h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("referrer-policy"), 0, NULL,
                              H2O_STRLIT("no-referrer"));
    }
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-content-type-options"), 0,
                          NULL, H2O_STRLIT("nosniff"));
    h2o_send_inline(req, a->data, a->len);
}
