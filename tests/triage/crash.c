/* A crash of the application itself: after its first job completed, the program's own code
 * writes through a NULL pointer (a lookup that failed and was not checked) and dies of SIGSEGV
 * with its context and one buffer still live. Nothing on the GPU side failed. */
#include <stddef.h>
#include <string.h>
#include "staged.h"

struct layer {
    const char *name;
    float *weights;
};

static struct layer *find_layer(struct layer *layers, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(layers[i].name, name) == 0) return &layers[i];
    return NULL;
}

int main(void) {
    umdDevice dev;
    umdContext ctx;
    umdBuffer act;
    umdCmdBuf cb;
    umdDevicePtr va;
    umdFence f;
    OPEN(dev, ctx);
    CHECK(umdMemAlloc(ctx, 1 << 20, 0, &act));
    CHECK(umdMemGetAddress(act, &va));
    RECORD(ctx, cb, CHECK(umdCmdFill(cb, va, 1 << 20, 0)));
    CHECK(umdSubmit(ctx, &cb, 1, NULL, 0, &f));
    CHECK(umdFenceWait(&f, UMD_TIMEOUT_INFINITE));
    struct layer layers[2] = {{"embed", NULL}, {"proj", NULL}};
    struct layer *l = find_layer(layers, 2, "attn"); /* not there: NULL */
    printf("layer %s\n", l->name);                   /* SIGSEGV */
    return 0;
}
