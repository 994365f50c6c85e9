/*
 * pgcluster.c — a private PostgreSQL cluster per directory, for the tests and tandemd's embedded
 * default. The hard parts are the ones initdb and pg_ctl leave to their caller: they refuse root,
 * so as root they run as user `postgres` (fork, drop privileges, exec with a clean environment);
 * that user must be able to reach the data directory, which a checkout under /root does not
 * allow, so the data then lives under /var/tmp behind a symbolic link; and a second start must
 * find the first cluster (postmaster.pid) instead of racing it. Every failure of a tool is logged
 * once, with its output, where it is decided.
 */
#include "config.h"

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include <tdm/log.h>
#include <tdm/pgcluster.h>

#include "pg_int.h"

#define PG_RELOCATE_FMT "/var/tmp/tandem-pg-%016llx"
#define PG_SERVER_LOG "server.log"
#define START_TRIES 3

/* What postmaster.pid says about a live server. */
typedef struct pidfile {
    pid_t pid;
    int port;
    char sockdir[TDM_PG_HOST_MAX];
} pidfile_t;

/* Paths of one call: the caller's directory made absolute, and where the data really is. */
typedef struct pg_paths {
    char parent[TDM_PG_PATH_MAX]; /* absolute, resolved parent of dir */
    char dir[TDM_PG_PATH_MAX];    /* parent + "/" + basename(dir): may be a link */
    char data[TDM_PG_PATH_MAX];   /* the real data directory */
    int is_link;
} pg_paths_t;

static const char *bindir_of(const tdm_pg_opts_t *opts)
{
    return opts && opts->bindir ? opts->bindir : TDM_PG_BINDIR;
}

/* A live (not zombie) process named postgres: postmaster.pid can outlive its server. */
static int pid_is_postgres(pid_t pid)
{
    char path[64], stat_line[512];
    if (pid <= 0 || (kill(pid, 0) != 0 && errno != EPERM))
        return 0;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return 1; /* no /proc: trust kill() */
    size_t n = fread(stat_line, 1, sizeof(stat_line) - 1, f);
    fclose(f);
    stat_line[n] = '\0';
    /* "pid (comm) S ...": comm may hold spaces or ')' — the state follows the last ')' */
    const char *open_paren = strchr(stat_line, '(');
    const char *close_paren = strrchr(stat_line, ')');
    if (!open_paren || !close_paren || close_paren < open_paren || close_paren[1] != ' ')
        return 0;
    char state = close_paren[2];
    size_t comm_len = (size_t)(close_paren - open_paren - 1);
    if (state == 'Z' || state == 'X')
        return 0;
    return (comm_len == 8 && !strncmp(open_paren + 1, "postgres", 8)) ||
           (comm_len == 10 && !strncmp(open_paren + 1, "postmaster", 10));
}

/*
 * Read postmaster.pid (pid, datadir, start time, port, socket dir, listen addr, shm key, status).
 * Returns TDM_OK and fills ret when a live postgres owns it and has written its port and socket
 * directory; TDM_ERR_NOTFOUND when there is no file or its process is gone (a stale file);
 * TDM_ERR_AGAIN while the server is still starting.
 */
static tdm_status_t pidfile_read(const char *datadir, pidfile_t *ret)
{
    char path[TDM_PG_PATH_MAX], line[TDM_PG_PATH_MAX];
    pidfile_t pf = {0};
    int lineno = 0, have_port = 0, have_sock = 0;
    tdm_status_t st = TDM_OK;

    TDM_TRY(tdm_pg_path_join(path, sizeof(path), datadir, "postmaster.pid"));
    FILE *f = fopen(path, "re");
    if (!f)
        return errno == ENOENT ? TDM_ERR_NOTFOUND : tdm_pg_errno_status(errno);
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        lineno++;
        if (lineno == 1) {
            pf.pid = (pid_t)strtol(line, NULL, 10);
        } else if (lineno == 4) {
            pf.port = (int)strtol(line, NULL, 10);
            have_port = pf.port > 0 && pf.port < 65536;
        } else if (lineno == 5) {
            if (strlen(line) >= sizeof(pf.sockdir)) {
                tdm_err(TDM_SUB_DB, "msg=\"socket directory in postmaster.pid too long\" path=%s",
                        path);
                st = TDM_ERR_FORMAT;
                goto out_close;
            }
            snprintf(pf.sockdir, sizeof(pf.sockdir), "%s", line);
            have_sock = line[0] == '/';
        }
    }
    if (!pid_is_postgres(pf.pid)) {
        st = TDM_ERR_NOTFOUND;
        goto out_close;
    }
    if (!have_port || !have_sock) {
        st = TDM_ERR_AGAIN;
        goto out_close;
    }
    *ret = pf;
