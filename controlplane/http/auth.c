/*
 * auth.c — token generation and hashing (OpenSSL's SHA-256, the kernel's randomness), the
 * admin.token file, and the loop's token cache.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include <tdm/httpd.h>
#include <tdm/mem.h>

#include "controlplane/http/auth.h"

static const char *const role_names[TDM_CP_ROLE_MAX] = {"none", "read", "admin"};
_Static_assert(sizeof(role_names) / sizeof(role_names[0]) == TDM_CP_ROLE_MAX, "role names");

const char *tdm_cp_role_name(tdm_cp_role_t role)
{
    return (unsigned)role < TDM_CP_ROLE_MAX ? role_names[role] : "unknown";
}

tdm_status_t tdm_cp_role_parse(const char *s, tdm_cp_role_t *ret_role)
{
    if (strcmp(s, "read") == 0)
        *ret_role = TDM_CP_ROLE_READ;
    else if (strcmp(s, "admin") == 0)
        *ret_role = TDM_CP_ROLE_ADMIN;
    else
        return TDM_ERR_INVAL;
    return TDM_OK;
}

void tdm_cp_auth_sha256(const void *data, size_t len, uint8_t out[32])
{
    unsigned int n = 32;
    EVP_Digest(data, len, out, &n, EVP_sha256(), NULL);
}

void tdm_cp_auth_hex(const uint8_t *bytes, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 15];
    }
    out[2 * n] = '\0';
}

tdm_status_t tdm_cp_auth_token_new(char *out)
{
    uint8_t rnd[32];
    size_t got = 0;
    while (got < sizeof(rnd)) {
        ssize_t n = getrandom(rnd + got, sizeof(rnd) - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return TDM_ERR_IO;
        got += (size_t)n;
    }
    memcpy(out, "tdm_", 4);
    tdm_cp_auth_hex(rnd, sizeof(rnd), out + 4);
    return TDM_OK;
}

static int token_wellformed(const char *t, size_t len)
{
    if (len != TDM_CP_TOKEN_LEN || memcmp(t, "tdm_", 4) != 0)
        return 0;
    for (size_t i = 4; i < len; i++)
        if (!((t[i] >= '0' && t[i] <= '9') || (t[i] >= 'a' && t[i] <= 'f')))
            return 0;
    return 1;
}

tdm_status_t tdm_cp_auth_admin_file(const char *state_dir, char *ret_token, int *ret_created,
                                    char *err, size_t err_len)
{
    char path[4096];
    if ((size_t)snprintf(path, sizeof(path), "%s/admin.token", state_dir) >= sizeof(path)) {
        snprintf(err, err_len, "state dir path too long");
        return TDM_ERR_INVAL;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0) {
        struct stat st;
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (st.st_mode & 077) != 0) {
            snprintf(err, err_len, "%s: must be a regular file with mode 0600 (is %o)", path,
                     (unsigned)(st.st_mode & 07777));
            close(fd);
            return TDM_ERR_PERM;
        }
        char buf[TDM_CP_TOKEN_LEN + 8];
        ssize_t n = read(fd, buf, sizeof(buf));
        close(fd);
        while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
            n--;
        if (n < 0 || !token_wellformed(buf, (size_t)n)) {
            snprintf(err, err_len, "%s: does not hold one tandem token (tdm_ + 64 hex digits)",
                     path);
            return TDM_ERR_FORMAT;
        }
        memcpy(ret_token, buf, TDM_CP_TOKEN_LEN);
        ret_token[TDM_CP_TOKEN_LEN] = '\0';
        *ret_created = 0;
        return TDM_OK;
    }
    if (errno != ENOENT) {
        snprintf(err, err_len, "%s: %s", path, strerror(errno));
        return TDM_ERR_IO;
    }
    char tok[TDM_CP_TOKEN_LEN + 2];
    if (tdm_cp_auth_token_new(tok) != TDM_OK) {
        snprintf(err, err_len, "getrandom: %s", strerror(errno));
        return TDM_ERR_IO;
    }
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        snprintf(err, err_len, "%s: %s", tmp, strerror(errno));
        return TDM_ERR_IO;
    }
    tok[TDM_CP_TOKEN_LEN] = '\n';
    int bad = fchmod(fd, 0600) != 0 ||
              write(fd, tok, TDM_CP_TOKEN_LEN + 1) != TDM_CP_TOKEN_LEN + 1 || fsync(fd) != 0;
    close(fd);
    if (bad || rename(tmp, path) != 0) {
        snprintf(err, err_len, "%s: %s", path, strerror(errno));
        unlink(tmp);
        return TDM_ERR_IO;
    }
    memcpy(ret_token, tok, TDM_CP_TOKEN_LEN);
    ret_token[TDM_CP_TOKEN_LEN] = '\0';
    *ret_created = 1;
    return TDM_OK;
}

void tdm_cp_auth_init(tdm_cp_auth_t *a)
{
    a->v = NULL;
    a->n = 0;
}

void tdm_cp_auth_free(tdm_cp_auth_t *a)
{
    tdm_free(a->v);
    a->v = NULL;
    a->n = 0;
}

void tdm_cp_auth_put(tdm_cp_auth_t *a, const char *name, tdm_cp_role_t role, const uint8_t hash[32])
{
    tdm_cp_token_t *t = NULL;
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->v[i].name, name) == 0)
            t = &a->v[i];
    if (!t) {
        a->v = tdm_realloc(a->v, (a->n + 1) * sizeof(*a->v));
        t = &a->v[a->n++];
    }
    memcpy(t->hash, hash, 32);
    t->role = role;
    snprintf(t->name, sizeof(t->name), "%s", name);
}

void tdm_cp_auth_remove(tdm_cp_auth_t *a, const char *name)
{
    for (size_t i = 0; i < a->n; i++) {
        if (strcmp(a->v[i].name, name) == 0) {
            a->v[i] = a->v[a->n - 1];
            a->n--;
            return;
        }
    }
}

const tdm_cp_token_t *tdm_cp_auth_check(const tdm_cp_auth_t *a, const char *hdr, size_t len)
{
    h2o_iovec_t tok;
    if (!tdm_httpd_bearer_parse(hdr, len, &tok) || !token_wellformed(tok.base, tok.len))
        return NULL;
    uint8_t h[32];
    tdm_cp_auth_sha256(tok.base, tok.len, h);
    for (size_t i = 0; i < a->n; i++)
        if (memcmp(a->v[i].hash, h, 32) == 0)
            return &a->v[i];
    return NULL;
}
