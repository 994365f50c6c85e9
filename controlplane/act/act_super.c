/*
 * act_super.c — tandemd's supervisor (docs/design.md §5 "without systemd"): the groups config, the
 * per-group state directory (base.ini, override.ini, record.json, ready.json, worker.log), starting
 * a group's launcher with posix_spawn (or, for a group in a network namespace of its own, fork +
 * setns + exec: docs/groups.md "Network namespaces"), stopping it (SIGTERM to the launcher, which
 * forwards it to its ranks; SIGKILL to the process group after the timeout), re-adopting a recorded
 * launcher after tandemd restarts, and noticing exits nobody asked for.
 *
 * A process is "ours" only when both pid and /proc starttime match the record, so a recycled pid
 * is never signalled. Children are started in a session of their own: tandemd's terminal or
 * its own exit does not take the workers down (they are re-adopted).
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tdm/log.h>
#include <tdm/mem.h>
#include <tdm/params.h>
#include <tdm/telemetry.h>
#include <tdm/time.h>

#include "controlplane/act/act_int.h"

extern char **environ;

/* ---- files ---------------------------------------------------------------------------------- */

tdm_status_t tdm_act_write_file(const char *path, const char *text, char *err, size_t err_len)
{
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f || fputs(text, f) < 0 || fflush(f) != 0 || fsync(fileno(f)) != 0) {
        snprintf(err, err_len, "%s: %s", tmp, strerror(errno));
        if (f)
            fclose(f);
        return TDM_ERR_IO;
    }
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        snprintf(err, err_len, "%s: %s", path, strerror(errno));
        return TDM_ERR_IO;
    }
    return TDM_OK;
}

static void gpath(const tdm_cp_act_t *a, const act_group_t *g, const char *file, char *out,
                  size_t len)
{
    snprintf(out, len, "%s/groups/%s%s%s", a->state_dir, g->name, file ? "/" : "",
             file ? file : "");
}

/* Field 22 of /proc/PID/stat; 0 when the process is gone. */
static unsigned long long proc_starttime(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* comm may contain spaces */
    if (!p || p[1] != ' ' || !p[2] || p[2] == 'Z')
        return 0; /* malformed, or a zombie: gone for our purposes */
    p++;          /* p: the space before field 3 (state) */
    for (int field = 3; field < 22 && p; field++)
        p = strchr(p + 1, ' ');
    return p ? strtoull(p + 1, NULL, 10) : 0;
}

/* The launcher tandemd runs for g, where it answers (url), for a later tandemd to re-adopt. */
static void record_write(tdm_cp_act_t *a, act_group_t *g, const char *url)
{
    char path[4200], err[256];
    gpath(a, g, "record.json", path, sizeof(path));
    json_t *o = json_pack("{s:s,s:i,s:I,s:s,s:I}", "group", g->name, "pid", (json_int_t)g->pid,
                          "starttime", (json_int_t)g->starttime, "admin_url", url, "started_us",
                          (json_int_t)g->started_us);
    char *text = json_dumps(o, JSON_SORT_KEYS);
    json_decref(o);
    if (!text || tdm_act_write_file(path, text, err, sizeof(err)) != TDM_OK)
        tdm_err(TDM_SUB_CP, "msg=\"cannot write the supervisor record\" group=%s err=\"%s\"",
                g->name, text ? err : "nomem");
    free(text);
}

/* Re-adopt the recorded launcher when it is still the same process. */
static void record_adopt(tdm_cp_act_t *a, act_group_t *g)
{
    char path[4200];
    gpath(a, g, "record.json", path, sizeof(path));
    json_t *o = json_load_file(path, 0, NULL);
    if (!o)
        return;
    pid_t pid = (pid_t)json_integer_value(json_object_get(o, "pid"));
    unsigned long long st = (unsigned long long)json_integer_value(json_object_get(o, "starttime"));
    const char *url = json_string_value(json_object_get(o, "admin_url"));
    if (pid > 0 && st && url && proc_starttime(pid) == st) {
        g->pid = pid;
        g->starttime = st;
        g->child = 0;
        g->started_us = (uint64_t)json_integer_value(json_object_get(o, "started_us"));
        snprintf(g->admin_url, sizeof(g->admin_url), "%s", url);
        g->state = ACT_ST_RUNNING;
        tdm_info(TDM_SUB_CP, "msg=\"re-adopted worker group\" group=%s pid=%d url=%s", g->name,
                 (int)pid, url);
    }
    json_decref(o);
}

/* ---- the groups config ---------------------------------------------------------------------- */

typedef struct load_ctx {
    tdm_cp_act_t *a;
    act_group_t *cur;
} load_ctx_t;

