/* See pyframes.h.  Offsets come from CPython's headers (Include/internal/pycore_frame.h,
 * Include/cpython/code.h, Include/cpython/pystate.h) of each supported minor version. */
#define _GNU_SOURCE
#include "pyframes.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stream.h"
#include "strings.h"

int xp_py_enabled;
unsigned xp_py_minor;
uint64_t xp_py_guard_failures;

struct py_layout {
    unsigned tstate_cframe;      /* PyThreadState.cframe */
    unsigned cframe_current;     /* _PyCFrame.current_frame */
    unsigned frame_code;         /* _PyInterpreterFrame.f_code */
    unsigned frame_previous;
    unsigned frame_prev_instr;
    int frame_owner;             /* -1: none */
    int frame_is_entry;          /* -1: none (3.12 marks C-stack shim frames by owner) */
    unsigned code_filename, code_qualname;
    unsigned ascii_header;       /* sizeof(PyASCIIObject) */
    unsigned compact_header;     /* sizeof(PyCompactUnicodeObject) */
    unsigned compact_utf8;       /* offsetof(PyCompactUnicodeObject, utf8) */
};

static const struct py_layout layout_311 = {56, 8, 32, 48, 56, 69, 68, 112, 128, 48, 72, 56};
static const struct py_layout layout_312 = {56, 0, 0, 8, 56, 70, -1, 112, 128, 40, 56, 48};
static struct py_layout L;

static void *(*get_tstate)(void);
static int (*addr2line)(void *code, int offset);
static const void *code_type;
static const void *unicode_type;
static long code_basicsize;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void do_init(void) {
    const unsigned long *version = dlsym(RTLD_DEFAULT, "Py_Version");
    unsigned major = 0, minor = 0;
    if (version) {
        minor = (unsigned)((*version >> 16) & 0xff);
        major = (unsigned)(*version >> 24);
    } else {
        /* Before 3.11 there is no Py_Version: "3.10.12 (main, ...)" from Py_GetVersion. */
        const char *(*get_version)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "Py_GetVersion");
        if (!get_version || sscanf(get_version(), "%u.%u", &major, &minor) != 2) return;
    }
    if (major != 3) return;
    xp_py_minor = minor;
    if (minor == 11) L = layout_311;
    else if (minor == 12) L = layout_312;
    else return;
    get_tstate = (void *(*)(void))dlsym(RTLD_DEFAULT, "PyGILState_GetThisThreadState");
    addr2line = (int (*)(void *, int))dlsym(RTLD_DEFAULT, "PyCode_Addr2Line");
    code_type = dlsym(RTLD_DEFAULT, "PyCode_Type");
    unicode_type = dlsym(RTLD_DEFAULT, "PyUnicode_Type");
    if (!get_tstate || !addr2line || !code_type || !unicode_type) return;
    /* co_code_adaptive ends the variable-size code object: its offset is tp_basicsize. */
    code_basicsize = *(const long *)((const char *)code_type + 32);
    xp_py_enabled = 1;
}

void xp_py_init(void) { pthread_once(&init_once, do_init); }

static inline const void *type_of(const void *obj) { return *(const void *const *)((const char *)obj + 8); }
static inline const void *field(const void *base, unsigned off) { return *(const void *const *)((const char *)base + off); }

int xp_py_walk(struct xp_pyframe_key *keys, int max) {
    if (!xp_py_enabled) return 0;
    const char *tstate = get_tstate();
    if (!tstate) return 0;
    const char *cframe = field(tstate, L.tstate_cframe);
    if (!cframe) return 0;
    const char *frame = field(cframe, L.cframe_current);
    int n = 0;
    while (frame && n < max) {
        const char *code = field(frame, L.frame_code);
        if (!code || type_of(code) != code_type) { xp_py_guard_failures++; break; }
        int is_shim = L.frame_owner >= 0 && L.frame_is_entry < 0 && frame[L.frame_owner] == 3;
        if (is_shim) {
            keys[n].code = 0;
            keys[n].offset = 0;
            n++;
        } else {
            const char *instr = field(frame, L.frame_prev_instr);
            int64_t off = instr - (code + code_basicsize);
            keys[n].code = (uint64_t)code;
            keys[n].offset = (uint64_t)off;
            n++;
            if (L.frame_is_entry >= 0 && frame[L.frame_is_entry] && n < max) {
                keys[n].code = 0;
                keys[n].offset = 0;
                n++;
            }
        }
        frame = field(frame, L.frame_previous);
    }
    return n;
}

