/* A "CUDA application" for the fake CUPTI: it plays the scenario the CI tests check.
 *   main thread:  runtime launches (nested driver call), driver-only launches, a graph launch
 *                 of 5 kernels, an H2D copy, a memset, a sync, an untraced API call
 *   worker thread: launches on stream 2
 *   forked child:  CPU work only (CUDA is unusable in a fork of a process that initialised it),
 *                  then _exit as a multiprocessing or DataLoader worker ends: its stream, with
 *                  its final flush, and no CUPTI call (the fake aborts on one)
 * Usage: fake_app LAUNCHES [EXIT_CODE [wait|two_devices]]; prints the counts it produced.
 * With "wait" it stops after the main thread's launches, prints "ready" and waits for a
 * signal.  "two_devices" plays only: 3 kernels, a device sync and a stream sync on device 1
 * (stream 13), then 2 kernels and a device sync on device 0 (stream 7).  "crash" launches
 * LAUNCHES kernels, waits 1.5 s (past the library's periodic flush, every 1 s), launches 5 more and
 * dies by SIGKILL, which no handler sees.
 * "profiler" (capture windows): LAUNCHES "outside_kernel" launches, cudaProfilerStart,
 * LAUNCHES "window_kernel" launches + an H2D copy + a device sync + one "long_window_kernel"
 * (50 ms on the GPU: it ends after the window), cudaProfilerStop, LAUNCHES
 * "outside_kernel" launches, then a second window opened and closed by the driver's
 * cuProfilerStart/Stop around 7 driver-only "second_window_kernel" launches, then 3 more
 * "outside_kernel" launches.
 * "loop": LAUNCHES launches every 10 ms until a signal ends it.
 * "steps": LAUNCHES training-like steps, each "step_forward", "step_backward" and
 * "step_update" launched back to back, then 5 ms of CPU in prepare_batch before the next.
 * "_exit": LAUNCHES launches and a device sync, then _exit(EXIT_CODE) at once (no atexit, no
 * periodic flush yet: what multiprocessing and DataLoader workers do).
 * "delay" (timed windows): 20 "before_kernel" launches at once, 20 "window_kernel" launches 1 s
 * after its start, 20 "after_kernel" launches 2 s after its start, then it exits.
 * "nvtx" (NVTX capture ranges): "outside_kernel" launches between ranges named "step", each
 * of which holds its own kernels: (1) a push/pop "step" nested in a range "other", LAUNCHES
 * "nvtx_kernel_1" + 2 inside a nested "inner" range; (2) a start/end "step" with 5
 * "nvtx_kernel_2" (another start/end range opens and ends inside it); (3) a push "step" in
 * domain "app", 4 "nvtx_kernel_3"; (4) the same by a registered string, 6 "nvtx_kernel_4";
 * (5) a pushEx "step" in the default domain, 2 "nvtx_kernel_5", with a "step" nested in it.
 * "profiler_cpu": 0.5 s of CPU in burn_outside_window, cudaProfilerStart, 0.5 s in
 * burn_inside_window and LAUNCHES "window_kernel", cudaProfilerStop, 0.5 s outside again.
 * "toggle" (the outside trigger): LAUNCHES "outside_kernel", SIGUSR2 to its parent, LAUNCHES
 * "window_kernel" + a device sync, SIGUSR2, 5 "outside_kernel", SIGUSR2, 4 "second_window_kernel"
 * on stream 1, exit (300 ms pause after each signal).
 * "memory" (device memory): on device 0, alloc_weights cudaMallocs 3 x 64 MiB,
 * alloc_activations 4 x 16 MiB, two of those are freed, alloc_workspace takes 100 MiB (the
 * peak: 324 MiB, held by weights 192, workspace 100, activations 32), then everything is
 * freed; on device 1, alloc_pool takes 8 MiB with cudaMallocAsync on stream 13 and keeps
 * it (device 1's peak: 8 MiB, at its end).
 * "program_profiler": LAUNCHES "before_kernel" launches, then the program's own profiler
 * (fake_profiler_client.c) runs two traces of LAUNCHES "active_kernel" launches each.
 * "profiler_first": the same profiler, started before the program initialises CUDA.
 * "pm_phases" (PM sampling, fake_pm_sampling.c): one "warmup_kernel" (the context: sampling
 * starts), 300 ms idle, then the tensor-bound phase with a 200 ms "tensor_kernel" 50 ms into
 * it, then the DRAM-bound phase with a 200 ms "dram_kernel" likewise, each phase 400 ms, then
 * idle 200 ms; prints the samples the fake's hardware buffer lost. */
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern void fake_cuInit(void);
extern uint32_t fake_launch_kernel(const char *name, uint32_t stream, int driver_only);
extern uint32_t fake_graph_launch(uint32_t graph_id, int kernels, uint32_t stream);
extern uint32_t fake_memcpy_h2d(uint64_t bytes, uint32_t stream);
extern uint32_t fake_memset(uint64_t bytes, uint32_t value, uint32_t stream);
extern uint32_t fake_device_synchronize(void);
extern uint32_t fake_stream_synchronize(uint32_t stream);
extern void fake_get_device(void);
extern uint64_t fake_malloc(uint64_t bytes, int async, uint32_t stream);
extern void fake_free(uint64_t address, uint64_t bytes, int async, uint32_t stream);
extern void fake_set_dropped(size_t n);
extern void fake_set_device(uint32_t device);
extern int cuptiActivityFlushAll(uint32_t flag);
extern uint32_t fake_launch_kernel_for(const char *name, uint32_t stream, uint64_t dur_ns);
extern void fake_profiler_start(int driver_only);
extern uint64_t fake_callbacks_delivered(void);
extern void fake_profiler_stop(int driver_only);
extern int fake_nvtx_range_push(const char *message);
extern int fake_nvtx_range_push_ex(const char *message);
extern int fake_nvtx_range_pop(void);
extern uint64_t fake_nvtx_range_start(const char *message);
extern void fake_nvtx_range_end(uint64_t id);
extern void *fake_nvtx_domain_create(const char *name);
extern void *fake_nvtx_domain_register_string(void *domain, const char *string);
extern int fake_nvtx_domain_range_push(void *domain, const char *message, void *registered);
extern int fake_nvtx_domain_range_pop(void *domain);
extern void fake_profiler_client_run(int launches, int cycles);
extern void fake_pm_phase(int phase);
extern uint64_t fake_pm_lost(void);
extern int fake_pm_host_starting(void);

