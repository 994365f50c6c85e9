# tdm.m4 — tandem's configure macros: warnings, sanitizers, CUDA, pthreads.

# TDM_WARNINGS: the warning set, declared once; --enable-werror turns them into errors.
AC_DEFUN([TDM_WARNINGS], [
  AC_ARG_ENABLE([werror],
    [AS_HELP_STRING([--enable-werror], [treat compiler warnings as errors (CI)])],
    [], [enable_werror=no])
  TDM_WARN_CFLAGS="-Wall -Wextra -Wshadow -Wpointer-arith -Wwrite-strings -Wstrict-prototypes -Wmissing-prototypes -Wformat=2 -Wno-unused-parameter -Wno-missing-field-initializers -Wvla -Wundef"
  AS_IF([test "x$enable_werror" = xyes], [TDM_WARN_CFLAGS="$TDM_WARN_CFLAGS -Werror"])
  AC_SUBST([TDM_WARN_CFLAGS])
  AC_SUBST([enable_werror])
])

# TDM_SANITIZERS: --enable-sanitizers=address,undefined for host code only.
AC_DEFUN([TDM_SANITIZERS], [
  AC_ARG_ENABLE([sanitizers],
    [AS_HELP_STRING([--enable-sanitizers=LIST], [build host code with -fsanitize=LIST (e.g. address,undefined)])],
    [], [enable_sanitizers=no])
  TDM_SAN_CFLAGS=""
  TDM_SAN_LDFLAGS=""
  AS_CASE(["$enable_sanitizers"],
    [no|""], [],
    [yes], [enable_sanitizers=address,undefined
            TDM_SAN_CFLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
            TDM_SAN_LDFLAGS="-fsanitize=address,undefined"],
    [TDM_SAN_CFLAGS="-fsanitize=$enable_sanitizers -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
     TDM_SAN_LDFLAGS="-fsanitize=$enable_sanitizers"])
  AC_SUBST([TDM_SAN_CFLAGS])
  AC_SUBST([TDM_SAN_LDFLAGS])
  AM_CONDITIONAL([TDM_SANITIZED], [test "x$TDM_SAN_CFLAGS" != x])
])

