/*
 * oneshot.h — tandem-worker's one-shot mode (docs/contracts.md §f): load a checkpoint, run one
 * prompt to completion on the CPU engine, print `{"ids","text","steps"}` as the last stdout line.
 *
 * Request flags (sampling, logprobs) are not worker tunables: tdm_oneshot_split_argv() moves
 * them and their values out of argv before the worker's params table sees it, and
 * tdm_oneshot_main() parses them with their own table (same parser, same error messages).
 */
#ifndef TDM_DATAPLANE_ONESHOT_H
#define TDM_DATAPLANE_ONESHOT_H

#include <stdio.h>

#include <tdm/config.h>

/* Split argv (argv[0] is copied to both): request flags to r_argv, the rest to w_argv. Both
 * arrays need argc + 1 slots. */
void tdm_oneshot_split_argv(int argc, char **argv, int *w_argc, char **w_argv, int *r_argc,
                            char **r_argv);
/* 1 if the worker config asks for one-shot mode (--prompt or --prompt-ids given). */
int tdm_oneshot_wanted(const tdm_worker_config_t *cfg);
/* Run it (device_given: --device was set explicitly; anything but cpu is refused). Returns the
 * process exit status: 0, 1 (runtime failure) or 2 (bad usage). */
int tdm_oneshot_main(const tdm_worker_config_t *cfg, int device_given, int r_argc, char **r_argv);
void tdm_oneshot_usage(FILE *out);

#endif
