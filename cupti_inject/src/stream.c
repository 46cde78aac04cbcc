/* Transport implementation: see stream.h and protos/README.md. */
#define _GNU_SOURCE
#include "stream.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define XP_MAGIC "XPUPERF\0"
#define XP_FORMAT_VERSION 1u

struct xp_chunk {
    struct xp_chunk *next;
    size_t size;
    uint8_t bytes[];
};

static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t queue_cond = PTHREAD_COND_INITIALIZER;
static struct xp_chunk *queue_head, *queue_tail;
static size_t queue_bytes;
static size_t queue_limit = 256u << 20; /* XPU_PERF_QUEUE_KB */
static int out_fd = -1;
static pid_t stream_pid;
/* The channel to record: the file's path and identity, so a descriptor the target closed
 * (closerange, a daemon's fd sweep) or dup2'ed over is noticed before a write, and the file
 * reopened by its path (stream_file_check).  whole_bytes: the file's length up to the last
 * whole chunk, where a reopened file is cut back to if a write failed half way. */
static char stream_path[4096];
static dev_t stream_dev;
static ino_t stream_ino;
static uint64_t whole_bytes;
static uint64_t reopened, lost_bytes;
/* Rows of events (not names, threads, modules, counters): a stream of none is empty. */
static _Atomic uint64_t event_rows;
static pthread_t writer_thread;
static int writer_running;
static int writer_stop;
static unsigned flush_period_ms = 200; /* XPU_PERF_FLUSH_MS */
static xp_flush_hook flush_hook;
static pthread_mutex_t flush_lock = PTHREAD_MUTEX_INITIALIZER;
static int closed;
static int enabled;
uint64_t xp_dropped_rows;
const char *xp_stream_prefix = "cupti";
const char *xp_stream_dir_env = "XPU_PERF_OUT_DIR";
static uint64_t written_bytes;
static uint64_t dropped_chunks;
/* What could not be written (ENOSPC or another write error), by chunk type: the UNWRITTEN
 * block (protos/cupti_stream.def) is written right after the file header with zeros and
 * rewritten in place by the final flush, into bytes the file system already holds, so these
 * counts reach record even when the disk is full.  unwritten_at: the file offset of the
 * block's value column (0: the block itself could not be written). */
#define XP_CHUNK_TYPES 64
static uint64_t unwritten_rows[XP_CHUNK_TYPES];
static uint64_t unwritten_chunks;
static uint64_t unwritten_at;

uint64_t xp_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int xp_stream_enabled(void) { return enabled; }

/* ---- column encoding ---- */
static size_t col_size_U32(const uint32_t *c, uint32_t n) { (void)c; return 4u * n; }
static size_t col_size_I32(const int32_t *c, uint32_t n) { (void)c; return 4u * n; }
static size_t col_size_U64(const uint64_t *c, uint32_t n) { (void)c; return 8u * n; }
static size_t col_size_F64(const double *c, uint32_t n) { (void)c; return 8u * n; }
static size_t col_size_STR(const struct xp_str *c, uint32_t n) {
    size_t s = 4u * n;
    for (uint32_t i = 0; i < n; i++) s += c[i].len;
    return s;
}
static size_t col_size_U64LIST(const struct xp_u64list *c, uint32_t n) {
    size_t s = 4u * n;
    for (uint32_t i = 0; i < n; i++) s += 8u * c[i].count;
    return s;
}
static size_t col_size_U32LIST(const struct xp_u32list *c, uint32_t n) {
    size_t s = 4u * n;
    for (uint32_t i = 0; i < n; i++) s += 4u * c[i].count;
    return s;
}
static uint8_t *col_put_U32(uint8_t *o, const uint32_t *c, uint32_t n) { memcpy(o, c, 4u * n); return o + 4u * n; }
static uint8_t *col_put_I32(uint8_t *o, const int32_t *c, uint32_t n) { memcpy(o, c, 4u * n); return o + 4u * n; }
static uint8_t *col_put_U64(uint8_t *o, const uint64_t *c, uint32_t n) { memcpy(o, c, 8u * n); return o + 8u * n; }
static uint8_t *col_put_F64(uint8_t *o, const double *c, uint32_t n) { memcpy(o, c, 8u * n); return o + 8u * n; }
static uint8_t *col_put_STR(uint8_t *o, const struct xp_str *c, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) { memcpy(o, &c[i].len, 4); o += 4; }
    for (uint32_t i = 0; i < n; i++) { memcpy(o, c[i].ptr, c[i].len); o += c[i].len; }
    return o;
}
static uint8_t *col_put_U64LIST(uint8_t *o, const struct xp_u64list *c, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) { memcpy(o, &c[i].count, 4); o += 4; }
    for (uint32_t i = 0; i < n; i++) { memcpy(o, c[i].ptr, 8u * c[i].count); o += 8u * c[i].count; }
    return o;
}
static uint8_t *col_put_U32LIST(uint8_t *o, const struct xp_u32list *c, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) { memcpy(o, &c[i].count, 4); o += 4; }
    for (uint32_t i = 0; i < n; i++) { memcpy(o, c[i].ptr, 4u * c[i].count); o += 4u * c[i].count; }
    return o;
}