static int on_kv(void *vctx, const char *section, const char *key, const char *value, unsigned line,
                 char *err, size_t err_len)
{
    load_ctx_t *c = vctx;
    tdm_cp_act_t *a = c->a;
    if (strncmp(section, "group.", 6) != 0) {
        snprintf(err, err_len, "line %u: key %s outside a [group.NAME] section", line, key);
        return -1;
    }
    const char *name = section + 6;
    if (!c->cur || strcmp(c->cur->name, name) != 0) {
        c->cur = tdm_act_group_find(a, name);
        if (!c->cur) {
            if (a->n_groups == TDM_CP_ACT_GROUP_MAX || !*name ||
                strlen(name) >= TDM_CP_ACT_NAME_MAX) {
                snprintf(err, err_len, "line %u: group \"%s\": too many groups or bad name", line,
                         name);
                return -1;
            }
            act_group_t *g = &a->groups[a->n_groups++];
            memset(g, 0, sizeof(*g));
            snprintf(g->name, sizeof(g->name), "%s", name);
            g->base = json_object();
            g->config = json_object();
            snprintf(g->mode, sizeof(g->mode), "null");
            snprintf(g->token, sizeof(g->token), "%s", a->admin_token);
            c->cur = g;
        }
    }
    act_group_t *g = c->cur;
    char k[128];
    snprintf(k, sizeof(k), "%s", key);
    for (char *p = k; *p; p++)
        if (*p == '-')
            *p = '_';
    if (!strcmp(k, "unit")) {
        snprintf(g->unit, sizeof(g->unit), "%s", value);
    } else if (!strcmp(k, "url")) {
        snprintf(g->admin_url, sizeof(g->admin_url), "%s", value);
    } else if (!strcmp(k, "bus_host")) {
        snprintf(g->bus_host, sizeof(g->bus_host), "%s", value);
    } else if (!strcmp(k, "pair")) {
        snprintf(g->pair, sizeof(g->pair), "%s", value);
    } else if (!strcmp(k, "token_file")) {
        FILE *f = fopen(value, "r");
        if (!f || !fgets(g->token, sizeof(g->token), f)) {
            snprintf(err, err_len, "line %u: token_file %s: %s", line, value,
                     f ? "empty" : strerror(errno));
            if (f)
                fclose(f);
            return -1;
        }
        fclose(f);
        g->token[strcspn(g->token, "\r\n ")] = '\0';
    } else if (!strcmp(k, "netns")) {
        /* a name under /var/run/netns (`ip netns add NAME`): no path, no "." or ".." */
        size_t n = strlen(value),
               ok = n > 0 && n < sizeof(g->netns) && strcmp(value, ".") && strcmp(value, "..");
        for (size_t i = 0; ok && i < n; i++)
            ok = isalnum((unsigned char)value[i]) || strchr("._-", value[i]);
        if (!ok) {
            snprintf(err, err_len,
                     "line %u: netns \"%s\": the name of a namespace under /var/run/netns "
                     "(letters, digits, . _ -; at most %zu characters)",
                     line, value, sizeof(g->netns) - 1);
            return -1;
        }
        snprintf(g->netns, sizeof(g->netns), "%s", value);
    } else if (!strcmp(k, "control_plane_host")) {
        size_t n = strlen(value), ok = n > 0 && n < sizeof(g->cp_host);
        for (size_t i = 0; ok && i < n; i++)
            ok = isalnum((unsigned char)value[i]) || strchr(".-:", value[i]);
        if (!ok) {
            snprintf(err, err_len,
                     "line %u: control_plane_host \"%s\": an address or host name (the worker "
                     "reaches tandemd at http://ADDRESS:TANDEMD_PORT)",
                     line, value);
            return -1;
        }
        snprintf(g->cp_host, sizeof(g->cp_host), "%s", value);
    } else if (!strcmp(k, "env")) {
        /* NAME=VALUE words, appended (an `env` line may repeat) */
        char copy[1024], *save = NULL;
        if (strlen(value) >= sizeof(copy)) {
            snprintf(err, err_len, "line %u: env: longer than %zu characters", line,
                     sizeof(copy) - 1);
            return -1;
        }
        snprintf(copy, sizeof(copy), "%s", value);
        for (char *w = strtok_r(copy, " \t", &save); w; w = strtok_r(NULL, " \t", &save)) {
            size_t i = 0;
            while (w[i] == '_' || isalpha((unsigned char)w[i]) ||
                   (i && isdigit((unsigned char)w[i])))
                i++;
            if (!i || w[i] != '=') {
                snprintf(err, err_len,
                         "line %u: env \"%s\": expected NAME=VALUE words (NAME: letters, digits, "
                         "_), e.g. env = UCX_NET_DEVICES=veth0 UCX_TLS=tcp",
                         line, w);
                return -1;
            }
            size_t have = strlen(g->env);
            if (have + strlen(w) + 2 > sizeof(g->env)) {
                snprintf(err, err_len, "line %u: env: more than %zu characters in all", line,
                         sizeof(g->env) - 1);
                return -1;
            }
            snprintf(g->env + have, sizeof(g->env) - have, "%s%s", have ? " " : "", w);
        }
    } else if (!strcmp(k, "port")) {
        char *end;
        errno = 0;
        long p = strtol(value, &end, 10);
        if (errno || end == value || *end || p < 0 || p > 65535) {
            snprintf(err, err_len, "line %u: port \"%s\": the worker's HTTP port, 0..65535", line,
                     value);
            return -1;
        }
        g->listen_port = (int)p;
        g->port_set = 1;
    } else {
        if (!strcmp(k, "group") || !strcmp(k, "ready_file") || !strcmp(k, "control_plane") ||
            !strcmp(k, "admin_token_file") || !strcmp(k, "rank")) {
            snprintf(err, err_len, "line %u: %s is set by tandemd's supervisor", line, key);
            return -1;
        }
        if (!strcmp(k, "disaggregation_mode"))
            snprintf(g->mode, sizeof(g->mode), "%s", value);
        if (!strcmp(k, "tp_size"))
            g->tp_size = atoi(value);
        if (!strcmp(k, "served_model_name") || (!strcmp(k, "model_path") && !g->model[0]) ||
            !strcmp(k, "model"))
            snprintf(g->model, sizeof(g->model), "%s", value);
        json_object_set_new(g->base, k, json_string(value));
    }
    return 0;
}

static tdm_status_t mkdirs(const char *path, char *err, size_t err_len)
{
    if (mkdir(path, 0700) != 0 && errno != EEXIST) {
        snprintf(err, err_len, "%s: %s", path, strerror(errno));
        return TDM_ERR_IO;
    }
    return TDM_OK;
}

/* Every supervised group listens on a port that restarts keep (docs/groups.md "Ports"): its
 * `port`, else its role's default (the worker's: 30001 prefill, 30000 decode or colocated). Two
 * groups on one port (two of one role without ports, or a port given twice) are refused here,
 * naming both, rather than found at the second start. */
