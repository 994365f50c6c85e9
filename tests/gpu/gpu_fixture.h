/*
 * tests/gpu/gpu_fixture.h — a fixture checkpoint (DIR/models/NAME) and its one-rank view, for the
 * GPU tests that run the executor's adapter on the fixtures.
 */
#ifndef TDM_TESTS_GPU_FIXTURE_H
#define TDM_TESTS_GPU_FIXTURE_H

#include <stdio.h>

#include <tdm/model.h>

#include "tap.h"

/* 1 with *m and *view ready (release with tdm_model_view_free, tdm_model_free); 0 after a failed
 * TAP line naming the reason, nothing held. */
static inline int gpu_fixture_load(const char *dir, const char *name, tdm_model_t **m,
                                   tdm_model_view_t *view)
{
    char path[1200], err[256] = "";
    *m = NULL;
    snprintf(path, sizeof(path), "%.1000s/models/%.64s", dir, name);
    if (tdm_model_load(path, m, err, sizeof(err)) != TDM_OK ||
        tdm_model_view_init(*m, 1, 0, view, err, sizeof(err)) != TDM_OK) {
        ok(0, "%s: load (%s)", name, err);
        tdm_model_free(*m);
        *m = NULL;
        return 0;
    }
    return 1;
}

#endif