/* Counters bypass the limit: the accounting of what was dropped must not be dropped. */
static void enqueue(struct xp_chunk *chunk, uint32_t rows, int type) {
    pthread_mutex_lock(&queue_lock);
    if (closed || (type != XP_CHUNK_COUNTER && queue_bytes + chunk->size > queue_limit)) {
        xp_dropped_rows += rows;
        dropped_chunks++;
        pthread_mutex_unlock(&queue_lock);
        free(chunk);
        return;
    }
    chunk->next = NULL;
    if (queue_tail) queue_tail->next = chunk; else queue_head = chunk;
    queue_tail = chunk;
    queue_bytes += chunk->size;
    pthread_mutex_unlock(&queue_lock);
}

static int is_event_chunk(int type) {
    switch (type) {
    case XP_CHUNK_API: case XP_CHUNK_API_ALIAS: case XP_CHUNK_KERNEL: case XP_CHUNK_MEMCPY:
    case XP_CHUNK_MEMSET: case XP_CHUNK_SYNC: case XP_CHUNK_MARKER: case XP_CHUNK_CPU_SAMPLE:
    case XP_CHUNK_WINDOW: case XP_CHUNK_PM_SAMPLE:
        return 1;
    default:
        return 0;
    }
}

/* The column writer per chunk type, generated first. */
#define XP_PUT_CHUNK(n, id) static void xp_put_cols_##n(uint8_t *o, const struct xp_batch_##n *b, uint32_t rows) {
#define XP_PUT_COL(n, c, k) o = col_put_##k(o, b->c, rows);
#define XP_PUT_END(n) (void)o; }
#define XP_CHUNK XP_PUT_CHUNK
#define XP_COL XP_PUT_COL
#define XP_END XP_PUT_END
#include "../../protos/cupti_stream.def"
#undef XP_CHUNK
#undef XP_COL
#undef XP_END
/* Chunk header: u32 type, u32 rows, u32 payload bytes. */
#define XP_CHUNK(n, id)                                                                 \
    void xp_emit_##n(struct xp_batch_##n *b) {                                          \
        uint32_t rows = b->rows;                                                        \
        if (rows == 0 || !enabled) { b->rows = 0; return; }                             \
        size_t payload = 0;