static tdm_status_t check_ports(tdm_cp_act_t *a, char *err, size_t err_len)
{
    for (size_t i = 0; i < a->n_groups; i++) {
        act_group_t *g = &a->groups[i];
        if (g->kind == ACT_KIND_SUPERVISED && !g->port_set)
            g->listen_port = !strcmp(g->mode, "prefill") ? 30001 : 30000;
    }
    for (size_t i = 0; i < a->n_groups; i++) {
        act_group_t *g = &a->groups[i];
        if (g->kind != ACT_KIND_SUPERVISED || !g->listen_port)
            continue;
        for (size_t j = 0; j < i; j++) {
            act_group_t *h = &a->groups[j];
            if (h->kind != ACT_KIND_SUPERVISED || h->listen_port != g->listen_port)
                continue;
            if (g->port_set && h->port_set)
                snprintf(err, err_len, "groups %s and %s both have port = %d: each needs its own",
                         h->name, g->name, g->listen_port);
            else
                snprintf(err, err_len,
                         "groups %s and %s would both listen on port %d (the %s default): two "
                         "groups of one role need `port = N`, a stable port of their own, in "
                         "their sections",
                         h->name, g->name, g->listen_port,
                         g->listen_port == 30001 ? "prefill" : "decode and colocated");
            return TDM_ERR_INVAL;
        }
    }
    return TDM_OK;
}

tdm_status_t tdm_act_super_load(tdm_cp_act_t *a, char *err, size_t err_len)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/groups", a->state_dir);
    tdm_status_t st = mkdirs(path, err, err_len);
    if (st != TDM_OK || !a->o.groups_config || !*a->o.groups_config)
        return st;
    load_ctx_t c = {a, NULL};
    char e2[512];
    st = tdm_ini_parse_file(a->o.groups_config, on_kv, &c, e2, sizeof(e2));
    if (st != TDM_OK) {
        snprintf(err, err_len, "--groups-config %s: %s", a->o.groups_config, e2);
        return st;
    }
    for (size_t i = 0; i < a->n_groups; i++) {
        act_group_t *g = &a->groups[i];
        g->kind = g->unit[0]        ? ACT_KIND_UNIT
                  : g->admin_url[0] ? ACT_KIND_EXTERNAL
                                    : ACT_KIND_SUPERVISED;
        if (g->kind != ACT_KIND_SUPERVISED && g->port_set) {
            snprintf(err, err_len,
                     "group %s: port is for supervised groups (a unit's or an external group's "
                     "port is the one in its url)",
                     g->name);
            return TDM_ERR_INVAL;
        }
        if (g->kind != ACT_KIND_SUPERVISED && (g->netns[0] || g->cp_host[0] || g->env[0])) {
            snprintf(err, err_len,
                     "group %s: %s is for supervised groups (tandemd does not start a unit's or "
                     "an external group's process)",
                     g->name,
                     g->netns[0]     ? "netns"
                     : g->cp_host[0] ? "control_plane_host"
                                     : "env");
            return TDM_ERR_INVAL;
        }
        /* in a namespace of its own the worker's 127.0.0.1 is not tandemd's: both directions
         * need an address (docs/groups.md "Network namespaces") */
        const char *h = json_string_value(json_object_get(g->base, "host"));
        if (g->netns[0] && (!h || !*h || !strcmp(h, "0.0.0.0") || !strcmp(h, "::") ||
                            !strncmp(h, "127.", 4) || !strcmp(h, "localhost"))) {
            snprintf(err, err_len,
                     "group %s: netns = %s needs host = the worker's address inside the namespace "
                     "that tandemd reaches (not a wildcard or loopback one)",
                     g->name, g->netns);
            return TDM_ERR_INVAL;
        }
        if (g->netns[0] && !g->cp_host[0]) {
            snprintf(err, err_len,
                     "group %s: netns = %s needs control_plane_host = the address at which the "
                     "worker reaches tandemd from inside the namespace",
                     g->name, g->netns);
            return TDM_ERR_INVAL;
        }
    }
    if ((st = check_ports(a, err, err_len)) != TDM_OK)
        return st;
    for (size_t i = 0; i < a->n_groups; i++) {
        act_group_t *g = &a->groups[i];
        if (g->kind == ACT_KIND_UNIT && !g->admin_url[0]) {
            snprintf(err, err_len, "group %s: a unit needs url = the worker's HTTP base URL",
                     g->name);
            return TDM_ERR_INVAL;
        }
        if (g->kind == ACT_KIND_UNIT) {
            tdm_cp_sdbus_call_t call;
            if (tdm_cp_sdbus_restart_call(g->unit, &call, err, err_len) != TDM_OK)
                return TDM_ERR_INVAL;
        }
        gpath(a, g, NULL, path, sizeof(path));
        if ((st = mkdirs(path, err, err_len)) != TDM_OK)
            return st;
        /* the current config version survives tandemd restarts beside the override file */
        gpath(a, g, "override.json", path, sizeof(path));
        json_t *cur = json_load_file(path, 0, NULL);
        if (json_is_object(cur)) {
            json_decref(g->config);
            g->config = cur;
            g->config_version = (uint64_t)json_integer_value(json_object_get(cur, "_version"));
            json_object_del(g->config, "_version");
        } else {
            json_decref(cur);
        }
        if (g->kind != ACT_KIND_SUPERVISED) {
            g->state = ACT_ST_RUNNING;
            tdm_act_url_hostport(g);
            continue;
        }
        char *ini = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&ini, &len);
        const char *k;
        json_t *v;
        fprintf(f, "# written by tandemd from --groups-config [group.%s]\n", g->name);
        json_object_foreach(g->base, k, v) fprintf(f, "%s = \"%s\"\n", k, json_string_value(v));
        fclose(f);
        gpath(a, g, "base.ini", path, sizeof(path));
        st = tdm_act_write_file(path, ini, err, err_len);
        free(ini);
        if (st != TDM_OK)
            return st;
        record_adopt(a, g);
    }
    return TDM_OK;
}

/* ---- start / stop --------------------------------------------------------------------------- */

static int read_port(const char *path, uint16_t *port)
{
    json_t *o = json_load_file(path, 0, NULL);
    json_int_t p = json_integer_value(json_object_get(o, "http"));
    json_decref(o);
    if (p <= 0 || p > 65535)
        return 0;
    *port = (uint16_t)p;
    return 1;
}

