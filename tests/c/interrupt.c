/* A signal during umdFenceWait, written from include/umd.h and docs/libumd.md alone, on either
 * backend: a handler installed without SA_RESTART interrupts the wait (UMD_ERR_SYNC_INTERRUPTED,
 * the work still queued: the same call made again completes); with SA_RESTART the wait goes on
 * and returns when the work is done. The job waits on a flag a second thread sets.
 * Exits 0 only if every check passed. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <umd.h>

#define CHECK_PROG "interrupt"
#include "check.h"

static volatile sig_atomic_t handled;

static void on_alarm(int sig) {
    (void)sig;
    handled++;
}

static void handler(int flags) {
    /* A blocked SIGALRM (inherited from the parent's mask) would never reach the handler. */
    sigset_t alrm;
    sigemptyset(&alrm);
    sigaddset(&alrm, SIGALRM);
    pthread_sigmask(SIG_UNBLOCK, &alrm, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = flags;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
}

/* SIGALRM to this (the waiting) thread in `ms`, from a helper thread: a process-directed
 * signal could go to any of libumd's threads instead. */
static pthread_t waiter;
static long alarm_ms;

static void *send_alarm(void *arg) {
    (void)arg;
    struct timespec nap = {alarm_ms / 1000, (alarm_ms % 1000) * 1000 * 1000};
    nanosleep(&nap, NULL);
    pthread_kill(waiter, SIGALRM);
    return NULL;
}

static void alarm_in_ms(long ms) {
    pthread_t t;
    waiter = pthread_self();
    alarm_ms = ms;
    if (pthread_create(&t, NULL, send_alarm, NULL) == 0)
        pthread_detach(t);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static umdBuffer flag;

static void *set_flag_later(void *arg) {
    struct timespec nap = {0, (long)(size_t)arg * 1000 * 1000};
    nanosleep(&nap, NULL);
    uint64_t one = 1;
    if (umdMemcpyHtoD(flag, 0, &one, sizeof one) != UMD_SUCCESS)
        printf("interrupt: FAIL setting the flag\n");
    return NULL;
}

/* A job that waits until the flag is `value`. */
static umdFence blocked_job(umdContext ctx, umdDevicePtr flag_va, uint64_t value) {
    umdCmdBuf b;
    MUST(umdCmdBufCreate(ctx, &b));
    MUST(umdCmdBufBegin(b));
    MUST(umdCmdWaitValue(b, flag_va, value));
    MUST(umdCmdBufEnd(b));
    umdFence f;
    MUST(umdSubmit(ctx, &b, 1, NULL, 0, &f));
    MUST(umdCmdBufDestroy(b));
    return f;
}

int main(void) {
    umdDevice dev;
    MUST(umdDeviceOpen(0, &dev));
    umdContext ctx;
    MUST(umdContextCreate(dev, UMD_PRIORITY_NORMAL, &ctx));
    MUST(umdMemAlloc(ctx, 4096, 0, &flag));
    umdDevicePtr flag_va;
    MUST(umdMemGetAddress(flag, &flag_va));
    uint64_t zero = 0;
    MUST(umdMemcpyHtoD(flag, 0, &zero, sizeof zero));
    char why[1200];

    /* Without SA_RESTART: the wait is interrupted at the signal, the job still queued. */
    umdFence f = blocked_job(ctx, flag_va, 1);
    handler(0);
    handled = 0;
    double t0 = now_s();
    alarm_in_ms(100);
    umdResult r = umdFenceWait(&f, 5ull * 1000 * 1000 * 1000);
    double took = now_s() - t0;
    snprintf(why, sizeof why, "got %s after %.3f s, handler ran %d times: %s", umdGetErrorName(r), took,
             (int)handled, detail().message);
    check("a handler without SA_RESTART interrupts the wait", r == UMD_ERR_SYNC_INTERRUPTED && handled == 1 &&
                                                                  took < 1.0,
          why);
    check("the interrupted call can be made again", umdIsRetryable(UMD_ERR_SYNC_INTERRUPTED) == 1, "not retryable");
    check("the job is still queued", umdFenceQuery(&f) == UMD_STATUS_NOT_READY, "not pending");
    pthread_t t;
    if (pthread_create(&t, NULL, set_flag_later, (void *)(size_t)100) != 0)
        return 1;
    r = umdFenceWait(&f, 5ull * 1000 * 1000 * 1000);
    pthread_join(t, NULL);
    snprintf(why, sizeof why, "got %s", umdGetErrorName(r));
    check("the same wait made again completes", r == UMD_SUCCESS, why);

    /* With SA_RESTART: the wait goes on through the signal. */
    MUST(umdMemcpyHtoD(flag, 0, &zero, sizeof zero));
    f = blocked_job(ctx, flag_va, 1);
    handler(SA_RESTART);
    handled = 0;
    if (pthread_create(&t, NULL, set_flag_later, (void *)(size_t)400) != 0)
        return 1;
    t0 = now_s();
    alarm_in_ms(100);
    r = umdFenceWait(&f, 5ull * 1000 * 1000 * 1000);
    took = now_s() - t0;
    pthread_join(t, NULL);
    snprintf(why, sizeof why, "got %s after %.3f s, handler ran %d times", umdGetErrorName(r), took, (int)handled);
    check("with SA_RESTART the wait goes on until the work is done", r == UMD_SUCCESS && handled == 1 && took >= 0.35,
          why);

    MUST(umdMemFree(flag));
    MUST(umdContextDestroy(ctx));
    MUST(umdDeviceClose(dev));
    return check_summary();
}
