/*
 * pgport.c — the cluster's port and socket directory: a free port from the kernel, whether one is
 * still free, and the port and socket directory remembered in the data directory so that a
 * restart reuses them (see tdm/pgcluster.h).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tdm/log.h>
#include <tdm/pgcluster.h>

#include "pg_int.h"

tdm_status_t tdm_pg_free_port(int *ret_port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    socklen_t len = sizeof(sa);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return tdm_pg_errno_status(errno);
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        int e = errno;
        close(fd);
        tdm_err(TDM_SUB_DB, "msg=\"cannot find a free port on 127.0.0.1\" err=\"%s\"", strerror(e));
        return TDM_ERR_IO;
    }
    close(fd);
    *ret_port = ntohs(sa.sin_port);
    return TDM_OK;
}

/* A restarted cluster comes back on the port it had, so clients holding its address (tandemd
 * after a database outage) reconnect without being told. The port is remembered in the data
 * directory; if it is taken now, a fresh one is picked. */
#define PG_PORT_FILE "tandem.port"

int tdm_pg_port_is_free(int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    int ok = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    close(fd);
    return ok;
}

int tdm_pg_remembered_port(const char *data)
{
    char path[TDM_PG_PATH_MAX], buf[16] = "";
    if (tdm_pg_path_join(path, sizeof(path), data, PG_PORT_FILE) != TDM_OK)
        return 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int port = fgets(buf, sizeof(buf), f) ? (int)strtol(buf, NULL, 10) : 0;
    fclose(f);
    return port > 1024 && port < 65536 && tdm_pg_port_is_free(port) ? port : 0;
}

void tdm_pg_remember_port(const char *data, int port)
{
    char path[TDM_PG_PATH_MAX];
    if (tdm_pg_path_join(path, sizeof(path), data, PG_PORT_FILE) != TDM_OK)
        return;
    FILE *f = fopen(path, "w");
    if (!f)
        return; /* only a convenience: the next start picks a fresh port */
    fprintf(f, "%d\n", port);
    fclose(f);
}

/* The last bytes of the server log, for an error line. */
int tdm_pg_remembered_sockdir(const char *data, const run_as_t *ru, char *out, size_t len)
{
    char path[TDM_PG_PATH_MAX], buf[TDM_PG_HOST_MAX] = "";
    if (tdm_pg_path_join(path, sizeof(path), data, PG_SOCKDIR_FILE) != TDM_OK)
        return 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int got = fgets(buf, sizeof(buf), f) != NULL;
    fclose(f);
    buf[strcspn(buf, "\n")] = '\0';
    const char *pre = "/tmp/tdm-pg-";
    if (!got || strlen(buf) != strlen(PG_SOCK_TEMPLATE) || strncmp(buf, pre, strlen(pre)) ||
        strchr(buf + strlen(pre), '/') || strstr(buf, "..") || strlen(buf) >= len)
        return 0;
    struct stat sb;
    if (mkdir(buf, 0700) != 0) {
        if (errno != EEXIST || lstat(buf, &sb) != 0 || !S_ISDIR(sb.st_mode) ||
            sb.st_uid != (ru->switch_user ? ru->uid : geteuid()))
            return 0;
    }
    snprintf(out, len, "%s", buf);
    return 1;
}

void tdm_pg_remember_sockdir(const char *data, const char *sockdir)
{
    char path[TDM_PG_PATH_MAX];
    if (tdm_pg_path_join(path, sizeof(path), data, PG_SOCKDIR_FILE) != TDM_OK)
        return;
    FILE *f = fopen(path, "w");
    if (!f)
        return; /* only a convenience, as the port */
    fprintf(f, "%s\n", sockdir);
    fclose(f);
}