/* The host part of a URL: an IPv6 literal in brackets. */
static void url_host(char *out, size_t len, const char *host)
{
    snprintf(out, len, strchr(host, ':') ? "[%s]" : "%s", host);
}

/* The address tandemd reaches the worker at: its `host` unless that is a wildcard (or unset). */
static const char *worker_host(const act_group_t *g)
{
    const char *h = json_string_value(json_object_get(g->base, "host"));
    if (!h || !*h || !strcmp(h, "0.0.0.0"))
        return "127.0.0.1";
    return !strcmp(h, "::") ? "::1" : h;
}

/* tandemd's environment with the group's `env` words on top (a NAME given there replaces
 * tandemd's own). The words live in `words` (a copy of g->env); free both arrays after use. */
static char **group_environ(const act_group_t *g, char **words)
{
    size_t n_env = 0, n_words = 0;
    while (environ[n_env])
        n_env++;
    *words = tdm_strdup(g->env);
    char *w[128], *save = NULL;
    for (char *t = strtok_r(*words, " \t", &save); t && n_words < 128;
         t = strtok_r(NULL, " \t", &save))
        w[n_words++] = t;
    char **envp = tdm_calloc(n_env + n_words + 1, sizeof(*envp));
    size_t n = 0;
    for (size_t i = 0; i < n_env; i++) {
        int replaced = 0;
        for (size_t j = 0; j < n_words && !replaced; j++) {
            size_t klen = (size_t)(strchr(w[j], '=') - w[j]) + 1; /* NAME= */
            replaced = !strncmp(environ[i], w[j], klen);
        }
        if (!replaced)
            envp[n++] = environ[i];
    }
    for (size_t j = 0; j < n_words; j++)
        envp[n++] = w[j];
    envp[n] = NULL;
    return envp;
}

/* The worker binary's path ($PATH lookup, as posix_spawnp), for execve after fork. */
static int resolve_bin(const char *bin, char *out, size_t len)
{
    if (strchr(bin, '/')) {
        snprintf(out, len, "%s", bin);
        return access(out, X_OK) == 0;
    }
    const char *path = getenv("PATH");
    char dirs[4096];
    snprintf(dirs, sizeof(dirs), "%s", path && *path ? path : "/usr/local/bin:/usr/bin:/bin");
    char *save = NULL;
    for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(out, len, "%s/%s", *d ? d : ".", bin);
        if (access(out, X_OK) == 0)
            return 1;
    }
    return 0;
}

/* Start the launcher inside the network namespace open at `nsfd`: fork, setns(2), a mount
 * namespace with that network namespace's sysfs on /sys (as `ip netns exec`), then what
 * posix_spawn does for the other groups (a session of its own, stdin /dev/null, stdout and stderr
 * to the log, an empty signal mask), execve. Only async-signal-safe calls between fork and exec;
 * a failure there comes back over a close-on-exec pipe (the step and errno) and fails the start
 * with that reason. */
static pid_t spawn_in_netns(const char *bin, char **argv, char **envp, int nsfd, const char *netns,
                            const char *logp, char *detail, size_t len)
{
    char path[4200];
    if (!resolve_bin(bin, path, sizeof(path))) {
        snprintf(detail, len, "cannot start %s: not an executable (or not found on $PATH)", bin);
        return -1;
    }
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) != 0) {
        snprintf(detail, len, "cannot start %s: pipe: %s", bin, strerror(errno));
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(detail, len, "cannot start %s: fork: %s", bin, strerror(errno));
        close(pfd[0]);
        close(pfd[1]);
        return -1;
    }
    if (pid == 0) {
        int msg[2] = {0, 0};
        sigset_t none;
        sigemptyset(&none);
        if (setns(nsfd, CLONE_NEWNET) != 0) {
            msg[0] = 1;
        } else if (unshare(CLONE_NEWNS) != 0 || mount("none", "/", NULL, MS_REC | MS_SLAVE, NULL) ||
                   (umount2("/sys", MNT_DETACH) != 0 && errno != EINVAL) ||
                   mount(netns, "/sys", "sysfs", 0, NULL) != 0) {
            /* as `ip netns exec`: a mount namespace whose /sys shows the namespace's own
             * interfaces (UCX lists its devices from /sys/class/net) */
            msg[0] = 4;
        } else {
            int in = open("/dev/null", O_RDONLY),
                out = open(logp, O_WRONLY | O_CREAT | O_APPEND, 0600);
            if (in < 0 || out < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0) {
                msg[0] = 2;
            } else {
                if (in > 2)
                    close(in);
                if (out > 2)
                    close(out);
                setsid();
                sigprocmask(SIG_SETMASK, &none, NULL);
                execve(path, argv, envp);
                msg[0] = 3;
            }
        }
        msg[1] = errno;
        if (write(pfd[1], msg, sizeof(msg)) < 0)
            _exit(126);
        _exit(127);
    }
    close(pfd[1]);
    int msg[2];
    ssize_t n;
    do
        n = read(pfd[0], msg, sizeof(msg));
    while (n < 0 && errno == EINTR);
    close(pfd[0]);
    if (n == (ssize_t)sizeof(msg)) {
        waitpid(pid, NULL, 0);
        snprintf(detail, len, "cannot start %s: %s: %s", bin,
                 msg[0] == 1   ? "setns into the group's network namespace"
                 : msg[0] == 2 ? "stdin /dev/null or stdout to the worker log"
                 : msg[0] == 4 ? "the namespace's own /sys (unshare, mount sysfs)"
                               : "execve",
                 strerror(msg[1]));
        return -1;
    }
    return pid;
}

