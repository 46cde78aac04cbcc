#define _GNU_SOURCE
#include "modules.h"

#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "stream.h"

static unsigned long long last_adds = ~0ull, last_subs = ~0ull;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct xp_batch_MODULE batch;
static char paths[XP_BATCH_ROWS][512];
static char build_ids[XP_BATCH_ROWS][41];
static char exe_path[512];

static void build_id_hex(const struct dl_phdr_info *info, char *out) {
    out[0] = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE) continue;
        const uint8_t *p = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr);
        const uint8_t *end = p + ph->p_memsz;
        while (p + 12 <= end) {
            uint32_t namesz, descsz, type;
            memcpy(&namesz, p, 4);
            memcpy(&descsz, p + 4, 4);
            memcpy(&type, p + 8, 4);
            const uint8_t *name = p + 12;
            const uint8_t *desc = name + ((namesz + 3) & ~3u);
            if (desc + descsz > end) break;
            if (type == 3 && namesz == 4 && memcmp(name, "GNU", 4) == 0) {
                uint32_t n = descsz > 20 ? 20 : descsz;
                for (uint32_t k = 0; k < n; k++) sprintf(out + 2 * k, "%02x", desc[k]);
                return;
            }
            p = desc + ((descsz + 3) & ~3u);
        }
    }
}

static int counts_cb(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    unsigned long long *c = data;
    c[0] = info->dlpi_adds;
    c[1] = info->dlpi_subs;
    return 1;
}

static int module_cb(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    (void)data;
    if (batch.rows >= XP_BATCH_ROWS) return 1;
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD) continue;
        uint64_t a = info->dlpi_addr + ph->p_vaddr;
        if (a < lo) lo = a;
        if (a + ph->p_memsz > hi) hi = a + ph->p_memsz;
    }
    if (hi == 0) return 0;
    uint32_t r = batch.rows;
    const char *name = info->dlpi_name;
    if (!name || !*name) name = exe_path; /* the main program */
    snprintf(paths[r], sizeof paths[r], "%s", name);
    build_id_hex(info, build_ids[r]);
    batch.load_bias[r] = info->dlpi_addr;
    batch.lo[r] = lo;
    batch.hi[r] = hi;
    batch.path[r] = (struct xp_str){paths[r], (uint32_t)strlen(paths[r])};
    batch.build_id[r] = (struct xp_str){build_ids[r], (uint32_t)strlen(build_ids[r])};
    batch.rows++;
    return 0;
}

void xp_modules_emit_if_changed(void) {
    unsigned long long c[2] = {0, 0};
    pthread_mutex_lock(&lock);
    dl_iterate_phdr(counts_cb, c);
    if (c[0] != last_adds || c[1] != last_subs) {
        last_adds = c[0];
        last_subs = c[1];
        if (!exe_path[0]) {
            ssize_t n = readlink("/proc/self/exe", exe_path, sizeof exe_path - 1);
            exe_path[n > 0 ? n : 0] = 0;
        }
        batch.rows = 0;
        dl_iterate_phdr(module_cb, NULL);
        xp_emit_MODULE(&batch);
    }
    pthread_mutex_unlock(&lock);
}

void xp_modules_reset(void) {
    pthread_mutex_init(&lock, NULL);
    last_adds = last_subs = ~0ull;
}

struct self_ctx { uint64_t addr, lo, hi; };
static int self_cb(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    struct self_ctx *s = data;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uint64_t a = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) && s->addr >= a && s->addr < a + ph->p_memsz) {
            s->lo = a;
            s->hi = a + ph->p_memsz;
            return 1;
        }
    }
    return 0;
}

void xp_modules_self_range(const void *addr_in_self, unsigned long *lo, unsigned long *hi) {
    struct self_ctx s = {(uint64_t)addr_in_self, 0, 0};
    dl_iterate_phdr(self_cb, &s);
    *lo = s.lo;
    *hi = s.hi;
}
