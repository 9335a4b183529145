/* A three-stage pipeline whose first stage faults, written from include/umd.h and
 * docs/libumd.md alone: no stage that depends on the failed one may run on its garbage, and
 * every wait says which producer failed and why.
 *
 *   producer P: wait until a flag is set, then read an unmapped VA (a page fault)
 *   consumer C1: after P, fill `out[0..64)`          consumer C2: after C1, fill `out[64..128)`
 *
 * Then a fresh context D names P's failed fence: refused, nothing queued, D keeps working.
 * Run on either backend (UMD_BACKEND); exits 0 only if every check passed. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <umd.h>

#define CHECK_PROG "dependency"
#include "check.h"


/* `code` from `call`, and the detail's message containing every fragment. */
static void expect(const char *name, umdResult got, umdResult want, const char *frag1, const char *frag2) {
    umdErrorDetail d = detail();
    char why[1400];
    int ok = got == want && (!frag1 || strstr(d.message, frag1)) && (!frag2 || strstr(d.message, frag2));
    snprintf(why, sizeof why, "got %s (want %s), detail: %s", umdGetErrorName(got), umdGetErrorName(want),
             d.message);
    check(name, ok, why);
}

static umdCmdBuf begin(umdContext c) {
    umdCmdBuf b;
    MUST(umdCmdBufCreate(c, &b));
    MUST(umdCmdBufBegin(b));
    return b;
}

int main(void) {
    umdDevice dev;
    MUST(umdDeviceOpen(0, &dev));
    umdContext p, c1, c2, d;
    MUST(umdContextCreate(dev, UMD_PRIORITY_NORMAL, &p));
    MUST(umdContextCreate(dev, UMD_PRIORITY_NORMAL, &c1));
    MUST(umdContextCreate(dev, UMD_PRIORITY_NORMAL, &c2));
    umdBuffer flag, out;
    MUST(umdMemAlloc(p, 4096, 0, &flag));
    MUST(umdMemAlloc(c1, 4096, 0, &out));
    umdDevicePtr flag_va, out_va;
    MUST(umdMemGetAddress(flag, &flag_va));
    MUST(umdMemGetAddress(out, &out_va));
    uint8_t zero[4096];
    memset(zero, 0, sizeof zero);
    MUST(umdMemcpyHtoD(flag, 0, zero, 8));
    MUST(umdMemcpyHtoD(out, 0, zero, sizeof zero));

    const umdDevicePtr BAD_VA = 0x7f0010000ull;
    umdCmdBuf bp = begin(p), b1 = begin(c1), b2 = begin(c2);
    MUST(umdCmdWaitValue(bp, flag_va, 1));
    MUST(umdCmdCopy(bp, out_va + 256, BAD_VA, 64));
    MUST(umdCmdBufEnd(bp));
    MUST(umdCmdFill(b1, out_va, 64, 0xc1c1c1c1u));
    MUST(umdCmdBufEnd(b1));
    MUST(umdCmdFill(b2, out_va + 64, 64, 0xc2c2c2c2u));
    MUST(umdCmdBufEnd(b2));
    umdFence fp, f1, f2;
    MUST(umdSubmit(p, &bp, 1, NULL, 0, &fp));
    MUST(umdSubmit(c1, &b1, 1, &fp, 1, &f1));
    MUST(umdSubmit(c2, &b2, 1, &f1, 1, &f2));
    uint64_t one = 1;
    MUST(umdMemcpyHtoD(flag, 0, &one, sizeof one));

    expect("the producer faults", umdFenceWait(&fp, UMD_TIMEOUT_INFINITE), UMD_ERR_CTX_LOST, "'unmapped'", NULL);
    uint64_t p_id = detail().context_id;
    char p_name[64];
    snprintf(p_name, sizeof p_name, "context %" PRIu64 " ", p_id);
    expect("its consumer did not run and names it", umdFenceWait(&f1, UMD_TIMEOUT_INFINITE),
           UMD_ERR_CTX_DEPENDENCY_FAILED, "did not run", p_name);
    expect("the consumer's detail says why the producer failed", umdFenceWait(&f1, 0), UMD_ERR_CTX_DEPENDENCY_FAILED,
           "faulted: GPU fault 'unmapped' (read access) at VA 0x7f0010000", NULL);
    expect("the second consumer fails through the first", umdFenceWait(&f2, UMD_TIMEOUT_INFINITE),
           UMD_ERR_CTX_DEPENDENCY_FAILED, "did not run either", p_name);
    check("the action is to recreate the context",
          umdGetErrorAction(UMD_ERR_CTX_DEPENDENCY_FAILED) == UMD_ACTION_RECREATE_CONTEXT, "wrong action");

    uint8_t got[128];
    MUST(umdMemcpyDtoH(got, out, 0, sizeof got));
    check("nothing ran on the producer's output", memcmp(got, zero, sizeof got) == 0, "out was written");

    umdContextState st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    MUST(umdContextGetState(c1, &st));
    char why[256];
    snprintf(why, sizeof why, "ban=%u dep_context_id=%" PRIu64 " dep_seqno=%" PRIu64 " reset=%u", st.ban,
             st.dep_context_id, st.dep_seqno, st.reset_status);
    check("the consumer's state names the producer",
          st.ban == UMD_BAN_DEPENDENCY && st.dep_context_id == p_id && st.dep_seqno == fp.seqno &&
              st.reset_status == UMD_RESET_NONE && st.hung == 0,
          why);
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    MUST(umdContextGetState(p, &st));
    check("the producer's state says fault", st.ban == UMD_BAN_FAULT && st.reset_status == UMD_RESET_GUILTY,
          "wrong producer state");
    /* A caller built against the version-1 struct gets the version-1 fields only. */
    umdContextState v1;
    memset(&v1, 0xab, sizeof v1);
    v1.struct_size = UMD_CONTEXT_STATE_SIZE_V1;
    MUST(umdContextGetState(c1, &v1));
    check("a version-1 caller's struct is not written past its size", v1.ban == 0xababababu, "ban was written");

    umdFence later;
    expect("a later submit on the consumer fails the same way", umdSubmit(c1, &b1, 1, NULL, 0, &later),
           UMD_ERR_CTX_DEPENDENCY_FAILED, "did not run", NULL);

    MUST(umdContextCreate(dev, UMD_PRIORITY_HIGH, &d));
    umdCmdBuf bd = begin(d);
    MUST(umdCmdFill(bd, out_va + 512, 64, 0xddddddddu));
    MUST(umdCmdBufEnd(bd));
    umdFence fd;
    expect("a submit naming the failed fence is refused", umdSubmit(d, &bd, 1, &fp, 1, &fd),
           UMD_ERR_CTX_DEPENDENCY_FAILED, "nothing was queued", p_name);
    MUST(umdSubmit(d, &bd, 1, NULL, 0, &fd));
    expect("and its context keeps working", umdFenceWait(&fd, UMD_TIMEOUT_INFINITE), UMD_SUCCESS, NULL, NULL);

    MUST(umdCmdBufDestroy(bp));
    MUST(umdCmdBufDestroy(b1));
    MUST(umdCmdBufDestroy(b2));
    MUST(umdCmdBufDestroy(bd));
    MUST(umdMemFree(flag));
    MUST(umdMemFree(out));
    MUST(umdContextDestroy(d));
    MUST(umdContextDestroy(c2));
    MUST(umdContextDestroy(c1));
    MUST(umdContextDestroy(p));
    MUST(umdDeviceClose(dev));
    return check_summary();
}