/* The group's launcher started (its pid), or -1 with the reason in detail. */
static pid_t launch(tdm_cp_act_t *a, const act_group_t *g, char **argv, char **envp,
                    const char *logp, char *detail, size_t len)
{
    if (g->netns[0]) {
        /* docs/groups.md "Network namespaces": opened here, so a missing one is this start's
         * failure with its name, before any process exists */
        char nsp[128];
        snprintf(nsp, sizeof(nsp), "/var/run/netns/%s", g->netns);
        int nsfd = open(nsp, O_RDONLY | O_CLOEXEC);
        if (nsfd < 0) {
            snprintf(detail, len, "netns %s: %s: %s (`ip netns add %s` creates it)", g->netns, nsp,
                     strerror(errno), g->netns);
            return -1;
        }
        pid_t pid = spawn_in_netns(a->worker_bin, argv, envp, nsfd, g->netns, logp, detail, len);
        close(nsfd);
        return pid;
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, logp, O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawnattr_init(&at);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK);
    pid_t pid;
    int r = posix_spawnp(&pid, a->worker_bin, &fa, &at, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (r != 0) {
        snprintf(detail, len, "cannot start %s: %s", a->worker_bin, strerror(r));
        return -1;
    }
    return pid;
}

/* The launcher's own reason for a start that failed: the last `group failed to start: …` line it
 * wrote to worker.log after `from` (its size when this start began), into out ("" if none). */
static void launcher_reason(const char *logp, off_t from, char *out, size_t len)
{
    static const char key[] = "msg=\"group failed to start: ";
    out[0] = '\0';
    FILE *f = fopen(logp, "r");
    if (!f)
        return;
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && sb.st_size - from > 65536)
        from = sb.st_size - 65536; /* the reason is among its last lines */
    char line[2048];
    if (fseeko(f, from, SEEK_SET) == 0)
        while (fgets(line, sizeof(line), f)) {
            char *k = strstr(line, key), *end;
            if (!k || !(end = strrchr(k + sizeof(key) - 1, '"')))
                continue;
            *end = '\0';
            snprintf(out, len, "%s", k + sizeof(key) - 1);
        }
    fclose(f);
}

static tdm_status_t start_once(tdm_cp_act_t *a, act_group_t *g, char *detail, size_t len)
{
    char base[4200], ovr[4200], ready[4200], logp[4200], tok[4200], cp[200];
    gpath(a, g, "base.ini", base, sizeof(base));
    gpath(a, g, "override.ini", ovr, sizeof(ovr));
    gpath(a, g, "ready.json", ready, sizeof(ready));
    gpath(a, g, "worker.log", logp, sizeof(logp));
    snprintf(tok, sizeof(tok), "%s/admin.token", a->state_dir);
    char cph[160], wh[160];
    url_host(cph, sizeof(cph), g->cp_host[0] ? g->cp_host : "127.0.0.1");
    snprintf(cp, sizeof(cp), "http://%s:%d", cph, a->tandemd_port);
    unlink(ready);
    char f_config[] = "--config", f_ovr[] = "--override-config", f_group[] = "--group",
         f_port[] = "--port", port_s[16], f_ready[] = "--ready-file", f_cp[] = "--control-plane",
         f_tok[] = "--admin-token-file", f_cptok[] = "--control-plane-token-file";
    snprintf(port_s, sizeof(port_s), "%d", g->listen_port); /* the same on every start */
    /* the same token authorises tandemd's calls to the worker's /admin and the worker's
     * telemetry to tandemd */
    /* telemetry the worker could not deliver (tandemd down or restarting while it stops) waits
     * on disk and is replayed by the next start: its spool directory, unless the section names
     * one (docs/groups.md) */
    char spool[4200], f_spool[] = "--spool-dir";
    gpath(a, g, "spool", spool, sizeof(spool));
    char *argv[20] = {a->worker_bin, f_config, base, f_ovr, ovr,   f_group, g->name, f_port, port_s,
                      f_ready,       ready,    f_cp, cp,    f_tok, tok,     f_cptok, tok};
    size_t argc = 17;
    if (!json_object_get(g->base, "spool_dir")) {
        argv[argc++] = f_spool;
        argv[argc++] = spool;
    }
    argv[argc] = NULL;
    char *words = NULL, **envp = group_environ(g, &words);
    struct stat lsb;
    off_t log_from = stat(logp, &lsb) == 0 ? lsb.st_size : 0;
    pid_t pid = launch(a, g, argv, envp, logp, detail, len);
    free(envp);
    free(words);
    if (pid < 0) {
        /* no process: the group is failed, and /api/v1/status says why (its `health`) */
        pthread_mutex_lock(&a->mu);
        g->pid = 0;
        g->ready = 0;
        g->state = ACT_ST_FAILED;
        snprintf(g->why, sizeof(g->why), "%s", detail);
        pthread_mutex_unlock(&a->mu);
        tdm_err(TDM_SUB_CP, "msg=\"cannot start worker group\" group=%s err=\"%s\"", g->name,
                detail);
        return TDM_ERR_IO;
    }
    pthread_mutex_lock(&a->mu);
    g->pid = pid;
    g->child = 1;
    g->starttime = proc_starttime(pid);
    g->started_us = tdm_time_wall_us();
    g->admin_url[0] = '\0';
    g->ready = 0;
    g->why[0] = '\0';
    g->state = ACT_ST_STARTING;
    char early[sizeof(g->admin_url)] = "";
    if (g->listen_port > 0) {
        url_host(wh, sizeof(wh), worker_host(g));
        snprintf(early, sizeof(early), "http://%s:%d", wh, g->listen_port);
    }
    pthread_mutex_unlock(&a->mu);
    tdm_info(TDM_SUB_CP, "msg=\"started worker group\" group=%s pid=%d", g->name, (int)pid);
    /* The record names the new launcher at once, where its stable port will answer: a tandemd
     * killed before the worker is ready (inside a restart) leaves a record the next one re-adopts.
     * It named the launcher just stopped, so the next tandemd started another, which could not
     * bind the port the unrecorded one held: the group failed, served by a launcher nobody
     * supervised (tests/chaos/chaos.py scenario 7, tandemd killed -9 during a restart). */
    if (early[0])
        record_write(a, g, early);
    /* the launcher writes the ready file once it listens (after the model is loaded) */
    uint64_t deadline = tdm_time_mono_us() + (uint64_t)(a->o.start_timeout_s * 1e6);
    uint16_t port = 0;
    while (!read_port(ready, &port)) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            /* the launcher says why in its log (a rank's port taken, a model that does not load) */
            char why[1024];
            launcher_reason(logp, log_from, why, sizeof(why));
            pthread_mutex_lock(&a->mu);
            g->pid = 0;
            g->state = ACT_ST_FAILED;
            pthread_mutex_unlock(&a->mu);
            snprintf(detail, len, "the worker exited during startup (%s %d)%s%s; see %s",
                     WIFSIGNALED(status) ? "signal" : "code",
                     WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status),
                     why[0] ? ": " : "", why, logp);
            return TDM_ERR_PEER;
        }
        if (tdm_time_mono_us() > deadline || tdm_act_sleep(a, 100)) {
            snprintf(detail, len, "no ready file from the worker within %.0f s",
                     a->o.start_timeout_s);
            return TDM_ERR_TIMEOUT;
        }
    }
    pthread_mutex_lock(&a->mu);
    g->port = port;
    snprintf(g->host, sizeof(g->host), "%s", worker_host(g));
    url_host(wh, sizeof(wh), g->host);
    snprintf(g->admin_url, sizeof(g->admin_url), "http://%s:%u", wh, port);
    pthread_mutex_unlock(&a->mu);
    record_write(a, g, g->admin_url);
    double left = (double)(deadline - tdm_time_mono_us()) / 1e6;
    if (!tdm_act_wait_ready(a, g->admin_url, left > 1 ? left : 1)) {
        snprintf(detail, len, "started (pid %d, %s) but not /ready in time", (int)pid,
                 g->admin_url);
        return TDM_ERR_TIMEOUT;
    }
    pthread_mutex_lock(&a->mu);
    g->state = ACT_ST_RUNNING;
    g->ready = 1;
    g->ready_mono = tdm_time_mono_us();
    pthread_mutex_unlock(&a->mu);
    snprintf(detail, len, "started pid %d at %s", (int)pid, g->admin_url);
    return TDM_OK;
}

