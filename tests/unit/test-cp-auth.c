/* test-cp-auth.c — token format, SHA-256 (FIPS 180-2 vector), the admin.token file (created 0600,
 * re-read, refused when group/other-readable or malformed) and the token cache. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "controlplane/http/auth.h"
#include "tap.h"

int main(void)
{
    uint8_t h[32];
    char hex[65];
    tdm_cp_auth_sha256("abc", 3, h);
    tdm_cp_auth_hex(h, 32, hex);
    is_str(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", "sha256(abc)");

    char t1[TDM_CP_TOKEN_LEN + 1], t2[TDM_CP_TOKEN_LEN + 1];
    tdm_cp_auth_token_new(t1);
    tdm_cp_auth_token_new(t2);
    is_int(strlen(t1), TDM_CP_TOKEN_LEN, "token length");
    ok(strncmp(t1, "tdm_", 4) == 0, "token prefix");
    ok(strcmp(t1, t2) != 0, "tokens differ");

    char dir[] = "/tmp/test-cp-auth-XXXXXX", path[128], err[256], tok[TDM_CP_TOKEN_LEN + 1],
         tok2[TDM_CP_TOKEN_LEN + 1];
    if (!mkdtemp(dir))
        bail_out("mkdtemp failed");
    snprintf(path, sizeof(path), "%s/admin.token", dir);
    int created = 0;
    is_int(tdm_cp_auth_admin_file(dir, tok, &created, err, sizeof(err)), TDM_OK, "create admin");
    ok(created, "created on first call");
    struct stat st;
    stat(path, &st);
    is_int(st.st_mode & 0777, 0600, "admin.token is 0600");
    is_int(tdm_cp_auth_admin_file(dir, tok2, &created, err, sizeof(err)), TDM_OK, "read admin");
    ok(!created && strcmp(tok, tok2) == 0, "second call reads the same token");
    chmod(path, 0644);
    is_int(tdm_cp_auth_admin_file(dir, tok2, &created, err, sizeof(err)), TDM_ERR_PERM,
           "world-readable admin.token refused");
    FILE *f = fopen(path, "w");
    fputs("hunter2\n", f);
    fclose(f);
    chmod(path, 0600);
    is_int(tdm_cp_auth_admin_file(dir, tok2, &created, err, sizeof(err)), TDM_ERR_FORMAT,
           "malformed admin.token refused");
    unlink(path);
    rmdir(dir);

    tdm_cp_auth_t a;
    tdm_cp_auth_init(&a);
    tdm_cp_auth_sha256(t1, TDM_CP_TOKEN_LEN, h);
    tdm_cp_auth_put(&a, "r", TDM_CP_ROLE_READ, h);
    char hdr[128];
    snprintf(hdr, sizeof(hdr), "Bearer %s", t1);
    const tdm_cp_token_t *who = tdm_cp_auth_check(&a, hdr, strlen(hdr));
    ok(who && who->role == TDM_CP_ROLE_READ && strcmp(who->name, "r") == 0, "bearer accepted");
    snprintf(hdr, sizeof(hdr), "Bearer %s", t2);
    ok(tdm_cp_auth_check(&a, hdr, strlen(hdr)) == NULL, "unknown token refused");
    ok(tdm_cp_auth_check(&a, t1, strlen(t1)) == NULL, "missing Bearer scheme refused");
    snprintf(hdr, sizeof(hdr), "Bearer %s", t1);
    ok(tdm_cp_auth_check(&a, hdr, strlen(hdr) - 1) == NULL, "truncated token refused");
    tdm_cp_auth_remove(&a, "r");
    ok(tdm_cp_auth_check(&a, hdr, strlen(hdr)) == NULL, "removed token refused");
    tdm_cp_role_t r;
    is_int(tdm_cp_role_parse("admin", &r), TDM_OK, "parse admin");
    is_int(tdm_cp_role_parse("root", &r), TDM_ERR_INVAL, "parse unknown role");
    tdm_cp_auth_free(&a);
    return done_testing();
}
