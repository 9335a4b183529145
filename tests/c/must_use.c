/* Must NOT compile with -Werror: it ignores a umdResult. tests/c_abi.rs expects the failure and
 * the warn_unused_result diagnostic. */
#include "umd.h"

int main(void) {
    umdDeviceClose(0);
    return 0;
}
