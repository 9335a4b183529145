/* A hang: the job never finishes (the debug HANG packet stands for a kernel that spins), with
 * the default job timeout in force. */
#include "staged.h"

int main(void) {
    umdDevice dev;
    umdContext ctx;
    umdCmdBuf cb;
    umdFence done;
    OPEN(dev, ctx);
    RECORD(ctx, cb, CHECK(umdCmdDebugHang(cb)));
    CHECK(umdSubmit(ctx, &cb, 1, NULL, 0, &done));
    CHECK(umdFenceWait(&done, UMD_TIMEOUT_INFINITE)); /* UMD_ERR_CTX_LOST after the timeout */
    return 0;
}