# TDM_CUDA: --with-cuda[=PATH], auto-detected from nvcc. CUDA objects build without a GPU.
AC_DEFUN([TDM_CUDA], [
  AC_ARG_WITH([cuda],
    [AS_HELP_STRING([--with-cuda@<:@=PATH@:>@], [build the CUDA backend (default: auto-detect nvcc)])],
    [], [with_cuda=check])
  have_cuda=no
  NVCC=""
  AS_IF([test "x$with_cuda" != xno], [
    AS_IF([test "x$with_cuda" = xyes || test "x$with_cuda" = xcheck],
      [AC_PATH_PROG([NVCC], [nvcc], [], [$PATH:/usr/local/cuda/bin])],
      [AC_PATH_PROG([NVCC], [nvcc], [], [$with_cuda/bin])])
    AS_IF([test -n "$NVCC"], [
      CUDA_HOME=`dirname \`dirname "$NVCC"\``
      have_cuda=yes
    ], [
      AS_IF([test "x$with_cuda" != xcheck], [AC_MSG_ERROR([--with-cuda given but nvcc not found])])
    ])
  ])
  # The runtime libraries: installs differ (lib64, lib, targets/<arch>/lib, a symlinked nvcc), so
  # search the usual places and nvcc's own -L list, then prove a link. nvcc without linkable
  # cudart/cuBLAS still compiles the kernels; only the GPU binaries are left out (HAVE_CUDA_RT).
  have_cuda_rt=no
  CUDA_LIBDIR=""
  AS_IF([test "x$have_cuda" = xyes], [
    nvcc_real=`readlink -f "$NVCC" 2>/dev/null || echo "$NVCC"`
    cuda_real=`dirname \`dirname "$nvcc_real"\``
    cuda_dry=`"$NVCC" --dryrun -x cu -o conftest.nvcc /dev/null 2>&1 | tr ' "' '\n\n' | sed -n 's/^-L//p' | grep -v stubs`
    AC_MSG_CHECKING([for the CUDA runtime and cuBLAS libraries])
    for d in "$CUDA_HOME/lib64" "$CUDA_HOME/lib" "$CUDA_HOME/targets/x86_64-linux/lib" \
             "$cuda_real/lib64" "$cuda_real/lib" "$cuda_real/targets/x86_64-linux/lib" $cuda_dry; do
      AS_IF([test -z "$CUDA_LIBDIR" && test -e "$d/libcudart.so" && test -e "$d/libcublas.so" &&
             test -e "$d/libcublasLt.so"], [CUDA_LIBDIR=`cd "$d" && pwd -P`])
    done
    AS_IF([test -n "$CUDA_LIBDIR"], [
      tdm_save_LIBS=$LIBS
      LIBS="-L$CUDA_LIBDIR -lcudart -lcublas -lcublasLt $LIBS"
      AC_LINK_IFELSE([AC_LANG_PROGRAM([[int cudaGetDeviceCount(int *); int cublasCreate_v2(void **);
int cublasLtCreate(void **);]],
        [[int n; void *h; return cudaGetDeviceCount(&n) + cublasCreate_v2(&h) + cublasLtCreate(&h);]])],
        [have_cuda_rt=yes])
      LIBS=$tdm_save_LIBS
    ])
    AC_MSG_RESULT([$have_cuda_rt${CUDA_LIBDIR:+ ($CUDA_LIBDIR)}])
    AS_IF([test "x$have_cuda_rt" = xno], [
      AS_IF([test "x$with_cuda" = xcheck],
        [AC_MSG_WARN([nvcc found but libcudart/libcublas/libcublasLt are not linkable: the kernels compile, the GPU tests and benchmarks are not built])],
        [AC_MSG_ERROR([--with-cuda=$with_cuda: libcudart/libcublas/libcublasLt not found or not linkable])])
    ])
  ])
  # The runtime headers, for host C code that calls cudart (the CUDA IPC mover): the same layout
  # spread as the libraries, so search the candidates and nvcc's own -I list, then prove a compile.
  # Without them the GPU binaries are left out too (HAVE_CUDA_RT), never a build that fails later.
  CUDA_INCDIR=""
  AS_IF([test "x$have_cuda" = xyes], [
    cuda_dry_inc=`"$NVCC" --dryrun -x cu -o conftest.nvcc /dev/null 2>&1 | tr ' "' '\n\n' | sed -n 's/^-I//p'`
    for d in "$CUDA_HOME/include" "$CUDA_HOME/targets/x86_64-linux/include" "$cuda_real/include" \
             "$cuda_real/targets/x86_64-linux/include" $cuda_dry_inc; do
      AS_IF([test -z "$CUDA_INCDIR" && test -e "$d/cuda_runtime_api.h"], [CUDA_INCDIR=`cd "$d" && pwd -P`])
    done
    AS_IF([test "x$have_cuda_rt" = xyes], [
      AC_MSG_CHECKING([for the CUDA runtime headers])
      tdm_save_CPPFLAGS=$CPPFLAGS
      CPPFLAGS="${CUDA_INCDIR:+-I$CUDA_INCDIR} $CPPFLAGS"
      AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[#include <cuda_runtime_api.h>]],
        [[cudaIpcMemHandle_t h; (void)h; return 0;]])], [], [have_cuda_rt=no])
      CPPFLAGS=$tdm_save_CPPFLAGS
      AC_MSG_RESULT([${have_cuda_rt}${CUDA_INCDIR:+ ($CUDA_INCDIR)}])
      AS_IF([test "x$have_cuda_rt" = xno], [
        AS_IF([test "x$with_cuda" = xcheck],
          [AC_MSG_WARN([cuda_runtime_api.h not found or not compilable: the GPU tests and benchmarks are not built])],
          [AC_MSG_ERROR([--with-cuda=$with_cuda: cuda_runtime_api.h not found])])
      ])
    ])
  ])
  # --enable-cuda-module: the engine as backend-cuda.so (kernels/cuda/module.h) with the CUDA
  # runtime linked in statically (cuBLAS stays shared: the toolkit ships no static cuBLAS here);
  # the worker then links no CUDA library and loads the module for --device cuda only.
  AC_ARG_ENABLE([cuda-module],
    [AS_HELP_STRING([--enable-cuda-module], [build the CUDA engine as PKGLIBDIR/backend-cuda.so, loaded by the worker, instead of linking it in (the Debian packages)])],
    [], [enable_cuda_module=no])
  AS_IF([test "x$enable_cuda_module" = xyes && test "x$have_cuda_rt" != xyes],
    [AC_MSG_ERROR([--enable-cuda-module needs nvcc with a linkable CUDA runtime and cuBLAS])])
  AS_IF([test "x$enable_cuda_module" = xyes],
    [AS_IF([test -e "$CUDA_LIBDIR/libcudart_static.a"], [],
       [AC_MSG_ERROR([--enable-cuda-module: $CUDA_LIBDIR/libcudart_static.a not found])])
     CUDA_MODULE_LIBS="-L$CUDA_LIBDIR -lcudart_static -lcublas -lcublasLt -ldl -lrt -lpthread"])
  AC_SUBST([CUDA_MODULE_LIBS])
  AM_CONDITIONAL([CUDA_MODULE], [test "x$enable_cuda_module" = xyes])
  AS_IF([test "x$have_cuda" = xyes], [
    CUDA_CFLAGS="-I${CUDA_INCDIR:-$CUDA_HOME/include}"
    CUDA_LIBS="-L$CUDA_LIBDIR -Wl,-rpath,$CUDA_LIBDIR -lcudart -lcublas -lcublasLt"
    NVCC_FLAGS="-O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Xcompiler -fPIC -Xcompiler -Wall"
    AS_IF([test "x$enable_werror" = xyes], [NVCC_FLAGS="$NVCC_FLAGS -Werror all-warnings"])
    AC_DEFINE([TDM_HAVE_CUDA], [1], [Build the CUDA backend])
  ])
  AC_SUBST([NVCC])
  AC_SUBST([NVCC_FLAGS])
  AC_SUBST([CUDA_CFLAGS])
  AC_SUBST([CUDA_LIBS])
  AM_CONDITIONAL([HAVE_CUDA], [test "x$have_cuda" = xyes])
  AM_CONDITIONAL([HAVE_CUDA_RT], [test "x$have_cuda_rt" = xyes])
  # NCCL (GPU tensor parallelism, dataplane/tp/nccl.c): nccl.h and libnccl beside the runtime
  have_nccl=no
  NCCL_LIBS=""
  AS_IF([test "x$have_cuda_rt" = xyes], [
    AC_MSG_CHECKING([for NCCL])
    AS_IF([test -e "${CUDA_INCDIR:-$CUDA_HOME/include}/nccl.h" && test -e "$CUDA_LIBDIR/libnccl.so"],
      [have_nccl=yes; NCCL_LIBS="-L$CUDA_LIBDIR -Wl,-rpath,$CUDA_LIBDIR -lnccl"])
    AC_MSG_RESULT([$have_nccl])
  ])
  AC_SUBST([NCCL_LIBS])
  AM_CONDITIONAL([HAVE_NCCL], [test "x$have_nccl" = xyes])
])

# AX_PTHREAD_SIMPLE: glibc >= 2.34 has pthreads in libc; -pthread is still the portable spelling.
AC_DEFUN([AX_PTHREAD_SIMPLE], [
  PTHREAD_CFLAGS="-pthread"
  PTHREAD_LIBS="-pthread"
  AC_SUBST([PTHREAD_CFLAGS])
  AC_SUBST([PTHREAD_LIBS])
])