/* ---- failed starts (docs/groups.md "Failed starts") ----------------------------------------- */

/* The wait before retry number n (n ≥ 1): 1 s, doubling, at most --start-backoff-max. */
static uint64_t retry_backoff_us(const tdm_cp_act_t *a, unsigned n)
{
    double s = 1;
    for (unsigned i = 1; i < n && s < a->o.start_backoff_max_s; i++)
        s *= 2;
    return (uint64_t)((s < a->o.start_backoff_max_s ? s : a->o.start_backoff_max_s) * 1e6);
}

void tdm_act_super_reset_failures(act_group_t *g)
{
    g->start_failures = 0;
    g->retry_at_mono = 0;
    g->retry_at_us = 0;
    g->gave_up = 0;
}

enum { FAIL_NOW, FAIL_LATER, FAIL_GAVE_UP };

/* A failure of g (detail: why), counted: a start that failed (ready_s < 0), or an incarnation that
 * exited or was remedied ready_s seconds after it became /ready, less than --stable-window (a
 * crash loop). The group is FAILED with the reason as its health. Its next start: FAIL_NOW for the
 * first crash in a row (the restart after a crash stays immediate), else FAIL_LATER, scheduled
 * after the backoff (1 s, 2 s, 4 s ... at most --start-backoff-max; a crash's is one step behind,
 * its first wait being 0); past --start-retries failures in a row, FAIL_GAVE_UP: no retry, the
 * supervisor reports `worker_lost` (data.source `supervisor`, `gave_up` true) naming the count and
 * the last reason, so WORKER_LOST stays open on a group that cannot keep running. Caller holds mu.
 */
static int note_failure(tdm_cp_act_t *a, act_group_t *g, const char *detail, double ready_s)
{
    unsigned n = ++g->start_failures;
    g->ready = 0;
    g->ready_mono = 0;
    g->state = ACT_ST_FAILED;
    g->fail_ready_s = ready_s;
    /* printable ASCII only: the reason travels in JSON (status, audit params, the event) and part
     * of it is the launcher's log line, whatever bytes a path in it holds */
    snprintf(g->last_error, sizeof(g->last_error), "%s", detail);
    for (char *c = g->last_error; *c; c++)
        if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e)
            *c = '?';
    detail = g->last_error;
    snprintf(g->why, sizeof(g->why), "%s", detail);
    const char *what = ready_s < 0 ? "start failed" : "crashed soon after ready";
    if (n <= (unsigned)a->o.start_retries) {
        uint64_t wait = ready_s < 0 ? retry_backoff_us(a, n)
                        : n > 1     ? retry_backoff_us(a, n - 1)
                                    : 0;
        g->retry_at_mono = wait ? tdm_time_mono_us() + wait : 0;
        g->retry_at_us = wait ? tdm_time_wall_us() + wait : 0;
        g->gave_up = 0;
        tdm_warn(TDM_SUB_CP,
                 "msg=\"%s: retrying\" group=%s failures=%u retries=%d in_s=%.1f err=\"%s\"", what,
                 g->name, n, a->o.start_retries, (double)wait / 1e6, detail);
        return wait ? FAIL_LATER : FAIL_NOW;
    }
    g->retry_at_mono = 0;
    g->retry_at_us = 0;
    g->gave_up = 1;
    char reason[TDM_TM_REASON_MAX + 1];
    snprintf(reason, sizeof(reason), "%s %u times in a row, no more retries: %.190s",
             ready_s < 0 ? "start failed" : "failed", n, detail);
    tdm_err(TDM_SUB_CP,
            "msg=\"%s %u times in a row: the group stays failed until an operator restarts it\" "
            "group=%s err=\"%s\"",
            ready_s < 0 ? "start failed" : "failed", n, g->name, detail);
    tdm_act_post(a, ACT_MSG_EVENT,
                 json_pack("{s:s,s:s,s:s,s:{s:i,s:s,s:i,s:b,s:s}}", "group", g->name, "type",
                           "worker_lost", "reason", reason, "data", "rank", 0, "source",
                           "supervisor", "start_failures", (int)n, "gave_up", 1, "error", detail),
                 NULL, NULL);
    return FAIL_GAVE_UP;
}