#define XP_COL(n, c, k) payload += col_size_##k(b->c, rows);
#define XP_END(n)                                                                       \
        struct xp_chunk *ch = malloc(sizeof *ch + 12 + payload);                        \
        if (!ch) { xp_dropped_rows += rows; b->rows = 0; return; }                      \
        ch->size = 12 + payload;                                                        \
        uint32_t hdr[3] = {XP_CHUNK_##n, rows, (uint32_t)payload};                      \
        memcpy(ch->bytes, hdr, 12);                                                     \
        xp_put_cols_##n(ch->bytes + 12, b, rows);                                       \
        b->rows = 0;                                                                    \
        if (is_event_chunk(XP_CHUNK_##n)) atomic_fetch_add(&event_rows, rows);          \
        enqueue(ch, rows, XP_CHUNK_##n);                                                \
    }
#include "../../protos/cupti_stream.def"
#undef XP_CHUNK
#undef XP_COL
#undef XP_END

/* Cold one-row chunks use small batches on the stack would be too big (XP_BATCH_ROWS rows),
 * so they share static batches under a lock. */
static pthread_mutex_t cold_lock = PTHREAD_MUTEX_INITIALIZER;
static struct xp_batch_STRING cold_string;
static struct xp_batch_COUNTER cold_counter;
static struct xp_batch_THREAD cold_thread;

void xp_emit_string(uint32_t id, const char *text) {
    pthread_mutex_lock(&cold_lock);
    cold_string.rows = 1;
    cold_string.string_id[0] = id;
    cold_string.text[0].ptr = text ? text : "";
    cold_string.text[0].len = (uint32_t)strlen(cold_string.text[0].ptr);
    xp_emit_STRING(&cold_string);
    pthread_mutex_unlock(&cold_lock);
}

void xp_emit_counter(const char *name, uint64_t value) {
    pthread_mutex_lock(&cold_lock);
    cold_counter.rows = 1;
    cold_counter.name[0].ptr = name;
    cold_counter.name[0].len = (uint32_t)strlen(name);
    cold_counter.value[0] = value;
    xp_emit_COUNTER(&cold_counter);
    pthread_mutex_unlock(&cold_lock);
}

void xp_emit_thread(uint32_t tid, const char *name) {
    pthread_mutex_lock(&cold_lock);
    cold_thread.rows = 1;
    cold_thread.tid[0] = tid;
    cold_thread.name[0].ptr = name;
    cold_thread.name[0].len = (uint32_t)strlen(name);
    xp_emit_THREAD(&cold_thread);
    pthread_mutex_unlock(&cold_lock);
}

/* ---- file and writer thread ---- */
/* Our descriptor, moved up high: the target's own opens get the lowest free numbers, and a
 * dup2() aimed at 0-2 or its own numbers will not land on ours. */
static int move_high(int fd) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < 128) return fd;
    long floor = rl.rlim_cur > 1100 ? 1000 : (long)rl.rlim_cur - 64;
    int high = fcntl(fd, F_DUPFD_CLOEXEC, (int)floor);
    if (high < 0) return fd;
    close(fd);
    return high;
}

static int still_our_file(void) {
    struct stat st;
    return out_fd >= 0 && fstat(out_fd, &st) == 0 && st.st_dev == stream_dev &&
           st.st_ino == stream_ino;
}

/* The descriptor is no longer our file: open the file again by its path (appending, cut back
 * to its last whole chunk so the framing stays valid).  The number is not closed: it is the
 * target's now.  0: writable again. */
static int reopen_stream(void) {
    out_fd = -1;
    if (!stream_path[0]) return -1;
    int fd = open(stream_path, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_dev != stream_dev || st.st_ino != stream_ino ||
        ftruncate(fd, (off_t)whole_bytes) != 0) {
        close(fd);
        return -1;
    }
    out_fd = move_high(fd);
    reopened++;
    return 0;
}

/* Before the writes of a drain (one fstat per drain, not per chunk). */
static void stream_file_check(void) {
    if (out_fd >= 0 && still_our_file()) return;
    if (stream_path[0]) reopen_stream();
}

/* One chunk (or the header), written whole or counted as lost (0: written).  A write that
 * failed half way (a full disk takes what fits, then says ENOSPC) is cut back to the last
 * whole chunk: the next chunk must not follow half of this one. */
static int write_all(const uint8_t *p, size_t n) {
    size_t left = n;
    int retried = 0;
    while (left > 0) {
        if (out_fd < 0) { lost_bytes += left; return -1; }
        ssize_t w = write(out_fd, p, left);
        if (w < 0) {
            if (errno == EINTR) continue;
            /* Closed under us between the check and the write: once more, whole. */
            if (errno == EBADF && !retried && reopen_stream() == 0) {
                retried = 1;
                p -= n - left;
                left = n;
                continue;
            }
            if (left < n && ftruncate(out_fd, (off_t)whole_bytes) == 0) {
                written_bytes -= n - left;
                left = n;
            }
            lost_bytes += left;
            return -1;
        }
        p += w;
        left -= (size_t)w;
        written_bytes += (uint64_t)w;
    }
    whole_bytes += n;
    return 0;
}

/* A queued chunk that could not be written: its rows counted by its type (header: u32 type,
 * u32 rows). */
static void count_unwritten(const struct xp_chunk *c) {
    uint32_t hdr[2];
    memcpy(hdr, c->bytes, sizeof hdr);
    unwritten_chunks++;
    if (hdr[0] < XP_CHUNK_TYPES) unwritten_rows[hdr[0]] += hdr[1];
}

/* Write out everything queued; only one drainer at a time keeps chunk order. */
static pthread_mutex_t drain_lock = PTHREAD_MUTEX_INITIALIZER;
static void drain_queue(void) {
    pthread_mutex_lock(&drain_lock);
    pthread_mutex_lock(&queue_lock);
    struct xp_chunk *c = queue_head;
    queue_head = queue_tail = NULL;
    queue_bytes = 0;
    pthread_mutex_unlock(&queue_lock);
    if (c) stream_file_check();
    while (c) {
        struct xp_chunk *next = c->next;
        if (write_all(c->bytes, c->size) != 0) count_unwritten(c);
        free(c);
        c = next;
    }
    pthread_mutex_unlock(&drain_lock);
}

static void *writer_main(void *arg) {
    (void)arg;
    /* The target's signals go to its own threads: a handler that ends the process runs the
     * final flush (process_hooks.c), which must not find this thread inside a drain. */
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    unsigned ticks = 0;
    for (;;) {
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_nsec += (long)(flush_period_ms % 1000) * 1000000L;
        deadline.tv_sec += flush_period_ms / 1000 + deadline.tv_nsec / 1000000000L;
        deadline.tv_nsec %= 1000000000L;
        pthread_mutex_lock(&queue_lock);
        if (!writer_stop) pthread_cond_timedwait(&queue_cond, &queue_lock, &deadline);
        int stop = writer_stop;
        pthread_mutex_unlock(&queue_lock);
        if (stop) break;
        /* Every period: pull per-thread batches and completed CUPTI buffers, then write. */
        if (flush_hook && (++ticks % 5) == 0) flush_hook(0);
        drain_queue();
    }
    return NULL;
}

void xp_stream_user_dir(char *buf, size_t size, const char *dir, unsigned uid) {
    snprintf(buf, size, "%s/uid-%u", dir, uid);
}

/* A new file of this process in dir (O_EXCL: never another image's), or -1 with errno. */
static int open_in(const char *dir, char *path, size_t size) {
    int fd = -1;
    /* A process that exec()s keeps its pid: each image gets a file of its own (the image
     * before the exec may have written one already), cpu-PID.xpstream, cpu-PID.1.xpstream... */
    for (int n = 0; n < 1000; n++) {
        if (n == 0)
            snprintf(path, size, "%s/%s-%d.xpstream", dir, xp_stream_prefix, (int)stream_pid);
        else
            snprintf(path, size, "%s/%s-%d.%d.xpstream", dir, xp_stream_prefix, (int)stream_pid, n);
        /* 0600: other users cannot read it (the directory is traversable by them when record
         * runs as root, so that processes that change user reach their uid-N directory). */
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0600);
        if (fd >= 0 || errno != EEXIST) break;
    }
    return fd;
}