/* Copy a str object's text into buf as UTF-8 (non-ASCII compact strings without a cached
 * UTF-8 form come out with '?' for each non-ASCII character). */
static void unicode_text(const char *obj, char *buf, size_t cap) {
    buf[0] = 0;
    if (!obj || type_of(obj) != unicode_type) { strcpy(buf, "<?>"); return; }
    int64_t length = *(const int64_t *)(obj + 16);
    uint32_t state = *(const uint32_t *)(obj + 32);
    unsigned kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
    if (!compact || length < 0) { strcpy(buf, "<?>"); return; }
    size_t n = (size_t)length < cap - 1 ? (size_t)length : cap - 1;
    if (ascii) { memcpy(buf, obj + L.ascii_header, n); buf[n] = 0; return; }
    const char *utf8 = field(obj, L.compact_utf8);
    if (utf8) { size_t u = strlen(utf8); if (u > cap - 1) u = cap - 1; memcpy(buf, utf8, u); buf[u] = 0; return; }
    const char *data = obj + L.compact_header;
    for (size_t i = 0; i < n; i++) {
        uint32_t ch = kind == 1 ? ((const uint8_t *)data)[i]
                    : kind == 2 ? ((const uint16_t *)data)[i] : ((const uint32_t *)data)[i];
        buf[i] = ch < 128 ? (char)ch : '?';
    }
    buf[n] = 0;
}

/* (code, line) -> PYFRAME id; cold path under a lock. */
struct pyframe_entry { uint64_t code; int32_t line; uint32_t id; };
static struct pyframe_entry *table;
static uint32_t table_cap, table_used, next_id = 1;
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

static struct xp_batch_PYFRAME pyframe_batch;

uint32_t xp_py_frame_id(struct xp_pyframe_key key) {
    if (key.code == 0) return 0;
    const char *code = (const char *)key.code;
    int line = addr2line((void *)code, (int)key.offset);
    pthread_mutex_lock(&table_lock);
    if (table_used * 2 >= table_cap) {
        uint32_t ncap = table_cap ? table_cap * 2 : 4096;
        struct pyframe_entry *nt = calloc(ncap, sizeof *nt);
        if (!nt) { pthread_mutex_unlock(&table_lock); return 0; }
        for (uint32_t i = 0; i < table_cap; i++) {
            if (!table[i].id) continue;
            uint64_t h = (table[i].code * 31 + (uint64_t)table[i].line) * 0x9E3779B97F4A7C15ull;
            uint32_t j = (uint32_t)(h >> 32) & (ncap - 1);
            while (nt[j].id) j = (j + 1) & (ncap - 1);
            nt[j] = table[i];
        }
        free(table);
        table = nt;
        table_cap = ncap;
    }
    uint64_t h = (key.code * 31 + (uint64_t)line) * 0x9E3779B97F4A7C15ull;
    uint32_t j = (uint32_t)(h >> 32) & (table_cap - 1);
    while (table[j].id) {
        if (table[j].code == key.code && table[j].line == line) {
            uint32_t id = table[j].id;
            pthread_mutex_unlock(&table_lock);
            return id;
        }
        j = (j + 1) & (table_cap - 1);
    }
    uint32_t id = next_id++;
    table[j] = (struct pyframe_entry){key.code, line, id};
    table_used++;
    char filename[1024], qualname[512];
    unicode_text(field(code, L.code_filename), filename, sizeof filename);
    unicode_text(field(code, L.code_qualname), qualname, sizeof qualname);
    pyframe_batch.rows = 1;
    pyframe_batch.pyframe_id[0] = id;
    pyframe_batch.filename_id[0] = xp_intern(filename);
    pyframe_batch.function_id[0] = xp_intern(qualname);
    pyframe_batch.line[0] = line < 0 ? 0 : (uint32_t)line;
    xp_emit_PYFRAME(&pyframe_batch);
    pthread_mutex_unlock(&table_lock);
    return id;
}
