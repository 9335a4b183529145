/*
 * Short-lived processes the way outside programs use libumd: written from include/umd.h and
 * docs/ alone. Each mode is one program shape that used to lose its log, stall at exit, die of
 * SIGPIPE or hang after fork. umd/tests/short_process.rs runs every mode (on the simulator, and
 * with UMD_BACKEND=kmd where no module is loaded) and checks the exit status, the time, the
 * console and the log file; the QEMU guest runs the fork modes against the real module.
 *
 *   short_process <mode> [job timeout ms, for long-packet]
 *
 * Output on stdout: "short_process: <what> <UMD_... name>" lines the harness checks, and
 * "short_process: done" when main returns normally.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "umd.h"

static void say(const char *what, umdResult r) {
    printf("short_process: %s %s\n", what, umdGetErrorName(r));
    fflush(stdout);
}

/* The detail's message of the last failure on this thread. */
static void say_detail(const char *what) {
    umdErrorDetail d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    if (umdGetLastErrorDetail(&d) != UMD_SUCCESS) return;
    printf("short_process: %s detail ctx=%llu %s\n", what, (unsigned long long)d.context_id, d.message);
    fflush(stdout);
}

static void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* A call that fails on every backend without a device: a NULL out-pointer. */
static void fail_once(const char *what) {
    umdBuffer b;
    say(what, umdMemAlloc(0, 0, 0, &b));
}

static void *thread_exits(void *arg) {
    (void)arg;
    fail_once("thread alloc");
    exit(0);
    return NULL;
}

static void atexit_handler(void) {
    fail_once("atexit alloc");
    exit(0); /* exit() inside an atexit handler: the remaining handlers and libumd's still run */
}

/* Work on device 0 that must complete: one FILL, waited with a bounded timeout. */
static int run_fill(umdDevice dev, const char *who) {
    umdContext ctx;
    umdResult r = umdContextCreate(dev, UMD_PRIORITY_NORMAL, &ctx);
    say("context create", r);
    if (r != UMD_SUCCESS) return 1;
    umdBuffer buf;
    r = umdMemAlloc(ctx, 4096, 0, &buf);
    if (r != UMD_SUCCESS) return say("alloc", r), 1;
    umdDevicePtr va;
    if (umdMemGetAddress(buf, &va) != UMD_SUCCESS) return 1;
    umdCmdBuf cb;
    if (umdCmdBufCreate(ctx, &cb) != UMD_SUCCESS || umdCmdBufBegin(cb) != UMD_SUCCESS ||
        umdCmdFill(cb, va, 4096, 0x5a5a5a5au) != UMD_SUCCESS || umdCmdBufEnd(cb) != UMD_SUCCESS)
        return say("record", UMD_ERR_INTERNAL), 1;
    umdFence f;
    r = umdSubmit(ctx, &cb, 1, NULL, 0, &f);
    if (r != UMD_SUCCESS) return say("submit", r), 1;
    r = umdFenceWait(&f, 10ull * 1000 * 1000 * 1000);
    char what[64];
    snprintf(what, sizeof what, "%s wait", who);
    say(what, r);
    uint32_t word = 0;
    if (r == UMD_SUCCESS && umdMemcpyDtoH(&word, buf, 0, 4) == UMD_SUCCESS)
        printf("short_process: %s word 0x%08x\n", who, word);
    if (umdCmdBufDestroy(cb) != UMD_SUCCESS || umdMemFree(buf) != UMD_SUCCESS || umdContextDestroy(ctx) != UMD_SUCCESS)
        return 1;
    return r == UMD_SUCCESS ? 0 : 1;
}

static uint64_t now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

struct close_waiter {
    umdFence fence;
    umdResult code;
    uint64_t woke_us;
    char message[UMD_DETAIL_MESSAGE_LEN];
};