/* ---- the UNWRITTEN block ---- */
/* Its row names, in order: the three totals, then one per chunk type of the format. */
static const char *const unwritten_totals[] = {"final", "chunks", "bytes"};
#define XP_UNWRITTEN_TOTALS 3
#define XP_CHUNK(n, id) [id] = "rows_" #n,
#define XP_COL(n, c, k)
#define XP_END(n)
static const char *const unwritten_kinds[XP_CHUNK_TYPES] = {
#include "../../protos/cupti_stream.def"
};
#undef XP_CHUNK
#undef XP_COL
#undef XP_END

/* The values of the block, row by row; n: the rows (totals, then every named chunk type). */
static uint32_t unwritten_values(uint64_t *values, int final) {
    uint32_t n = 0;
    values[n++] = (uint64_t)final;
    values[n++] = unwritten_chunks;
    values[n++] = lost_bytes;
    for (uint32_t t = 0; t < XP_CHUNK_TYPES; t++)
        if (unwritten_kinds[t]) values[n++] = unwritten_rows[t];
    return n;
}

/* Right after the file header, all zeros: the space its final values need, taken now. */
static void write_unwritten_block(void) {
    static uint8_t block[12 + (4 + 32 + 8) * (XP_UNWRITTEN_TOTALS + XP_CHUNK_TYPES)];
    uint64_t values[XP_UNWRITTEN_TOTALS + XP_CHUNK_TYPES];
    uint32_t rows = unwritten_values(values, 0);
    uint8_t *o = block + 12;
    uint32_t row = 0;
    for (uint32_t t = 0; t < XP_UNWRITTEN_TOTALS + XP_CHUNK_TYPES; t++) {
        const char *name = t < XP_UNWRITTEN_TOTALS ? unwritten_totals[t]
                                                   : unwritten_kinds[t - XP_UNWRITTEN_TOTALS];
        if (!name) continue;
        uint32_t len = (uint32_t)strlen(name);
        memcpy(o, &len, 4);
        o += 4;
        row++;
    }
    for (uint32_t t = 0; t < XP_UNWRITTEN_TOTALS + XP_CHUNK_TYPES; t++) {
        const char *name = t < XP_UNWRITTEN_TOTALS ? unwritten_totals[t]
                                                   : unwritten_kinds[t - XP_UNWRITTEN_TOTALS];
        if (!name) continue;
        memcpy(o, name, strlen(name));
        o += strlen(name);
    }
    uint64_t values_at = (uint64_t)(o - block);
    memcpy(o, values, 8u * rows);
    o += 8u * rows;
    uint32_t hdr[3] = {XP_CHUNK_UNWRITTEN, row, (uint32_t)(o - block - 12)};
    memcpy(block, hdr, 12);
    uint64_t at = whole_bytes;
    unwritten_at = write_all(block, (size_t)(o - block)) == 0 ? at + values_at : 0;
}

