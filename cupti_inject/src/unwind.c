/* See unwind.h.  x86-64 only; DWARF register numbers: 6 rbp, 7 rsp, 16 return address. */
#define _GNU_SOURCE
#include "unwind.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

uint64_t xp_unwind_cfi_misses;
uint64_t xp_unwind_fp_fallbacks;

/* CFA_END: the CFI says this frame has no caller (DW_CFA_undefined of the return address, as
 * in _start and clone): the walk stops here instead of reading a stack word as a pc. */
/* CFA_SIGNAL: the frame is a signal trampoline (__restore_rt, CIE augmentation 'S'): the
 * interrupted registers are in the ucontext at rsp.  CFA_PLT: a PLT stub, whose CFA is
 * rsp + 8, or rsp + 16 once the stub's push has run (pc & 15 >= rbp_off). */
enum { CFA_RSP = 0, CFA_RBP = 1, CFA_DEREF_RBP = 2, CFA_DEREF_RSP = 3, CFA_SIGNAL = 4,
       CFA_PLT = 5, CFA_END = 6, CFA_INVALID = 7 };
enum { RBP_SAME = 0, RBP_AT_CFA = 1, RBP_AT_RBP = 2 };

/* How to step from a frame at one pc to its caller. */
struct rule {
    int32_t cfa_off;
    int16_t rbp_off;
    uint8_t cfa_kind;
    uint8_t rbp_kind;
};

/* A rule cache slot is struct xp_rule_slot (unwind.h: the sampler keeps its own caches),
 * whose `rule` word holds a struct rule. */
#define CACHE_BITS 14
#define CACHE_SIZE (1u << CACHE_BITS)

/* The frames of this thread's previous unwind: (pc looked up, rsp at that frame, its rule).
 * Launch stacks repeat, and most of a stack equals the previous one's frames (same pcs at the
 * same depth from the top, or the same rsp in the shared outer part), so the walk takes the
 * rule from here, read sequentially, before it falls back to the hashed rule cache: the hashed
 * cache costs one cold cache line per frame after the application's own work between two
 * launches has evicted it (22 ns/frame on the H100 host, docs/benchmarks.md).  A rule depends
 * on the pc alone, so a reused rule is exactly the one the cache would give. */
#define MEMO_FRAMES 128
struct frame_memo {
    int n;
    uint64_t pc[MEMO_FRAMES];
    uint64_t rsp[MEMO_FRAMES];
    struct rule rule[MEMO_FRAMES];
};

struct thread_unwind {
    struct xp_rule_slot *cache;
    struct frame_memo *memo, *next_memo; /* previous unwind; the one being written */
    uint64_t stack_lo, stack_hi;
    int ready;
};

/* initial-exec: a plain %fs-relative load, not a __tls_get_addr call per access (this
 * library is dlopen'ed, which would otherwise make every TLS access a call). */
static __thread struct thread_unwind tls __attribute__((tls_model("initial-exec")));
static pthread_key_t cache_key;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;

/* One allocation per thread: the rule cache, then the two frame memos. */
static void free_cache(void *p) { free(p); }
static void make_key(void) { pthread_key_create(&cache_key, free_cache); }

static int thread_setup(void) {
    if (tls.ready) return tls.cache != NULL;
    tls.ready = 1;
    pthread_once(&cache_once, make_key);
    char *block = calloc(1, CACHE_SIZE * sizeof(struct xp_rule_slot) + 2 * sizeof(struct frame_memo));
    if (!block) return 0;
    tls.cache = (struct xp_rule_slot *)block;
    tls.memo = (struct frame_memo *)(block + CACHE_SIZE * sizeof(struct xp_rule_slot));
    tls.next_memo = tls.memo + 1;
    pthread_setspecific(cache_key, block);
    pthread_attr_t attr;
    void *addr = NULL;
    size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
        pthread_attr_getstack(&attr, &addr, &size);
        pthread_attr_destroy(&attr);
    }
    tls.stack_lo = (uint64_t)addr;
    tls.stack_hi = (uint64_t)addr + size;
    return 1;
}

