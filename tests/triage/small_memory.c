/* Device memory set too small in the service's environment (UMD_SIM_MEM_MIB=64): a model's
 * 128 MiB of weights cannot be allocated. The program is right; the setting is wrong. */
#include "staged.h"

int main(void) {
    umdDevice dev;
    umdContext ctx;
    umdBuffer weights;
    OPEN(dev, ctx);
    CHECK(umdMemAlloc(ctx, 128u << 20, 0, &weights)); /* UMD_ERR_MEM_OUT_OF_MEMORY */
    return 0;
}
