/* See pyframes.h.  For 3.11 and 3.12 the offsets come from CPython's headers
 * (Include/internal/pycore_frame.h, Include/cpython/code.h, Include/cpython/pystate.h); from
 * 3.13 on they are read from the runtime's own _Py_DebugOffsets (the first member of the
 * exported _PyRuntime), which CPython publishes for out-of-process debuggers. */
#define _GNU_SOURCE
#include "pyframes.h"

#include <dlfcn.h>
#include <sys/uio.h>
#include <unistd.h>
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
    unsigned tstate_cframe;      /* PyThreadState.cframe (3.13+: current_frame itself) */
    int cframe_current;          /* _PyCFrame.current_frame; -1: no cframe (3.13+) */
    unsigned frame_code;         /* _PyInterpreterFrame.f_code */
    unsigned frame_previous;
    unsigned frame_prev_instr;
    int frame_owner;             /* -1: none */
    int frame_is_entry;          /* -1: none (3.12 marks C-stack shim frames by owner) */
    unsigned code_filename, code_qualname;
    unsigned ascii_header;       /* sizeof(PyASCIIObject) */
    unsigned compact_header;     /* sizeof(PyCompactUnicodeObject) */
    unsigned compact_utf8;       /* offsetof(PyCompactUnicodeObject, utf8) */
    unsigned unicode_state, unicode_length;
    uint64_t executable_mask;    /* 3.14: f_executable is a tagged _PyStackRef */
    int cstack_owner;            /* owner value of the C-stack entry frames */
    unsigned code_adaptive;      /* offsetof(PyCodeObject, co_code_adaptive); 0: tp_basicsize */
};

static const struct py_layout layout_311 = {56, 8, 32, 48, 56, 69, 68, 112, 128, 48, 72, 56,
                                            32, 16, ~0ull, 3, 0};
static const struct py_layout layout_312 = {56, 0, 0, 8, 56, 70, -1, 112, 128, 40, 56, 48,
                                            32, 16, ~0ull, 3, 0};

/* Where the members this reader needs sit inside _Py_DebugOffsets, in 8-byte words: the
 * struct gains members between minors, so each minor's positions are listed once (3.13 from
 * its Include/internal/pycore_runtime.h, 3.14 from pycore_debug_offsets.h).  A minor not
 * listed is tried with the newest positions and accepted only if the values pass the same
 * checks (cookie, version, sizes that bound every offset). */
struct debug_positions {
    unsigned minor;
    unsigned thread_state, interpreter_frame, code_object, unicode_object;
};
static const struct debug_positions debug_positions[] = {
    {13, 19, 28, 34, 67},
    {14, 20, 29, 36, 73},
};
static struct py_layout L;

static void *(*get_tstate)(void);
static int (*addr2line)(void *code, int offset);
static const void *code_type;
static const void *unicode_type;
static long code_basicsize;
static int (*is_initialized)(void);
static int (*is_finalizing)(void);

/* The interpreter's objects may be read: initialized and not tearing down (finalization
 * frees frames and code objects under a reader that runs without the GIL). */
static int runtime_usable(void) {
    return is_initialized() && !(is_finalizing && is_finalizing());
}

/* Copy n bytes from p, asked of the kernel: 0 on success, -1 where p is not mapped. */
static int safe_copy(void *dst, const void *p, size_t n) {
    struct iovec local = {dst, n}, remote = {(void *)p, n};
    return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == (ssize_t)n ? 0 : -1;
}

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static int init_done;

