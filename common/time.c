/* time.c — the one clock helper that is not inline. */
#include "config.h"

#include <errno.h>

#include <tdm/time.h>

void tdm_time_sleep_us(uint64_t us)
{
    struct timespec ts = {.tv_sec = (time_t)(us / 1000000u),
                          .tv_nsec = (long)(us % 1000000u) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}