/* ---- DWARF reading ---- */
static uint64_t read_uleb(const uint8_t **p, const uint8_t *end) {
    uint64_t v = 0;
    unsigned shift = 0;
    while (*p < end) {
        uint8_t b = *(*p)++;
        if (shift < 64) v |= (uint64_t)(b & 0x7f) << shift;
        shift += 7;
        if (!(b & 0x80)) break;
    }
    return v;
}

static int64_t read_sleb(const uint8_t **p, const uint8_t *end) {
    int64_t v = 0;
    unsigned shift = 0;
    uint8_t b = 0;
    while (*p < end) {
        b = *(*p)++;
        if (shift < 64) v |= (int64_t)(b & 0x7f) << shift;
        shift += 7;
        if (!(b & 0x80)) break;
    }
    if (shift < 64 && (b & 0x40)) v |= -((int64_t)1 << shift);
    return v;
}

/* DW_EH_PE pointer encodings; data_base is the .eh_frame_hdr address for datarel. */
static int read_encoded(const uint8_t **p, const uint8_t *end, uint8_t enc, uint64_t data_base,
                        uint64_t *out) {
    if (enc == 0xff) return 0;
    const uint8_t *start = *p;
    uint64_t v;
    switch (enc & 0x0f) {
    case 0x00: if (end - *p < 8) return -1; memcpy(&v, *p, 8); *p += 8; break;
    case 0x01: v = read_uleb(p, end); break;
    case 0x02: { uint16_t x; if (end - *p < 2) return -1; memcpy(&x, *p, 2); *p += 2; v = x; break; }
    case 0x03: { uint32_t x; if (end - *p < 4) return -1; memcpy(&x, *p, 4); *p += 4; v = x; break; }
    case 0x04: if (end - *p < 8) return -1; memcpy(&v, *p, 8); *p += 8; break;
    case 0x09: v = (uint64_t)read_sleb(p, end); break;
    case 0x0a: { int16_t x; if (end - *p < 2) return -1; memcpy(&x, *p, 2); *p += 2; v = (uint64_t)(int64_t)x; break; }
    case 0x0b: { int32_t x; if (end - *p < 4) return -1; memcpy(&x, *p, 4); *p += 4; v = (uint64_t)(int64_t)x; break; }
    case 0x0c: if (end - *p < 8) return -1; memcpy(&v, *p, 8); *p += 8; break;
    default: return -1;
    }
    switch (enc & 0x70) {
    case 0x00: break;
    case 0x10: v += (uint64_t)start; break;
    case 0x30: v += data_base; break;
    default: return -1;
    }
    if (enc & 0x80) v = *(const uint64_t *)v; /* indirect */
    *out = v;
    return 0;
}

/* Locate .eh_frame_hdr of the object containing pc. */
#ifndef DLFO_EH_SEGMENT_TYPE
struct find_ctx { uint64_t pc; const uint8_t *hdr; };

static int find_phdr_cb(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    struct find_ctx *ctx = data;
    int inside = 0;
    const uint8_t *hdr = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uint64_t lo = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && ctx->pc >= lo && ctx->pc < lo + ph->p_memsz) inside = 1;
        if (ph->p_type == PT_GNU_EH_FRAME) hdr = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr);
    }
    if (inside) { ctx->hdr = hdr; return 1; }
    return 0;
}
#endif

static const uint8_t *find_eh_frame_hdr(uint64_t pc) {
#ifdef DLFO_EH_SEGMENT_TYPE
    struct dl_find_object dlfo;
    if (_dl_find_object((void *)pc, &dlfo) == 0) return dlfo.dlfo_eh_frame;
    return NULL;
#else
    struct find_ctx ctx = {pc, NULL};
    dl_iterate_phdr(find_phdr_cb, &ctx);
    return ctx.hdr;
#endif
}

/* Register-rule state while interpreting a CFA program. */
struct cfa_state {
    uint8_t cfa_kind;
    uint8_t cfa_reg;
    int64_t cfa_off;
    uint8_t rbp_kind;
    int64_t rbp_off;
    uint8_t ra_defined;
    uint8_t ra_undefined; /* DW_CFA_undefined of the return address is in force */
};