static int launches = 100;

#ifdef FAKE_PY_VERSION
/* Built as fake_app_py313: looks like a CPython 3.13 process to the injection library
 * (exported like the interpreter's own Py_Version), whose frame layout it does not read. */
__attribute__((visibility("default"), used)) const unsigned long Py_Version = FAKE_PY_VERSION;
#endif

__attribute__((noinline)) void model_forward_layer(int i) {
    fake_launch_kernel(i % 2 ? "gemm_kernel" : "gelu_kernel", 7, 0);
    __asm__ volatile("");
}

__attribute__((noinline)) void triton_style_launch(void) {
    fake_launch_kernel("triton_fused_kernel", 7, 1);
    __asm__ volatile("");
}

static void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000 * 1000};
    while (nanosleep(&t, &t) != 0) {}
}

static void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < launches; i++) fake_launch_kernel("worker_kernel", 2, 0);
    return NULL;
}

/* CPU time for the sampler: 0.5 s of this thread's CPU in a function named by where it runs. */
static volatile uint64_t burn_sink;
static void burn_cpu_ns(long long ns) {
    struct timespec t0, t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    do {
        for (int i = 0; i < 10000; i++) burn_sink = burn_sink * 6364136223846793005ull + 1;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000000000ll + (t.tv_nsec - t0.tv_nsec) < ns);
}
static void burn_cpu(void) { burn_cpu_ns(500000000ll); }
__attribute__((noinline)) void burn_outside_window(void) { burn_cpu(); }
__attribute__((noinline)) void burn_inside_window(void) { burn_cpu(); }
/* "steps": the host work between two steps, 5 ms of CPU (the GPU idles meanwhile). */
__attribute__((noinline)) void prepare_batch(void) { burn_cpu_ns(5000000ll); }