/* A start of g failed (detail: why): counted and retried (note_failure). */
static void start_failed(tdm_cp_act_t *a, act_group_t *g, const char *detail)
{
    pthread_mutex_lock(&a->mu);
    g->pid = 0;
    note_failure(a, g, detail, -1);
    pthread_mutex_unlock(&a->mu);
}

/* Seconds the current incarnation of g has been /ready, when less than --stable-window (its loss
 * now is a failure); < 0 when it never became /ready here (adopted) or has been for longer. */
static double short_lived(const tdm_cp_act_t *a, const act_group_t *g, uint64_t now)
{
    if (!g->ready_mono || now < g->ready_mono)
        return -1;
    double s = (double)(now - g->ready_mono) / 1e6;
    return s < a->o.stable_window_s ? s : -1;
}

int tdm_act_super_remedy_gate(tdm_cp_act_t *a, act_group_t *g, const char *actor, char *detail,
                              size_t len)
{
    if (g->kind != ACT_KIND_SUPERVISED)
        return 1;
    uint64_t now = tdm_time_mono_us();
    /* a lost group's remedy (WORKER_LOST) soon after /ready is a crash in a row; other remedies
     * (a wedge, a divergence) are not counted, only held back by a retry due or a give-up */
    if (!g->gave_up && !g->retry_at_mono) {
        double s = strcmp(actor, "policy:WORKER_LOST") ? -1 : short_lived(a, g, now);
        if (s < 0)
            return 1;
        char what[600];
        snprintf(what, sizeof(what), "crashed after %.1f s ready: remedied by %s", s, actor);
        if (note_failure(a, g, what, s) == FAIL_NOW)
            return 1;
    }
    if (g->gave_up)
        snprintf(detail, len,
                 "not restarted: the supervisor gave up after %u failures in a row (last: %.300s); "
                 "an operator's restart starts over",
                 g->start_failures, g->last_error);
    else
        snprintf(detail, len,
                 "not restarted now: the supervisor's retry %u of %d is due in %.1f s (last "
                 "failure: %.300s)",
                 g->start_failures, a->o.start_retries,
                 g->retry_at_mono > now ? (double)(g->retry_at_mono - now) / 1e6 : 0.0,
                 g->last_error);
    return 0;
}

/* A start, counted: one that failed is retried
 * (start_failed). A launcher still running without becoming /ready in time is stopped first, so
 * the retry starts clean. A start abandoned because tandemd is stopping counts for nothing (the
 * launcher, if any, is re-adopted by the next tandemd). */
tdm_status_t tdm_act_super_start(tdm_cp_act_t *a, act_group_t *g, char *detail, size_t len)
{
    tdm_status_t st = start_once(a, g, detail, len);
    pthread_mutex_lock(&a->mu);
    int stopping = a->stop;
    if (st == TDM_OK) { /* the failures are forgotten once it stays ready (tdm_act_super_reap) */
        g->retry_at_mono = 0;
        g->retry_at_us = 0;
        g->gave_up = 0;
    }
    pthread_mutex_unlock(&a->mu);
    if (st == TDM_OK || stopping)
        return st;
    if (g->pid > 0) {
        char d[256];
        tdm_act_super_stop(a, g, d, sizeof(d));
        size_t off = strlen(detail);
        if (off + 1 < len)
            snprintf(detail + off, len - off, "; %s", d);
    }
    start_failed(a, g, detail);
    return st;
}

/* Gone: reaped (child) or no longer the recorded process (adopted). */
static int gone(act_group_t *g, int *status)
{
    if (g->child) {
        pid_t r = waitpid(g->pid, status, WNOHANG);
        if (r == g->pid)
            return 1;
        if (r == 0)
            return 0;
        /* ECHILD: reaped elsewhere (or not ours after all): fall back to /proc */
    }
    return proc_starttime(g->pid) != g->starttime;
}

tdm_status_t tdm_act_super_stop(tdm_cp_act_t *a, act_group_t *g, char *detail, size_t len)
{
    if (g->pid <= 0) {
        snprintf(detail, len, "not running");
        return TDM_OK;
    }
    int status = 0;
    if (gone(g, &status)) {
        g->pid = 0;
        snprintf(detail, len, "had already exited");
        return TDM_OK;
    }
    /* a stop tandemd asks for is not a loss: its ranks are retired at once, without waiting
     * for their `shutdown` events, which sit behind unacknowledged batches while the database
     * is down (docs/alerts.md WORKER_LOST) */
    tdm_act_post(a, ACT_MSG_EVENT, json_pack("{s:s,s:s}", "group", g->name, "type", "planned_stop"),
                 NULL, NULL);
    kill(g->pid, SIGTERM);
    uint64_t deadline = tdm_time_mono_us() + 15000000u;
    int killed = 0;
    while (!gone(g, &status)) {
        if (!killed && tdm_time_mono_us() > deadline) {
            kill(-g->pid, SIGKILL); /* its session: the launcher and every rank */
            kill(g->pid, SIGKILL);
            killed = 1;
        }
        usleep(50000);
    }
    snprintf(detail, len, "stopped pid %d%s", (int)g->pid, killed ? " (SIGKILL after 15 s)" : "");
    pthread_mutex_lock(&a->mu);
    g->pid = 0;
    g->ready = 0;
    g->ready_mono = 0;
    g->state = ACT_ST_STOPPED;
    pthread_mutex_unlock(&a->mu);
    return TDM_OK;
}

/* 1 when an action for `group` is queued or running (its next start is that action). Caller holds
 * mu. */
static int is_for(const act_req_t *r, const char *group)
{
    const char *g = json_string_value(json_object_get(r->request, "group"));
    return g && !strcmp(g, group);
}