static void *wait_forever(void *arg) {
    struct close_waiter *w = arg;
    w->code = umdFenceWait(&w->fence, UMD_TIMEOUT_INFINITE);
    w->woke_us = now_us();
    umdErrorDetail d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    if (umdGetLastErrorDetail(&d) == UMD_SUCCESS) memcpy(w->message, d.message, sizeof w->message);
    return NULL;
}

/* umdDeviceClose while another thread is blocked in umdFenceWait on a job that never finishes
 * (it waits for a value nobody writes): the waiter must wake at once with
 * UMD_ERR_INVALID_HANDLE saying the device was closed under it (docs/libumd.md, "Closing under a
 * blocked wait"). Checks itself: exit 0 only if the code, the sentence and the timing hold. */
static int close_under_wait(void) {
    umdDevice dev;
    umdContext ctx;
    umdBuffer buf;
    umdDevicePtr va;
    umdCmdBuf cb;
    if (umdDeviceOpen(0, &dev) != UMD_SUCCESS || umdContextCreate(dev, UMD_PRIORITY_NORMAL, &ctx) != UMD_SUCCESS ||
        umdMemAlloc(ctx, 4096, 0, &buf) != UMD_SUCCESS || umdMemGetAddress(buf, &va) != UMD_SUCCESS)
        return 2;
    uint64_t zero = 0;
    if (umdMemcpyHtoD(buf, 0, &zero, 8) != UMD_SUCCESS || umdCmdBufCreate(ctx, &cb) != UMD_SUCCESS ||
        umdCmdBufBegin(cb) != UMD_SUCCESS || umdCmdWaitValue(cb, va, 1) != UMD_SUCCESS || umdCmdBufEnd(cb) != UMD_SUCCESS)
        return 2;
    static struct close_waiter w;
    if (umdSubmit(ctx, &cb, 1, NULL, 0, &w.fence) != UMD_SUCCESS) return 2;
    pthread_t t;
    if (pthread_create(&t, NULL, wait_forever, &w) != 0) return 2;
    sleep_ms(200); /* the waiter is asleep in the driver by now */
    uint64_t t0 = now_us();
    umdResult r = umdDeviceClose(dev);
    uint64_t t1 = now_us();
    pthread_join(t, NULL);
    long woke_ms = (long)((w.woke_us - t0) / 1000), close_ms = (long)((t1 - t0) / 1000);
    say("close under wait", r);
    say("waiter", w.code);
    printf("short_process: waiter woke %ld ms after the close started; the close took %ld ms\n", woke_ms, close_ms);
    printf("short_process: waiter detail %s\n", w.message);
    int sentence = strstr(w.message, "the device was closed by another thread (umdDeviceClose) while this wait was blocked") != NULL;
    return r == UMD_SUCCESS && w.code == UMD_ERR_INVALID_HANDLE && sentence && woke_ms < 1000 ? 0 : 7;
}

/* Another process while the long packet runs: opens device 0 (a file of its own on the kernel
 * backend; fork's contract: docs/libumd.md "fork"), runs one high-priority fill and waits for
 * it. Exit status 0 when everything succeeded. */
static int other_process_job(void) {
    umdDevice dev;
    umdContext c;
    umdBuffer b;
    umdDevicePtr va;
    umdCmdBuf cb;
    umdFence f;
    if (umdDeviceOpen(0, &dev) != UMD_SUCCESS || umdContextCreate(dev, UMD_PRIORITY_HIGH, &c) != UMD_SUCCESS ||
        umdMemAlloc(c, 4096, 0, &b) != UMD_SUCCESS || umdMemGetAddress(b, &va) != UMD_SUCCESS ||
        umdCmdBufCreate(c, &cb) != UMD_SUCCESS || umdCmdBufBegin(cb) != UMD_SUCCESS ||
        umdCmdFill(cb, va, 4096, 0x0be11e5u) != UMD_SUCCESS || umdCmdBufEnd(cb) != UMD_SUCCESS ||
        umdSubmit(c, &cb, 1, NULL, 0, &f) != UMD_SUCCESS || umdFenceWait(&f, 30ull * 1000 * 1000 * 1000) != UMD_SUCCESS)
        return 1;
    return umdCmdBufDestroy(cb) == UMD_SUCCESS && umdMemFree(b) == UMD_SUCCESS && umdContextDestroy(c) == UMD_SUCCESS &&
                   umdDeviceClose(dev) == UMD_SUCCESS
               ? 0
               : 1;
}