static int layout_from_debug_offsets(unsigned minor) {
    const uint64_t *d = dlsym(RTLD_DEFAULT, "_PyRuntime");
    if (!d || memcmp(d, "xdebugpy", 8) != 0) return -1;
    if (((d[1] >> 24) & 0xff) != 3 || ((d[1] >> 16) & 0xff) != minor) return -1;
    if (d[2] != 0) return -1; /* free-threaded build: other object layouts */
    const struct debug_positions *pos = &debug_positions[0];
    for (size_t i = 0; i < sizeof debug_positions / sizeof *debug_positions; i++)
        if (debug_positions[i].minor <= minor) pos = &debug_positions[i];
    const uint64_t *ts = d + pos->thread_state, *fr = d + pos->interpreter_frame;
    const uint64_t *co = d + pos->code_object, *un = d + pos->unicode_object;
    /* Every offset lies inside its struct, and the sizes are those of the real structs. */
    if (ts[0] < 64 || ts[0] > 4096 || ts[4] >= ts[0]) return -1;
    if (fr[0] < 40 || fr[0] > 256 || fr[1] >= fr[0] || fr[2] >= fr[0] || fr[3] >= fr[0] || fr[5] >= fr[0]) return -1;
    if (co[0] < 96 || co[0] > 1024 || co[1] >= co[0] || co[3] >= co[0] || co[9] > co[0]) return -1;
    if (un[0] < 32 || un[0] > 128 || un[1] >= un[0] || un[2] >= un[0] || un[3] > un[0]) return -1;
    L.tstate_cframe = (unsigned)ts[4];
    L.cframe_current = -1;
    L.frame_previous = (unsigned)fr[1];
    L.frame_code = (unsigned)fr[2];
    L.frame_prev_instr = (unsigned)fr[3];
    L.frame_owner = (int)fr[5];
    L.frame_is_entry = -1;
    L.code_filename = (unsigned)co[1];
    L.code_qualname = (unsigned)co[3];
    L.code_adaptive = (unsigned)co[9];
    L.unicode_state = (unsigned)un[1];
    L.unicode_length = (unsigned)un[2];
    L.ascii_header = (unsigned)un[3];
    L.compact_utf8 = L.ascii_header + 8;     /* PyCompactUnicodeObject: utf8_length, utf8 */
    L.compact_header = L.ascii_header + 16;
    /* 3.14: f_executable is a _PyStackRef whose low bit tags a deferred reference; the
     * C-stack entry frames moved from owner 3 to 4 (3 is FRAME_OWNED_BY_INTERPRETER). */
    L.executable_mask = minor >= 14 ? ~(uint64_t)3 : ~(uint64_t)0;
    L.cstack_owner = minor >= 14 ? 4 : 3;
    return 0;
}

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
    init_done = 1; /* an interpreter is here: its verdict is final */
    if (major != 3) return;
    xp_py_minor = minor;
    if (minor == 11) L = layout_311;
    else if (minor == 12) L = layout_312;
    else if (minor < 11 || layout_from_debug_offsets(minor) != 0) return;
    get_tstate = (void *(*)(void))dlsym(RTLD_DEFAULT, "PyGILState_GetThisThreadState");
    addr2line = (int (*)(void *, int))dlsym(RTLD_DEFAULT, "PyCode_Addr2Line");
    is_initialized = (int (*)(void))dlsym(RTLD_DEFAULT, "Py_IsInitialized");
    is_finalizing = (int (*)(void))dlsym(RTLD_DEFAULT, "Py_IsFinalizing"); /* 3.13+ */
    if (!is_finalizing) is_finalizing = (int (*)(void))dlsym(RTLD_DEFAULT, "_Py_IsFinalizing");
    code_type = dlsym(RTLD_DEFAULT, "PyCode_Type");
    unicode_type = dlsym(RTLD_DEFAULT, "PyUnicode_Type");
    if (!get_tstate || !addr2line || !code_type || !unicode_type || !is_initialized) return;
    /* co_code_adaptive ends the variable-size code object: its offset is tp_basicsize. */
    code_basicsize = L.code_adaptive ? (long)L.code_adaptive : *(const long *)((const char *)code_type + 32);
    xp_py_enabled = 1;
}

/* Until an interpreter is found this may be called again (the CPU sampler is loaded before
 * an embedding program loads libpython); once found, the first answer stands. */
void xp_py_init(void) {
    pthread_mutex_lock(&init_lock);
    if (!init_done) do_init();
    pthread_mutex_unlock(&init_lock);
}