/* The linker's CFA expression for .plt entries: rsp + 8, plus 8 once pc & 15 >= k
 * (DW_OP_breg7 8; DW_OP_breg16 0; DW_OP_lit15; DW_OP_and; DW_OP_lit<k>; DW_OP_ge;
 * DW_OP_lit3; DW_OP_shl; DW_OP_plus).  Returns k, or -1 for any other expression. */
static int plt_expression(const uint8_t *e, uint64_t len) {
    static const uint8_t head[] = {0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a};
    static const uint8_t tail[] = {0x2a, 0x33, 0x24, 0x22};
    if (len != sizeof head + 1 + sizeof tail) return -1;
    if (memcmp(e, head, sizeof head) != 0 || memcmp(e + sizeof head + 1, tail, sizeof tail) != 0)
        return -1;
    uint8_t lit = e[sizeof head];
    if (lit < 0x30 || lit > 0x4f) return -1;
    return lit - 0x30;
}

static int set_cfa_expression(struct cfa_state *st, const uint8_t *e, uint64_t len) {
    /* Supports the stack-realignment form: DW_OP_breg{6,7} off; DW_OP_deref; and PLT stubs. */
    const uint8_t *end = e + len;
    int plt_k = plt_expression(e, len);
    if (plt_k >= 0) {
        st->cfa_kind = CFA_PLT;
        st->cfa_off = 8;
        st->rbp_kind = RBP_SAME;
        st->rbp_off = plt_k;
        return 0;
    }
    if (len < 3) return -1;
    uint8_t op = *e++;
    if (op != 0x76 && op != 0x77) return -1;
    int64_t off = read_sleb(&e, end);
    if (e + 1 != end || *e != 0x06) return -1;
    st->cfa_kind = op == 0x76 ? CFA_DEREF_RBP : CFA_DEREF_RSP;
    st->cfa_off = off;
    return 0;
}

static int rbp_expression(struct cfa_state *st, const uint8_t *e, uint64_t len) {
    /* DW_OP_breg6 off: rbp saved at rbp + off (realigned frames). */
    const uint8_t *end = e + len;
    if (len < 2 || *e++ != 0x76) return -1;
    int64_t off = read_sleb(&e, end);
    if (e != end) return -1;
    st->rbp_kind = RBP_AT_RBP;
    st->rbp_off = off;
    return 0;
}