out_close:
    fclose(f);
    return st;
}

/* Poll a live server's pid file until it has its port and socket (a start in progress). */
static tdm_status_t pidfile_wait(const char *datadir, pidfile_t *ret)
{
    for (int i = 0; i < 600; i++) {
        tdm_status_t st = pidfile_read(datadir, ret);
        if (st != TDM_ERR_AGAIN)
            return st;
        nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
    }
    tdm_err(TDM_SUB_DB, "msg=\"server in %s did not become ready in 60 s\"", datadir);
    return TDM_ERR_TIMEOUT;
}

static tdm_status_t mkdir_p(const char *path, mode_t mode)
{
    char buf[TDM_PG_PATH_MAX];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof(buf))
        return TDM_ERR_INVAL;
    memcpy(buf, path, n + 1);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, mode) != 0 && errno != EEXIST) {
                int e = errno;
                tdm_err(TDM_SUB_DB, "msg=\"cannot create directory\" path=%s err=\"%s\"", buf,
                        strerror(e));
                return tdm_pg_errno_status(e);
            }
            *p = c;
            if (c == '\0')
                break;
        }
    }
    return TDM_OK;
}

/* Make `dir` absolute with a resolved parent; create the parent when create_parent is set. */
static tdm_status_t paths_init(const char *dir, int create_parent, pg_paths_t *ret)
{
    char tmp[TDM_PG_PATH_MAX], cwd[TDM_PG_PATH_MAX];
    pg_paths_t p;
    size_t n;

    memset(&p, 0, sizeof(p));
    if (!dir || !*dir) {
        tdm_err(TDM_SUB_DB, "msg=\"empty cluster directory\"");
        return TDM_ERR_INVAL;
    }
    if (dir[0] == '/') {
        if (snprintf(tmp, sizeof(tmp), "%s", dir) >= (int)sizeof(tmp))
            return TDM_ERR_OVERFLOW;
    } else {
        if (!getcwd(cwd, sizeof(cwd)))
            return tdm_pg_errno_status(errno);
        TDM_TRY(tdm_pg_path_join(tmp, sizeof(tmp), cwd, dir));
    }
    n = strlen(tmp);
    while (n > 1 && tmp[n - 1] == '/')
        tmp[--n] = '\0';
    char *slash = strrchr(tmp, '/');
    const char *base = slash + 1;
    if (!*base || !strcmp(base, ".") || !strcmp(base, "..")) {
        tdm_err(TDM_SUB_DB, "msg=\"cluster directory must name a directory\" dir=%s", dir);
        return TDM_ERR_INVAL;
    }
    *slash = '\0';
    const char *parent = slash == tmp ? "/" : tmp;
    if (create_parent)
        TDM_TRY(mkdir_p(parent, 0755));
    if (!realpath(parent, p.parent)) {
        int e = errno;
        if (e != ENOENT)
            tdm_err(TDM_SUB_DB, "msg=\"cannot resolve\" path=%s err=\"%s\"", parent, strerror(e));
        return tdm_pg_errno_status(e);
    }
    TDM_TRY(tdm_pg_path_join(p.dir, sizeof(p.dir), strcmp(p.parent, "/") ? p.parent : "", base));
    *ret = p;
    return TDM_OK;
}

