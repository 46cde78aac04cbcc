/* Maps the recording's capture-window control page (window_control.h). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "window_control.h"

static struct xp_window_control *control;
static pthread_once_t control_once = PTHREAD_ONCE_INIT;

static void map_control(void) {
    const char *path = getenv("XPU_PERF_WINDOW_CONTROL");
    if (!path || !*path) return;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st;
    /* A fork keeps the mapping (MAP_SHARED): children share the page with their parent. */
    if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof *control) {
        void *p = mmap(NULL, sizeof *control, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        struct xp_window_control *c = p == MAP_FAILED ? NULL : p;
        if (c && c->magic == XP_WINDOW_CONTROL_MAGIC && c->version == XP_WINDOW_CONTROL_VERSION)
            control = c;
        else if (c) munmap(p, sizeof *control);
    }
    close(fd);
}

struct xp_window_control *xp_window_control(void) {
    pthread_once(&control_once, map_control);
    return control;
}
