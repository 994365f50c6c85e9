/*
 * loader.c — dlopen of the CUDA engine module (module.h) for a worker built without the CUDA
 * runtime: the file, its entry symbol and its table's ABI are checked, each failure named in one
 * line the operator can act on. Needs only libdl; nothing here touches CUDA.
 */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "module.h"

#ifndef TDM_PKGLIBDIR
#define TDM_PKGLIBDIR "/usr/lib/tandem"
#endif

#define SET_ERR(...) snprintf(err, err_len, __VA_ARGS__)

const char *tdm_cuda_module_default_path(void)
{
    return TDM_PKGLIBDIR "/" TDM_CUDA_MODULE_FILE;
}

tdm_status_t tdm_cuda_module_load(const char *path, const tdm_cuda_module_t **ret, char *err,
                                  size_t err_len)
{
    if (!path || !*path)
        path = tdm_cuda_module_default_path();
    /* absent is the common case (tandem-cuda not installed): say so before dlopen's wording */
    if (access(path, F_OK) != 0) {
        int e = errno;
        SET_ERR("GPU backend not installed: install tandem-cuda (%s: %s)", path, strerror(e));
        return e == ENOENT ? TDM_ERR_NOTFOUND : TDM_ERR_IO;
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        /* the module links the CUDA runtime in, but cuBLAS comes from NVIDIA's toolkit */
        if (why && strstr(why, "libcublas"))
            SET_ERR("GPU backend %s needs NVIDIA's cuBLAS 13 (libcublas.so.13, libcublasLt.so.13 "
                    "from the CUDA toolkit) on the library path: %s",
                    path, why);
        else
            SET_ERR("GPU backend %s cannot be loaded: %s", path,
                    why ? why : "unknown dlopen error");
        return TDM_ERR_UNSUPPORTED;
    }
    tdm_cuda_module_fn fn;
    void *sym = dlsym(h, TDM_CUDA_MODULE_SYMBOL);
    memcpy(&fn, &sym, sizeof(fn)); /* object → function pointer, as dlsym(3) prescribes */
    const tdm_cuda_module_t *m = fn ? fn() : NULL;
    if (!m) {
        SET_ERR("GPU backend %s is not a tandem CUDA backend (no %s)", path,
                TDM_CUDA_MODULE_SYMBOL);
        goto err_close;
    }
    if (m->abi != TDM_CUDA_MODULE_ABI || m->size < sizeof(tdm_cuda_module_t) || !m->exec_init ||
        !m->exec_free || !m->exec_num_pages || !m->exec_layout || !m->exec_kv ||
        !m->exec_weight_bytes || !m->exec_forward) {
        SET_ERR("GPU backend %s (tandem %s) has module ABI %u, this worker needs %u: install the "
                "tandem-cuda of this tandem's version",
                path, m->version ? m->version : "?", m->abi, TDM_CUDA_MODULE_ABI);
        goto err_close;
    }
    *ret = m;
    return TDM_OK;
err_close:
    dlclose(h);
    return TDM_ERR_UNSUPPORTED;
}