/* Run CFA instructions [p, end) while loc <= target. Returns 1 when target was passed. */
static int run_cfa(const uint8_t *p, const uint8_t *end, uint64_t *loc, uint64_t target,
                   uint64_t code_align, int64_t data_align, struct cfa_state *st,
                   const struct cfa_state *initial) {
    struct cfa_state saved[8];
    int nsaved = 0;
    while (p < end) {
        uint8_t op = *p++;
        uint8_t hi = op & 0xc0, lo = op & 0x3f;
        uint64_t reg, delta = 0;
        int64_t off;
        if (hi == 0x40) { delta = lo * code_align; goto advance; }
        if (hi == 0x80) {
            off = (int64_t)read_uleb(&p, end) * data_align;
            if (lo == 6) { st->rbp_kind = RBP_AT_CFA; st->rbp_off = off; }
            if (lo == 16) { st->ra_defined = 1; st->ra_undefined = 0; }
            continue;
        }
        if (hi == 0xc0) {
            if (lo == 6) { st->rbp_kind = initial->rbp_kind; st->rbp_off = initial->rbp_off; }
            continue;
        }
        switch (op) {
        case 0x00: break;
        case 0x01: { uint64_t v; memcpy(&v, p, 8); p += 8; if (v > target) return 1; *loc = v; break; }
        case 0x02: delta = (uint64_t)*p++ * code_align; goto advance;
        case 0x03: { uint16_t v; memcpy(&v, p, 2); p += 2; delta = v * code_align; goto advance; }
        case 0x04: { uint32_t v; memcpy(&v, p, 4); p += 4; delta = v * code_align; goto advance; }
        case 0x05: reg = read_uleb(&p, end); off = (int64_t)read_uleb(&p, end) * data_align;
            if (reg == 6) { st->rbp_kind = RBP_AT_CFA; st->rbp_off = off; }
            if (reg == 16) { st->ra_defined = 1; st->ra_undefined = 0; }
            break;
        case 0x06: reg = read_uleb(&p, end);
            if (reg == 6) { st->rbp_kind = initial->rbp_kind; st->rbp_off = initial->rbp_off; }
            break;
        case 0x07: reg = read_uleb(&p, end); if (reg == 16) { st->ra_defined = 0; st->ra_undefined = 1; } break;
        case 0x08: reg = read_uleb(&p, end); if (reg == 6) st->rbp_kind = RBP_SAME; break;
        case 0x09: reg = read_uleb(&p, end); read_uleb(&p, end);
            if (reg == 6 || reg == 16) return -1;
            break;
        case 0x0a: if (nsaved < 8) saved[nsaved++] = *st; else return -1; break;
        case 0x0b: if (nsaved > 0) { uint8_t k = st->ra_defined; *st = saved[--nsaved]; st->ra_defined |= k; } break;
        case 0x0c: st->cfa_reg = (uint8_t)read_uleb(&p, end); st->cfa_off = (int64_t)read_uleb(&p, end);
            st->cfa_kind = 0; break;
        case 0x0d: st->cfa_reg = (uint8_t)read_uleb(&p, end); st->cfa_kind = 0; break;
        case 0x0e: st->cfa_off = (int64_t)read_uleb(&p, end); break;
        case 0x0f: { uint64_t len = read_uleb(&p, end);
            if (set_cfa_expression(st, p, len) != 0) st->cfa_kind = CFA_INVALID;
            else st->cfa_reg = 0xff;
            p += len; break; }
        case 0x10: { reg = read_uleb(&p, end); uint64_t len = read_uleb(&p, end);
            if (reg == 6 && rbp_expression(st, p, len) != 0) return -1;
            if (reg == 16) return -1;
            p += len; break; }
        case 0x11: reg = read_uleb(&p, end); off = read_sleb(&p, end) * data_align;
            if (reg == 6) { st->rbp_kind = RBP_AT_CFA; st->rbp_off = off; }
            if (reg == 16) { st->ra_defined = 1; st->ra_undefined = 0; }
            break;
        case 0x12: st->cfa_reg = (uint8_t)read_uleb(&p, end); st->cfa_off = read_sleb(&p, end) * data_align;
            st->cfa_kind = 0; break;
        case 0x13: st->cfa_off = read_sleb(&p, end) * data_align; break;
        case 0x14: case 0x15: reg = read_uleb(&p, end); read_uleb(&p, end);
            if (reg == 6 || reg == 16) return -1;
            break;
        case 0x16: { reg = read_uleb(&p, end); uint64_t len = read_uleb(&p, end); p += len;
            if (reg == 6 || reg == 16) return -1;
            break; }
        case 0x2e: read_uleb(&p, end); break;
        case 0x2f: reg = read_uleb(&p, end); off = -(int64_t)read_uleb(&p, end) * data_align;
            if (reg == 6) { st->rbp_kind = RBP_AT_CFA; st->rbp_off = off; }
            break;
        default: return -1;
        }
        continue;
    advance:
        if (*loc + delta > target) return 1;
        *loc += delta;
    }
    return 0;
}

