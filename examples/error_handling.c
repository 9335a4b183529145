/*
 * Error handling done right with libumd (docs/libumd.md, "Results"): check every result, read
 * the detail at once on the failing thread, act on umdGetErrorAction:
 *   retry                    -> UMD_ERR_SYNC_TIMEOUT: the work still runs; wait again
 *   free memory and retry    -> UMD_ERR_MEM_OUT_OF_MEMORY: drop a cache, trim the pool, retry
 *   recreate context         -> UMD_ERR_CTX_LOST: the fault is in the detail; new context
 *   recreate device          -> UMD_ERR_DEVICE_LOST: close everything, open the device again
 *   fix call / installation / report bug -> stop, with the detail.
 * Each case is provoked on purpose; device loss uses the test hook umdDebugInjectFault, which
 * production code never calls. Run with UMD_BACKEND=sim UMD_SIM_MEM_MIB=64 for the output
 * tests/install/test_install.sh expects.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "umd.h"

static const uint64_t SECOND_NS = 1000ull * 1000 * 1000;

/* Prints a failure with everything libumd knows about it; returns its action. */
static umdErrorAction report(umdResult r, const char *call) {
    umdErrorDetail d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    if (umdGetLastErrorDetail(&d) != UMD_SUCCESS || d.code != r) {
        /* No detail for this code (cannot happen for a libumd failure): the sentence only. */
        snprintf(d.message, sizeof d.message, "%s", umdGetErrorString(r));
        d.function[0] = 0;
    }
    fprintf(stderr, "error_handling: %s -> %s (%d) in %s: %s\n", call, umdGetErrorName(r), (int)r,
            d.function, d.message);
    if (d.fault_va != 0) fprintf(stderr, "error_handling:   fault at VA 0x%" PRIx64 "\n", d.fault_va);
    return umdGetErrorAction(r);
}

