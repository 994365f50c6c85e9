/*
 * act_fault.c — the audited fault route (docs/contracts.md §e): POST /api/v1/groups/{g}/faults
 * (admin) is an action like a drain. The executor forwards a worker fault point to the group's
 * `POST /admin/faults` with the group's admin token; the `signal` point tandemd carries out
 * itself on a group it supervises (a signal to rank R's process, the launcher's child started
 * with `--rank R`). Either way the audit row's finished_us is when the fault was in effect (the
 * worker answered that it armed it, or kill(2) returned): chaos figures measure detection from
 * it (tests/chaos/).
 */
#include "config.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/mem.h>

#include "controlplane/act/act_int.h"

static const struct {
    const char *name;
    int sig;
} signals[] = {{"KILL", SIGKILL}, {"STOP", SIGSTOP}, {"CONT", SIGCONT}, {"TERM", SIGTERM}};

static int signal_of(const char *name)
{
    for (size_t i = 0; name && i < sizeof(signals) / sizeof(signals[0]); i++)
        if (!strcmp(signals[i].name, name))
            return signals[i].sig;
    return 0;
}

tdm_status_t tdm_act_fault_check(const json_t *params, int supervised, char *err, size_t err_len)
{
    const char *name = json_string_value(json_object_get(params, "name"));
    if (!json_is_object(params) || !name) {
        snprintf(err, err_len,
                 "the body must be a fault: {\"name\", \"rank\", ...} "
                 "(docs/contracts.md §e)");
        return TDM_ERR_INVAL;
    }
    if (strcmp(name, "signal") != 0)
        return TDM_OK; /* the worker checks its own points and answers 400 naming the field */
    const char *keys[] = {"name", "rank", "signal"};
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)params, k, v)
    {
        size_t i = 0;
        while (i < 3 && strcmp(keys[i], k))
            i++;
        if (i == 3) {
            snprintf(err, err_len, "%.64s: the signal fault takes rank and signal only", k);
            return TDM_ERR_INVAL;
        }
    }
    json_t *rank = json_object_get(params, "rank");
    if (!json_is_integer(rank) || json_integer_value(rank) < 0 || json_integer_value(rank) > 1023) {
        snprintf(err, err_len, "rank: an integer 0..1023");
        return TDM_ERR_INVAL;
    }
    if (!signal_of(json_string_value(json_object_get(params, "signal")))) {
        snprintf(err, err_len, "signal: one of KILL, STOP, CONT, TERM");
        return TDM_ERR_INVAL;
    }
    if (!supervised) {
        snprintf(err, err_len,
                 "the signal fault needs a group tandemd supervises (it signals "
                 "the rank's process)");
        return TDM_ERR_UNSUPPORTED;
    }
    return TDM_OK;
}

/* The pid of the child of `parent` whose command line ends in "--rank R", or 0. */
static pid_t rank_pid(pid_t parent, long rank)
{
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    pid_t found = 0;
    struct dirent *e;
    char path[300], want[32];
    snprintf(want, sizeof(want), "%ld", rank);
    while (!found && (e = readdir(d))) {
        if (!isdigit((unsigned char)e->d_name[0]))
            continue;
        snprintf(path, sizeof(path), "/proc/%.20s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        char buf[512];
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        const char *rp = strrchr(buf, ')'); /* comm may hold spaces */
        int ppid = 0;
        char st;
        if (!rp || sscanf(rp + 1, " %c %d", &st, &ppid) != 2 || ppid != parent)
            continue;
        snprintf(path, sizeof(path), "/proc/%.20s/cmdline", e->d_name);
        f = fopen(path, "r");
        if (!f)
            continue;
        char cmd[8192];
        n = fread(cmd, 1, sizeof(cmd) - 1, f);
        fclose(f);
        cmd[n] = '\0';
        /* NUL-separated arguments: the last two are "--rank" and R (dataplane/worker/launcher.c) */
        const char *args[64];
        size_t na = 0;
        for (size_t i = 0; i < n && na < 64; i += strlen(cmd + i) + 1)
            args[na++] = cmd + i;
        if (na >= 2 && !strcmp(args[na - 2], "--rank") && !strcmp(args[na - 1], want))
            found = (pid_t)atoi(e->d_name);
    }
    closedir(d);
    return found;
}

tdm_status_t tdm_act_do_fault(tdm_cp_act_t *a, act_group_t *g, const json_t *params, long *wstatus,
                              char *detail, size_t len)
{
    const char *name = json_string_value(json_object_get(params, "name"));
    *wstatus = 0;
    if (name && !strcmp(name, "signal")) {
        long rank = (long)json_integer_value(json_object_get(params, "rank"));
        const char *sname = json_string_value(json_object_get(params, "signal"));
        pthread_mutex_lock(&a->mu);
        pid_t launcher = g->pid;
        pthread_mutex_unlock(&a->mu);
        pid_t pid = launcher > 0 ? rank_pid(launcher, rank) : 0;
        if (!pid) {
            snprintf(detail, len, "no process of rank %ld under the launcher (pid %d)", rank,
                     (int)launcher);
            *wstatus = 409;
            return TDM_ERR_NOTFOUND;
        }
        if (kill(pid, signal_of(sname)) != 0) {
            snprintf(detail, len, "kill(%d, SIG%s): %s", (int)pid, sname, strerror(errno));
            return TDM_ERR_IO;
        }
        snprintf(detail, len, "SIG%s sent to rank %ld (pid %d)", sname, rank, (int)pid);
        return TDM_OK;
    }
    char url[512];
    pthread_mutex_lock(&a->mu);
    snprintf(url, sizeof(url), "%s/admin/faults", g->admin_url);
    char token[256];
    snprintf(token, sizeof(token), "%s", g->token);
    pthread_mutex_unlock(&a->mu);
    char *text = json_dumps(params, JSON_COMPACT | JSON_SORT_KEYS);
    char *body = NULL;
    long code = tdm_act_http("POST", url, token, text, 5000, &body);
    free(text);
    *wstatus = code;
    /* the worker's answer, one line, for the audit row */
    size_t n = 0;
    for (const char *p = body ? body : ""; *p && n + 1 < len; p++)
        detail[n++] = *p == '\n' ? ' ' : *p;
    detail[n] = '\0';
    tdm_free(body);
    if (code == 200)
        return TDM_OK;
    if (code < 0) {
        snprintf(detail, len, "POST %s: no answer", url);
        *wstatus = 502;
    }
    return TDM_ERR_PEER;
}
