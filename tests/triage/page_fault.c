/* A GPU page fault with an innocent second context: context B fills through a stale device
 * pointer that no buffer of the process covers (a framework's cached address after its arena
 * was released); context A has work queued at the same time. The driver bans B and resubmits
 * A's work after the engine reset. */
#include "staged.h"

int main(void) {
    umdDevice dev;
    umdContext a, b;
    umdBuffer abuf;
    umdDevicePtr ava;
    umdCmdBuf acb, bcb;
    umdFence adone, bdone;
    const umdDevicePtr stale = 0x7f0000000ull;
    CHECK(umdDeviceOpen(0, &dev));
    CHECK(umdContextCreate(dev, UMD_PRIORITY_NORMAL, &a));
    CHECK(umdContextCreate(dev, UMD_PRIORITY_NORMAL, &b));
    CHECK(umdMemAlloc(a, 8 << 20, 0, &abuf));
    CHECK(umdMemGetAddress(abuf, &ava));
    RECORD(a, acb, for (int i = 0; i < 8; i++) CHECK(umdCmdFill(acb, ava, 8 << 20, (uint32_t)i)));
    RECORD(b, bcb, CHECK(umdCmdFill(bcb, stale, 4096, 0xdead)));
    CHECK(umdSubmit(a, &acb, 1, NULL, 0, &adone));
    CHECK(umdSubmit(b, &bcb, 1, NULL, 0, &bdone));
    CHECK(umdFenceWait(&adone, UMD_TIMEOUT_INFINITE)); /* A completes after the reset */
    umdResult r = umdFenceWait(&bdone, UMD_TIMEOUT_INFINITE); /* B: UMD_ERR_CTX_LOST */
    CHECK(umdCmdBufDestroy(acb));
    CHECK(umdMemFree(abuf));
    CHECK(umdContextDestroy(a));
    return r == UMD_SUCCESS ? 0 : staged_fail(r, "umdFenceWait(&bdone, UMD_TIMEOUT_INFINITE)");
}