/* One legal GEMM far beyond the job timeout (1024 x 4096 x 4096, 17 G multiply-accumulates):
 * the driver must declare it hung within the job timeout plus a slack and reset, and meanwhile
 * another context's high-priority work must complete, and so must another process that opens
 * the device and runs a high-priority job (hw-spec §6, "Long packets"). Checks itself; prints
 * the times. */
static int long_packet(long timeout_ms) {
    umdDevice dev;
    umdContext slow, fast;
    if (umdDeviceOpen(0, &dev) != UMD_SUCCESS || umdContextCreate(dev, UMD_PRIORITY_LOW, &slow) != UMD_SUCCESS ||
        umdContextCreate(dev, UMD_PRIORITY_HIGH, &fast) != UMD_SUCCESS)
        return 2;
    umdBuffer ab, cbuf, small;
    umdDevicePtr ab_va, c_va, small_va;
    if (umdMemAlloc(slow, 16u << 20, 0, &ab) != UMD_SUCCESS || umdMemAlloc(slow, 16u << 20, 0, &cbuf) != UMD_SUCCESS ||
        umdMemAlloc(fast, 4096, 0, &small) != UMD_SUCCESS || umdMemGetAddress(ab, &ab_va) != UMD_SUCCESS ||
        umdMemGetAddress(cbuf, &c_va) != UMD_SUCCESS || umdMemGetAddress(small, &small_va) != UMD_SUCCESS)
        return 2;
    /* A and B share one 16 MiB buffer (both only read). */
    umdGemmI8Args g = {.a = ab_va, .b = ab_va, .c = c_va, .m = 1024, .n = 4096, .k = 4096, .lda = 4096, .ldb = 4096, .ldc = 4096};
    umdCmdBuf cg, cf;
    if (umdCmdBufCreate(slow, &cg) != UMD_SUCCESS || umdCmdBufBegin(cg) != UMD_SUCCESS ||
        umdCmdGemmI8(cg, &g) != UMD_SUCCESS || umdCmdBufEnd(cg) != UMD_SUCCESS)
        return 2;
    if (umdCmdBufCreate(fast, &cf) != UMD_SUCCESS || umdCmdBufBegin(cf) != UMD_SUCCESS ||
        umdCmdFill(cf, small_va, 4096, 0x600dca75u) != UMD_SUCCESS || umdCmdBufEnd(cf) != UMD_SUCCESS)
        return 2;
    umdFence fg, ff;
    uint64_t ts = now_us();
    if (umdSubmit(slow, &cg, 1, NULL, 0, &fg) != UMD_SUCCESS) return 2;
    /* The job's time counts from here: the submit itself binds and pins its 32 MiB first. */
    uint64_t t0 = now_us();
    sleep_ms(100);
    uint64_t t1 = now_us();
    umdResult rf = umdSubmit(fast, &cf, 1, NULL, 0, &ff);
    if (rf == UMD_SUCCESS) rf = umdFenceWait(&ff, 30ull * 1000 * 1000 * 1000);
    uint64_t t2 = now_us();
    /* Another process, started while the GEMM still runs (the job timeout is not reached yet
     * when the fill above took less than it). */
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) _exit(other_process_job());
    int cst = -1;
    if (child > 0) waitpid(child, &cst, 0);
    uint64_t t2b = now_us();
    umdResult rg = umdFenceWait(&fg, 120ull * 1000 * 1000 * 1000);
    uint64_t t3 = now_us();
    umdContextState st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    umdResult rs = umdContextGetState(slow, &st);
    long fast_ms = (long)((t2 - t1) / 1000), hang_ms = (long)((t3 - t0) / 1000), submit_ms = (long)((t0 - ts) / 1000);
    long other_ms = (long)((t2b - t2) / 1000);
    int other_ok = child > 0 && WIFEXITED(cst) && WEXITSTATUS(cst) == 0;
    say("high-priority fill", rf);
    printf("short_process: another process's open and high-priority job %s\n", other_ok ? "UMD_SUCCESS" : "FAILED");
    say("long gemm", rg);
    printf("short_process: the high-priority job took %ld ms, another process's open and job %ld ms; the long GEMM ended %ld ms after its submit returned (the submit took %ld ms; job timeout %ld ms), hung=%u\n",
           fast_ms, other_ms, hang_ms, submit_ms, timeout_ms, st.hung);
    /* Slack: the watchdog's period and the reset, and emulation: the timeout plus 3 s. */
    int ok = rf == UMD_SUCCESS && rg == UMD_ERR_CTX_LOST && rs == UMD_SUCCESS && st.hung == 1 &&
             hang_ms < timeout_ms + 3000 && fast_ms < timeout_ms + 3000 && other_ok && other_ms < timeout_ms + 3000;
    if (umdCmdBufDestroy(cg) != UMD_SUCCESS || umdCmdBufDestroy(cf) != UMD_SUCCESS || umdMemFree(small) != UMD_SUCCESS ||
        umdMemFree(cbuf) != UMD_SUCCESS || umdMemFree(ab) != UMD_SUCCESS || umdContextDestroy(fast) != UMD_SUCCESS ||
        umdContextDestroy(slow) != UMD_SUCCESS || umdDeviceClose(dev) != UMD_SUCCESS)
        return 2;
    return ok ? 0 : 8;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "fail-first") == 0) {
        umdDevice d;
        say("open", umdDeviceOpen(0, &d));
    } else if (strcmp(mode, "open-detail") == 0) {
        /* Open device 0: the result, and the detail when it failed (the version refusal). */
        umdDevice d;
        umdResult r = umdDeviceOpen(0, &d);
        say("open", r);
        if (r != UMD_SUCCESS)
            say_detail("open");
        else if (umdDeviceClose(d) != UMD_SUCCESS)
            return 2;
    } else if (strcmp(mode, "open-alloc") == 0) {
        /* Open, create a context, allocate: each result said, the process exits 0 whatever
         * they are (the settings of the backend, the pool and the simulator are read here). */
        umdDevice d;
        umdResult r = umdDeviceOpen(0, &d);
        say("open", r);
        if (r == UMD_SUCCESS) {
            umdContext c;
            r = umdContextCreate(d, UMD_PRIORITY_NORMAL, &c);
            say("context", r);
            if (r == UMD_SUCCESS) {
                umdBuffer b;
                r = umdMemAlloc(c, 4096, 0, &b);
                say("alloc", r);
                if (r == UMD_SUCCESS && umdMemFree(b) != UMD_SUCCESS) return 2;
                if (umdContextDestroy(c) != UMD_SUCCESS) return 2;
            }
            if (umdDeviceClose(d) != UMD_SUCCESS) return 2;
        }
    } else if (strcmp(mode, "fail-alloc") == 0) {
        uint32_t n = 0;
        say("count", umdGetDeviceCount(&n));
        fail_once("alloc");
    } else if (strcmp(mode, "succeed-first") == 0) {
        uint32_t n = 0;
        say("count", umdGetDeviceCount(&n));
    } else if (strcmp(mode, "exit-thread") == 0) {
        pthread_t t;
        if (pthread_create(&t, NULL, thread_exits, NULL) != 0) return 2;
        for (;;) sleep_ms(1000); /* the second thread exits the process */
    } else if (strcmp(mode, "atexit-exit") == 0) {
        if (atexit(atexit_handler) != 0) return 2;
        fail_once("main alloc");
    } else if (strcmp(mode, "fork-exit") == 0) {
        fail_once("parent alloc");
        pid_t pid = fork();
        if (pid == 0) {
            fail_once("child alloc");
            exit(0);
        }
        int st = 0;
        if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return 3;
        printf("short_process: child exited 0 (parent pid %d, child pid %d)\n", (int)getpid(), (int)pid);
    } else if (strcmp(mode, "dlopen") == 0) {
        void *h = dlopen("libumd.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!h) return printf("short_process: dlopen failed: %s\n", dlerror()), 2;
        umdResult (*alloc)(umdContext, uint64_t, uint32_t, umdBuffer *) =
            (umdResult(*)(umdContext, uint64_t, uint32_t, umdBuffer *))dlsym(h, "umdMemAlloc");
        if (!alloc) return 2;
        umdBuffer b;
        printf("short_process: dlopen alloc %d\n", (int)alloc(0, 0, 0, &b));
        if (dlclose(h) != 0) return 2;
        printf("short_process: dlclosed\n");
    } else if (strcmp(mode, "console-burst") == 0) {
        /* Failing calls in separate writer batches: every one writes the console. */
        for (int i = 0; i < 18; i++) {
            fail_once("burst alloc");
            sleep_ms(5);
        }
    } else if (strcmp(mode, "flood") == 0) {
        /* 20,000 forged handles: the console gets a few records and a summary, the file all. */
        for (int i = 0; i < 20000; i++) {
            uint64_t addr = 0;
            if (umdMemGetAddress((umdBuffer)(0x0300000100000000ull | (uint64_t)(i + 1000)), &addr) != UMD_ERR_INVALID_HANDLE)
                return 4;
        }
        say("flood last", UMD_ERR_INVALID_HANDLE);
    } else if (strcmp(mode, "leak-arena") == 0) {
        /* A forgotten arena: 5,000 buffers still allocated at umdContextDestroy. */
        umdDevice dev;
        umdContext ctx;
        if (umdDeviceOpen(0, &dev) != UMD_SUCCESS || umdContextCreate(dev, UMD_PRIORITY_NORMAL, &ctx) != UMD_SUCCESS)
            return 2;
        for (int i = 0; i < 5000; i++) {
            umdBuffer b;
            if (umdMemAlloc(ctx, 256, 0, &b) != UMD_SUCCESS) return 2;
        }
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        say("leaky destroy", umdContextDestroy(ctx));
        clock_gettime(CLOCK_MONOTONIC, &t1);
        printf("short_process: destroy took %ld us\n", (long)((t1.tv_sec - t0.tv_sec) * 1000000L + (t1.tv_nsec - t0.tv_nsec) / 1000));
        if (umdDeviceClose(dev) != UMD_SUCCESS) return 2;
    } else if (strcmp(mode, "file-path") == 0) {
        char path[512];
        size_t need = 0;
        say("path NULL buf size 8", umdLogGetFilePath(NULL, 8, &need));
        umdResult r = umdLogGetFilePath(path, sizeof path, &need);
        say("path", r);
        if (r == UMD_SUCCESS) printf("short_process: path is %s\n", path);
    } else if (strcmp(mode, "hang-disabled") == 0) {
        umdDevice dev;
        umdContext ctx;
        umdCmdBuf cb;
        if (umdDeviceOpen(0, &dev) != UMD_SUCCESS || umdContextCreate(dev, UMD_PRIORITY_NORMAL, &ctx) != UMD_SUCCESS ||
            umdCmdBufCreate(ctx, &cb) != UMD_SUCCESS || umdCmdBufBegin(cb) != UMD_SUCCESS)
            return 2;
        say("hang", umdCmdDebugHang(cb));
        say_detail("hang");
        if (umdCmdBufDestroy(cb) != UMD_SUCCESS || umdContextDestroy(ctx) != UMD_SUCCESS || umdDeviceClose(dev) != UMD_SUCCESS)
            return 2;
    } else if (strcmp(mode, "fault-second-device") == 0) {
        /* Contexts 1 and 2 on device 0, context 3 on device 1 (the kernel's context 1 there);
         * context 3 faults. Every record must name libumd's context 3, never the innocent 1. */
        umdDevice d0, d1;
        umdContext a, b, c;
        if (umdDeviceOpen(0, &d0) != UMD_SUCCESS || umdContextCreate(d0, UMD_PRIORITY_NORMAL, &a) != UMD_SUCCESS ||
            umdContextCreate(d0, UMD_PRIORITY_NORMAL, &b) != UMD_SUCCESS || umdDeviceOpen(1, &d1) != UMD_SUCCESS ||
            umdContextCreate(d1, UMD_PRIORITY_NORMAL, &c) != UMD_SUCCESS)
            return 2;
        umdCmdBuf cb;
        if (umdCmdBufCreate(c, &cb) != UMD_SUCCESS || umdCmdBufBegin(cb) != UMD_SUCCESS ||
            umdCmdFill(cb, 0x7f0010000ull, 4096, 1) != UMD_SUCCESS || umdCmdBufEnd(cb) != UMD_SUCCESS)
            return 2;
        umdFence f;
        if (umdSubmit(c, &cb, 1, NULL, 0, &f) != UMD_SUCCESS) return 2;
        say("faulting wait", umdFenceWait(&f, 10ull * 1000 * 1000 * 1000));
        say_detail("faulting wait");
        if (umdCmdBufDestroy(cb) != UMD_SUCCESS || umdContextDestroy(c) != UMD_SUCCESS || umdContextDestroy(b) != UMD_SUCCESS ||
            umdContextDestroy(a) != UMD_SUCCESS || umdDeviceClose(d1) != UMD_SUCCESS || umdDeviceClose(d0) != UMD_SUCCESS)
            return 2;
    } else if (strcmp(mode, "injected-hardware") == 0) {
        /* The test hook's hardware faults on the simulator: a memory error on the next access
         * (a job's, or the fetch of its descriptor), then the device falls off the bus. The
         * simulated kernel's records say injected=1 (umd/tests/short_process.rs). */
        umdDevice dev;
        umdContext ctx, c2;
        umdBuffer buf;
        umdDevicePtr va;
        umdCmdBuf cb;
        umdFence f;
        if (umdDeviceOpen(0, &dev) != UMD_SUCCESS || umdContextCreate(dev, UMD_PRIORITY_NORMAL, &ctx) != UMD_SUCCESS ||
            umdMemAlloc(ctx, 4096, 0, &buf) != UMD_SUCCESS || umdMemGetAddress(buf, &va) != UMD_SUCCESS ||
            umdCmdBufCreate(ctx, &cb) != UMD_SUCCESS || umdCmdBufBegin(cb) != UMD_SUCCESS ||
            umdCmdFill(cb, va, 4096, 1) != UMD_SUCCESS || umdCmdBufEnd(cb) != UMD_SUCCESS)
            return 2;
        say("inject memory error", umdDebugInjectFault(dev, UMD_DEBUG_FAULT_MEM_ERROR));
        if (umdSubmit(ctx, &cb, 1, NULL, 0, &f) != UMD_SUCCESS) return 2;
        umdResult w = umdFenceWait(&f, 10ull * 1000 * 1000 * 1000);
        say("memory error wait", w == UMD_SUCCESS || w == UMD_ERR_CTX_LOST ? UMD_SUCCESS : w);
        say("inject fall off the bus", umdDebugInjectFault(dev, UMD_DEBUG_FAULT_FALL_OFF_BUS));
        say("context after the fall", umdContextCreate(dev, UMD_PRIORITY_NORMAL, &c2));
        /* A second open while this context lives is lost too. */
        umdDevice again, fresh;
        say("open while a context lives", umdDeviceOpen(0, &again));
        say_detail("open while a context lives");
        /* Clean-up still succeeds on the lost device (exit status 3 if not). */
        if (umdCmdBufDestroy(cb) != UMD_SUCCESS || umdMemFree(buf) != UMD_SUCCESS ||
            umdContextDestroy(ctx) != UMD_SUCCESS)
            return 3;
        /* No context is left (the lost open stays open): the next open power-cycles the device;
         * the open that saw the loss stays lost. */
        umdContext c3;
        say("open once no context is left", umdDeviceOpen(0, &fresh));
        say("context on the power-cycled device", umdContextCreate(fresh, UMD_PRIORITY_NORMAL, &c3));
        say("the open that saw the loss", umdContextCreate(dev, UMD_PRIORITY_NORMAL, &c2));
        if (umdContextDestroy(c3) != UMD_SUCCESS || umdDeviceClose(fresh) != UMD_SUCCESS ||
            umdDeviceClose(dev) != UMD_SUCCESS)
            return 3;
    } else if (strcmp(mode, "long-packet") == 0) {
        /* argv[2]: the driver's job timeout in ms (the module parameter or UMD_SIM_JOB_TIMEOUT_MS). */
        int rc = long_packet(argc > 2 ? atol(argv[2]) : 2000);
        if (rc != 0) return rc;
    } else if (strcmp(mode, "close-under-wait") == 0) {
        int rc = close_under_wait();
        if (rc != 0) return rc;
    } else if (strcmp(mode, "fork-device") == 0) {
        /* The parent keeps device 0 (and a context) open across fork(); the child uses the
         * inherited handles (must fail fast, naming fork) and then opens its own device, whose
         * work must run. The parent's device keeps working after the child is gone. */
        umdDevice dev;
        umdContext pctx;
        if (umdDeviceOpen(0, &dev) != UMD_SUCCESS || umdContextCreate(dev, UMD_PRIORITY_NORMAL, &pctx) != UMD_SUCCESS)
            return 2;
        /* A buffer the parent frees before fork(): the child freeing it again is told the
         * handle was destroyed, without a description read from the parent's pool. */
        umdBuffer gone;
        if (umdMemAlloc(pctx, 4096, 0, &gone) != UMD_SUCCESS || umdMemFree(gone) != UMD_SUCCESS) return 2;
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            umdResult r0 = umdMemFree(gone);
            say("child free of the parent's freed buffer", r0);
            say_detail("child free of the parent's freed buffer");
            if (r0 != UMD_ERR_INVALID_HANDLE) _exit(6);
            umdBuffer b;
            umdResult r1 = umdMemAlloc(pctx, 4096, 0, &b);
            say("child inherited alloc", r1);
            say_detail("child inherited alloc");
            umdContext c2;
            umdResult r2 = umdContextCreate(dev, UMD_PRIORITY_NORMAL, &c2);
            say("child inherited context create", r2);
            umdResult r3 = umdDeviceClose(dev);
            say("child inherited close", r3);
            if (r1 != UMD_ERR_INVALID_HANDLE || r2 != UMD_ERR_INVALID_HANDLE || r3 != UMD_ERR_INVALID_HANDLE) _exit(6);
            umdDevice mine;
            umdResult r = umdDeviceOpen(0, &mine);
            say("child open", r);
            if (r != UMD_SUCCESS) _exit(1);
            int rc = run_fill(mine, "child");
            say("child close", umdDeviceClose(mine));
            exit(rc);
        }
        int st = 0;
        if (waitpid(pid, &st, 0) != pid) return 3;
        printf("short_process: child status %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
        int rc = run_fill(dev, "parent");
        if (umdContextDestroy(pctx) != UMD_SUCCESS || umdDeviceClose(dev) != UMD_SUCCESS) return 2;
        if (rc != 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return 5;
    } else {
        fprintf(stderr, "short_process: unknown mode '%s'\n", mode);
        return 2;
    }
    printf("short_process: done\n");
    return 0;
}
