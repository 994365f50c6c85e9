/*
 * pgproc.c — running initdb and pg_ctl for pgcluster.c. They refuse to run as root, so as root
 * they run as user postgres: fork, setgid/initgroups/setuid, chdir("/") (the caller's cwd may be
 * under /root), exec with a clean environment (no PG* variables leak in), stdout and stderr
 * captured so that a failure is logged with what the tool said.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tdm/log.h>
#include <tdm/pgcluster.h>

#include "pg_int.h"

tdm_status_t tdm_pg_errno_status(int e)
{
    switch (e) {
    case ENOENT:
        return TDM_ERR_NOTFOUND;
    case EACCES:
    case EPERM:
        return TDM_ERR_PERM;
    case ENAMETOOLONG:
        return TDM_ERR_OVERFLOW;
    case ENOTDIR:
    case EINVAL:
        return TDM_ERR_INVAL;
    default:
        return TDM_ERR_IO;
    }
}

tdm_status_t tdm_pg_path_join(char *buf, size_t len, const char *a, const char *b)
{
    int n = snprintf(buf, len, "%s/%s", a, b);
    if (n < 0 || (size_t)n >= len)
        return TDM_ERR_OVERFLOW;
    return TDM_OK;
}

tdm_status_t tdm_pg_runas_lookup(run_as_t *ret)
{
    run_as_t ru = {0};
    if (geteuid() != 0) {
        snprintf(ru.name, sizeof(ru.name), "%s", "(self)");
        *ret = ru;
        return TDM_OK;
    }
    errno = 0;
    struct passwd *pw = getpwnam(PG_SUPERUSER);
    if (!pw) {
        tdm_err(TDM_SUB_DB,
                "msg=\"running as root, but there is no user postgres to run initdb/pg_ctl as; "
                "install the postgresql package\"");
        return TDM_ERR_NOTFOUND;
    }
    ru.switch_user = 1;
    ru.uid = pw->pw_uid;
    ru.gid = pw->pw_gid;
    snprintf(ru.name, sizeof(ru.name), "%s", pw->pw_name);
    *ret = ru;
    return TDM_OK;
}

/* In a forked child: become the tool's user. Returns 0, or -1 with errno set. */
static int child_drop_privileges(const run_as_t *ru)
{
    if (!ru->switch_user)
        return 0;
    if (setgid(ru->gid) != 0 || initgroups(ru->name, ru->gid) != 0 || setuid(ru->uid) != 0)
        return -1;
    return 0;
}

static void child_close_fds(void)
{
#ifdef SYS_close_range
    if (syscall(SYS_close_range, 3u, ~0u, 0u) == 0)
        return;
#endif
    long max = sysconf(_SC_OPEN_MAX);
    if (max < 0 || max > 65536)
        max = 65536;
    for (int fd = 3; fd < max; fd++)
        close(fd);
}

tdm_status_t tdm_pg_runas_chown(const run_as_t *ru, const char *path)
{
    if (!ru->switch_user)
        return TDM_OK;
    if (chown(path, ru->uid, ru->gid) != 0) {
        int e = errno;
        tdm_err(TDM_SUB_DB, "msg=\"cannot chown to postgres\" path=%s err=\"%s\"", path,
                strerror(e));
        return tdm_pg_errno_status(e);
    }
    return TDM_OK;
}

/* Can the tool's user read, write and enter `path` (every parent traversable)? */
int tdm_pg_runas_can_access(const run_as_t *ru, const char *path)
{
    if (!ru->switch_user)
        return access(path, R_OK | W_OK | X_OK) == 0;
    pid_t pid = fork();
    if (pid < 0)
        return 0;
    if (pid == 0) {
        if (child_drop_privileges(ru) != 0)
            _exit(2);
        _exit(access(path, R_OK | W_OK | X_OK) == 0 ? 0 : 1);
    }
    int ws;
    while (waitpid(pid, &ws, 0) < 0)
        if (errno != EINTR)
            return 0;
    return WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
}

