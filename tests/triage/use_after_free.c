/* Use after free through a replayed command buffer: the application records a fill of a
 * buffer, runs it, frees the buffer and submits the same command buffer again. */
#include "staged.h"

int main(void) {
    umdDevice dev;
    umdContext ctx;
    umdBuffer buf;
    umdDevicePtr va;
    umdCmdBuf cb;
    umdFence done;
    OPEN(dev, ctx);
    CHECK(umdMemAlloc(ctx, 64 << 10, 0, &buf));
    CHECK(umdMemGetAddress(buf, &va));
    RECORD(ctx, cb, CHECK(umdCmdFill(cb, va, 64 << 10, 0x2a2a2a2a)));
    CHECK(umdSubmit(ctx, &cb, 1, NULL, 0, &done));
    CHECK(umdFenceWait(&done, UMD_TIMEOUT_INFINITE));
    CHECK(umdMemFree(buf));
    CHECK(umdSubmit(ctx, &cb, 1, NULL, 0, &done)); /* the replay: fails here */
    CHECK(umdFenceWait(&done, UMD_TIMEOUT_INFINITE));
    return 0;
}
