/* Every blocking call the sampler library times, each made so that its result is known: a
 * timeout, EINTR from a handler installed without SA_RESTART, a restart under SA_RESTART, a
 * bad argument, data or a wake-up from another thread after a delay.  One line per case with
 * the return value, errno and what the call wrote back; exit status 1 when a case does not
 * give what the C library documents.  tests/test_waits.py runs it with and without the
 * library (waits recorded from 1 us) and compares the lines. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DELAY_MS 30
#define SENTINEL 4242

static int failures;
static volatile sig_atomic_t handled;

static void check(const char *name, int ok, long r, int err, const char *extra) {
    printf("%s: r=%ld errno=%d %s%s\n", name, r, err, extra ? extra : "", ok ? "" : " FAILED");
    if (!ok) failures++;
}

static void on_alarm(int sig) { (void)sig; handled++; }

/* SIGALRM in DELAY_MS, its handler installed with or without SA_RESTART. */
static void alarm_in_delay(int restart) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = restart ? SA_RESTART : 0;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 0}, {0, DELAY_MS * 1000}};
    setitimer(ITIMER_REAL, &it, NULL);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static struct timespec abs_in_ms(clockid_t clock, long ms) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    ts.tv_nsec += ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    return ts;
}

/* ---- helpers run on another thread after DELAY_MS ---- */
static int write_fd;
static int write_delay_ms = DELAY_MS;
static void *write_later(void *arg) {
    (void)arg;
    usleep(write_delay_ms * 1000);
    if (write(write_fd, "hello", 5) != 5) abort();
    return NULL;
}
static sem_t sem;
static void *post_later(void *arg) {
    (void)arg;
    usleep(DELAY_MS * 1000);
    sem_post(&sem);
    return NULL;
}
static pthread_mutex_t held = PTHREAD_MUTEX_INITIALIZER;
static void *hold_mutex(void *arg) {
    pthread_mutex_lock(&held);
    sem_post(arg);
    usleep(DELAY_MS * 1000);
    pthread_mutex_unlock(&held);
    return NULL;
}
static pthread_mutex_t cond_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int cond_flag;
static void *signal_later(void *arg) {
    (void)arg;
    usleep(DELAY_MS * 1000);
    pthread_mutex_lock(&cond_mutex);
    cond_flag = 1;
    pthread_cond_signal(&cond);
    pthread_mutex_unlock(&cond_mutex);
    return NULL;
}
static void *return_later(void *arg) {
    usleep(DELAY_MS * 1000);
    return arg;
}

