/* A leak with a normal exit: a request handler allocates a scratch buffer per request and
 * frees only the first one; the program then tears down cleanly and exits 0. */
#include "staged.h"

int main(void) {
    umdDevice dev;
    umdContext ctx;
    umdBuffer scratch[3];
    OPEN(dev, ctx);
    for (int i = 0; i < 3; i++) {
        umdMemAllocInfo info = {.struct_size = sizeof info, .size = 256 << 10, .tag = "request-scratch"};
        CHECK(umdMemAllocEx(ctx, &info, &scratch[i]));
    }
    CHECK(umdMemFree(scratch[0])); /* the bug: scratch[1] and scratch[2] are never freed */
    CHECK(umdContextDestroy(ctx));
    CHECK(umdDeviceClose(dev));
    puts("served 3 requests");
    return 0;
}
