/* Transport: columnar chunks (protos/cupti_stream.def) written to one file per process by a
 * background thread.  The application's threads only append to memory; the writer thread does
 * every write(2).  Memory is bounded: past the limit a chunk is dropped and counted. */
#ifndef XPU_PERF_STREAM_H
#define XPU_PERF_STREAM_H

#include <stddef.h>
#include <stdint.h>

#define XP_BATCH_ROWS 4096

struct xp_str { const char *ptr; uint32_t len; };
struct xp_u64list { const uint64_t *ptr; uint32_t count; };
struct xp_u32list { const uint32_t *ptr; uint32_t count; };

#define XP_CTYPE_U32 uint32_t
#define XP_CTYPE_I32 int32_t
#define XP_CTYPE_U64 uint64_t
#define XP_CTYPE_F64 double
#define XP_CTYPE_STR struct xp_str
#define XP_CTYPE_U64LIST struct xp_u64list
#define XP_CTYPE_U32LIST struct xp_u32list

enum xp_chunk_type {
#define XP_CHUNK(n, id) XP_CHUNK_##n = id,
#define XP_COL(n, c, k)
#define XP_END(n)
#include "../../protos/cupti_stream.def"
#undef XP_CHUNK
#undef XP_COL
#undef XP_END
};

/* One struct-of-arrays batch per chunk type, XP_BATCH_ROWS rows. */
#define XP_CHUNK(n, id) struct xp_batch_##n { uint32_t rows;
#define XP_COL(n, c, k) XP_CTYPE_##k c[XP_BATCH_ROWS];
#define XP_END(n) };
#include "../../protos/cupti_stream.def"
#undef XP_CHUNK
#undef XP_COL
#undef XP_END

/* Encode a batch into a freshly allocated chunk and queue it for the writer (bounded; on
 * overflow the rows are counted as dropped).  Resets b->rows. */
#define XP_CHUNK(n, id) void xp_emit_##n(struct xp_batch_##n *b);
#define XP_COL(n, c, k)
#define XP_END(n)
#include "../../protos/cupti_stream.def"
#undef XP_CHUNK
#undef XP_COL
#undef XP_END

/* One-row conveniences for cold chunks. */
void xp_emit_string(uint32_t id, const char *text);
void xp_emit_counter(const char *name, uint64_t value);
void xp_emit_thread(uint32_t tid, const char *name);

/* File name prefix: <prefix>-<pid>.xpstream ("cupti" unless the library sets another). */
extern const char *xp_stream_prefix;
/* The environment variable naming the output directory (XPU_PERF_OUT_DIR unless set). */
extern const char *xp_stream_dir_env;
/* Open the stream for this process (directory from XPU_PERF_OUT_DIR) and start the writer. */
int xp_stream_start(void);
/* Called before the flush at exit/signal/period to pull in data that sits elsewhere. */
typedef void (*xp_flush_hook)(int final);
void xp_stream_set_flush_hook(xp_flush_hook hook);
/* Drain everything to the file; final (XP_FLUSH_FINAL, XP_FLUSH_EXEC): also write counters
 * and close; before an exec, a stream without events is removed (nothing of this image). */
enum { XP_FLUSH_PERIODIC = 0, XP_FLUSH_FINAL = 1, XP_FLUSH_EXEC = 2 };
void xp_stream_flush(int final);
/* Stop the writer thread for a moment (0: it was not running here); the process changes user
 * and glibc's set*id must find no thread of ours (process_hooks.c).  Resume restarts it. */
int xp_stream_pause_writer(void);
void xp_stream_resume_writer(void);
/* Where a process of user `uid` writes when it cannot write into dir itself: dir/uid-N. */
void xp_stream_user_dir(char *buf, size_t size, const char *dir, unsigned uid);
/* Bytes and chunks dropped because the queue was full. */
extern uint64_t xp_dropped_rows;
uint64_t xp_now_ns(void);
int xp_stream_enabled(void);

#endif