/* Keep the last TOOL_OUT_MAX-1 bytes of a tool's output, NUL-terminated, quotes made single. */
static void out_append(char *out, size_t *used, const char *p, size_t n)
{
    const size_t cap = TOOL_OUT_MAX - 1;
    if (n >= cap) {
        p += n - cap;
        n = cap;
    }
    if (*used + n > cap) {
        size_t drop = *used + n - cap;
        memmove(out, out + drop, *used - drop);
        *used -= drop;
    }
    memcpy(out + *used, p, n);
    *used += n;
    out[*used] = '\0';
    for (size_t i = 0; i < *used; i++)
        if (out[i] == '"')
            out[i] = '\'';
}

/*
 * Run bindir/argv[0] as the tool user with stdin from /dev/null, stdout+stderr captured into
 * out (tail kept). Returns TDM_OK when it ran (ret_exit holds the exit code, or 128+signal),
 * or an error when it could not be started at all.
 */
tdm_status_t tdm_pg_tool_run(const run_as_t *ru, const char *bindir, const char *const argv[],
                             char out[TOOL_OUT_MAX], int *ret_exit)
{
    char exe[TDM_PG_PATH_MAX];
    char pathenv[TDM_PG_PATH_MAX + 32];
    int fds[2];
    size_t used = 0;
    tdm_status_t st;

    out[0] = '\0';
    TDM_TRY(tdm_pg_path_join(exe, sizeof(exe), bindir, argv[0]));
    if (access(exe, X_OK) != 0) {
        tdm_err(TDM_SUB_DB, "msg=\"PostgreSQL tool not found\" path=%s err=\"%s\"", exe,
                strerror(errno));
        return TDM_ERR_NOTFOUND;
    }
    snprintf(pathenv, sizeof(pathenv), "PATH=%s:/usr/bin:/bin", bindir);
    char lc_all[] = "LC_ALL=C", lang[] = "LANG=C", home[] = "HOME=/";
    char *const envp[] = {pathenv, lc_all, lang, home, NULL};

    if (pipe2(fds, O_CLOEXEC) != 0)
        return tdm_pg_errno_status(errno);
    pid_t pid = fork();
    if (pid < 0) {
        st = tdm_pg_errno_status(errno);
        close(fds[0]);
        close(fds[1]);
        return st;
    }
    if (pid == 0) {
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(fds[1], 1) < 0 || dup2(fds[1], 2) < 0)
            _exit(126);
        child_close_fds();
        /* the caller's cwd may be unreachable for postgres (a checkout under /root) */
        if (chdir("/") != 0 || child_drop_privileges(ru) != 0) {
            dprintf(2, "cannot switch to user %s: %s\n", ru->name, strerror(errno));
            _exit(126);
        }
        execve(exe, (char *const *)argv, envp);
        dprintf(2, "exec %s: %s\n", exe, strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    for (;;) {
        char buf[1024];
        ssize_t n = read(fds[0], buf, sizeof(buf));
        if (n > 0) {
            out_append(out, &used, buf, (size_t)n);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        break;
    }
    close(fds[0]);
    int ws;
    while (waitpid(pid, &ws, 0) < 0) {
        if (errno != EINTR)
            return TDM_ERR_IO;
    }
    *ret_exit = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + (WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
    return TDM_OK;
}

/* Run a tool that must succeed; a failure is logged here with its output. */
tdm_status_t tdm_pg_tool_run_ok(const run_as_t *ru, const char *bindir, const char *const argv[])
{
    char out[TOOL_OUT_MAX];
    int code = 0;
    TDM_TRY(tdm_pg_tool_run(ru, bindir, argv, out, &code));
    if (code != 0) {
        tdm_err(TDM_SUB_DB, "msg=\"%s failed\" exit=%d output=\"%s\"", argv[0], code, out);
        return TDM_ERR_DB;
    }
    tdm_dbg(TDM_SUB_DB, "msg=\"%s ok\" output=\"%s\"", argv[0], out);
    return TDM_OK;
}
