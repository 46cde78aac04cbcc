/* NVTX: NVTX_INJECTION64_PATH points at this library too.  InitializeInjectionNvtx2 hands
 * NVTX to the libcupti this library is linked with, so NVTX ranges and markers become CUPTI
 * MARKER records (parsed in activity.c).  NVTX calls it at the process's first NVTX call, so
 * the MARKER kind is turned on only in processes that use NVTX: enabled up front it costs
 * programs that have no NVTX ranges too.  With a window mode, markers follow the windows. */
#define _GNU_SOURCE
#include <dlfcn.h>

#include "nvtx.h"
#include "config.h"
#include "kinds.h"
#include "state.h"
#include "windows.h"

_Atomic int nvtx_used, cupti_ready;
static _Atomic int markers_enabled;

void enable_markers_once(void) {
    if (atomic_load(&cupti_forked)) return;
    if (!xp_config.enabled || !kind_wanted(XP_KIND_MARKER)) return;
    if (window_mode != WINDOW_NONE) {
        /* Markers follow the windows: on now only inside one (markers_follow_window does the rest). */
        pthread_mutex_lock(&window_lock);
        if (atomic_load(&window_open) && !atomic_exchange(&markers_enabled, 1))
            kind_set(CUPTI_ACTIVITY_KIND_MARKER, 1);
        pthread_mutex_unlock(&window_lock);
        return;
    }
    if (!atomic_exchange(&markers_enabled, 1)) kind_set(CUPTI_ACTIVITY_KIND_MARKER, 1);
}

/* Caller holds window_lock. */
void markers_follow_window(int on) {
    if (nvtx_used && cupti_ready && kind_wanted(XP_KIND_MARKER)) {
        kind_set(CUPTI_ACTIVITY_KIND_MARKER, on);
        atomic_store(&markers_enabled, on);
    }
}

EXPORT int InitializeInjectionNvtx2(const void *get_export_table) {
    Dl_info info;
    /* A function the preloaded sampler library does not interpose (cupti_interpose.c): its
     * address is libcupti's own. */
    if (!dladdr((const void *)&cuptiGetResultString, &info) || !info.dli_fname) return 0;
    void *cupti = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    if (!cupti) return 0;
    int (*init)(const void *) = (int (*)(const void *))dlsym(cupti, "InitializeInjectionNvtx2");
    int ok = init ? init(get_export_table) : 0;
    nvtx_used = 1;
    if (cupti_ready) enable_markers_once();
    return ok;
}
