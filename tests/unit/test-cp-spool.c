/* test-cp-spool.c — the ingest spool file: FIFO order, durability across reopen, consumption and
 * truncation, the byte bound, precise rejection of foreign files, torn-tail recovery. */
#include "config.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tdm/mem.h>

#include "controlplane/store/db_spool.h"
#include "tap.h"

static char dir[] = "/tmp/test-cp-spool-XXXXXX";

static int pop(tdm_cp_spool_t *sp, char *out, size_t len)
{
    uint16_t type;
    uint8_t *body;
    size_t n;
    if (tdm_cp_spool_peek(sp, &type, &body, &n) != TDM_OK)
        return -1;
    snprintf(out, len, "%.*s", (int)n, (const char *)body);
    tdm_free(body);
    return tdm_cp_spool_advance(sp) == TDM_OK ? (int)type : -1;
}

int main(void)
{
    if (!mkdtemp(dir))
        bail_out("mkdtemp failed");
    char path[256], err[256], got[64];
    snprintf(path, sizeof(path), "%s/s.spool", dir);
    tdm_cp_spool_t *sp;
    is_int(tdm_cp_spool_open(path, 1 << 20, &sp, err, sizeof(err)), TDM_OK, "create");
    for (int i = 0; i < 5; i++) {
        char rec[16];
        int n = snprintf(rec, sizeof(rec), "rec%d", i);
        tdm_cp_spool_append(sp, 1, rec, (size_t)n);
    }
    is_u64(tdm_cp_spool_records(sp), 5, "5 records");
    is_int(pop(sp, got, sizeof(got)), 1, "pop type");
    is_str(got, "rec0", "FIFO: first");
    tdm_cp_spool_close(sp);

    /* Reopen: consumed-but-not-truncated records replay (the marks make that harmless). */
    is_int(tdm_cp_spool_open(path, 1 << 20, &sp, err, sizeof(err)), TDM_OK, "reopen");
    is_u64(tdm_cp_spool_records(sp), 5, "all 5 survive a restart");
    int order = 1;
    for (int i = 0; i < 5; i++) {
        char want[16];
        snprintf(want, sizeof(want), "rec%d", i);
        order &= pop(sp, got, sizeof(got)) == 1 && strcmp(got, want) == 0;
    }
    ok(order, "records come back in order");
    uint16_t type;
    uint8_t *body;
    size_t n;
    is_int(tdm_cp_spool_peek(sp, &type, &body, &n), TDM_ERR_NOTFOUND, "empty after consuming");
    struct stat st;
    stat(path, &st);
    is_int(st.st_size, TDM_CP_SPOOL_HDR, "fully consumed spool is truncated to its header");

    /* Bound. */
    tdm_cp_spool_close(sp);
    unlink(path);
    tdm_cp_spool_open(path, TDM_CP_SPOOL_REC_HDR * 2 + 8, &sp, err, sizeof(err));
    is_int(tdm_cp_spool_append(sp, 1, "abcd", 4), TDM_OK, "append within bound");
    is_int(tdm_cp_spool_append(sp, 1, "abcd", 4), TDM_OK, "append up to bound");
    is_int(tdm_cp_spool_append(sp, 1, "abcd", 4), TDM_ERR_OVERFLOW, "append past bound refused");
    tdm_cp_spool_close(sp);

    /* Torn tail: cut the last record in half; open keeps the first, drops the torn one. */
    stat(path, &st);
    if (truncate(path, st.st_size - 3) != 0)
        diag("truncate failed");
    is_int(tdm_cp_spool_open(path, 1 << 20, &sp, err, sizeof(err)), TDM_OK, "open torn file");
    is_u64(tdm_cp_spool_records(sp), 1, "torn record cut, complete one kept");
    is_int(tdm_cp_spool_append(sp, 1, "efgh", 4), TDM_OK, "append after recovery");
    tdm_cp_spool_close(sp);
    tdm_cp_spool_open(path, 1 << 20, &sp, err, sizeof(err));
    is_u64(tdm_cp_spool_records(sp), 2, "recovered file is consistent");
    tdm_cp_spool_close(sp);

    /* Foreign files. */
    FILE *f = fopen(path, "w");
    fputs("this is not a spool file", f);
    fclose(f);
    is_int(tdm_cp_spool_open(path, 1 << 20, &sp, err, sizeof(err)), TDM_ERR_FORMAT,
           "bad magic refused");
    ok(strstr(err, "bad magic") != NULL, "message names the magic: %s", err);
    uint8_t hdr[TDM_CP_SPOOL_HDR] = {'T', 'D', 'S', 'P', 9, 0, TDM_CP_SPOOL_HDR, 0};
    f = fopen(path, "w");
    fwrite(hdr, 1, sizeof(hdr), f);
    fclose(f);
    is_int(tdm_cp_spool_open(path, 1 << 20, &sp, err, sizeof(err)), TDM_ERR_FORMAT,
           "future version refused");
    ok(strstr(err, "version 9") != NULL, "message names the version: %s", err);
    unlink(path);
    rmdir(dir);
    return done_testing();
}
