/* Out-of-bounds GEMM write in one of two contexts: context A streams fills into its own
 * buffer; context B runs a 64x64x64 int8 GEMM whose output buffer was sized for int8 results
 * (64*64 bytes) instead of int32 (64*64*4 bytes). A's work is innocent and must complete. */
#include "staged.h"

int main(void) {
    umdDevice dev;
    umdContext a, b;
    umdBuffer abuf, x, w, out;
    umdDevicePtr ava, xva, wva, ova;
    umdCmdBuf acb, bcb;
    umdFence adone, bdone;
    CHECK(umdDeviceOpen(0, &dev));
    CHECK(umdContextCreate(dev, UMD_PRIORITY_NORMAL, &a));
    CHECK(umdContextCreate(dev, UMD_PRIORITY_NORMAL, &b));
    CHECK(umdMemAlloc(a, 1 << 20, 0, &abuf));
    CHECK(umdMemGetAddress(abuf, &ava));
    RECORD(a, acb, CHECK(umdCmdFill(acb, ava, 1 << 20, 7)));
    CHECK(umdSubmit(a, &acb, 1, NULL, 0, &adone));
    CHECK(umdMemAlloc(b, 64 * 64, 0, &x));
    CHECK(umdMemAlloc(b, 64 * 64, 0, &w));
    CHECK(umdMemAlloc(b, 64 * 64, 0, &out)); /* the bug: int32 results need 64*64*4 bytes */
    CHECK(umdMemGetAddress(x, &xva));
    CHECK(umdMemGetAddress(w, &wva));
    CHECK(umdMemGetAddress(out, &ova));
    umdGemmI8Args g = {.a = xva, .b = wva, .c = ova, .m = 64, .n = 64, .k = 64,
                       .lda = 64, .ldb = 64, .ldc = 64};
    CHECK(umdCmdBufCreate(b, &bcb));
    CHECK(umdCmdBufBegin(bcb));
    CHECK(umdCmdGemmI8(bcb, &g));
    CHECK(umdCmdBufEnd(bcb));
    umdResult r = umdSubmit(b, &bcb, 1, NULL, 0, &bdone); /* fails: the write runs past `out` */
    CHECK(umdFenceWait(&adone, UMD_TIMEOUT_INFINITE)); /* A's work is unaffected */
    CHECK(umdCmdBufDestroy(acb));
    CHECK(umdCmdBufDestroy(bcb));
    CHECK(umdMemFree(abuf));
    CHECK(umdMemFree(x));
    CHECK(umdMemFree(w));
    CHECK(umdMemFree(out));
    CHECK(umdContextDestroy(a));
    CHECK(umdContextDestroy(b));
    CHECK(umdDeviceClose(dev));
    return r == UMD_SUCCESS ? 0 : staged_fail(r, "umdSubmit(b, &bcb, 1, NULL, 0, &bdone)");
}