/* The final values, over the zeros in place: no new space is needed.  The descriptor appends
 * (O_APPEND, where pwrite would append too): not from here on, it is closed next. */
static void rewrite_unwritten_block(void) {
    if (!unwritten_at) return;
    if (out_fd < 0 || !still_our_file()) reopen_stream();
    if (out_fd < 0) return;
    int flags = fcntl(out_fd, F_GETFL);
    if (flags < 0 || fcntl(out_fd, F_SETFL, flags & ~O_APPEND) != 0) return;
    uint64_t values[XP_UNWRITTEN_TOTALS + XP_CHUNK_TYPES];
    uint32_t rows = unwritten_values(values, 1);
    const uint8_t *p = (const uint8_t *)values;
    size_t left = 8u * rows;
    off_t at = (off_t)unwritten_at;
    while (left > 0) {
        ssize_t w = pwrite(out_fd, p, left, at);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        p += w;
        at += w;
        left -= (size_t)w;
    }
}

static void open_stream_file(void) {
    const char *dir = getenv(xp_stream_dir_env);
    if (!dir || !*dir) return;
    char path[4096];
    stream_pid = getpid();
    out_fd = open_in(dir, path, sizeof path);
    if (out_fd < 0 && errno == EACCES) {
        /* A process that changed user (setpriv, runuser, su) after record made the directory:
         * the uid-N directory its parent prepared while still root (process_hooks.c). */
        char user_dir[4096];
        xp_stream_user_dir(user_dir, sizeof user_dir, dir, (unsigned)geteuid());
        out_fd = open_in(user_dir, path, sizeof path);
    }
    if (out_fd < 0) {
        fprintf(stderr, "xpu-perf: cannot open %s: %s (this process is not recorded)\n", path,
                strerror(errno));
        return;
    }
    struct stat st;
    if (fstat(out_fd, &st) != 0) {
        close(out_fd);
        out_fd = -1;
        return;
    }
    stream_dev = st.st_dev;
    stream_ino = st.st_ino;
    whole_bytes = 0;
    snprintf(stream_path, sizeof stream_path, "%s", path);
    out_fd = move_high(out_fd);
    uint8_t header[16];
    memcpy(header, XP_MAGIC, 8);
    uint32_t version = XP_FORMAT_VERSION, zero = 0;
    memcpy(header + 8, &version, 4);
    memcpy(header + 12, &zero, 4);
    /* Without its header the file is no stream: no block to count into either. */
    if (write_all(header, sizeof header) == 0) write_unwritten_block();
}

