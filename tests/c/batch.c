/* A batch larger than one kernel submit (256 command buffers) that fails in a later part,
 * written from include/umd.h and docs/libumd.md alone: the caller is told exactly which part
 * was queued, and nothing the queued part uses is handed out again before it is done.
 *
 * Context C: a first batch of 700 command buffers whose first one waits for a flag and whose
 * second reads an unmapped VA (a page fault once the flag is set) fills most of the ring. A
 * second batch of 600 from another thread gets its first part (256) into the ring and then
 * waits for ring space for its second part. The main thread sets the flag: C faults and is
 * banned, the waiting part is refused, and umdSubmit says that command buffers 0..256 were
 * queued. Exits 0 only if every check passed. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <umd.h>

#define CHECK_PROG "batch"
#include "check.h"


enum { FIRST = 700, SECOND = 600 };

static umdContext ctx;
static umdCmdBuf nops[SECOND];
static umdResult second_result;
static char second_detail[1100];

static void *second(void *arg) {
    (void)arg;
    umdFence f;
    second_result = umdSubmit(ctx, nops, SECOND, NULL, 0, &f);
    snprintf(second_detail, sizeof second_detail, "%s", detail().message);
    return NULL;
}

static umdCmdBuf recorded(umdDevicePtr dst, uint32_t pattern) {
    umdCmdBuf b;
    MUST(umdCmdBufCreate(ctx, &b));
    MUST(umdCmdBufBegin(b));
    MUST(umdCmdFill(b, dst, 4, pattern));
    MUST(umdCmdBufEnd(b));
    return b;
}

int main(void) {
    umdDevice dev;
    MUST(umdDeviceOpen(0, &dev));
    MUST(umdContextCreate(dev, UMD_PRIORITY_NORMAL, &ctx));
    umdBuffer flag, out;
    MUST(umdMemAlloc(ctx, 4096, 0, &flag));
    MUST(umdMemAlloc(ctx, 4096, 0, &out));
    umdDevicePtr flag_va, out_va;
    MUST(umdMemGetAddress(flag, &flag_va));
    MUST(umdMemGetAddress(out, &out_va));
    uint64_t zero = 0, one = 1;
    MUST(umdMemcpyHtoD(flag, 0, &zero, sizeof zero));

    umdCmdBuf wait, fault, fill = recorded(out_va, 0x11111111u);
    MUST(umdCmdBufCreate(ctx, &wait));
    MUST(umdCmdBufBegin(wait));
    MUST(umdCmdWaitValue(wait, flag_va, 1));
    MUST(umdCmdBufEnd(wait));
    MUST(umdCmdBufCreate(ctx, &fault));
    MUST(umdCmdBufBegin(fault));
    MUST(umdCmdCopy(fault, out_va + 64, 0x7f0010000ull, 64));
    MUST(umdCmdBufEnd(fault));
    static umdCmdBuf first[FIRST];
    first[0] = wait;
    first[1] = fault;
    for (int i = 2; i < FIRST; i++)
        first[i] = fill;
    for (int i = 0; i < SECOND; i++)
        nops[i] = fill;
    umdFence f1;
    MUST(umdSubmit(ctx, first, FIRST, NULL, 0, &f1));

    pthread_t t;
    if (pthread_create(&t, NULL, second, NULL) != 0)
        return 1;
    struct timespec nap = {0, 300 * 1000 * 1000};
    nanosleep(&nap, NULL); /* the second batch's second part is waiting for ring space now */
    MUST(umdMemcpyHtoD(flag, 0, &one, sizeof one));
    pthread_join(t, NULL);

    char why[1300];
    snprintf(why, sizeof why, "got %s: %s", umdGetErrorName(second_result), second_detail);
    check("the waiting part is refused: the context faulted", second_result == UMD_ERR_CTX_LOST, why);
    check("the caller is told which part was queued",
          strstr(second_detail, "only part of the batch was queued: command buffers 0..256 (parts 1..1 of 3)") != NULL &&
              strstr(second_detail, "command buffers 256..600 were not") != NULL,
          why);
    umdResult w = umdFenceWait(&f1, UMD_TIMEOUT_INFINITE);
    snprintf(why, sizeof why, "got %s", umdGetErrorName(w));
    check("the first batch's fence reports the fault", w == UMD_ERR_CTX_LOST, why);
    umdContextState st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    MUST(umdContextGetState(ctx, &st));
    snprintf(why, sizeof why, "submitted=%" PRIu64 " ban=%u", st.submitted_seqno, st.ban);
    /* The first batch is 3 kernel submits, the second got 1 in: 4 jobs, no more. */
    check("exactly the queued part reached the kernel", st.submitted_seqno == 4 && st.ban == UMD_BAN_FAULT, why);

    MUST(umdMemFree(flag));
    MUST(umdMemFree(out));
    MUST(umdContextDestroy(ctx));
    MUST(umdDeviceClose(dev));
    return check_summary();
}
