/*
 * act_sdbus.c — restart a worker unit through systemd over sd-bus (docs/design.md §5, §8): the
 * org.freedesktop.systemd1.Manager.RestartUnit(name, "replace") call, on this host's system bus
 * or another host's (sd_bus_open_system_remote, what `systemctl -H` uses). The call is described
 * as data first (tdm_cp_sdbus_restart_call) and built into a message separately, so the message
 * can be checked on any bus, a private one in the tests included.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <systemd/sd-bus.h>

#include "controlplane/act/act.h"

/* systemd's unit-name rules: [A-Za-z0-9:_.\-\\@], at most 255 bytes, "prefix@instance.service"
 * with a non-empty prefix. */
static int unit_name_ok(const char *u)
{
    size_t n = strlen(u);
    static const char suffix[] = ".service";
    if (n <= sizeof(suffix) - 1 || n > 255 || strcmp(u + n - (sizeof(suffix) - 1), suffix) != 0)
        return 0;
    if (u[0] == '@' || u[0] == '.')
        return 0;
    int ats = 0;
    for (size_t i = 0; i < n; i++) {
        char c = u[i];
        if (c == '@')
            ats++;
        else if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   c == ':' || c == '_' || c == '.' || c == '-' || c == '\\'))
            return 0;
    }
    return ats <= 1;
}

tdm_status_t tdm_cp_sdbus_restart_call(const char *unit, tdm_cp_sdbus_call_t *ret, char *err,
                                       size_t err_len)
{
    if (!unit || !unit_name_ok(unit)) {
        snprintf(err, err_len, "unit \"%.64s\" is not a valid systemd service unit name",
                 unit ? unit : "");
        return TDM_ERR_INVAL;
    }
    tdm_cp_sdbus_call_t c = {
        .destination = "org.freedesktop.systemd1",
        .path = "/org/freedesktop/systemd1",
        .interface = "org.freedesktop.systemd1.Manager",
        .member = "RestartUnit",
        .signature = "ss",
        .mode = "replace",
    };
    snprintf(c.unit, sizeof(c.unit), "%s", unit);
    *ret = c;
    return TDM_OK;
}

tdm_status_t tdm_cp_sdbus_message(void *bus, const tdm_cp_sdbus_call_t *c, void **ret_msg,
                                  char *err, size_t err_len)
{
    sd_bus_message *m = NULL;
    int r =
        sd_bus_message_new_method_call(bus, &m, c->destination, c->path, c->interface, c->member);
    if (r >= 0)
        r = sd_bus_message_append(m, c->signature, c->unit, c->mode);
    if (r < 0) {
        snprintf(err, err_len, "building %s(%s): %s", c->member, c->unit, strerror(-r));
        sd_bus_message_unref(m);
        return TDM_ERR_INVAL;
    }
    *ret_msg = m;
    return TDM_OK;
}

tdm_status_t tdm_cp_sdbus_restart_unit(const char *host, const char *unit, char *err,
                                       size_t err_len)
{
    tdm_cp_sdbus_call_t c;
    tdm_status_t st = tdm_cp_sdbus_restart_call(unit, &c, err, err_len);
    if (st != TDM_OK)
        return st;
    sd_bus *bus = NULL;
    int r;
    if (host && *host) {
        r = sd_bus_open_system_remote(&bus, host);
    } else {
        /* the same test sd_booted()-style tools use: no system bus socket, no systemd to ask */
        const char *addr = getenv("DBUS_SYSTEM_BUS_ADDRESS");
        if ((!addr || !*addr) && access("/run/dbus/system_bus_socket", F_OK) != 0) {
            snprintf(err, err_len, "no system bus on this host (/run/dbus/system_bus_socket)");
            return TDM_ERR_UNSUPPORTED;
        }
        r = sd_bus_open_system(&bus);
    }
    if (r < 0) {
        snprintf(err, err_len, "cannot connect to the system bus%s%s: %s",
                 host && *host ? " of " : "", host && *host ? host : "", strerror(-r));
        return TDM_ERR_IO;
    }
    sd_bus_message *m = NULL, *reply = NULL;
    sd_bus_error e = SD_BUS_ERROR_NULL;
    st = tdm_cp_sdbus_message(bus, &c, (void **)&m, err, err_len);
    if (st == TDM_OK) {
        r = sd_bus_call(bus, m, 30 * 1000000ull, &e, &reply);
        if (r < 0) {
            snprintf(err, err_len, "RestartUnit(%s): %s", unit,
                     e.message ? e.message : strerror(-r));
            st = TDM_ERR_IO;
        }
    }
    sd_bus_error_free(&e);
    sd_bus_message_unref(reply);
    sd_bus_message_unref(m);
    sd_bus_flush_close_unref(bus);
    return st;
}
