/* Buffers still allocated at a normal exit: a tool allocates its work buffers, prints its result
 * and returns from main without freeing them or destroying its context. */
#include "staged.h"

int main(void) {
    umdDevice dev;
    umdContext ctx;
    umdBuffer work[2];
    OPEN(dev, ctx);
    CHECK(umdMemAlloc(ctx, 128 << 10, 0, &work[0]));
    CHECK(umdMemAlloc(ctx, 64 << 10, 0, &work[1]));
    puts("done");
    return 0; /* the bug: neither buffer is freed, the context is never destroyed */
}
