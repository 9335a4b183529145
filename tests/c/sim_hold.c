/* sim_hold.c: a process on the simulator that other processes look at (tools/tests/sim_export.rs,
 * umd/tests/sim_publish.rs). It opens device 0, allocates one 1 MiB buffer, creates two
 * contexts, submits one fill on each and waits for both, prints "ready pid=<pid>" and then
 * blocks until its standard input closes (or a line arrives), and closes everything.
 *
 * Mode "fork" (argv[1]): after the work, it forks a child that opens nothing, sleeps 600 ms
 * (longer than the publishing period) and exits with exit(0); the parent waits for it and
 * prints "child pid=<pid> status=<status>" before "ready".
 *
 * Mode "leave": when its input ends it exits at once, its device, contexts and buffer still
 * open. */
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "../triage/staged.h" /* CHECK: the failing call's code, status 1 */

static int fill(umdContext ctx, umdDevicePtr va, uint32_t value) {
    umdCmdBuf cb;
    umdFence done;
    CHECK(umdCmdBufCreate(ctx, &cb));
    CHECK(umdCmdBufBegin(cb));
    CHECK(umdCmdFill(cb, va, 4096, value));
    CHECK(umdCmdBufEnd(cb));
    CHECK(umdSubmit(ctx, &cb, 1, NULL, 0, &done));
    CHECK(umdFenceWait(&done, UMD_TIMEOUT_INFINITE));
    CHECK(umdCmdBufDestroy(cb));
    return 0;
}

int main(int argc, char **argv) {
    umdDevice dev;
    umdContext a, b;
    umdBuffer buf;
    umdDevicePtr va;
    char line[64];
    CHECK(umdDeviceOpen(0, &dev));
    CHECK(umdContextCreate(dev, UMD_PRIORITY_NORMAL, &a));
    CHECK(umdContextCreate(dev, UMD_PRIORITY_HIGH, &b));
    CHECK(umdMemAlloc(a, 1 << 20, 0, &buf));
    CHECK(umdMemGetAddress(buf, &va));
    if (fill(a, va, 0x11111111) || fill(b, va + 4096, 0x22222222)) return 1;
    if (argc > 1 && strcmp(argv[1], "fork") == 0) {
        pid_t child = fork();
        if (child < 0) {
            perror("fork");
            return 1;
        }
        if (child == 0) {
            struct timespec t = {0, 600 * 1000 * 1000};
            nanosleep(&t, NULL);
            exit(0);
        }
        int status = 0;
        if (waitpid(child, &status, 0) != child) {
            perror("waitpid");
            return 1;
        }
        printf("child pid=%d status=%d\n", (int)child, status);
    }
    printf("ready pid=%d\n", (int)getpid());
    fflush(stdout);
    if (fgets(line, sizeof line, stdin) == NULL) line[0] = '\0';
    if (argc > 1 && strcmp(argv[1], "leave") == 0) {
        printf("left open\n");
        return 0;
    }
    CHECK(umdMemFree(buf));
    CHECK(umdContextDestroy(a));
    CHECK(umdContextDestroy(b));
    CHECK(umdDeviceClose(dev));
    printf("closed\n");
    return 0;
}
