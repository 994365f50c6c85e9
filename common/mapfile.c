/*
 * mapfile.c — a shared file, created and mapped (tdm/mapfile.h).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <tdm/mapfile.h>

tdm_status_t tdm_mapfile_create(const char *path, size_t size, void **ret)
{
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return TDM_ERR_IO;
    if (ftruncate(fd, (off_t)size) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return TDM_ERR_IO;
    }
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED) {
        errno = e;
        return TDM_ERR_NOMEM;
    }
    *ret = m;
    return TDM_OK;
}
