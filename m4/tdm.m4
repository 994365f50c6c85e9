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
  AS_IF([test "x$have_cuda" = xyes], [
    CUDA_CFLAGS="-I$CUDA_HOME/include"
    CUDA_LIBS="-L$CUDA_HOME/lib64 -Wl,-rpath,$CUDA_HOME/lib64 -lcudart -lcublas -lcublasLt"
    NVCC_FLAGS="-O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Xcompiler -fPIC -Xcompiler -Wall"
    AS_IF([test "x$enable_werror" = xyes], [NVCC_FLAGS="$NVCC_FLAGS -Werror all-warnings"])
    AC_DEFINE([TDM_HAVE_CUDA], [1], [Build the CUDA backend])
  ])
  AC_SUBST([NVCC])
  AC_SUBST([NVCC_FLAGS])
  AC_SUBST([CUDA_CFLAGS])
  AC_SUBST([CUDA_LIBS])
  AM_CONDITIONAL([HAVE_CUDA], [test "x$have_cuda" = xyes])
])

# AX_PTHREAD_SIMPLE: glibc >= 2.34 has pthreads in libc; -pthread is still the portable spelling.
AC_DEFUN([AX_PTHREAD_SIMPLE], [
  PTHREAD_CFLAGS="-pthread"
  PTHREAD_LIBS="-pthread"
  AC_SUBST([PTHREAD_CFLAGS])
  AC_SUBST([PTHREAD_LIBS])
])