static pthread_t start(void *(*fn)(void *), void *arg) {
    pthread_t t;
    if (pthread_create(&t, NULL, fn, arg) != 0) abort();
    return t;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 3 && strcmp(argv[1], "burst") == 0) {
        /* N sleeps of >= 50 us (the timer slack) back to back, faster than a 20 ms scan
         * empties a ring of 128: each is recorded or counted lost. */
        long n = atol(argv[2]);
        struct timespec req = {0, 1000};
        for (long i = 0; i < n; i++) nanosleep(&req, NULL);
        return 0;
    }
    int p[2];
    char buf[16];
    long r;
    int e;
    double t0;

    /* poll: a timeout, EINTR, data that comes later, an invalid fd reported in revents. */
    t0 = now_ms();
    errno = SENTINEL;
    r = poll(NULL, 0, DELAY_MS);
    e = errno;
    check("poll_timeout", r == 0 && e == SENTINEL && now_ms() - t0 >= DELAY_MS - 1, r, e, NULL);
    if (pipe(p) != 0) abort();
    struct pollfd pfd = {p[0], POLLIN, 0};
    alarm_in_delay(0);
    r = poll(&pfd, 1, 5000);
    e = errno;
    check("poll_eintr", r == -1 && e == EINTR && handled == 1, r, e, NULL);
    alarm_in_delay(1); /* SA_RESTART does not restart poll: EINTR all the same */
    r = poll(&pfd, 1, 5000);
    e = errno;
    check("poll_restart_flag", r == -1 && e == EINTR && handled == 2, r, e, NULL);
    write_fd = p[1];
    pthread_t t = start(write_later, NULL);
    r = poll(&pfd, 1, 5000);
    e = errno;
    snprintf(buf, sizeof buf, "revents=%d", pfd.revents);
    check("poll_data", r == 1 && pfd.revents == POLLIN, r, e, buf);
    pthread_join(t, NULL);
    r = read(p[0], buf, sizeof buf);
    struct pollfd bad = {-5 + 1000, POLLIN, 0};
    errno = SENTINEL;
    r = poll(&bad, 1, 0);
    e = errno;
    snprintf(buf, sizeof buf, "revents=%d", bad.revents);
    check("poll_nval", r == 1 && bad.revents == POLLNVAL && e == SENTINEL, r, e, buf);

    /* ppoll: a timeout. */
    struct timespec ts = {0, DELAY_MS * 1000000L};
    r = ppoll(NULL, 0, &ts, NULL);
    check("ppoll_timeout", r == 0, r, errno, NULL);

    /* select: a timeout writes back what is left; EINTR. */
    struct timeval tv = {0, DELAY_MS * 1000};
    r = select(0, NULL, NULL, NULL, &tv);
    snprintf(buf, sizeof buf, "left=%ld", (long)(tv.tv_sec * 1000000 + tv.tv_usec));
    check("select_timeout", r == 0 && tv.tv_sec == 0 && tv.tv_usec == 0, r, errno, buf);
    fd_set rd;
    FD_ZERO(&rd);
    FD_SET(p[0], &rd);
    tv = (struct timeval){5, 0};
    alarm_in_delay(0);
    r = select(p[0] + 1, &rd, NULL, NULL, &tv);
    e = errno;
    check("select_eintr", r == -1 && e == EINTR, r, e, NULL);

    /* epoll_wait: a timeout, then EBADF. */
    int ep = epoll_create1(0);
    struct epoll_event ev;
    r = epoll_wait(ep, &ev, 1, DELAY_MS);
    check("epoll_timeout", r == 0, r, errno, NULL);
    r = epoll_wait(-1, &ev, 1, DELAY_MS);
    e = errno;
    check("epoll_ebadf", r == -1 && e == EBADF, r, e, NULL);
    close(ep);

    /* read: data written later, EINTR, a restart under SA_RESTART, EBADF. */
    t = start(write_later, NULL);
    r = read(p[0], buf, sizeof buf);
    pthread_join(t, NULL);
    check("read_data", r == 5 && memcmp(buf, "hello", 5) == 0, r, errno, NULL);
    alarm_in_delay(0);
    r = read(p[0], buf, sizeof buf);
    e = errno;
    check("read_eintr", r == -1 && e == EINTR, r, e, NULL);
    handled = 0;
    alarm_in_delay(1);
    write_fd = p[1];
    write_delay_ms = 4 * DELAY_MS; /* after the alarm: the read restarts, then gets it */
    t = start(write_later, NULL);
    r = read(p[0], buf, sizeof buf);
    pthread_join(t, NULL);
    write_delay_ms = DELAY_MS;
    snprintf(buf, sizeof buf, "handled=%d", (int)handled);
    check("read_restarted", r == 5 && handled == 1, r, errno, buf);
    r = read(-1, buf, sizeof buf);
    e = errno;
    check("read_ebadf", r == -1 && e == EBADF, r, e, NULL);

    /* recv on a socket pair: data later; nonblocking EAGAIN. */
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) abort();
    write_fd = sv[1];
    t = start(write_later, NULL);
    r = recv(sv[0], buf, sizeof buf, 0);
    pthread_join(t, NULL);
    check("recv_data", r == 5, r, errno, NULL);
    r = recv(sv[0], buf, sizeof buf, MSG_DONTWAIT);
    e = errno;
    check("recv_eagain", r == -1 && e == EAGAIN, r, e, NULL);

    /* connect to a path nobody listens on. */
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un addr = {AF_UNIX, "/nonexistent/xpu-perf-test"};
    r = connect(s, (struct sockaddr *)&addr, sizeof addr);
    e = errno;
    check("connect_enoent", r == -1 && e == ENOENT, r, e, NULL);
    close(s);

    /* Semaphores: a post later, timeouts, an invalid timeout. */
    sem_init(&sem, 0, 0);
    t = start(post_later, NULL);
    r = sem_wait(&sem);
    pthread_join(t, NULL);
    check("sem_wait_posted", r == 0, r, errno, NULL);
    struct timespec at = abs_in_ms(CLOCK_REALTIME, DELAY_MS);
    r = sem_timedwait(&sem, &at);
    e = errno;
    check("sem_timedwait_timeout", r == -1 && e == ETIMEDOUT, r, e, NULL);
    struct timespec bad_ts = {0, 2000000000L};
    r = sem_timedwait(&sem, &bad_ts);
    e = errno;
    check("sem_timedwait_einval", r == -1 && e == EINVAL, r, e, NULL);
    at = abs_in_ms(CLOCK_MONOTONIC, DELAY_MS);
    r = sem_clockwait(&sem, CLOCK_MONOTONIC, &at);
    e = errno;
    check("sem_clockwait_timeout", r == -1 && e == ETIMEDOUT, r, e, NULL);
    alarm_in_delay(0);
    r = sem_wait(&sem);
    e = errno;
    check("sem_wait_eintr", r == -1 && e == EINTR, r, e, NULL);

    /* Condition variables: a signal later; timeouts (the error is the return value, errno
     * is not touched). */
    t = start(signal_later, NULL);
    pthread_mutex_lock(&cond_mutex);
    while (!cond_flag) pthread_cond_wait(&cond, &cond_mutex);
    pthread_mutex_unlock(&cond_mutex);
    pthread_join(t, NULL);
    check("cond_wait_signalled", cond_flag == 1, cond_flag, errno, NULL);
    pthread_mutex_lock(&cond_mutex);
    at = abs_in_ms(CLOCK_REALTIME, DELAY_MS);
    errno = SENTINEL;
    r = pthread_cond_timedwait(&cond, &cond_mutex, &at);
    e = errno;
    check("cond_timedwait_timeout", r == ETIMEDOUT && e == SENTINEL, r, e, NULL);
    at = abs_in_ms(CLOCK_MONOTONIC, DELAY_MS);
    r = pthread_cond_clockwait(&cond, &cond_mutex, CLOCK_MONOTONIC, &at);
    check("cond_clockwait_timeout", r == ETIMEDOUT, r, errno, NULL);
    pthread_mutex_unlock(&cond_mutex);

    /* Mutexes: contended, error-checking relock, recursive relock, timed lock timeout. */
    sem_t ready;
    sem_init(&ready, 0, 0);
    t = start(hold_mutex, &ready);
    sem_wait(&ready);
    t0 = now_ms();
    r = pthread_mutex_lock(&held);
    check("mutex_contended", r == 0 && now_ms() - t0 >= 1, r, errno, NULL);
    pthread_mutex_unlock(&held);
    pthread_join(t, NULL);
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ERRORCHECK);
    pthread_mutex_t checked;
    pthread_mutex_init(&checked, &ma);
    pthread_mutex_lock(&checked);
    r = pthread_mutex_lock(&checked);
    check("mutex_errorcheck_relock", r == EDEADLK, r, errno, NULL);
    pthread_mutex_unlock(&checked);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_t recursive;
    pthread_mutex_init(&recursive, &ma);
    pthread_mutex_lock(&recursive);
    r = pthread_mutex_lock(&recursive);
    int unlocks = (pthread_mutex_unlock(&recursive) == 0) + (pthread_mutex_unlock(&recursive) == 0);
    int third = pthread_mutex_unlock(&recursive);
    snprintf(buf, sizeof buf, "unlocks=%d,%d", unlocks, third);
    check("mutex_recursive_relock", r == 0 && unlocks == 2 && third == EPERM, r, errno, buf);
    t = start(hold_mutex, &ready);
    sem_wait(&ready);
    at = abs_in_ms(CLOCK_REALTIME, 2);
    r = pthread_mutex_timedlock(&held, &at);
    check("mutex_timedlock_timeout", r == ETIMEDOUT, r, errno, NULL);
    pthread_join(t, NULL);

    /* Sleeps: nanosleep's EINTR writes the rest back; clock_nanosleep returns its error;
     * sleep returns the seconds left. */
    struct timespec req = {5, 0}, rem = {0, 0};
    alarm_in_delay(0);
    r = nanosleep(&req, &rem);
    e = errno;
    check("nanosleep_eintr", r == -1 && e == EINTR && rem.tv_sec >= 3 && rem.tv_sec <= 4, r, e, NULL);
    req = (struct timespec){0, DELAY_MS * 1000000L};
    r = nanosleep(&req, NULL);
    check("nanosleep_done", r == 0, r, errno, NULL);
    req = (struct timespec){0, -1};
    r = nanosleep(&req, NULL);
    e = errno;
    check("nanosleep_einval", r == -1 && e == EINVAL, r, e, NULL);
    alarm_in_delay(0);
    req = (struct timespec){5, 0};
    errno = SENTINEL;
    r = clock_nanosleep(CLOCK_MONOTONIC, 0, &req, &rem);
    e = errno;
    check("clock_nanosleep_eintr", r == EINTR && e == SENTINEL, r, e, NULL);
    at = abs_in_ms(CLOCK_MONOTONIC, DELAY_MS);
    r = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL);
    check("clock_nanosleep_abs", r == 0, r, errno, NULL);
    r = usleep(DELAY_MS * 1000);
    check("usleep_done", r == 0, r, errno, NULL);
    alarm_in_delay(0);
    r = sleep(3);
    check("sleep_interrupted", r == 2 || r == 3, r, errno, NULL); /* 2.97 s left */

    /* Children: a status later; ECHILD with none left. */
    pid_t child = fork();
    if (child == 0) {
        usleep(DELAY_MS * 1000);
        _exit(7);
    }
    int status = 0;
    r = waitpid(child, &status, 0);
    snprintf(buf, sizeof buf, "status=%d", WEXITSTATUS(status));
    check("waitpid_child", r == child && WIFEXITED(status) && WEXITSTATUS(status) == 7, r == child, errno, buf);
    r = waitpid(-1, &status, 0);
    e = errno;
    check("waitpid_echild", r == -1 && e == ECHILD, r, e, NULL);
    child = fork();
    if (child == 0) {
        usleep(DELAY_MS * 1000);
        _exit(3);
    }
    siginfo_t info;
    memset(&info, 0, sizeof info);
    r = waitid(P_PID, (id_t)child, &info, WEXITED);
    check("waitid_child", r == 0 && info.si_status == 3, r, errno, NULL);
    child = fork();
    if (child == 0) _exit(5);
    r = wait(&status);
    check("wait_child", r == child && WEXITSTATUS(status) == 5, r == child, errno, NULL);

    /* Threads: the value a thread returns. */
    t = start(return_later, (void *)42);
    void *ret = NULL;
    r = pthread_join(t, &ret);
    check("join_value", r == 0 && ret == (void *)42, r, errno, NULL);

    printf("failures: %d\n", failures);
    return failures ? 1 : 0;
}
