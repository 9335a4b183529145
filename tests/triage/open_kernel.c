/* A service that needs the kernel driver (UMD_BACKEND=kmd in its unit file) opens device 0 and
 * allocates a buffer. The program is right; the machine decides how it fails: module not
 * loaded, permission denied on the render node, or a kernel UAPI this libumd cannot drive. */
#include "staged.h"

int main(void) {
    umdDevice dev;
    umdContext ctx;
    umdBuffer buf;
    OPEN(dev, ctx);
    CHECK(umdMemAlloc(ctx, 4096, 0, &buf));
    CHECK(umdMemFree(buf));
    CHECK(umdContextDestroy(ctx));
    CHECK(umdDeviceClose(dev));
    return 0;
}
