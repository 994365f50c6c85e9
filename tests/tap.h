/*
 * tests/tap.h — a minimal TAP producer for unit tests (header-only).
 *
 * plan(n) or done_testing(); ok(cond, fmt...); is_int/is_str/is_u64 print got/expected on failure;
 * skip_all(reason) prints "1..0 # SKIP reason" and exits 0 (GPU tests without a device only);
 * bail_out(reason) fails the test for a missing prerequisite. exit_status() is nonzero if any
 * failed.
 */
#ifndef TDM_TESTS_TAP_H
#define TDM_TESTS_TAP_H

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tap_n_ = 0;
static int tap_failed_ = 0;

static inline void plan(int n)
{
    printf("1..%d\n", n);
    fflush(stdout);
}

__attribute__((format(printf, 2, 3))) static inline int ok(int cond, const char *fmt, ...)
{
    va_list ap;
    tap_n_++;
    printf("%s %d - ", cond ? "ok" : "not ok", tap_n_);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    if (!cond)
        tap_failed_++;
    return cond;
}

__attribute__((format(printf, 1, 2))) static inline void diag(const char *fmt, ...)
{
    va_list ap;
    printf("# ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

__attribute__((format(printf, 1, 2))) static inline void skip(const char *fmt, ...)
{
    va_list ap;
    tap_n_++;
    printf("ok %d # SKIP ", tap_n_);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

/* A missing prerequisite outside the GPU tests is a failure, not a skip: "Bail out!" is an
 * ERROR for Automake's TAP driver. */
__attribute__((noreturn)) static inline void bail_out(const char *reason)
{
    printf("Bail out! %s\n", reason);
    fflush(stdout);
    exit(1);
}

__attribute__((noreturn)) static inline void skip_all(const char *reason)
{
    printf("1..0 # SKIP %s\n", reason);
    fflush(stdout);
    exit(0);
}

#define is_int(got, exp, ...)                                                                      \
    do {                                                                                           \
        long long g_ = (long long)(got), e_ = (long long)(exp);                                    \
        if (!ok(g_ == e_, __VA_ARGS__))                                                            \
            diag("  got %lld, expected %lld", g_, e_);                                             \
    } while (0)

#define is_u64(got, exp, ...)                                                                      \
    do {                                                                                           \
        uint64_t g_ = (uint64_t)(got), e_ = (uint64_t)(exp);                                       \
        if (!ok(g_ == e_, __VA_ARGS__))                                                            \
            diag("  got %" PRIu64 ", expected %" PRIu64, g_, e_);                                  \
    } while (0)

#define is_str(got, exp, ...)                                                                      \
    do {                                                                                           \
        const char *g_ = (got), *e_ = (exp);                                                       \
        if (!ok(g_ && e_ && strcmp(g_, e_) == 0, __VA_ARGS__))                                     \
            diag("  got \"%s\", expected \"%s\"", g_ ? g_ : "(null)", e_ ? e_ : "(null)");         \
    } while (0)

static inline int done_testing(void)
{
    printf("1..%d\n", tap_n_);
    fflush(stdout);
    return tap_failed_ ? 1 : 0;
}

static inline int exit_status(void)
{
    return tap_failed_ ? 1 : 0;
}

#endif
