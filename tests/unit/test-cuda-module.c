/*
 * test-cuda-module.c — the CUDA module loader (kernels/cuda/module.h) on any host: an absent
 * backend-cuda.so is "GPU backend not installed: install tandem-cuda" naming the path; a file that
 * is not a shared object, one without the entry symbol and one of another ABI are each refused
 * with their own message; a well-formed module loads and its table is the module's (its engine's
 * init error comes back unchanged). The fakes are tests/unit/cuda-module-fake.c.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "kernels/cuda/module.h"
#include "tap.h"

static const tdm_cuda_module_t *m;
static char err[1024];

static tdm_status_t load(const char *dir, const char *file)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    m = NULL;
    err[0] = '\0';
    return tdm_cuda_module_load(path, &m, err, sizeof(err));
}

int main(void)
{
    const char *b = getenv("TDM_BUILDDIR"), *s = getenv("TDM_SRCDIR");
    if (!b || !s)
        skip_all("TDM_BUILDDIR/TDM_SRCDIR unset (run under make check)");

    const char *def = tdm_cuda_module_default_path();
    ok(strstr(def, "/tandem/backend-cuda.so") != NULL, "default path: %s", def);

    is_int(load("/nonexistent", "backend-cuda.so"), TDM_ERR_NOTFOUND, "absent module");
    ok(strstr(err, "GPU backend not installed: install tandem-cuda") &&
           strstr(err, "/nonexistent/backend-cuda.so"),
       "absent: says what to install and where it looked: %s", err);
    ok(m == NULL, "absent: no table");

    is_int(load(s, "README.md"), TDM_ERR_UNSUPPORTED, "not a shared object");
    ok(strstr(err, "cannot be loaded") && strstr(err, "README.md"), "not loadable: %s", err);

    is_int(load(b, "tests/unit/cuda-module-nosym.so"), TDM_ERR_UNSUPPORTED, "no entry symbol");
    ok(strstr(err, "not a tandem CUDA backend") && strstr(err, TDM_CUDA_MODULE_SYMBOL),
       "no symbol: %s", err);

    is_int(load(b, "tests/unit/cuda-module-abi.so"), TDM_ERR_UNSUPPORTED, "another ABI");
    ok(strstr(err, "ABI 999") && strstr(err, "install the tandem-cuda of this tandem's version"),
       "ABI mismatch: %s", err);
    ok(m == NULL, "ABI mismatch: no table");

    is_int(load(b, "tests/unit/cuda-module-ok.so"), TDM_OK, "well-formed module loads: %s", err);
    ok(m && m->abi == TDM_CUDA_MODULE_ABI && m->version && !strcmp(m->version, "fake"),
       "its table is the module's");
    if (m) {
        tdm_exec_cuda_t *x = NULL;
        char e2[128] = "";
        is_int(m->exec_init(NULL, &x, e2, sizeof(e2)), TDM_ERR_CUDA, "calls reach the module");
        is_str(e2, "fake engine: no device", "the module's error comes back unchanged");
    }
    return done_testing();
}