static inline const void *type_of(const void *obj) { return *(const void *const *)((const char *)obj + 8); }
static inline const void *field(const void *base, unsigned off) { return *(const void *const *)((const char *)base + off); }

/* A pointer the walk may follow: non-null, 8-aligned, in user space.  A frame chain caught
 * mid-update can still hold a stale one: the sampler walks under fault recovery. */
static inline int plausible(const void *p) {
    uint64_t a = (uint64_t)p;
    return a >= 4096 && (a & 7) == 0 && a < (1ull << 47);
}

/* The CPU sampler's walk.  A signal can land while the interpreter pushes or pops a frame,
 * when a `previous` or code pointer may be stale: the caller runs this under its fault
 * recovery (sampler.c: a SIGSEGV/SIGBUS in here returns to the caller, counted), so reads
 * are plain loads.  Each frame's line is computed now, while the live frame holds its code
 * object (cached per (code, offset) in `lines`); names are read later, by safe copies
 * (xp_py_frame_id_at_line). */
int xp_py_walk_lines(struct xp_pyframe_key *keys, int max, struct xp_line_cache *lines) {
    int n = xp_py_walk(keys, max);
    for (int i = 0; i < n; i++) {
        if (!keys[i].code) continue;
        uint64_t h = ((keys[i].code >> 4) ^ (keys[i].offset * 0x9E3779B97F4A7C15ull)) >> 54;
        struct xp_line_slot *e = &lines->slot[h & (XP_LINE_CACHE_SLOTS - 1)];
        if (e->code == keys[i].code && e->offset == keys[i].offset) {
            keys[i].offset = (uint64_t)(int64_t)e->line;
            continue;
        }
        int line = addr2line((void *)keys[i].code, (int)keys[i].offset);
        e->code = keys[i].code;
        e->offset = keys[i].offset;
        e->line = line;
        keys[i].offset = (uint64_t)(int64_t)line;
    }
    return n;
}

