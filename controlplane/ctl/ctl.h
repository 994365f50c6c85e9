/*
 * controlplane/ctl/ctl.h — tandemctl's parts: the command table and argument conventions
 * (tandemctl.c) and the human renderings of tandemd's JSON (ctl_render.c).
 *
 * Conventions (docs/contracts.md, "tandemctl"): help on stdout with exit 0, per command too
 * (`tandemctl help drain`, `tandemctl drain -h`), never a request when help is asked; global
 * flags before or after the command; an unknown command or flag is an error naming it (exit 2);
 * tables by default, `-o json` (alias `--json`) prints the server's JSON unchanged; a failed
 * request exits 1.
 */
#ifndef TDM_CP_CTL_H
#define TDM_CP_CTL_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

/* Rendering options: `all` shows earlier incarnations and resolved rows; `now_us` is the wall
 * clock the "12s ago" columns count from (a parameter so tests can pin it). */
typedef struct tdm_ctl_view {
    int all;
    uint64_t now_us;
} tdm_ctl_view_t;

/* "12s ago", "3m ago", "5h ago", "2d ago"; "-" for 0 (never). */
void tdm_ctl_fmt_ago(char *buf, size_t len, uint64_t now_us, uint64_t then_us);
/* Local time "2026-12-04 14:42:10"; "-" for 0. */
void tdm_ctl_fmt_local(char *buf, size_t len, uint64_t us);

void tdm_ctl_render_status(FILE *out, json_t *o, const tdm_ctl_view_t *v);
void tdm_ctl_render_alerts(FILE *out, json_t *o, const tdm_ctl_view_t *v);
void tdm_ctl_render_actions(FILE *out, json_t *o, const tdm_ctl_view_t *v);
void tdm_ctl_render_transfers(FILE *out, json_t *o, const tdm_ctl_view_t *v);
void tdm_ctl_render_trace(FILE *out, json_t *o, const tdm_ctl_view_t *v);
void tdm_ctl_render_tokens(FILE *out, json_t *o, const tdm_ctl_view_t *v);

#endif
