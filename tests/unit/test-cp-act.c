/*
 * test-cp-act.c — the pure parts of controlplane actions: reconfigure's config versions (checks,
 * merge, the override INI the worker reads, and that tdm/params.h layers it as intended), the
 * RestartUnit call and its sd-bus message (built on a private dbus-daemon when one can be
 * started; the live call is skipped without a system bus), the Prometheus reader the drain
 * uses, and the one-remedy-per-group rule of policy actions.
 */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <systemd/sd-bus.h>

#include <tdm/config.h>
#include <tdm/params.h>

#include "controlplane/act/act.h"
#include "controlplane/act/act_int.h"
#include "tap.h"

static void test_merge(void)
{
    char err[256];
    json_t *out = NULL;
    json_t *req = json_pack("{s:s,s:s}", "overlap", "off", "kv_cache_dtype", "fp8_e4m3");
    ok(tdm_cp_act_config_merge(NULL, req, &out, err, sizeof(err)) == TDM_OK, "merge onto empty");
    json_t *req2 = json_pack("{s:s,s:i}", "overlap", "on", "max_running_requests", 8);
    json_t *out2 = NULL;
    ok(tdm_cp_act_config_merge(out, req2, &out2, err, sizeof(err)) == TDM_OK, "merge onto v1");
    ok(!strcmp(json_string_value(json_object_get(out2, "overlap")), "on") &&
           !strcmp(json_string_value(json_object_get(out2, "kv_cache_dtype")), "fp8_e4m3") &&
           json_integer_value(json_object_get(out2, "max_running_requests")) == 8,
       "later settings win, earlier ones stay");
    ok(!strcmp(json_string_value(json_object_get(out, "overlap")), "off"),
       "the base version is not modified");

    const char *bad[] = {"{\"overlap\":\"maybe\"}",
                         "{\"kv_cache_dtype\":\"fp4\"}",
                         "{\"max_running_requests\":-1}",
                         "{\"max_running_requests\":1.5}",
                         "{\"health_progress_timeout\":0}",
                         "{\"tp_size\":2}",
                         "{}",
                         "[]"};
    const char *word[] = {"overlap",
                          "kv_cache_dtype",
                          "max_running_requests",
                          "max_running_requests",
                          "health_progress_timeout",
                          "tp_size",
                          "non-empty",
                          "non-empty"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_t *b = json_loads(bad[i], 0, NULL);
        json_t *o = NULL;
        err[0] = '\0';
        tdm_status_t st = tdm_cp_act_config_merge(NULL, b, &o, err, sizeof(err));
        ok(st == TDM_ERR_INVAL && o == NULL && strstr(err, word[i]), "refused %s (%s)", bad[i],
           err);
        json_decref(b);
    }

    char *ini = tdm_cp_act_config_ini(out2);
    ok(ini && strstr(ini, "disable_overlap_schedule = false\n") &&
           strstr(ini, "kv_cache_dtype = fp8_e4m3\n") && strstr(ini, "max_running_requests = 8\n"),
       "override INI uses the worker's tunable names");
    free(ini);
    ini = tdm_cp_act_config_ini(out);
    ok(ini && strstr(ini, "disable_overlap_schedule = true\n"), "overlap=off → disable = true");

    /* the worker's own loader: base file sets overlap on, the override turns it off, CLI wins */
    char dir[] = "/tmp/test-cp-act-XXXXXX";
    ok(mkdtemp(dir) != NULL, "temp dir");
    char base[128], ovr[128];
    snprintf(base, sizeof(base), "%s/base.ini", dir);
    snprintf(ovr, sizeof(ovr), "%s/override.ini", dir);
    FILE *f = fopen(base, "w");
    fputs("disable_overlap_schedule = \"false\"\nkv_cache_dtype = \"bf16\"\ntp_size = \"2\"\n", f);
    fclose(f);
    f = fopen(ovr, "w");
    fputs(ini, f);
    fclose(f);
    free(ini);
    tdm_worker_config_t cfg;
    tdm_params_t *p = NULL;
    char a0[] = "tandem-worker", a1[] = "--config", a3[] = "--override-config";
    char *argv[] = {a0, a1, base, a3, ovr, NULL};
    tdm_status_t st = tdm_params_init(&tdm_worker_config_table, &cfg, &p, err, sizeof(err));
    if (st == TDM_OK)
        st = tdm_params_load(p, 5, argv, NULL, err, sizeof(err));
    ok(st == TDM_OK && cfg.disable_overlap_schedule == 1 &&
           !strcmp(cfg.kv_cache_dtype, "fp8_e4m3") && cfg.tp_size == 2,
       "worker params: override beats base, base keeps the rest (%s)", st == TDM_OK ? "" : err);
    tdm_params_free(p);
    unlink(base);
    unlink(ovr);
    rmdir(dir);
    json_decref(out);
    json_decref(out2);
    json_decref(req);
    json_decref(req2);
}