static int action_pending(const tdm_cp_act_t *a, const char *group)
{
    if (a->current && is_for(a->current, group))
        return 1;
    for (const act_req_t *r = a->q_head; r; r = r->next)
        if (is_for(r, group))
            return 1;
    return 0;
}

/* 1 when a start, restart or reconfigure of `group` is queued (it is the group's next start). */
static int start_queued(const tdm_cp_act_t *a, const char *group)
{
    for (const act_req_t *r = a->q_head; r; r = r->next) {
        const char *what = json_string_value(json_object_get(r->request, "action"));
        if (is_for(r, group) && what &&
            (!strcmp(what, "start") || !strcmp(what, "restart") || !strcmp(what, "reconfigure")))
            return 1;
    }
    return 0;
}

/* Appends a request to the executor's queue (taking the reference to request) and wakes the
 * executor. The caller holds a->mu, or the executor thread does not run yet. */
void tdm_act_queue_push(tdm_cp_act_t *a, const char *actor, json_t *request,
                        tdm_cp_act_done_fn done, void *ctx)
{
    act_req_t *r = tdm_calloc(1, sizeof(*r));
    snprintf(r->actor, sizeof(r->actor), "%s", actor);
    r->request = request;
    r->done = done;
    r->ctx = ctx;
    r->created_us = tdm_time_wall_us();
    if (a->q_tail)
        a->q_tail->next = r;
    else
        a->q_head = r;
    a->q_tail = r;
    pthread_cond_broadcast(&a->cv);
}

static void enqueue_restart(tdm_cp_act_t *a, act_group_t *g, const char *reason)
{
    tdm_act_queue_push(a, "supervisor",
                       json_pack("{s:s,s:s,s:{s:s}}", "action", "restart", "group", g->name,
                                 "params", "reason", reason),
                       NULL, NULL);
}

void tdm_act_super_reap(tdm_cp_act_t *a)
{
    pthread_mutex_lock(&a->mu);
    uint64_t now = tdm_time_mono_us();
    for (size_t i = 0; i < a->n_groups; i++) {
        act_group_t *g = &a->groups[i];
        int status = 0;
        /* ready for --stable-window: the failures in a row are forgotten */
        if (g->kind == ACT_KIND_SUPERVISED && g->start_failures && g->state == ACT_ST_RUNNING &&
            !g->busy && g->ready_mono && now >= g->ready_mono &&
            (double)(now - g->ready_mono) / 1e6 >= a->o.stable_window_s) {
            tdm_info(TDM_SUB_CP,
                     "msg=\"ready for --stable-window: failures forgotten\" group=%s failures=%u "
                     "window_s=%.1f",
                     g->name, g->start_failures, a->o.stable_window_s);
            tdm_act_super_reset_failures(g);
        }
        /* a failure's retry, once its backoff has passed and nothing else is under way for the
         * group (an action queued or running is its next start); a launcher still running (a
         * remedy held back) is stopped by the restart */
        if (g->kind == ACT_KIND_SUPERVISED && g->retry_at_mono && now >= g->retry_at_mono &&
            !g->busy && !action_pending(a, g->name)) {
            char reason[700];
            snprintf(reason, sizeof(reason), "retry %u of %d after %s: %.600s", g->start_failures,
                     a->o.start_retries,
                     g->fail_ready_s < 0 ? "a failed start" : "a crash soon after ready",
                     g->last_error);
            g->retry_at_mono = 0;
            g->retry_at_us = 0;
            tdm_info(TDM_SUB_CP, "msg=\"retrying after a failure\" group=%s retry=%u of %d",
                     g->name, g->start_failures, a->o.start_retries);
            enqueue_restart(a, g, reason);
            continue;
        }
        if (g->kind != ACT_KIND_SUPERVISED || g->busy || g->pid <= 0 ||
            g->state == ACT_ST_STARTING || !gone(g, &status))
            continue;
        char reason[160];
        if (g->child && WIFSIGNALED(status))
            snprintf(reason, sizeof(reason), "launcher pid %d exited (signal %d)", (int)g->pid,
                     WTERMSIG(status));
        else if (g->child)
            snprintf(reason, sizeof(reason), "launcher pid %d exited (code %d)", (int)g->pid,
                     WEXITSTATUS(status));
        else
            snprintf(reason, sizeof(reason), "adopted launcher pid %d is gone", (int)g->pid);
        tdm_warn(TDM_SUB_CP, "msg=\"worker group exited\" group=%s reason=\"%s\"", g->name, reason);
        double ready_s = short_lived(a, g, now);
        g->pid = 0;
        g->ready = 0;
        g->ready_mono = 0;
        g->state = ACT_ST_FAILED;
        snprintf(g->why, sizeof(g->why), "%s", reason);
        /* WORKER_LOST at once, then the supervisor's restart (Restart= semantics) */
        tdm_act_post(a, ACT_MSG_EVENT,
                     json_pack("{s:s,s:s,s:s,s:{s:i,s:s}}", "group", g->name, "type", "worker_lost",
                               "reason", reason, "data", "rank", 0, "source", "supervisor"),
                     NULL, NULL);
        /* no restart of its own when a retry is scheduled (a remedy held back by the backoff)
         * or the supervisor gave up */
        if (g->retry_at_mono || g->gave_up)
            continue;
        /* an exit less than --stable-window after /ready is a failure in a row (a crash loop):
         * the first restart is at once, the next ones back off, then the supervisor gives up;
         * counted here even when a remedy's restart is queued (that one then finds it counted) */
        if (ready_s >= 0) {
            char what[300];
            snprintf(what, sizeof(what), "crashed after %.1f s ready: %s", ready_s, reason);
            if (note_failure(a, g, what, ready_s) != FAIL_NOW)
                continue;
            snprintf(reason, sizeof(reason), "%.159s", what);
        }
        /* a restart already queued (a remedy's) is the group's next start */
        if (start_queued(a, g->name))
            continue;
        enqueue_restart(a, g, reason);
    }
    pthread_mutex_unlock(&a->mu);
}
