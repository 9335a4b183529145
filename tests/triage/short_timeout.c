/* A job timeout set far too short in the service's environment (UMD_SIM_JOB_TIMEOUT_MS=10):
 * an ordinary large GEMM that needs longer than that is declared hung. The program is right;
 * the setting is wrong. */
#include "staged.h"

int main(void) {
    umdDevice dev;
    umdContext ctx;
    umdBuffer x, w, out;
    umdDevicePtr xva, wva, ova;
    umdCmdBuf cb;
    umdFence done;
    const uint32_t n = 1024;
    OPEN(dev, ctx);
    CHECK(umdMemAlloc(ctx, (uint64_t)n * n, 0, &x));
    CHECK(umdMemAlloc(ctx, (uint64_t)n * n, 0, &w));
    CHECK(umdMemAlloc(ctx, (uint64_t)n * n * 4, 0, &out));
    CHECK(umdMemGetAddress(x, &xva));
    CHECK(umdMemGetAddress(w, &wva));
    CHECK(umdMemGetAddress(out, &ova));
    umdGemmI8Args g = {.a = xva, .b = wva, .c = ova, .m = n, .n = n, .k = n,
                       .lda = n, .ldb = n, .ldc = n};
    CHECK(umdCmdBufCreate(ctx, &cb));
    CHECK(umdCmdBufBegin(cb));
    CHECK(umdCmdGemmI8(cb, &g));
    CHECK(umdCmdBufEnd(cb));
    CHECK(umdSubmit(ctx, &cb, 1, NULL, 0, &done));
    CHECK(umdFenceWait(&done, UMD_TIMEOUT_INFINITE)); /* UMD_ERR_CTX_LOST after 10 ms */
    return 0;
}
