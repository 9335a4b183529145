/* umd.h and aigpu_drm.h compile on their own, twice included, as C11 and C++17. */
#include "umd.h"
#include "umd.h"
#include "aigpu_drm.h"
#include "aigpu_drm.h"

int main(void) {
    umdFence f = {0, 0};
    umdResult r = umdFenceQuery(&f);
    return r == UMD_ERR_INVALID_HANDLE ? 0 : 1; /* context 0 is never valid */
}