/* Fill p->data/is_link from what is at p->dir. TDM_ERR_NOTFOUND if nothing is there. */
static tdm_status_t paths_resolve(pg_paths_t *p)
{
    struct stat sb;
    if (lstat(p->dir, &sb) != 0)
        return tdm_pg_errno_status(errno);
    if (S_ISLNK(sb.st_mode)) {
        ssize_t n = readlink(p->dir, p->data, sizeof(p->data) - 1);
        if (n < 0)
            return tdm_pg_errno_status(errno);
        p->data[n] = '\0';
        if (p->data[0] != '/') {
            tdm_err(TDM_SUB_DB, "msg=\"cluster link must be absolute\" dir=%s target=%s", p->dir,
                    p->data);
            return TDM_ERR_INVAL;
        }
        p->is_link = 1;
        return TDM_OK;
    }
    if (!S_ISDIR(sb.st_mode)) {
        tdm_err(TDM_SUB_DB, "msg=\"cluster path exists and is not a directory\" dir=%s", p->dir);
        return TDM_ERR_INVAL;
    }
    snprintf(p->data, sizeof(p->data), "%s", p->dir);
    p->is_link = 0;
    return TDM_OK;
}

/* Serialise calls on one cluster directory: flock its parent. Returns the fd to close. */
static tdm_status_t lock_parent(const pg_paths_t *p, int *ret_fd)
{
    int fd = open(p->parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return tdm_pg_errno_status(errno);
    while (flock(fd, LOCK_EX) != 0) {
        if (errno != EINTR) {
            int e = errno;
            close(fd);
            return tdm_pg_errno_status(e);
        }
    }
    *ret_fd = fd;
    return TDM_OK;
}

static int has_pg_version(const char *datadir)
{
    char probe[TDM_PG_PATH_MAX];
    struct stat sb;
    return tdm_pg_path_join(probe, sizeof(probe), datadir, "PG_VERSION") == TDM_OK &&
           stat(probe, &sb) == 0;
}

static int dir_is_empty(const char *path)
{
    DIR *d = opendir(path);
    struct dirent *de;
    int empty = 1;
    if (!d)
        return 0;
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0) {
            empty = 0;
            break;
        }
    }
    closedir(d);
    return empty;
}

/*
 * The data directory lives in /var/tmp, which every local user may write: accept an existing
 * entry only if it is a real directory owned by us or by the tool user, never a planted link.
 */
static tdm_status_t relocated_dir_make(const run_as_t *ru, const char *target)
{
    struct stat sb;
    if (mkdir(target, 0700) != 0 && errno != EEXIST) {
        int e = errno;
        tdm_err(TDM_SUB_DB, "msg=\"cannot create relocated data directory\" path=%s err=\"%s\"",
                target, strerror(e));
        return tdm_pg_errno_status(e);
    }
    if (lstat(target, &sb) != 0)
        return tdm_pg_errno_status(errno);
    if (!S_ISDIR(sb.st_mode) ||
        (sb.st_uid != geteuid() && !(ru->switch_user && sb.st_uid == ru->uid))) {
        tdm_err(TDM_SUB_DB,
                "msg=\"relocated data directory is not a directory owned by us or "
                "postgres; refusing it\" path=%s",
                target);
        return TDM_ERR_PERM;
    }
    TDM_TRY(tdm_pg_runas_chown(ru, target));
    if (chmod(target, 0700) != 0)
        return tdm_pg_errno_status(errno);
    return TDM_OK;
}

/*
 * Make p->data a directory the tool user can use: create `dir` when missing, and when user
 * postgres cannot reach it (a parent is mode 0700, e.g. /root), replace the empty directory with
 * a link to /var/tmp/tandem-pg-<hash of the absolute path>, so the next call finds it again.
 */