/* Compute the unwind rule at pc from .eh_frame; -1 when there is none we can follow. */
static int compute_rule(uint64_t pc, struct rule *out) {
    const uint8_t *hdr = find_eh_frame_hdr(pc);
    if (!hdr || hdr[0] != 1) return -1;
    const uint8_t *p = hdr + 4;
    const uint8_t *hend = hdr + (1u << 30);
    uint64_t eh_frame, count;
    if (read_encoded(&p, hend, hdr[1], (uint64_t)hdr, &eh_frame) != 0) return -1;
    if (read_encoded(&p, hend, hdr[2], (uint64_t)hdr, &count) != 0) return -1;
    if (hdr[3] != 0x3b || count == 0) return -1; /* datarel | sdata4 table */
    const int32_t *table = (const int32_t *)p;
    int64_t rel = (int64_t)(pc - (uint64_t)hdr);
    uint64_t lo = 0, hi = count;
    while (hi - lo > 1) {
        uint64_t mid = (lo + hi) / 2;
        if (table[2 * mid] <= rel) lo = mid; else hi = mid;
    }
    if (table[2 * lo] > rel) return -1;
    const uint8_t *fde = hdr + table[2 * lo + 1];

    /* FDE */
    uint32_t len32;
    memcpy(&len32, fde, 4);
    if (len32 == 0xffffffffu || len32 == 0) return -1;
    const uint8_t *fde_end = fde + 4 + len32;
    const uint8_t *q = fde + 4;
    int32_t cie_off;
    memcpy(&cie_off, q, 4);
    const uint8_t *cie = q - cie_off;
    q += 4;

    /* CIE */
    uint32_t cie_len;
    memcpy(&cie_len, cie, 4);
    if (cie_len == 0xffffffffu) return -1;
    const uint8_t *cie_end = cie + 4 + cie_len;
    const uint8_t *c = cie + 8;
    uint8_t version = *c++;
    const char *aug = (const char *)c;
    c += strlen(aug) + 1;
    if (version >= 4) c += 2;
    uint64_t code_align = read_uleb(&c, cie_end);
    int64_t data_align = read_sleb(&c, cie_end);
    if (version == 1) c++; else read_uleb(&c, cie_end);
    uint8_t fde_enc = 0, lsda_enc = 0xff;
    int has_z = aug[0] == 'z';
    if (has_z) {
        uint64_t aug_len = read_uleb(&c, cie_end);
        const uint8_t *aug_end = c + aug_len;
        for (const char *a = aug + 1; *a; a++) {
            if (*a == 'R') fde_enc = *c++;
            else if (*a == 'L') lsda_enc = *c++;
            else if (*a == 'P') { uint8_t e = *c++; uint64_t dummy; if (read_encoded(&c, aug_end, e & 0x7f, 0, &dummy) != 0) return -1; }
            else if (*a == 'S') { out->cfa_kind = CFA_SIGNAL; out->cfa_off = 0; out->rbp_kind = RBP_SAME; out->rbp_off = 0; return 0; }
        }
        c = aug_end;
    }
    (void)lsda_enc;
    uint64_t pc_begin, pc_range;
    if (read_encoded(&q, fde_end, fde_enc, (uint64_t)hdr, &pc_begin) != 0) return -1;
    if (read_encoded(&q, fde_end, fde_enc & 0x0f, 0, &pc_range) != 0) return -1;
    if (pc < pc_begin || pc >= pc_begin + pc_range) return -1;
    if (has_z) { uint64_t l = read_uleb(&q, fde_end); q += l; }

    struct cfa_state st = {0}, initial;
    st.cfa_reg = 7;
    st.cfa_off = 8;
    st.rbp_kind = RBP_SAME;
    uint64_t loc = pc_begin;
    if (run_cfa(c, cie_end, &loc, UINT64_MAX, code_align, data_align, &st, &st) < 0) return -1;
    initial = st;
    loc = pc_begin;
    if (run_cfa(q, fde_end, &loc, pc, code_align, data_align, &st, &initial) < 0) return -1;

    if (st.cfa_kind == CFA_INVALID) return -1;
    if (st.ra_undefined) {
        out->cfa_kind = CFA_END;
        return 0;
    }
    if (st.cfa_kind == CFA_PLT) {
        *out = (struct rule){8, (int16_t)st.rbp_off, CFA_PLT, RBP_SAME};
        return 0;
    }
    if (st.cfa_kind == CFA_DEREF_RBP || st.cfa_kind == CFA_DEREF_RSP) out->cfa_kind = st.cfa_kind;
    else if (st.cfa_reg == 7) out->cfa_kind = CFA_RSP;
    else if (st.cfa_reg == 6) out->cfa_kind = CFA_RBP;
    else return -1;
    if (st.cfa_off > INT32_MAX || st.cfa_off < INT32_MIN) return -1;
    if (st.rbp_off > INT16_MAX || st.rbp_off < INT16_MIN) return -1;
    out->cfa_off = (int32_t)st.cfa_off;
    out->rbp_kind = st.rbp_kind;
    out->rbp_off = (int16_t)st.rbp_off;
    return 0;
}

