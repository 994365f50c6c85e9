/*
 * status.c — names and descriptions of tdm_status_t. The tables are indexed by -status and
 * checked against the enum's sentinel at compile time, so adding a code without a name fails
 * the build.
 */
#include "config.h"

#include <tdm/status.h>

static const char *const status_names[] = {
    "TDM_OK",           "TDM_ERR_NOMEM",    "TDM_ERR_INVAL",  "TDM_ERR_IO",
    "TDM_ERR_NOTFOUND", "TDM_ERR_OVERFLOW", "TDM_ERR_FORMAT", "TDM_ERR_UNSUPPORTED",
    "TDM_ERR_TIMEOUT",  "TDM_ERR_AGAIN",    "TDM_ERR_BUSY",   "TDM_ERR_ABORTED",
    "TDM_ERR_CORRUPT",  "TDM_ERR_CUDA",     "TDM_ERR_NCCL",   "TDM_ERR_UCX",
    "TDM_ERR_DB",       "TDM_ERR_PEER",     "TDM_ERR_STATE",  "TDM_ERR_PERM",
    "TDM_ERR_RANGE",
};

static const char *const status_strs[] = {
    "success",
    "out of memory",
    "invalid argument or input",
    "I/O error",
    "not found",
    "size overflow",
    "malformed or truncated data",
    "not supported",
    "timed out",
    "try again",
    "busy",
    "aborted",
    "data corruption detected",
    "CUDA error",
    "NCCL error",
    "UCX error",
    "database error",
    "peer gone",
    "wrong state",
    "permission denied",
    "value out of range",
};

_Static_assert(sizeof(status_names) / sizeof(status_names[0]) == TDM_STATUS_COUNT,
               "status_names must name every tdm_status_t");
_Static_assert(sizeof(status_strs) / sizeof(status_strs[0]) == TDM_STATUS_COUNT,
               "status_strs must describe every tdm_status_t");

const char *tdm_status_name(tdm_status_t st)
{
    int i = -(int)st;
    if (i < 0 || i >= TDM_STATUS_COUNT)
        return "TDM_ERR_UNKNOWN";
    return status_names[i];
}

const char *tdm_status_str(tdm_status_t st)
{
    int i = -(int)st;
    if (i < 0 || i >= TDM_STATUS_COUNT)
        return "unknown status";
    return status_strs[i];
}
