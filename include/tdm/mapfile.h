/*
 * tdm/mapfile.h — a shared file, mapped: the progress page, the group's shared state and a PD
 * rank's KV pool live in files under /dev/shm that other processes map too.
 */
#ifndef TDM_MAPFILE_H
#define TDM_MAPFILE_H

#include <stddef.h>

#include <tdm/status.h>

/* `path` created or truncated (mode 0600) to `size` zero bytes and mapped shared, read-write.
 * TDM_ERR_IO when the file cannot be made that size, TDM_ERR_NOMEM when it cannot be mapped;
 * errno says why. */
tdm_status_t tdm_mapfile_create(const char *path, size_t size, void **ret);

#endif
