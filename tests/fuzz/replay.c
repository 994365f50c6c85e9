/*
 * replay.c — runs a libFuzzer target's committed corpus without libFuzzer, as a TAP test.
 *
 * Built with the ordinary compiler (and sanitizers) and linked with one fuzz-<name>.c that defines
 * LLVMFuzzerTestOneInput. The program named "replay-<name>" replays every file under
 * $TDM_SRCDIR/tests/fuzz/corpus/<name>/, one TAP point per file; a crash or sanitizer report fails
 * the test program. `make fuzz` builds the real libFuzzer binaries with clang (tests/fuzz/README).
 */
#include "config.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        return -1;
    }
    long n = ftell(f);
    rewind(f);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    size_t got = n > 0 ? fread(buf, 1, (size_t)n, f) : 0;
    fclose(f);
    /* an exact-size heap copy lets ASan catch any read past the input */
    LLVMFuzzerTestOneInput(buf, got);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    const char *base = strrchr(argv[0], '/');
    base = base ? base + 1 : argv[0];
    if (strncmp(base, "lt-", 3) == 0)
        base += 3;
    const char *name = strncmp(base, "replay-", 7) == 0 ? base + 7 : base;
    const char *src = getenv("TDM_SRCDIR");
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/tests/fuzz/corpus/%s", src ? src : ".", name);
    if (argc > 1)
        snprintf(dir, sizeof(dir), "%s", argv[1]);

    DIR *d = opendir(dir);
    if (!d) {
        printf("1..1\nnot ok 1 - corpus directory %s missing\n", dir);
        return 1;
    }
    char **files = NULL;
    size_t nfiles = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        files = realloc(files, (nfiles + 1) * sizeof(*files));
        files[nfiles++] = strdup(de->d_name);
    }
    closedir(d);
    qsort(files, nfiles, sizeof(*files), cmp_str);
    if (nfiles == 0) {
        printf("1..1\nnot ok 1 - corpus %s is empty\n", dir);
        return 1;
    }
    for (size_t i = 0; i < nfiles; i++) {
        char path[8192];
        snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
        ok(replay_file(path) == 0, "%s/%s", name, files[i]);
        free(files[i]);
    }
    free(files);
    return done_testing();
}
