/*
 * controlplane/ctl/ctl_plan.h — `tandemctl plan`: the systemd layout of one host's P/D groups,
 * offline.
 *
 * Given the host's GPUs, it splits them into a prefill side and a decode side (N/2 each unless
 * --prefill-gpus/--decode-gpus say otherwise), cuts each side into TP groups, and prints per group
 * the unit (tandem-worker@<group>.service), the INI that unit reads
 * (/etc/tandem/worker-<group>.conf, docs/contracts.md §a keys, [worker] section) and the `systemctl
 * enable
 * --now` lines. Ports follow docs/contracts.md §b: decode group k HTTP 30000+2k, prefill group k
 * HTTP 30001+2k and bootstrap 8998+k.
 *
 * Every emitted key/value is first resolved through the worker's own parameter table
 * (tdm_worker_config_table), so a plan can only contain flags and values tandem-worker accepts.
 *
 * Needs no server. Prints the plan on `out`, errors on `err`; returns the exit status
 * (0, or 2 for bad options, each with a message naming the option and the rule).
 */
#ifndef TDM_CP_PLAN_H
#define TDM_CP_PLAN_H

#include <stdio.h>

int tdm_cp_plan_main(int argc, char **argv, int json_out, FILE *out, FILE *err);

#endif
