/* Out of memory caused by another context: a cache context keeps 15 x 64 MiB of the 1 GiB
 * device; the inference context then asks for 128 MiB and is refused. The refused context is
 * the victim; the holder is the cause. */
#include "staged.h"

int main(void) {
    umdDevice dev;
    umdContext cache, infer;
    umdBuffer held[15], act;
    CHECK(umdDeviceOpen(0, &dev));
    CHECK(umdContextCreate(dev, UMD_PRIORITY_LOW, &cache));
    CHECK(umdContextCreate(dev, UMD_PRIORITY_NORMAL, &infer));
    for (int i = 0; i < 15; i++) CHECK(umdMemAlloc(cache, 64u << 20, 0, &held[i]));
    CHECK(umdMemAlloc(infer, 128u << 20, 0, &act)); /* UMD_ERR_MEM_OUT_OF_MEMORY */
    return 0;
}
