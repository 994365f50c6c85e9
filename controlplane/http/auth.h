/*
 * controlplane/http/auth.h — bearer tokens: generation, hashing, the in-memory cache the loop
 * checks.
 *
 * A token is "tdm_" + 64 lowercase hex digits (32 random bytes from getrandom). Only its SHA-256
 * is stored, in api_tokens and in this cache; the plaintext is shown once, when created. Roles are
 * ordered: admin may do everything read may. The admin token lives in state_dir/admin.token (mode
 * 0600, created on first start); tandemd loads it into the cache before anything else, so admin
 * requests are authorised even while the database is down. Other tokens enter the cache from the
 * database (at start, and as they are created or revoked through the API).
 *
 * Threading: the cache is owned by the loop thread.
 */
#ifndef TDM_CP_AUTH_H
#define TDM_CP_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include <tdm/status.h>

#define TDM_CP_TOKEN_LEN 68 /* "tdm_" + 64 hex */
#define TDM_CP_TOKEN_NAME_MAX 64
#define TDM_CP_ADMIN_TOKEN_NAME "admin"

typedef enum tdm_cp_role {
    TDM_CP_ROLE_NONE = 0, /* public: no token needed */
    TDM_CP_ROLE_READ = 1,
    TDM_CP_ROLE_ADMIN = 2,
    TDM_CP_ROLE_MAX
} tdm_cp_role_t;

typedef struct tdm_cp_token {
    uint8_t hash[32];
    tdm_cp_role_t role;
    char name[TDM_CP_TOKEN_NAME_MAX];
} tdm_cp_token_t;

typedef struct tdm_cp_auth {
    tdm_cp_token_t *v;
    size_t n;
} tdm_cp_auth_t;

const char *tdm_cp_role_name(tdm_cp_role_t role);
/* "read" | "admin" → role; TDM_ERR_INVAL otherwise. */
tdm_status_t tdm_cp_role_parse(const char *s, tdm_cp_role_t *ret_role);

void tdm_cp_auth_sha256(const void *data, size_t len, uint8_t out[32]);
void tdm_cp_auth_hex(const uint8_t *bytes, size_t n, char *out); /* out: 2n+1 bytes */
/* out: TDM_CP_TOKEN_LEN + 1 bytes. TDM_ERR_IO if the kernel gives no randomness. */
tdm_status_t tdm_cp_auth_token_new(char *out);
/* Read state_dir/admin.token, or create it (0600) with a new token when missing. The file must be
 * a regular file not readable by group or others (TDM_ERR_PERM) and hold one token
 * (TDM_ERR_FORMAT). ret_created: 1 if written now. */
tdm_status_t tdm_cp_auth_admin_file(const char *state_dir, char *ret_token, int *ret_created,
                                    char *err, size_t err_len);

void tdm_cp_auth_init(tdm_cp_auth_t *a);
void tdm_cp_auth_free(tdm_cp_auth_t *a);
/* Insert or replace (by name). */
void tdm_cp_auth_put(tdm_cp_auth_t *a, const char *name, tdm_cp_role_t role,
                     const uint8_t hash[32]);
void tdm_cp_auth_remove(tdm_cp_auth_t *a, const char *name);
/* The token an Authorization header value ("Bearer tdm_…") names, or NULL. */
const tdm_cp_token_t *tdm_cp_auth_check(const tdm_cp_auth_t *a, const char *hdr, size_t len);

#endif
