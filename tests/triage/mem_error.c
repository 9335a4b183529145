/* An uncorrectable memory error while a job runs, and the engine reset after it fails: the
 * device is lost. (The failure is injected through the test hook, as on a test bench.) */
#include "staged.h"

int main(void) {
    umdDevice dev;
    umdContext ctx;
    umdBuffer buf;
    umdDevicePtr va;
    umdCmdBuf cb;
    umdFence done;
    OPEN(dev, ctx);
    CHECK(umdMemAlloc(ctx, 8 << 20, 0, &buf));
    CHECK(umdMemGetAddress(buf, &va));
    RECORD(ctx, cb, for (int i = 0; i < 16; i++) CHECK(umdCmdFill(cb, va, 8 << 20, (uint32_t)i)));
    CHECK(umdSubmit(ctx, &cb, 1, NULL, 0, &done));
    CHECK(umdDebugInjectFault(dev, UMD_DEBUG_FAULT_RESET_FAILURE));
    CHECK(umdDebugInjectFault(dev, UMD_DEBUG_FAULT_MEM_ERROR));
    /* The loss is the device's, asynchronous: the job may finish first. Keep working, as a
     * service would, until a call says UMD_ERR_DEVICE_LOST (a few rounds at most). */
    for (int round = 0; round < 1000; round++) {
        CHECK(umdFenceWait(&done, UMD_TIMEOUT_INFINITE));
        CHECK(umdSubmit(ctx, &cb, 1, NULL, 0, &done));
    }
    return 0;
}