static tdm_status_t datadir_prepare(const run_as_t *ru, pg_paths_t *p)
{
    tdm_status_t st = paths_resolve(p);
    if (st == TDM_ERR_NOTFOUND) {
        if (mkdir(p->dir, 0700) != 0) {
            int e = errno;
            tdm_err(TDM_SUB_DB, "msg=\"cannot create cluster directory\" path=%s err=\"%s\"",
                    p->dir, strerror(e));
            return tdm_pg_errno_status(e);
        }
        st = paths_resolve(p);
    }
    if (st != TDM_OK)
        return st;

    if (p->is_link) {
        struct stat sb;
        if (lstat(p->data, &sb) != 0) {
            /* the target was cleaned away (/var/tmp): start over there */
            tdm_warn(TDM_SUB_DB,
                     "msg=\"cluster link target missing; creating a new cluster\" "
                     "dir=%s target=%s",
                     p->dir, p->data);
            TDM_TRY(relocated_dir_make(ru, p->data));
        }
        if (!tdm_pg_runas_can_access(ru, p->data)) {
            tdm_err(TDM_SUB_DB, "msg=\"user %s cannot reach the data directory\" path=%s", ru->name,
                    p->data);
            return TDM_ERR_PERM;
        }
        return TDM_OK;
    }
    if (has_pg_version(p->data)) {
        if (!tdm_pg_runas_can_access(ru, p->data)) {
            tdm_err(TDM_SUB_DB,
                    "msg=\"data directory exists but user %s cannot reach it (is "
                    "a parent directory mode 0700?); move it or open its parents\" "
                    "path=%s",
                    ru->name, p->data);
            return TDM_ERR_PERM;
        }
        return TDM_OK;
    }
    if (!dir_is_empty(p->data)) {
        tdm_err(TDM_SUB_DB,
                "msg=\"cluster directory is neither a data directory nor empty\" "
                "path=%s",
                p->data);
        return TDM_ERR_INVAL;
    }
    TDM_TRY(tdm_pg_runas_chown(ru, p->data));
    if (chmod(p->data, 0700) != 0)
        return tdm_pg_errno_status(errno);
    if (tdm_pg_runas_can_access(ru, p->data))
        return TDM_OK;

    char target[TDM_PG_PATH_MAX];
    snprintf(target, sizeof(target), PG_RELOCATE_FMT,
             (unsigned long long)XXH3_64bits(p->dir, strlen(p->dir)));
    if (rmdir(p->data) != 0)
        return tdm_pg_errno_status(errno);
    TDM_TRY(relocated_dir_make(ru, target));
    if (symlink(target, p->dir) != 0) {
        int e = errno;
        tdm_err(TDM_SUB_DB, "msg=\"cannot link cluster directory\" dir=%s target=%s err=\"%s\"",
                p->dir, target, strerror(e));
        return tdm_pg_errno_status(e);
    }
    tdm_info(TDM_SUB_DB,
             "msg=\"user %s cannot reach the cluster directory; data relocated\" dir=%s target=%s",
             ru->name, p->dir, target);
    snprintf(p->data, sizeof(p->data), "%s", target);
    p->is_link = 1;
    return TDM_OK;
}

static void file_tail(const char *path, char *buf, size_t len)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "re");
    if (!f)
        return;
    if (fseek(f, 0, SEEK_END) == 0) {
        long end = ftell(f);
        long from = end > (long)len - 1 ? end - ((long)len - 1) : 0;
        if (fseek(f, from, SEEK_SET) == 0) {
            size_t n = fread(buf, 1, len - 1, f);
            buf[n] = '\0';
        }
    }
    fclose(f);
    for (char *c = buf; *c; c++)
        if (*c == '"')
            *c = '\'';
}

/* The socket directory, like the port, stays what it was across restarts: a client's DSN names
 * it (the demo's tandemd), and a new directory at every start would leave that client connecting
 * to nothing. Remembered in the data directory; reused when it is still ours (a directory, not a
 * link, owned by the server's user) or can be made again under its name; else a fresh one. */

static tdm_status_t cluster_initdb(const run_as_t *ru, const char *bindir, const char *data,
                                   int for_tests)
{
    const char *argv[] = {"initdb", "-D",   data,         "-U",           PG_SUPERUSER,
                          "-E",     "UTF8", "--locale=C", "--auth=trust", for_tests ? "-N" : NULL,
                          NULL};
    tdm_info(TDM_SUB_DB, "msg=\"initdb\" datadir=%s", data);
    return tdm_pg_tool_run_ok(ru, bindir, argv);
}