/* The rule at pc from a hashed cache of 2^bits slots, computed (and counted) on a miss. */
static inline int cached_rule(struct xp_rule_slot *slots, unsigned bits, uint64_t *misses,
                              uint64_t pc, struct rule *out) {
    _Static_assert(sizeof(struct rule) == sizeof(uint64_t), "a rule fills a slot's word");
    struct xp_rule_slot *e = &slots[(pc * 0x9E3779B97F4A7C15ull) >> (64 - bits)];
    if (e->pc == pc) {
        memcpy(out, &e->rule, sizeof *out);
    } else {
        (*misses)++;
        if (compute_rule(pc, out) != 0) out->cfa_kind = CFA_INVALID;
        e->pc = pc;
        memcpy(&e->rule, out, sizeof *out);
    }
    return out->cfa_kind == CFA_INVALID ? -1 : 0;
}

static inline int on_stack_of(const struct thread_unwind *t, uint64_t addr) {
    return addr >= t->stack_lo && addr + 8 <= t->stack_hi && (addr & 7) == 0;
}

__attribute__((noinline)) int xp_unwind(uint64_t *pcs, int max) {
    if (!thread_setup()) return 0;
    uint64_t rip, rsp, rbp;
    __asm__ volatile("lea 0(%%rip), %0\n\tmov %%rsp, %1\n\tmov %%rbp, %2"
                     : "=r"(rip), "=r"(rsp), "=r"(rbp));
    struct thread_unwind *t = &tls;
#define on_stack(a) on_stack_of(t, (a))
    const struct frame_memo *prev = t->memo;
    struct frame_memo *cur = t->next_memo;
    int n = 0, f = 0, j = 0;
    int first = 1;
    /* The previous unwind read each caller's return address just below its rsp: ask for
     * those stack lines all at once, so their cache misses overlap instead of queueing one
     * per frame (a prefetch never faults, so a stale address is harmless). */
    for (int i = 1; i < prev->n; i++) __builtin_prefetch((const void *)(prev->rsp[i] - 8));
    while (n < max) {
        struct rule r;
        uint64_t cfa;
        /* A return address points after the call; look up the call itself. */
        uint64_t lookup_pc = first ? rip : rip - 1;
        /* Same frame as the previous unwind at this position from the top, or (after the
         * stacks diverged) at this rsp in their shared outer part: take its rule. */
        int known = j < prev->n && prev->pc[j] == lookup_pc;
        if (!known) {
            while (j < prev->n && prev->rsp[j] < rsp) j++;
            known = j < prev->n && prev->pc[j] == lookup_pc;
        }
        int usable;
        if (known) {
            r = prev->rule[j++];
            usable = r.cfa_kind != CFA_INVALID;
        } else {
            usable = cached_rule(t->cache, CACHE_BITS, &xp_unwind_cfi_misses, lookup_pc, &r) == 0;
            /* A launch stack is taken by a call, never across a signal frame or from inside
             * a PLT stub: those rules are for the sampler's walk (xp_unwind_regs). */
            if (usable && (r.cfa_kind == CFA_SIGNAL || r.cfa_kind == CFA_PLT)) usable = 0;
            if (!usable) r.cfa_kind = CFA_INVALID;
        }
        if (f < MEMO_FRAMES) {
            cur->pc[f] = lookup_pc;
            cur->rsp[f] = rsp;
            cur->rule[f] = r;
            f++;
        }
        if (usable && r.cfa_kind == CFA_END) break;
        if (usable) {
            switch (r.cfa_kind) {
            case CFA_RSP: cfa = rsp + (int64_t)r.cfa_off; break;
            case CFA_RBP: cfa = rbp + (int64_t)r.cfa_off; break;
            case CFA_DEREF_RBP:
                if (!on_stack(rbp + (int64_t)r.cfa_off)) goto done;
                cfa = *(const uint64_t *)(rbp + (int64_t)r.cfa_off); break;
            default:
                if (!on_stack(rsp + (int64_t)r.cfa_off)) goto done;
                cfa = *(const uint64_t *)(rsp + (int64_t)r.cfa_off); break;
            }
            if (cfa <= rsp || !on_stack(cfa - 8)) goto done;
            uint64_t ra = *(const uint64_t *)(cfa - 8);
            uint64_t new_rbp = rbp;
            if (r.rbp_kind == RBP_AT_CFA) {
                if (!on_stack(cfa + r.rbp_off)) goto done;
                new_rbp = *(const uint64_t *)(cfa + r.rbp_off);
            } else if (r.rbp_kind == RBP_AT_RBP) {
                if (!on_stack(rbp + r.rbp_off)) goto done;
                new_rbp = *(const uint64_t *)(rbp + r.rbp_off);
            }
            rsp = cfa;
            rbp = new_rbp;
            rip = ra;
        } else {
            /* No usable CFI (JIT code, hand-written asm): try the frame-pointer chain. */
            if (first || !on_stack(rbp) || rbp < rsp || !on_stack(rbp + 8)) goto done;
            xp_unwind_fp_fallbacks++;
            uint64_t ra = *(const uint64_t *)(rbp + 8);
            rsp = rbp + 16;
            rbp = *(const uint64_t *)rbp;
            rip = ra;
        }
        first = 0;
        if (rip < 4096) break;
        pcs[n++] = rip;
    }
done:
#undef on_stack
    cur->n = f;
    t->next_memo = t->memo;
    t->memo = cur;
    return n;
}