/* The first of `names` set to a decimal integer >= 0 in this process's environment, else -1.
 * Launchers differ in names (torchrun RANK, Open MPI OMPI_COMM_WORLD_RANK, Slurm
 * SLURM_PROCID), so each identity has its list, torchrun's first: under `srun torchrun`,
 * RANK numbers the training processes while SLURM_PROCID numbers the srun tasks (nodes).
 * errno is the application's: restored. */
static int32_t env_rank(const char *const *names) {
    int saved_errno = errno;
    int32_t rank = -1;
    for (; *names && rank < 0; names++) {
        const char *v = getenv(*names);
        if (!v || !*v) continue;
        char *end;
        errno = 0;
        long n = strtol(v, &end, 10);
        if (*end == 0 && errno == 0 && n >= 0 && n <= INT32_MAX) rank = (int32_t)n;
    }
    errno = saved_errno;
    return rank;
}

static void write_process_chunk(void) {
    static const char *const rank_env[] = {"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", NULL};
    static const char *const local_env[] = {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                            "SLURM_LOCALID", NULL};
    static const char *const size_env[] = {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS",
                                           NULL};
    static struct xp_batch_PROCESS proc;
    static char exe[4096];
    static char cmdline[65536];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = 0;
    uint32_t cmdlen = 0;
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t r;
        while (cmdlen < sizeof cmdline &&
               (r = read(fd, cmdline + cmdlen, sizeof cmdline - cmdlen)) > 0)
            cmdlen += (uint32_t)r;
        close(fd);
    }
    if (cmdlen > 0 && cmdline[cmdlen - 1] == 0) cmdlen--;
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    proc.rows = 1;
    proc.pid[0] = (uint32_t)getpid();
    proc.ppid[0] = (uint32_t)getppid();
    proc.monotonic_ns[0] = xp_now_ns();
    proc.realtime_ns[0] = (uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec;
    proc.exe[0] = (struct xp_str){exe, (uint32_t)strlen(exe)};
    proc.cmdline[0] = (struct xp_str){cmdline, cmdlen};
    proc.rank[0] = env_rank(rank_env);
    proc.local_rank[0] = env_rank(local_env);
    proc.world_size[0] = env_rank(size_env);
    xp_emit_PROCESS(&proc);
}

void xp_stream_set_flush_hook(xp_flush_hook hook) { flush_hook = hook; }

static void stop_writer(void) {
    if (!writer_running) return;
    pthread_mutex_lock(&queue_lock);
    writer_stop = 1;
    pthread_cond_signal(&queue_cond);
    pthread_mutex_unlock(&queue_lock);
    pthread_join(writer_thread, NULL);
    writer_running = 0;
}