static tdm_status_t cluster_launch(const run_as_t *ru, const char *bindir, const char *data,
                                   int for_tests, pidfile_t *ret_pf)
{
    char logpath[TDM_PG_PATH_MAX], opts[512], out[TOOL_OUT_MAX], logtail[2048];
    tdm_status_t st;

    TDM_TRY(tdm_pg_path_join(logpath, sizeof(logpath), data, PG_SERVER_LOG));
    for (int attempt = 1;; attempt++) {
        char sockdir[] = PG_SOCK_TEMPLATE;
        int port = 0, code = 0;
        if ((attempt > 1 || !tdm_pg_remembered_sockdir(data, ru, sockdir, sizeof(sockdir))) &&
            !mkdtemp(sockdir)) {
            int e = errno;
            tdm_err(TDM_SUB_DB, "msg=\"cannot create socket directory\" err=\"%s\"", strerror(e));
            return tdm_pg_errno_status(e);
        }
        TDM_CHECK_GOTO(tdm_pg_runas_chown(ru, sockdir), st, err_rmdir);
        if (chmod(sockdir, 0755) != 0) {
            st = tdm_pg_errno_status(errno);
            goto err_rmdir;
        }
        port = attempt == 1 ? tdm_pg_remembered_port(data) : 0;
        if (!port)
            TDM_CHECK_GOTO(tdm_pg_free_port(&port), st, err_rmdir);
        snprintf(opts, sizeof(opts),
                 "-c port=%d -c listen_addresses=127.0.0.1 -c unix_socket_directories=%s%s", port,
                 sockdir,
                 for_tests ? " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
                             " -c max_connections=200"
                           : "");
        const char *argv[] = {"pg_ctl", "start", "-w",    "-t", "60", "-s", "-D",
                              data,     "-l",    logpath, "-o", opts, NULL};
        TDM_CHECK_GOTO(tdm_pg_tool_run(ru, bindir, argv, out, &code), st, err_rmdir);
        if (code == 0) {
            st = pidfile_wait(data, ret_pf);
            if (st != TDM_OK)
                goto err_rmdir;
            tdm_info(TDM_SUB_DB, "msg=\"started\" datadir=%s port=%d host=%s pid=%d", data,
                     ret_pf->port, ret_pf->sockdir, (int)ret_pf->pid);
            tdm_pg_remember_port(data, ret_pf->port);
            tdm_pg_remember_sockdir(data, ret_pf->sockdir);
            return TDM_OK;
        }
        rmdir(sockdir);
        file_tail(logpath, logtail, sizeof(logtail));
        if (attempt < START_TRIES &&
            (strstr(logtail, "could not bind") || strstr(logtail, "Address already in use"))) {
            tdm_warn(TDM_SUB_DB, "msg=\"port %d taken; retrying\"", port);
            continue;
        }
        tdm_err(TDM_SUB_DB, "msg=\"pg_ctl start failed\" exit=%d output=\"%s\" server_log=\"%s\"",
                code, out, logtail);
        return TDM_ERR_DB;
    err_rmdir:
        rmdir(sockdir);
        return st;
    }
}

static void info_fill(const pg_paths_t *p, const pidfile_t *pf, int adopted, tdm_pg_info_t *ret)
{
    memset(ret, 0, sizeof(*ret));
    snprintf(ret->host, sizeof(ret->host), "%s", pf->sockdir);
    ret->port = pf->port;
    snprintf(ret->user, sizeof(ret->user), "%s", PG_SUPERUSER);
    snprintf(ret->datadir, sizeof(ret->datadir), "%s", p->data);
    ret->pid = pf->pid;
    ret->adopted = adopted;
}

