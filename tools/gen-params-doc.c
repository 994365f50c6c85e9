/*
 * gen-params-doc — writes docs/params.md (to stdout, or to the file named by its argument) from
 * the parameter tables in include/tdm/config.h.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <tdm/config.h>

int main(int argc, char **argv)
{
    FILE *out = stdout;
    if (argc > 2) {
        fprintf(stderr, "usage: %s [OUTPUT.md]\n", argv[0]);
        return 2;
    }
    if (argc == 2 && !(out = fopen(argv[1], "w"))) {
        fprintf(stderr, "%s: %s: %s\n", argv[0], argv[1], strerror(errno));
        return 1;
    }
    tdm_config_doc_markdown(out);
    if (fflush(out) != 0 || (out != stdout && fclose(out) != 0)) {
        fprintf(stderr, "%s: write failed: %s\n", argv[0], strerror(errno));
        return 1;
    }
    return 0;
}