#define MIB (1ull << 20)
static uint64_t weights[3], activations[4], workspace, pool;
__attribute__((noinline)) void alloc_weights(void) {
    for (int i = 0; i < 3; i++) weights[i] = fake_malloc(64 * MIB, 0, 0);
}
__attribute__((noinline)) void alloc_activations(void) {
    for (int i = 0; i < 4; i++) activations[i] = fake_malloc(16 * MIB, 0, 0);
}
__attribute__((noinline)) void alloc_workspace(void) { workspace = fake_malloc(100 * MIB, 0, 0); }
__attribute__((noinline)) void alloc_pool(void) { pool = fake_malloc(8 * MIB, 1, 13); }

static void memory_scenario(void) {
    alloc_weights();
    alloc_activations();
    fake_free(activations[0], 16 * MIB, 0, 0);
    fake_free(activations[1], 16 * MIB, 0, 0);
    alloc_workspace();
    fake_free(workspace, 100 * MIB, 0, 0);
    for (int i = 2; i < 4; i++) fake_free(activations[i], 16 * MIB, 0, 0);
    for (int i = 0; i < 3; i++) fake_free(weights[i], 64 * MIB, 0, 0);
    fake_set_device(1);
    alloc_pool();
    fake_set_device(0);
}

int main(int argc, char **argv) {
    if (argc > 1) launches = atoi(argv[1]);
    int exit_code = argc > 2 ? atoi(argv[2]) : 0;
    if (argc > 3 && strcmp(argv[3], "profiler_first") == 0) {
        fake_profiler_client_run(launches, 2);
        fake_cuInit();
        return exit_code;
    }
    fake_cuInit();
    if (argc > 3 && strcmp(argv[3], "pm_phases") == 0) {
        fake_launch_kernel("warmup_kernel", 7, 0);
        sleep_ms(300);
        fake_pm_phase(1);
        sleep_ms(50);
        fake_launch_kernel_for("tensor_kernel", 7, 200 * 1000 * 1000);
        sleep_ms(350);
        fake_pm_phase(2);
        sleep_ms(50);
        fake_launch_kernel_for("dram_kernel", 7, 200 * 1000 * 1000);
        sleep_ms(350);
        fake_pm_phase(0);
        sleep_ms(200);
        printf("fake_app: pm samples lost %llu\n", (unsigned long long)fake_pm_lost());
        return exit_code;
    }
    if (argc > 3 && strcmp(argv[3], "exit_in_pm_start") == 0) {
        /* A trivial program: one kernel, and main returns while the PM sampling thread is
         * still starting the device (FAKE_PM=exit_race). */
        fake_launch_kernel("only_kernel", 7, 0);
        for (int i = 0; i < 5000 && !fake_pm_host_starting(); i++) sleep_ms(1);
        printf("fake_app: exits with the PM start %s\n",
               fake_pm_host_starting() ? "under way" : "not begun");
        return exit_code;
    }
    if (argc > 3 && strcmp(argv[3], "memory") == 0) {
        memory_scenario();
        return exit_code;
    }
    if (argc > 3 && strcmp(argv[3], "two_devices") == 0) {
        fake_set_device(1);
        for (int i = 0; i < 3; i++) fake_launch_kernel("device1_kernel", 13, 0);
        fake_device_synchronize();
        fake_stream_synchronize(13);
        fake_set_device(0);
        for (int i = 0; i < 2; i++) fake_launch_kernel("device0_kernel", 7, 0);
        fake_device_synchronize();
        return exit_code;
    }
    if (argc > 3 && strcmp(argv[3], "profiler") == 0) {
        for (int i = 0; i < launches; i++) fake_launch_kernel("outside_kernel", 7, 0);
        printf("fake_app: API callbacks before the window: %llu\n",
               (unsigned long long)fake_callbacks_delivered());
        fake_profiler_start(0);
        for (int i = 0; i < launches; i++) fake_launch_kernel("window_kernel", 7, 0);
        fake_memcpy_h2d(1 << 20, 7);
        fake_device_synchronize();
        fake_launch_kernel_for("long_window_kernel", 8, 50 * 1000 * 1000);
        fake_profiler_stop(0);
        for (int i = 0; i < launches; i++) fake_launch_kernel("outside_kernel", 7, 0);
        fake_profiler_start(1);
        for (int i = 0; i < 7; i++) fake_launch_kernel("second_window_kernel", 7, 1);
        fake_profiler_stop(1);
        for (int i = 0; i < 3; i++) fake_launch_kernel("outside_kernel", 7, 0);
        return exit_code;
    }
    if (argc > 3 && strcmp(argv[3], "nvtx") == 0) {
        for (int i = 0; i < launches; i++) fake_launch_kernel("outside_kernel", 7, 0);
        fake_nvtx_range_push("other");
        for (int i = 0; i < 3; i++) fake_launch_kernel("outside_kernel", 7, 0);
        fake_nvtx_range_push("step");
        for (int i = 0; i < launches; i++) fake_launch_kernel("nvtx_kernel_1", 7, 0);
        fake_nvtx_range_push("inner");
        for (int i = 0; i < 2; i++) fake_launch_kernel("nvtx_kernel_1", 7, 0);
        fake_nvtx_range_pop();
        fake_nvtx_range_pop(); /* step */
        for (int i = 0; i < 3; i++) fake_launch_kernel("outside_kernel", 7, 0);
        fake_nvtx_range_pop(); /* other */
        uint64_t step = fake_nvtx_range_start("step");
        for (int i = 0; i < 3; i++) fake_launch_kernel("nvtx_kernel_2", 7, 0);
        uint64_t other = fake_nvtx_range_start("other");
        for (int i = 0; i < 2; i++) fake_launch_kernel("nvtx_kernel_2", 7, 0);
        fake_nvtx_range_end(other);
        fake_nvtx_range_end(step);
        fake_launch_kernel("outside_kernel", 7, 0);
        void *app = fake_nvtx_domain_create("app");
        fake_nvtx_domain_range_push(app, "step", NULL);
        for (int i = 0; i < 4; i++) fake_launch_kernel("nvtx_kernel_3", 7, 0);
        fake_nvtx_domain_range_pop(app);
        fake_launch_kernel("outside_kernel", 7, 0);
        void *registered = fake_nvtx_domain_register_string(app, "step");
        fake_nvtx_domain_range_push(app, NULL, registered);
        for (int i = 0; i < 6; i++) fake_launch_kernel("nvtx_kernel_4", 7, 0);
        fake_nvtx_domain_range_pop(app);
        fake_launch_kernel("outside_kernel", 7, 0);
        fake_nvtx_range_push_ex("step");
        fake_launch_kernel("nvtx_kernel_5", 7, 0);
        fake_nvtx_range_push("step");
        fake_launch_kernel("nvtx_kernel_5", 7, 0);
        fake_nvtx_range_pop();
        fake_nvtx_range_pop();
        for (int i = 0; i < 3; i++) fake_launch_kernel("outside_kernel", 7, 0);
        return exit_code;
    }
    if (argc > 3 && strcmp(argv[3], "program_profiler") == 0) {
        for (int i = 0; i < launches; i++) fake_launch_kernel("before_kernel", 7, 0);
        fake_profiler_client_run(launches, 2);
        return exit_code;
    }
    if (argc > 3 && strcmp(argv[3], "profiler_cpu") == 0) {
        burn_outside_window();
        fake_profiler_start(0);
        burn_inside_window();
        for (int i = 0; i < launches; i++) fake_launch_kernel("window_kernel", 7, 0);
        fake_profiler_stop(0);
        burn_outside_window();
        return exit_code;
    }
    if (argc > 3 && strcmp(argv[3], "toggle") == 0) {
        /* The outside trigger: SIGUSR2 to the parent (record) opens the window, the next closes
         * it; 300 ms after each lets the library's poll (every 10 ms) see it. */
        struct timespec settle = {0, 300 * 1000 * 1000};
        for (int i = 0; i < launches; i++) fake_launch_kernel("outside_kernel", 7, 0);
        kill(getppid(), SIGUSR2);
        nanosleep(&settle, NULL);
        for (int i = 0; i < launches; i++) fake_launch_kernel("window_kernel", 7, 0);
        fake_device_synchronize();
        kill(getppid(), SIGUSR2);
        nanosleep(&settle, NULL);
        for (int i = 0; i < 5; i++) fake_launch_kernel("outside_kernel", 7, 0);
        kill(getppid(), SIGUSR2);
        nanosleep(&settle, NULL);
        for (int i = 0; i < 4; i++) fake_launch_kernel("second_window_kernel", 7, 1);
        return exit_code; /* the second window ends with the process */
    }
    if (argc > 3 && strcmp(argv[3], "loop") == 0) {
        /* Until a signal ends it: LAUNCHES launches every 10 ms (--max-size). */
        for (;;) {
            for (int i = 0; i < launches; i++) model_forward_layer(i);
            struct timespec pause_for = {0, 10 * 1000 * 1000};
            nanosleep(&pause_for, NULL);
        }
    }
    if (argc > 3 && strcmp(argv[3], "steps") == 0) {
        for (int i = 0; i < launches; i++) {
            fake_launch_kernel("step_forward", 7, 0);
            fake_launch_kernel("step_backward", 7, 0);
            fake_launch_kernel("step_update", 7, 0);
            prepare_batch();
        }
        fake_device_synchronize();
        return exit_code;
    }
    if (argc > 3 && strcmp(argv[3], "delay") == 0) {
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        const char *phases[3] = {"before_kernel", "window_kernel", "after_kernel"};
        for (int p = 0; p < 3; p++) {
            struct timespec at = {t0.tv_sec + p, t0.tv_nsec};
            while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL) != 0) {}
            for (int i = 0; i < 20; i++) fake_launch_kernel(phases[p], 7, 0);
        }
        printf("fake_app: delay phases done\n");
        return exit_code;
    }
    if (argc > 3 && strcmp(argv[3], "_exit") == 0) {
        for (int i = 0; i < launches; i++) model_forward_layer(i);
        fake_device_synchronize();
        _exit(exit_code);
    }
    if (argc > 3 && strcmp(argv[3], "crash") == 0) {
        for (int i = 0; i < launches; i++) model_forward_layer(i);
        struct timespec pause_for = {1, 500 * 1000 * 1000};
        nanosleep(&pause_for, NULL);
        for (int i = 0; i < 5; i++) model_forward_layer(i);
        raise(SIGKILL);
    }
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    for (int i = 0; i < launches; i++) model_forward_layer(i);
    if (argc > 3 && strcmp(argv[3], "wait") == 0) {
        pthread_join(t, NULL);
        printf("ready\n");
        fflush(stdout);
        for (;;) pause();
    }
    for (int i = 0; i < 10; i++) triton_style_launch();
    fake_graph_launch(42, 5, 9);
    fake_memcpy_h2d(1 << 20, 7);
    fake_memset(4096, 0, 7);
    fake_get_device();
    fake_set_dropped(3);
    fake_device_synchronize();
    fake_stream_synchronize(7);
    pthread_join(t, NULL);
    cuptiActivityFlushAll(0);

    pid_t child = fork();
    if (child == 0) {
        volatile uint64_t sink = 0;
        for (uint64_t i = 0; i < 20000000; i++) sink += i * i;
        _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    for (int i = 0; i < 5; i++) model_forward_layer(i);
    int kernels = 2 * launches + 10 + 5 + 5;
    printf("fake_app: parent kernels=%d dropped=3\n", kernels);
    return exit_code;
}
