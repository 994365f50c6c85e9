/*
 * tdm/status.h — the one status type of tandem.
 *
 * Every fallible function returns tdm_status_t: TDM_OK (0) or a negative TDM_ERR_*. Outputs are
 * written only on success. tdm_status_str() never returns NULL and is thread-safe.
 */
#ifndef TDM_STATUS_H
#define TDM_STATUS_H

typedef enum tdm_status {
    TDM_OK = 0,
    TDM_ERR_NOMEM = -1,       /* a large/pinned/device allocation failed */
    TDM_ERR_INVAL = -2,       /* bad argument or malformed input */
    TDM_ERR_IO = -3,          /* read/write/socket error (errno logged where decided) */
    TDM_ERR_NOTFOUND = -4,    /* missing file, tensor, key, room */
    TDM_ERR_OVERFLOW = -5,    /* size arithmetic or a bounded buffer would overflow */
    TDM_ERR_FORMAT = -6,      /* bad magic/version/length, truncated or inconsistent file */
    TDM_ERR_UNSUPPORTED = -7, /* valid but not supported (architecture, dtype, parameter) */
    TDM_ERR_TIMEOUT = -8,     /* a deadline passed */
    TDM_ERR_AGAIN = -9,       /* try again later (queue full, would block) */
    TDM_ERR_BUSY = -10,       /* resource in use (draining, locked) */
    TDM_ERR_ABORTED = -11,    /* the operation was aborted (request, room) */
    TDM_ERR_CORRUPT = -12,    /* checksum or layout mismatch: data must not be used */
    TDM_ERR_CUDA = -13,       /* a CUDA/cuBLAS call failed */
    TDM_ERR_NCCL = -14,       /* an NCCL call failed */
    TDM_ERR_UCX = -15,        /* a UCX call failed */
    TDM_ERR_DB = -16,         /* PostgreSQL error or connection lost */
    TDM_ERR_PEER = -17,       /* the peer (rank, worker, socket) is gone */
    TDM_ERR_STATE = -18,      /* the object is in the wrong state for this call */
    TDM_ERR_PERM = -19,       /* permission denied (auth, file mode) */
    TDM_ERR_RANGE = -20,      /* a value is outside its allowed range */
    TDM_ERR_MAX_ = -21        /* sentinel: one past the last code */
} tdm_status_t;

#define TDM_STATUS_COUNT (-(int)TDM_ERR_MAX_)

/* Short stable name ("TDM_ERR_INVAL") and a human description. */
const char *tdm_status_name(tdm_status_t st);
const char *tdm_status_str(tdm_status_t st);

/* Propagate a failing status: `TDM_TRY(f());` inside a function returning tdm_status_t. */
#define TDM_TRY(expr)                                                                              \
    do {                                                                                           \
        tdm_status_t tdm_try_st_ = (expr);                                                         \
        if (tdm_try_st_ != TDM_OK)                                                                 \
            return tdm_try_st_;                                                                    \
    } while (0)

/* Jump to a cleanup label on failure, keeping the status: TDM_CHECK_GOTO(f(), st, err_close); */
#define TDM_CHECK_GOTO(expr, st, label)                                                            \
    do {                                                                                           \
        (st) = (expr);                                                                             \
        if ((st) != TDM_OK)                                                                        \
            goto label;                                                                            \
    } while (0)

#endif
