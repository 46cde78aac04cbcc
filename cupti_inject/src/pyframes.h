/* Python frames of the launching thread, read from the interpreter's frame chain without the
 * GIL: the chain belongs to this thread, which is inside a CUDA call and so not mutating it.
 * Supported: CPython 3.11 and 3.12 (layouts checked by type guards on every frame). */
#ifndef XPU_PERF_PYFRAMES_H
#define XPU_PERF_PYFRAMES_H

#include <stdint.h>

/* A raw frame: code object and byte offset of the last instruction.  code == 0 marks the
 * boundary between two _PyEval_EvalFrameDefault invocations. */
struct xp_pyframe_key { uint64_t code; uint64_t offset; };

/* Resolve the interpreter's symbols if Python is in the process (cheap to call again). */
void xp_py_init(void);
/* Innermost first; returns the count (0 when the thread runs no Python). */
int xp_py_walk(struct xp_pyframe_key *keys, int max);
/* The walk, with each key's offset replaced by its line (the CPU sampler: computed while
 * the frame is alive, resolved to names later by xp_py_frame_id_at_line). */
#define XP_LINE_CACHE_SLOTS 1024
struct xp_line_slot { uint64_t code, offset; int64_t line; };
struct xp_line_cache { struct xp_line_slot slot[XP_LINE_CACHE_SLOTS]; };
int xp_py_walk_lines(struct xp_pyframe_key *keys, int max, struct xp_line_cache *lines);
uint32_t xp_py_frame_id_at_line(struct xp_pyframe_key key);
/* Cold path: the PYFRAME id for a key, emitting PYFRAME/STRING chunks on first sight. */
uint32_t xp_py_frame_id(struct xp_pyframe_key key);
/* A forked child's stream is new: its frames get ids (and PYFRAME rows) of their own. */
void xp_py_fork_child(void);
extern int xp_py_enabled;
/* CPython 3.x in the process: x (0: none found), supported or not. */
extern unsigned xp_py_minor;
extern uint64_t xp_py_guard_failures;

#endif
