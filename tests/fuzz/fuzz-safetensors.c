/*
 * fuzz-safetensors.c — libFuzzer target for the safetensors header parser: the input is a whole
 * file image (8-byte length, JSON header, data). Whatever the bytes, tdm_st_parse must return a
 * status without reading outside the input, and on success every tensor must lie inside it.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>

#include "model_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tdm_st_tensor_t *t;
    size_t n;
    uint64_t off;
    char err[256];
    if (tdm_st_parse(data, size, "fuzz", &t, &n, &off, err, sizeof(err)) != TDM_OK)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (t[i].data < data + off || t[i].end < t[i].begin ||
            t[i].end - t[i].begin > (uint64_t)(data + size - t[i].data))
            abort();
        volatile uint8_t sink = 0;
        if (t[i].end > t[i].begin)
            sink ^= t[i].data[t[i].end - t[i].begin - 1]; /* ASan checks the last byte */
        (void)sink;
    }
    tdm_st_tensors_free(t, n);
    return 0;
}
