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
    CHECK(umdDeviceOpen(0, &dev));
    CHECK(umdContextCreate(dev, UMD_PRIORITY_NORMAL, &ctx));
    CHECK(umdMemAlloc(ctx, 8 << 20, 0, &buf));
    CHECK(umdMemGetAddress(buf, &va));
    RECORD(ctx, cb, for (int i = 0; i < 16; i++) CHECK(umdCmdFill(cb, va, 8 << 20, (uint32_t)i)));
    CHECK(umdSubmit(ctx, &cb, 1, NULL, 0, &done));
    CHECK(umdDebugInjectFault(dev, UMD_DEBUG_FAULT_RESET_FAILURE));
    CHECK(umdDebugInjectFault(dev, UMD_DEBUG_FAULT_MEM_ERROR));
    CHECK(umdFenceWait(&done, UMD_TIMEOUT_INFINITE)); /* UMD_ERR_DEVICE_LOST */
    return 0;
}