int xp_py_walk(struct xp_pyframe_key *keys, int max) {
    if (!xp_py_enabled) return 0;
    /* Before Py_Initialize (and after finalization) the thread-state key is not a key. */
    if (!runtime_usable()) return 0;
    const char *tstate = get_tstate();
    if (!plausible(tstate)) return 0;
    const char *frame;
    if (L.cframe_current >= 0) {
        const char *cframe = field(tstate, L.tstate_cframe);
        if (!plausible(cframe)) return 0;
        frame = field(cframe, (unsigned)L.cframe_current);
    } else {
        frame = field(tstate, L.tstate_cframe);
    }
    int n = 0;
    while (frame && n < max) {
        if (!plausible(frame)) { xp_py_guard_failures++; break; }
        const char *code = (const char *)((uint64_t)field(frame, L.frame_code) & L.executable_mask);
        int is_shim = L.frame_owner >= 0 && L.frame_is_entry < 0 && frame[L.frame_owner] == L.cstack_owner;
        if (is_shim) {
            keys[n].code = 0;
            keys[n].offset = 0;
            n++;
        } else if (L.frame_owner >= 0 && L.cstack_owner == 4 && frame[L.frame_owner] == 3) {
            /* 3.14's interpreter-owned frames run no user code: skipped. */
        } else {
            if (!plausible(code) || type_of(code) != code_type) { xp_py_guard_failures++; break; }
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
 * UTF-8 form come out with '?' for each non-ASCII character).  Every read is a safe copy:
 * the object may be gone since it was sampled ("<?>" then, never a fault). */
static void unicode_text(const char *obj, char *buf, size_t cap) {
    char head[128];
    size_t head_len = L.compact_header <= sizeof head ? L.compact_header : sizeof head;
    if (!plausible(obj) || safe_copy(head, obj, head_len) != 0 ||
        *(const void *const *)(head + 8) != unicode_type) { strcpy(buf, "<?>"); return; }
    int64_t length = *(const int64_t *)(head + L.unicode_length);
    uint32_t state = *(const uint32_t *)(head + L.unicode_state);
    unsigned kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
    if (!compact || length < 0 || (kind != 1 && kind != 2 && kind != 4)) { strcpy(buf, "<?>"); return; }
    size_t n = (size_t)length < cap - 1 ? (size_t)length : cap - 1;
    if (ascii) {
        if (safe_copy(buf, obj + L.ascii_header, n) != 0) { strcpy(buf, "<?>"); return; }
        buf[n] = 0;
        return;
    }
    const char *utf8 = field(head, L.compact_utf8);
    if (utf8) { /* PyCompactUnicodeObject: utf8_length, then utf8 */
        int64_t u = *(const int64_t *)(head + L.ascii_header);
        size_t m = u < 0 ? 0 : (size_t)u < cap - 1 ? (size_t)u : cap - 1;
        if (safe_copy(buf, utf8, m) != 0) { strcpy(buf, "<?>"); return; }
        buf[m] = 0;
        return;
    }
    uint32_t data[1024];
    if (n > sizeof data / sizeof *data) n = sizeof data / sizeof *data;
    if (safe_copy(data, obj + L.compact_header, n * kind) != 0) { strcpy(buf, "<?>"); return; }
    for (size_t i = 0; i < n; i++) {
        uint32_t ch = kind == 1 ? ((const uint8_t *)data)[i]
                    : kind == 2 ? ((const uint16_t *)data)[i] : data[i];
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

static uint32_t frame_id_for(uint64_t code_addr, int line);

/* Whether code still is a code object, read safely (it may have been freed since). */
static int still_code(uint64_t code) {
    const void *type = NULL;
    return safe_copy(&type, (const char *)code + 8, sizeof type) == 0 && type == code_type;
}

uint32_t xp_py_frame_id(struct xp_pyframe_key key) {
    if (key.code == 0 || !runtime_usable() || !still_code(key.code)) return 0;
    return frame_id_for(key.code, addr2line((void *)key.code, (int)key.offset));
}

uint32_t xp_py_frame_id_at_line(struct xp_pyframe_key key) {
    /* Sampled up to a scan period ago: the code object may be freed since, so its names are
     * read with safe copies and checked for their types (a reused block gives "<?>"). */
    if (key.code == 0 || !xp_py_enabled || !still_code(key.code)) return 0;
    return frame_id_for(key.code, (int)(int64_t)key.offset);
}

void xp_py_fork_child(void) {
    pthread_mutex_init(&init_lock, NULL);
    pthread_mutex_init(&table_lock, NULL);
    free(table);
    table = NULL;
    table_cap = table_used = 0;
    next_id = 1;
}

static uint32_t frame_id_for(uint64_t code_addr, int line) {
    const char *code = (const char *)code_addr;
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
    uint64_t h = (code_addr * 31 + (uint64_t)line) * 0x9E3779B97F4A7C15ull;
    uint32_t j = (uint32_t)(h >> 32) & (table_cap - 1);
    while (table[j].id) {
        if (table[j].code == code_addr && table[j].line == line) {
            uint32_t id = table[j].id;
            pthread_mutex_unlock(&table_lock);
            return id;
        }
        j = (j + 1) & (table_cap - 1);
    }
    uint32_t id = next_id++;
    table[j] = (struct pyframe_entry){code_addr, line, id};
    table_used++;
    char filename[1024], qualname[512];
    const char *names[2] = {NULL, NULL};
    if (safe_copy(&names[0], code + L.code_filename, 8) != 0) names[0] = NULL;
    if (safe_copy(&names[1], code + L.code_qualname, 8) != 0) names[1] = NULL;
    unicode_text(names[0], filename, sizeof filename);
    unicode_text(names[1], qualname, sizeof qualname);
    pyframe_batch.rows = 1;
    pyframe_batch.pyframe_id[0] = id;
    pyframe_batch.filename_id[0] = xp_intern(filename);
    pyframe_batch.function_id[0] = xp_intern(qualname);
    pyframe_batch.line[0] = line < 0 ? 0 : (uint32_t)line;
    xp_emit_PYFRAME(&pyframe_batch);
    pthread_mutex_unlock(&table_lock);
    return id;
}