/* ---- the sampler's walk: from interrupted registers, inside a signal handler ---- */

/* Offsets in the kernel's x86-64 ucontext_t: uc_mcontext.gregs starts at 40; REG_RBP 10,
 * REG_RSP 15, REG_RIP 16. */
enum { UC_RBP = 40 + 8 * 10, UC_RSP = 40 + 8 * 15, UC_RIP = 40 + 8 * 16 };

/* The sampler's rule lookup: without _dl_find_object a miss would take the loader's lock
 * (dl_iterate_phdr), which a signal handler must not. */
static int sampler_rule(struct xp_rule_cache *cache, uint64_t pc, struct rule *out) {
#ifndef DLFO_EH_SEGMENT_TYPE
    (void)cache;
    (void)pc;
    out->cfa_kind = CFA_INVALID;
    return -1;
#else
    return cached_rule(cache->slot, XP_RULE_CACHE_BITS, &cache->misses, pc, out);
#endif
}

int xp_unwind_regs(const struct xp_regs *regs, uint64_t stack_hi, struct xp_rule_cache *cache,
                   uint64_t *pcs, int max, enum xp_unwind_end *end) {
    uint64_t rip = regs->rip, rsp = regs->rsp, rbp = regs->rbp;
    uint64_t lo = rsp;
    /* Reads are only of this thread's stack, between the interrupted rsp and its top. */
#define ON_STACK(a) ((a) >= lo && (a) + 8 <= stack_hi && ((a) & 7) == 0)
    int n = 0;
    int exact = 1; /* rip is the interrupted instruction, not a return address */
    *end = XP_END_MAX_DEPTH;
    if (rip < 4096) { *end = XP_END_BAD_PC; return 0; }
    pcs[n++] = rip;
    while (n < max) {
        struct rule r;
        uint64_t lookup_pc = exact ? rip : rip - 1;
        int usable = sampler_rule(cache, lookup_pc, &r) == 0;
        uint64_t cfa, ra, new_rbp = rbp;
        if (usable && r.cfa_kind == CFA_END) { *end = XP_END_ROOT; return n; }
        if (usable && r.cfa_kind == CFA_SIGNAL) {
            /* Entered through a signal: the frame below is the interrupted one. */
            if (!ON_STACK(rsp + UC_RBP) || !ON_STACK(rsp + UC_RIP)) { *end = XP_END_BAD_STACK; return n; }
            uint64_t uc = rsp;
            rip = *(const uint64_t *)(uc + UC_RIP);
            rbp = *(const uint64_t *)(uc + UC_RBP);
            uint64_t next_rsp = *(const uint64_t *)(uc + UC_RSP);
            if (next_rsp < lo || next_rsp >= stack_hi) { *end = XP_END_BAD_STACK; return n; }
            rsp = next_rsp;
            exact = 1;
            if (rip < 4096) { *end = XP_END_BAD_PC; return n; }
            pcs[n++] = rip;
            continue;
        }
        if (usable) {
            switch (r.cfa_kind) {
            case CFA_RSP: cfa = rsp + (int64_t)r.cfa_off; break;
            case CFA_RBP: cfa = rbp + (int64_t)r.cfa_off; break;
            case CFA_PLT: cfa = rsp + 8 + ((lookup_pc & 15) >= (uint64_t)r.rbp_off ? 8 : 0); break;
            case CFA_DEREF_RBP:
                if (!ON_STACK(rbp + (int64_t)r.cfa_off)) { *end = XP_END_BAD_STACK; return n; }
                cfa = *(const uint64_t *)(rbp + (int64_t)r.cfa_off); break;
            default:
                if (!ON_STACK(rsp + (int64_t)r.cfa_off)) { *end = XP_END_BAD_STACK; return n; }
                cfa = *(const uint64_t *)(rsp + (int64_t)r.cfa_off); break;
            }
            if (cfa <= rsp || !ON_STACK(cfa - 8)) { *end = XP_END_BAD_STACK; return n; }
            ra = *(const uint64_t *)(cfa - 8);
            if (r.cfa_kind != CFA_PLT && r.rbp_kind == RBP_AT_CFA) {
                if (!ON_STACK(cfa + r.rbp_off)) { *end = XP_END_BAD_STACK; return n; }
                new_rbp = *(const uint64_t *)(cfa + r.rbp_off);
            } else if (r.cfa_kind != CFA_PLT && r.rbp_kind == RBP_AT_RBP) {
                if (!ON_STACK(rbp + r.rbp_off)) { *end = XP_END_BAD_STACK; return n; }
                new_rbp = *(const uint64_t *)(rbp + r.rbp_off);
            }
            rsp = cfa;
        } else {
            /* No CFI for this pc (JIT code, stripped asm): the frame-pointer chain, as perf
             * does; counted, since it skips the caller of a frame that set up no rbp. */
            if (!ON_STACK(rbp) || rbp < rsp || !ON_STACK(rbp + 8)) { *end = XP_END_NO_CFI; return n; }
            cache->fp_steps++;
            ra = *(const uint64_t *)(rbp + 8);
            rsp = rbp + 16;
            new_rbp = *(const uint64_t *)rbp;
        }
        rbp = new_rbp;
        rip = ra;
        exact = 0;
        if (rip < 4096) { *end = rip == 0 ? XP_END_ROOT : XP_END_BAD_PC; return n; }
        pcs[n++] = rip;
    }
#undef ON_STACK
    return n;
}

