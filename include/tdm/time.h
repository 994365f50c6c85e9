/*
 * tdm/time.h — clocks. Monotonic time for timeouts and progress stamps; wall time (µs since the
 * epoch) for telemetry and the database (docs/design.md §6). Detectors take time as an argument so
 * tests can drive a virtual clock.
 */
#ifndef TDM_TIME_H
#define TDM_TIME_H

#include <stdint.h>
#include <time.h>

static inline uint64_t tdm_time_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t tdm_time_mono_us(void)
{
    return tdm_time_mono_ns() / 1000u;
}

static inline uint64_t tdm_time_wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000ull + (uint64_t)ts.tv_nsec / 1000u;
}

/* Sleep for `us` microseconds, resuming after signals. */
void tdm_time_sleep_us(uint64_t us);

#endif