static void test_sdbus(void)
{
    char err[256];
    tdm_cp_sdbus_call_t c;
    ok(tdm_cp_sdbus_restart_call("tandem-worker@decode-a.service", &c, err, sizeof(err)) == TDM_OK,
       "RestartUnit call for a template instance");
    ok(!strcmp(c.destination, "org.freedesktop.systemd1") &&
           !strcmp(c.path, "/org/freedesktop/systemd1") &&
           !strcmp(c.interface, "org.freedesktop.systemd1.Manager") &&
           !strcmp(c.member, "RestartUnit") && !strcmp(c.signature, "ss") &&
           !strcmp(c.unit, "tandem-worker@decode-a.service") && !strcmp(c.mode, "replace"),
       "call fields: systemd1 Manager.RestartUnit(ss) unit, replace");
    const char *bad[] = {"",
                         "tandem-worker@x",
                         "@x.service",
                         "a b.service",
                         "x@y@z.service",
                         "tandem-worker@x.socket",
                         "x;rm.service"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ok(tdm_cp_sdbus_restart_call(bad[i], &c, err, sizeof(err)) == TDM_ERR_INVAL,
           "unit name \"%s\" refused", bad[i]);

    /* The message, built on a private bus (dbus-daemon --session), read back field by field. */
    int fds[2];
    pid_t pid = -1;
    char addr[512] = "";
    if (access("/usr/bin/dbus-daemon", X_OK) == 0 && pipe(fds) == 0) {
        pid = fork();
        if (pid == 0) {
            dup2(fds[1], 1);
            close(fds[0]);
            execl("/usr/bin/dbus-daemon", "dbus-daemon", "--session", "--nofork", "--print-address",
                  (char *)NULL);
            _exit(127);
        }
        close(fds[1]);
        FILE *f = fdopen(fds[0], "r");
        if (!f || !fgets(addr, sizeof(addr), f))
            addr[0] = '\0';
        addr[strcspn(addr, "\n")] = '\0';
        if (f)
            fclose(f);
    }
    if (!addr[0]) {
        for (int i = 0; i < 4; i++)
            skip("no private dbus-daemon could be started");
    } else {
        sd_bus *bus = NULL;
        int r = sd_bus_new(&bus);
        if (r >= 0)
            r = sd_bus_set_address(bus, addr);
        if (r >= 0)
            r = sd_bus_set_bus_client(bus, 1);
        if (r >= 0)
            r = sd_bus_start(bus);
        ok(r >= 0, "connected to a private bus at %s", addr);
        tdm_cp_sdbus_restart_call("tandem-worker@decode-a.service", &c, err, sizeof(err));
        sd_bus_message *m = NULL;
        ok(r >= 0 && tdm_cp_sdbus_message(bus, &c, (void **)&m, err, sizeof(err)) == TDM_OK,
           "message built");
        const char *u = NULL, *mode = NULL;
        ok(m && !strcmp(sd_bus_message_get_destination(m), "org.freedesktop.systemd1") &&
               !strcmp(sd_bus_message_get_member(m), "RestartUnit") &&
               !strcmp(sd_bus_message_get_interface(m), "org.freedesktop.systemd1.Manager") &&
               !strcmp(sd_bus_message_get_path(m), "/org/freedesktop/systemd1"),
           "header: destination, path, interface, member");
        if (m) {
            sd_bus_message_seal(m, 1, 0);
            sd_bus_message_rewind(m, 1);
        }
        ok(m && sd_bus_message_read(m, "ss", &u, &mode) >= 0 && u &&
               !strcmp(u, "tandem-worker@decode-a.service") && mode && !strcmp(mode, "replace"),
           "body: (ss) unit, \"replace\"");
        sd_bus_message_unref(m);
        sd_bus_flush_close_unref(bus);
    }
    if (pid > 0) {
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
    }
    if (access("/run/dbus/system_bus_socket", F_OK) != 0) {
        tdm_status_t st =
            tdm_cp_sdbus_restart_unit(NULL, "tandem-worker@none.service", err, sizeof(err));
        ok(st == TDM_ERR_UNSUPPORTED && strstr(err, "no system bus"),
           "no system bus here: the live call says so (%s)", err);
    } else {
        skip("a system bus exists; not restarting units from a unit test");
    }
}

static void test_metric(void)
{
    const char *t = "# HELP tandem_drained 1 when a drain has completed\n"
                    "# TYPE tandem_drained gauge\n"
                    "tandem_drained 1\n"
                    "tandem_drained_x 5\n"
                    "tandem_requests_running 3\n"
                    "tandem_rank_iter{rank=\"0\"} 7\n";
    ok(tdm_act_metric(t, "tandem_drained") == 1, "gauge read");
    ok(tdm_act_metric(t, "tandem_requests_running") == 3, "second gauge");
    ok(tdm_act_metric(t, "tandem_requests_waiting") == -1, "absent → -1");
    ok(tdm_act_metric("", "tandem_drained") == -1, "empty text");
}

static act_req_t *req(const char *actor, const char *group)
{
    act_req_t *r = calloc(1, sizeof(*r));
    snprintf(r->actor, sizeof(r->actor), "%s", actor);
    r->request = json_pack("{s:s,s:s}", "action", "reconfigure", "group", group);
    return r;
}

/* One remedy per group at a time: a policy action running or queued on the group makes further
 * remedies for it skip; operator and supervisor actions, and other groups, do not. */
static void test_remedy_in_progress(void)
{
    static tdm_cp_act_t a; /* large: not on the stack */
    ok(tdm_act_remedy_in_progress(&a, "b") == NULL, "idle executor: no remedy in progress");
    a.current = req("admin", "b");
    a.q_head = req("supervisor", "b");
    a.q_head->next = req("policy:WEDGE", "a");
    ok(tdm_act_remedy_in_progress(&a, "b") == NULL,
       "operator and supervisor actions on b, a remedy on a: b has no remedy in progress");
    const char *by = tdm_act_remedy_in_progress(&a, "a");
    ok(by && !strcmp(by, "policy:WEDGE"), "a remedy queued on a is found (%s)", by ? by : "-");
    act_req_t *cur = a.current;
    a.current = req("policy:RANK_DIVERGENCE", "b");
    by = tdm_act_remedy_in_progress(&a, "b");
    ok(by && !strcmp(by, "policy:RANK_DIVERGENCE"), "the running remedy on b is found (%s)",
       by ? by : "-");
    ok(tdm_act_remedy_in_progress(&a, "c") == NULL, "a group nobody acts on: none");
    act_req_t *all[] = {cur, a.current, a.q_head->next, a.q_head};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        json_decref(all[i]->request);
        free(all[i]);
    }
    a.current = a.q_head = NULL;
}

int main(void)
{
    plan(39);
    test_merge();
    test_sdbus();
    test_metric();
    test_remedy_in_progress();
    return exit_status();
}