void xp_stream_flush(int final) {
    /* Not in a vfork()ed child, which shares our memory but is not the stream's process. */
    if (!enabled || getpid() != stream_pid) return;
    pthread_mutex_lock(&flush_lock);
    if (closed) { pthread_mutex_unlock(&flush_lock); return; }
    if (flush_hook) flush_hook(final);
    if (final) {
        stop_writer();
        xp_emit_counter("transport_dropped_rows", xp_dropped_rows);
        xp_emit_counter("transport_dropped_chunks", dropped_chunks);
        xp_emit_counter("transport_reopened", reopened);
        xp_emit_counter("transport_lost_bytes", lost_bytes);
    }
    drain_queue();
    if (final) {
        uint64_t bytes = written_bytes;
        xp_emit_counter("transport_bytes", bytes);
        drain_queue();
        rewrite_unwritten_block();
        pthread_mutex_lock(&queue_lock);
        closed = 1;
        pthread_mutex_unlock(&queue_lock);
        if (out_fd >= 0) close(out_fd);
        out_fd = -1;
        if (final == XP_FLUSH_EXEC && atomic_load(&event_rows) == 0 && stream_path[0])
            unlink(stream_path);
    }
    pthread_mutex_unlock(&flush_lock);
}

/* fork(): the child must not write the parent's data or wait on locks held by threads that
 * do not exist in it.  It starts a fresh stream (its own file) lazily via xp_stream_start. */
static void atfork_prepare(void) {
    pthread_mutex_lock(&flush_lock);
    pthread_mutex_lock(&drain_lock);
    pthread_mutex_lock(&cold_lock);
    pthread_mutex_lock(&queue_lock);
}
static void atfork_parent(void) {
    pthread_mutex_unlock(&queue_lock);
    pthread_mutex_unlock(&cold_lock);
    pthread_mutex_unlock(&drain_lock);
    pthread_mutex_unlock(&flush_lock);
}
static void atfork_child(void) {
    /* The parent's writer may have been waiting on the condition: its waiter is not in this
     * process, and a signal to it would wait for that ghost (an exec's final flush hung). */
    pthread_cond_init(&queue_cond, NULL);
    struct xp_chunk *c = queue_head;
    while (c) { struct xp_chunk *n = c->next; free(c); c = n; }
    queue_head = queue_tail = NULL;
    queue_bytes = 0;
    pthread_mutex_unlock(&queue_lock);
    pthread_mutex_unlock(&cold_lock);
    pthread_mutex_unlock(&drain_lock);
    pthread_mutex_unlock(&flush_lock);
    if (out_fd >= 0) close(out_fd);
    out_fd = -1;
    writer_running = 0;
    writer_stop = 0;
    xp_dropped_rows = 0;
    dropped_chunks = 0;
    written_bytes = 0;
    reopened = lost_bytes = 0;
    memset(unwritten_rows, 0, sizeof unwritten_rows);
    unwritten_chunks = unwritten_at = 0;
    atomic_store(&event_rows, 0);
    stream_path[0] = 0;
    closed = 0;
    if (enabled) {
        open_stream_file();
        if (out_fd < 0) { enabled = 0; return; }
        write_process_chunk();
        if (pthread_create(&writer_thread, NULL, writer_main, NULL) == 0) writer_running = 1;
    }
}

int xp_stream_pause_writer(void) {
    if (!enabled || closed || getpid() != stream_pid || !writer_running) return 0;
    stop_writer();
    pthread_mutex_lock(&queue_lock);
    writer_stop = 0;
    pthread_mutex_unlock(&queue_lock);
    return 1;
}

void xp_stream_resume_writer(void) {
    if (!enabled || closed || writer_running) return;
    if (pthread_create(&writer_thread, NULL, writer_main, NULL) == 0) writer_running = 1;
}

int xp_stream_start(void) {
    static int registered;
    const char *kb = getenv("XPU_PERF_QUEUE_KB");
    if (kb && atoi(kb) > 0) queue_limit = (size_t)atoi(kb) << 10;
    const char *ms = getenv("XPU_PERF_FLUSH_MS");
    if (ms && atoi(ms) > 0) flush_period_ms = (unsigned)atoi(ms);
    open_stream_file();
    if (out_fd < 0) return -1;
    enabled = 1;
    if (!registered) {
        pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
        registered = 1;
    }
    write_process_chunk();
    if (pthread_create(&writer_thread, NULL, writer_main, NULL) == 0) writer_running = 1;
    return 0;
}