/* The mapping that holds sp, [lo, hi), from /proc/self/maps read with plain system calls
 * (async-signal-safe: the sampler's handler and the wait wrappers look a thread's stack up
 * once).  -1: not found. */
int xp_stack_bounds(uint64_t sp, uint64_t *lo_out, uint64_t *hi_out) {
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    char buf[4096];
    size_t have = 0;
    int found = 0;
    for (;;) {
        ssize_t r = read(fd, buf + have, sizeof buf - have);
        if (r <= 0) break;
        have += (size_t)r;
        size_t line_start = 0;
        for (size_t i = 0; i < have; i++) {
            if (buf[i] != '\n') continue;
            uint64_t lo = 0, hi = 0;
            size_t k = line_start;
            while (k < i && buf[k] != '-') {
                char c = buf[k++];
                lo = lo * 16 + (uint64_t)(c <= '9' ? c - '0' : c - 'a' + 10);
            }
            k++;
            while (k < i && buf[k] != ' ') {
                char c = buf[k++];
                hi = hi * 16 + (uint64_t)(c <= '9' ? c - '0' : c - 'a' + 10);
            }
            if (sp >= lo && sp < hi) { *lo_out = lo; *hi_out = hi; found = 1; break; }
            line_start = i + 1;
        }
        if (found) break;
        memmove(buf, buf + line_start, have - line_start);
        have -= line_start;
        if (have == sizeof buf) have = 0; /* a line longer than the buffer: skip it */
    }
    close(fd);
    return found ? 0 : -1;
}