/* postmaster.pid of the cluster at p->data, waiting out a start in progress. */
static tdm_status_t running_server(const pg_paths_t *p, pidfile_t *ret_pf)
{
    tdm_status_t st = pidfile_read(p->data, ret_pf);
    if (st == TDM_ERR_AGAIN)
        st = pidfile_wait(p->data, ret_pf);
    return st;
}

tdm_status_t tdm_pg_cluster_start(const char *dir, const tdm_pg_opts_t *opts,
                                  tdm_pg_info_t *ret_info)
{
    const char *bindir = bindir_of(opts);
    int for_tests = opts ? opts->for_tests : 0;
    pg_paths_t p;
    pidfile_t pf;
    run_as_t ru;
    tdm_status_t st;
    int lockfd = -1;

    if (!ret_info) {
        tdm_err(TDM_SUB_DB, "msg=\"tdm_pg_cluster_start: NULL info\"");
        return TDM_ERR_INVAL;
    }
    TDM_TRY(paths_init(dir, 1, &p));
    TDM_TRY(tdm_pg_runas_lookup(&ru));
    TDM_TRY(lock_parent(&p, &lockfd));
    TDM_CHECK_GOTO(datadir_prepare(&ru, &p), st, out_unlock);

    st = running_server(&p, &pf);
    if (st == TDM_OK) {
        tdm_info(TDM_SUB_DB, "msg=\"adopted running cluster\" datadir=%s port=%d pid=%d", p.data,
                 pf.port, (int)pf.pid);
        info_fill(&p, &pf, 1, ret_info);
        goto out_unlock;
    }
    if (st != TDM_ERR_NOTFOUND)
        goto out_unlock;
    if (!has_pg_version(p.data))
        TDM_CHECK_GOTO(cluster_initdb(&ru, bindir, p.data, for_tests), st, out_unlock);
    TDM_CHECK_GOTO(cluster_launch(&ru, bindir, p.data, for_tests, &pf), st, out_unlock);
    info_fill(&p, &pf, 0, ret_info);
out_unlock:
    close(lockfd);
    return st;
}

tdm_status_t tdm_pg_cluster_status(const char *dir, tdm_pg_info_t *ret_info)
{
    pg_paths_t p;
    pidfile_t pf;
    if (!ret_info)
        return TDM_ERR_INVAL;
    TDM_TRY(paths_init(dir, 0, &p));
    TDM_TRY(paths_resolve(&p));
    TDM_TRY(pidfile_read(p.data, &pf));
    info_fill(&p, &pf, 1, ret_info);
    return TDM_OK;
}

static tdm_status_t stop_locked(const pg_paths_t *p, const char *bindir)
{
    pidfile_t pf;
    run_as_t ru;
    tdm_status_t st = running_server(p, &pf);
    if (st == TDM_ERR_NOTFOUND)
        return TDM_OK;
    if (st != TDM_OK)
        return st;
    TDM_TRY(tdm_pg_runas_lookup(&ru));
    const char *argv[] = {"pg_ctl", "stop", "-w", "-t",    "60", "-s",
                          "-m",     "fast", "-D", p->data, NULL};
    TDM_TRY(tdm_pg_tool_run_ok(&ru, bindir, argv));
    /* only the directories this module made; rmdir leaves anything non-empty alone */
    if (!strncmp(pf.sockdir, "/tmp/tdm-pg-", strlen("/tmp/tdm-pg-")))
        rmdir(pf.sockdir);
    tdm_info(TDM_SUB_DB, "msg=\"stopped\" datadir=%s pid=%d", p->data, (int)pf.pid);
    return TDM_OK;
}

/* Open the cluster at dir under its lock. TDM_ERR_NOTFOUND when there is nothing there. */
static tdm_status_t open_existing(const char *dir, pg_paths_t *p, int *ret_lockfd)
{
    int fd = -1;
    tdm_status_t st;
    TDM_TRY(paths_init(dir, 0, p));
    TDM_TRY(lock_parent(p, &fd));
    st = paths_resolve(p);
    if (st != TDM_OK) {
        close(fd);
        return st;
    }
    *ret_lockfd = fd;
    return TDM_OK;
}

