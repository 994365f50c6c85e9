/*
 * test-mem.c — overflow-checked size math (every helper at and past its limits, outputs
 * untouched on failure) and the abort-on-OOM allocators, including the abort itself (in a
 * re-executed child so ASan can be told to return NULL instead of reporting).
 */
#include "config.h"

#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tdm/mem.h>

#include "tap.h"

static void test_math(void)
{
    size_t r = 7;
    is_int(tdm_size_add(1, 2, &r), TDM_OK, "add");
    is_u64(r, 3, "1 + 2");
    is_int(tdm_size_add(SIZE_MAX - 1, 1, &r), TDM_OK, "add up to SIZE_MAX");
    is_u64(r, SIZE_MAX, "SIZE_MAX reached");
    r = 7;
    is_int(tdm_size_add(SIZE_MAX, 1, &r), TDM_ERR_OVERFLOW, "add overflow");
    is_u64(r, 7, "output untouched on overflow");
    is_int(tdm_size_mul(0, SIZE_MAX, &r), TDM_OK, "0 * SIZE_MAX");
    is_u64(r, 0, "is 0");
    is_int(tdm_size_mul(SIZE_MAX / 2, 2, &r), TDM_OK, "mul at the edge");
    r = 7;
    is_int(tdm_size_mul(SIZE_MAX / 2 + 1, 2, &r), TDM_ERR_OVERFLOW, "mul overflow");
    is_int(tdm_size_mul((size_t)1 << 32, (size_t)1 << 32, &r), TDM_ERR_OVERFLOW,
           "2^32 * 2^32 overflows");
    is_u64(r, 7, "output untouched");
    is_int(tdm_size_muladd(3, 4, 5, &r), TDM_OK, "muladd");
    is_u64(r, 17, "3*4+5");
    is_int(tdm_size_muladd(SIZE_MAX, 2, 0, &r), TDM_ERR_OVERFLOW, "muladd: the product overflows");
    is_int(tdm_size_muladd(SIZE_MAX / 2, 2, 2, &r), TDM_ERR_OVERFLOW, "muladd: the sum overflows");
    is_int(tdm_size_align(0, 16, &r), TDM_OK, "align 0");
    is_u64(r, 0, "0 stays 0");
    tdm_size_align(1, 16, &r);
    is_u64(r, 16, "1 → 16");
    tdm_size_align(16, 16, &r);
    is_u64(r, 16, "16 stays 16");
    tdm_size_align(17, 4096, &r);
    is_u64(r, 4096, "17 → 4096");
    r = 7;
    is_int(tdm_size_align(SIZE_MAX - 3, 16, &r), TDM_ERR_OVERFLOW, "align overflow");
    is_int(tdm_size_align(5, 0, &r), TDM_ERR_INVAL, "align 0 refused");
    is_int(tdm_size_align(5, 24, &r), TDM_ERR_INVAL, "non-power-of-two refused");
    is_u64(r, 7, "output untouched");
}

static void test_alloc(void)
{
    char *p = tdm_malloc(0);
    ok(p != NULL, "malloc(0) returns a pointer");
    tdm_free(p);
    unsigned char *z = tdm_calloc(64, 4);
    int zero = 1;
    for (int i = 0; i < 256; i++)
        zero &= z[i] == 0;
    ok(zero, "calloc zeroes");
    z = tdm_realloc(z, 4096);
    z[4095] = 1;
    ok(z[0] == 0, "realloc keeps contents");
    tdm_free(z);
    tdm_free(NULL); /* must not crash: the run reaching the next check is the test */
    char *s = tdm_strdup("hello");
    is_str(s, "hello", "strdup");
    tdm_free(s);
    s = tdm_strndup("hello", 3);
    is_str(s, "hel", "strndup truncates");
    tdm_free(s);
    s = tdm_strndup("hi", 100);
    is_str(s, "hi", "strndup stops at the NUL");
    tdm_free(s);
}

/* Runs in a re-executed child: each must abort with a log line. */
static int child(const char *what)
{
    volatile void *p = NULL;
    if (!strcmp(what, "malloc"))
        p = tdm_malloc(SIZE_MAX / 2);
    else if (!strcmp(what, "calloc"))
        p = tdm_calloc(SIZE_MAX / 2, 4); /* count * size overflows */
    else if (!strcmp(what, "realloc"))
        p = tdm_realloc(NULL, SIZE_MAX / 2);
    (void)p;
    return 0; /* not reached when the allocator aborts */
}

static void test_oom(void)
{
    const char *whats[] = {"malloc", "calloc", "realloc"};
    for (size_t i = 0; i < 3; i++) {
        int p[2];
        char buf[512] = "";
        if (pipe(p) != 0)
            exit(1);
        pid_t pid = fork();
        if (pid == 0) {
            dup2(p[1], STDERR_FILENO);
            close(p[0]);
            setenv("ASAN_OPTIONS", "allocator_may_return_null=1:detect_leaks=0", 1);
            execl("/proc/self/exe", "test-mem", "--oom-child", whats[i], (char *)NULL);
            _exit(127);
        }
        close(p[1]);
        size_t n = 0;
        ssize_t r;
        while (n < sizeof(buf) - 1 && (r = read(p[0], buf + n, sizeof(buf) - 1 - n)) > 0)
            n += (size_t)r;
        buf[n] = '\0';
        close(p[0]);
        int status = 0;
        waitpid(pid, &status, 0);
        ok(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT && strstr(buf, "out of memory"),
           "tdm_%s aborts with a log line on OOM", whats[i]);
        if (!strstr(buf, "out of memory"))
            diag("child stderr: %s", buf);
    }
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--oom-child"))
        return child(argv[2]);
    test_math();
    test_alloc();
    test_oom();
    return done_testing();
}