/* For calls whose failure this program does not plan for: report and stop. */
#define MUST(call)                                                                       \
    do {                                                                                 \
        umdResult r_ = (call);                                                           \
        if (r_ != UMD_SUCCESS) {                                                         \
            umdErrorAction a_ = report(r_, #call);                                       \
            exit(a_ == UMD_ACTION_CHECK_INSTALLATION ? 2 : 1);                           \
        }                                                                                \
    } while (0)

/* Free memory and retry: on out of memory drop the caller's own cache, trim libumd's pool
 * and try once more; any other failure is returned as it is. */
static umdResult alloc_retrying(umdDevice dev, umdContext ctx, uint64_t size, umdBuffer *cache,
                                int *cached, umdBuffer *out) {
    umdResult r = umdMemAlloc(ctx, size, 0, out);
    if (r == UMD_SUCCESS || umdGetErrorAction(r) != UMD_ACTION_FREE_MEMORY_AND_RETRY) return r;
    (void)report(r, "umdMemAlloc");
    int dropped = 0;
    while (*cached > 0) {
        MUST(umdMemFree(cache[--*cached]));
        dropped++;
    }
    uint64_t released = 0;
    MUST(umdMemTrim(dev, 0, &released));
    printf("error_handling: out of memory: dropped %d cached buffers, retrying\n", dropped);
    return umdMemAlloc(ctx, size, 0, out);
}

/* Retry: a wait that timed out is waited for again (bounded), any other failure returned. */
static umdResult wait_retrying(const umdFence *f, uint64_t timeout_ns, int attempts, void (*between)(void *),
                               void *arg) {
    for (int i = 0;; i++) {
        umdResult r = umdFenceWait(f, timeout_ns);
        if (r == UMD_SUCCESS || !umdIsRetryable(r) || i + 1 == attempts) return r;
        (void)report(r, "umdFenceWait");
        printf("error_handling: %s is retryable: waiting again\n", umdGetErrorName(r));
        if (between) between(arg);
    }
}

static void release_semaphore(void *host) { *(volatile uint64_t *)host = 1; }

static umdResult submit_one(umdContext ctx, umdCmdBuf cb, umdFence *fence) {
    return umdSubmit(ctx, &cb, 1, NULL, 0, fence);
}

int main(void) {
    umdDevice dev;
    umdContext ctx;
    MUST(umdDeviceOpen(0, &dev));
    MUST(umdContextCreate(dev, UMD_PRIORITY_NORMAL, &ctx));

    /* 1. Free memory and retry. A cache of 8 MiB buffers fills the device. */
    enum { CACHE_MAX = 64 };
    umdBuffer cache[CACHE_MAX];
    int cached = 0;
    const uint64_t MIB = 1024 * 1024;
    while (cached < CACHE_MAX && umdMemAlloc(ctx, 8 * MIB, 0, &cache[cached]) == UMD_SUCCESS) cached++;
    umdBuffer big;
    MUST(alloc_retrying(dev, ctx, 32 * MIB, cache, &cached, &big));
    printf("error_handling: 32 MiB allocated after the retry\n");
    MUST(umdMemFree(big));

    /* 2. Retry a timed-out wait: the job waits for a value the host writes later. */
    umdBuffer sem;
    umdDevicePtr sem_va;
    void *sem_host;
    MUST(umdMemAlloc(ctx, 4096, 0, &sem));
    MUST(umdMemGetAddress(sem, &sem_va));
    MUST(umdMemMap(sem, &sem_host));
    *(volatile uint64_t *)sem_host = 0;
    umdCmdBuf cb;
    umdFence fence;
    MUST(umdCmdBufCreate(ctx, &cb));
    MUST(umdCmdBufBegin(cb));
    MUST(umdCmdWaitValue(cb, sem_va, 1));
    MUST(umdCmdBufEnd(cb));
    MUST(submit_one(ctx, cb, &fence));
    MUST(wait_retrying(&fence, SECOND_NS / 100, 2, release_semaphore, sem_host));
    printf("error_handling: the job finished after the retry\n");

    /* 3. Recreate the context: a copy from an address no buffer has faults it. */
    MUST(umdCmdBufBegin(cb));
    MUST(umdCmdCopy(cb, sem_va, 0x7f0000000ull, 64));
    MUST(umdCmdBufEnd(cb));
    MUST(submit_one(ctx, cb, &fence));
    umdResult r = umdFenceWait(&fence, 10 * SECOND_NS);
    if (r == UMD_SUCCESS) {
        fprintf(stderr, "error_handling: the faulting job succeeded\n");
        return 1;
    }
    if (report(r, "umdFenceWait") != UMD_ACTION_RECREATE_CONTEXT) return 1;
    umdContextState st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    MUST(umdContextGetState(ctx, &st));
    printf("error_handling: context lost (reset status %u, fault type %u at 0x%" PRIx64 "): recreating it\n",
           st.reset_status, st.fault_type, st.fault_va);
    MUST(umdMemUnmap(sem));
    MUST(umdContextDestroy(ctx)); /* destroys cb and frees the context's buffers (reported as leaks) */
    MUST(umdContextCreate(dev, UMD_PRIORITY_NORMAL, &ctx));
    MUST(umdMemAlloc(ctx, 4096, 0, &sem));
    MUST(umdMemGetAddress(sem, &sem_va));
    MUST(umdCmdBufCreate(ctx, &cb));
    MUST(umdCmdBufBegin(cb));
    MUST(umdCmdFill(cb, sem_va, 4096, 0x5a5a5a5au));
    MUST(umdCmdBufEnd(cb));
    MUST(submit_one(ctx, cb, &fence));
    MUST(umdFenceWait(&fence, 10 * SECOND_NS));
    printf("error_handling: the new context runs\n");

    /* 4. Recreate the device: the test hook drops it off the bus. */
    MUST(umdDebugInjectFault(dev, UMD_DEBUG_FAULT_FALL_OFF_BUS));
    r = submit_one(ctx, cb, &fence);
    if (r == UMD_SUCCESS) r = umdFenceWait(&fence, 10 * SECOND_NS);
    if (r == UMD_SUCCESS || report(r, "umdSubmit/umdFenceWait") != UMD_ACTION_RECREATE_DEVICE) return 1;
    printf("error_handling: device lost: closing and reopening it\n");
    MUST(umdDeviceClose(dev)); /* still works on a lost device; frees everything on it */
    MUST(umdDeviceOpen(0, &dev));
    MUST(umdContextCreate(dev, UMD_PRIORITY_NORMAL, &ctx));
    MUST(umdMemAlloc(ctx, 4096, 0, &sem));
    MUST(umdMemGetAddress(sem, &sem_va));
    MUST(umdCmdBufCreate(ctx, &cb));
    MUST(umdCmdBufBegin(cb));
    MUST(umdCmdWriteValue(cb, sem_va, 42));
    MUST(umdCmdBufEnd(cb));
    MUST(submit_one(ctx, cb, &fence));
    MUST(umdFenceWait(&fence, 10 * SECOND_NS));
    uint64_t v = 0;
    MUST(umdMemcpyDtoH(&v, sem, 0, sizeof v));
    if (v != 42) {
        fprintf(stderr, "error_handling: read %" PRIu64 ", not 42\n", v);
        return 1;
    }
    printf("error_handling: the reopened device runs\n");
    MUST(umdCmdBufDestroy(cb));
    MUST(umdMemFree(sem));
    MUST(umdContextDestroy(ctx));
    MUST(umdDeviceClose(dev));
    printf("error_handling: ok\n");
    return 0;
}