tdm_status_t tdm_pg_cluster_stop(const char *dir, const tdm_pg_opts_t *opts)
{
    pg_paths_t p;
    int lockfd = -1;
    tdm_status_t st = open_existing(dir, &p, &lockfd);
    if (st == TDM_ERR_NOTFOUND)
        return TDM_OK;
    if (st != TDM_OK)
        return st;
    st = stop_locked(&p, bindir_of(opts));
    close(lockfd);
    return st;
}

static int rm_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    int rc = type == FTW_DP ? rmdir(path) : unlink(path);
    if (rc != 0 && errno != ENOENT) {
        tdm_err(TDM_SUB_DB, "msg=\"cannot remove\" path=%s err=\"%s\"", path, strerror(errno));
        return -1;
    }
    return 0;
}

tdm_status_t tdm_pg_cluster_destroy(const char *dir, const tdm_pg_opts_t *opts)
{
    pg_paths_t p;
    struct stat sb;
    int lockfd = -1;
    tdm_status_t st = open_existing(dir, &p, &lockfd);
    if (st == TDM_ERR_NOTFOUND)
        return TDM_OK;
    if (st != TDM_OK)
        return st;
    TDM_CHECK_GOTO(stop_locked(&p, bindir_of(opts)), st, out_unlock);
    if (lstat(p.data, &sb) == 0) {
        /* never remove a tree that is not a cluster: the path came from a caller or a link */
        if (!S_ISDIR(sb.st_mode) || (!has_pg_version(p.data) && !dir_is_empty(p.data))) {
            tdm_err(TDM_SUB_DB,
                    "msg=\"refusing to remove: not a PostgreSQL data directory\" "
                    "path=%s",
                    p.data);
            st = TDM_ERR_INVAL;
            goto out_unlock;
        }
        if (nftw(p.data, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0) {
            st = TDM_ERR_IO;
            goto out_unlock;
        }
    }
    if (p.is_link && unlink(p.dir) != 0 && errno != ENOENT) {
        st = tdm_pg_errno_status(errno);
        goto out_unlock;
    }
    tdm_info(TDM_SUB_DB, "msg=\"destroyed\" dir=%s datadir=%s", p.dir, p.data);
out_unlock:
    close(lockfd);
    return st;
}

/* Append key='value' with libpq's quoting (backslash before ' and \). */
static int dsn_put(char *buf, size_t len, size_t *pos, const char *key, const char *val)
{
    int n = snprintf(buf + *pos, len - *pos, "%s%s='", *pos ? " " : "", key);
    if (n < 0 || (size_t)n >= len - *pos)
        return -1;
    *pos += (size_t)n;
    for (const char *c = val; *c; c++) {
        size_t need = (*c == '\'' || *c == '\\') ? 2 : 1;
        if (*pos + need >= len)
            return -1;
        if (need == 2)
            buf[(*pos)++] = '\\';
        buf[(*pos)++] = *c;
    }
    if (*pos + 2 > len)
        return -1;
    buf[(*pos)++] = '\'';
    buf[*pos] = '\0';
    return 0;
}

tdm_status_t tdm_pg_info_dsn(const tdm_pg_info_t *info, const char *dbname, char *buf, size_t len)
{
    char tmp[1024], port[16];
    size_t pos = 0;
    if (!info || !buf || len == 0 || !info->host[0] || info->port <= 0)
        return TDM_ERR_INVAL;
    snprintf(port, sizeof(port), "%d", info->port);
    if (dsn_put(tmp, sizeof(tmp), &pos, "host", info->host) != 0 ||
        dsn_put(tmp, sizeof(tmp), &pos, "port", port) != 0 ||
        dsn_put(tmp, sizeof(tmp), &pos, "user", info->user) != 0 ||
        dsn_put(tmp, sizeof(tmp), &pos, "dbname", dbname ? dbname : "postgres") != 0)
        return TDM_ERR_OVERFLOW;
    if (pos + 1 > len)
        return TDM_ERR_OVERFLOW;
    memcpy(buf, tmp, pos + 1);
    return TDM_OK;
}
