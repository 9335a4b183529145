"""Every failing result raises the UmdError subclass of its domain, with the code's name, the
action and the whole umdErrorDetail; one misuse per class. Closing is exactly-once."""

import gc
import threading

import numpy as np
import pytest

import aigpu
from aigpu import ErrorAction as A

from conftest import run_py


def check_error(ei, cls, name, action, function):
    e = ei.value
    assert type(e) is cls, type(e)
    assert isinstance(e, aigpu.UmdError)
    assert e.name == name and e.code == aigpu.Result[name[len("UMD_"):]]
    assert e.action == action
    d = e.detail
    assert d is not None and d.code == e.code and d.name == name
    assert d.action == action and d.function == function
    assert d.file.startswith("umd/src/") and d.line > 0
    assert d.thread_id == threading.get_native_id()
    assert d.mono_ns > 0 and d.wall_ns > 0
    assert d.message.endswith(".") and "Action: " in d.message
    assert name in str(e) and d.message in str(e)
    assert set(d.as_dict()) >= {"code", "action", "os_errno", "kmd_reason", "context_id",
                                "fence_seqno", "fault_va", "function", "file", "line", "message"}
    return e


def test_invalid_error(ctx):
    with pytest.raises(aigpu.InvalidError) as ei:
        ctx.alloc(0)
    check_error(ei, aigpu.InvalidError, "UMD_ERR_INVALID_SIZE", A.FIX_CALL, "umdMemAllocEx")
    assert isinstance(ei.value, ValueError)
    cb = ctx.cmdbuf()
    with pytest.raises(aigpu.InvalidError) as ei:
        ctx.submit(cb)  # never ended
    assert ei.value.name in ("UMD_ERR_INVALID_STATE", "UMD_ERR_INVALID_ARGUMENT")


def test_invalid_handle_error_after_close(ctx):
    b = ctx.alloc(64)
    b.close()
    b.close()  # idempotent: no second umdMemFree
    with pytest.raises(aigpu.InvalidHandleError) as ei:
        b.read(4)
    e = check_error(ei, aigpu.InvalidHandleError, "UMD_ERR_INVALID_HANDLE", A.FIX_CALL, "umdMemcpyDtoH")
    assert "destroyed" in e.detail.message


def test_init_error_bad_config():
    out = run_py(
        "import aigpu\n"
        "try:\n"
        "    aigpu.Device(0)\n"
        "except aigpu.InitError as e:\n"
        "    print(type(e).__name__, e.name, e.action.name, e.detail.function, 'UMD_SIM_MEM_MIB' in e.detail.message)\n",
        UMD_BACKEND="sim",
        UMD_SIM_MEM_MIB="1",
    )
    assert out == "InitError UMD_ERR_INIT_BAD_CONFIG FIX_CONFIGURATION umdDeviceOpen True\n"


def test_init_error_no_kernel_driver():
    out = run_py(
        "import aigpu\n"
        "try:\n"
        "    aigpu.device_count(); aigpu.Device(0)\n"
        "except aigpu.InitError as e:\n"
        "    print(type(e).__name__, e.action.name)\n"
        "else:\n"
        "    print('kmd present')\n",
        UMD_BACKEND="kmd",
    )
    assert out in ("InitError CHECK_INSTALLATION\n", "kmd present\n")


def test_device_error_not_found():
    with pytest.raises(aigpu.DeviceError) as ei:
        aigpu.Device(7)
    check_error(ei, aigpu.DeviceError, "UMD_ERR_DEVICE_NOT_FOUND", A.FIX_CALL, "umdDeviceOpen")


def test_device_lost_error_and_reopen():
    out = run_py(
        "import aigpu\n"
        "dev = aigpu.Device(0); ctx = dev.context(); b = ctx.alloc(64); cb = ctx.cmdbuf()\n"
        "with cb.record(): cb.fill(b, 64, 7)\n"
        "dev.inject_fault(aigpu.DEBUG_FAULT_FALL_OFF_BUS)\n"
        "try:\n"
        "    ctx.submit(cb).wait(10)\n"
        "except aigpu.DeviceLostError as e:\n"
        "    print(e.name, e.action.name, isinstance(e, aigpu.DeviceError))\n"
        "dev.close()\n"  # works on a lost device; the children are marked closed
        "print(ctx.closed, b.closed)\n"
        "del b, cb, ctx\n"  # their finalisers must not call C again
        "with aigpu.Device(0) as d2, d2.context() as c2:\n"
        "    print(c2.alloc(64).nbytes)\n",
    )
    assert out == "UMD_ERR_DEVICE_LOST RECREATE_DEVICE True\nTrue True\n64\n"


def test_context_lost_error(ctx):
    dst = ctx.alloc(4096)
    cb = ctx.cmdbuf()
    with cb.record():
        cb.copy(dst, 0x7F0000000, 64)  # no buffer there: the GPU faults
    f = ctx.submit(cb)
    with pytest.raises(aigpu.ContextLostError) as ei:
        f.wait(10)
    e = check_error(ei, aigpu.ContextLostError, "UMD_ERR_CTX_LOST", A.RECREATE_CONTEXT, "umdFenceWait")
    assert isinstance(e, aigpu.ContextError)
    assert e.detail.fault_va == 0x7F0000000 and e.detail.fence_seqno == f.seqno
    assert e.detail.context_id == ctx.id
    st = ctx.state()
    assert st["reset_status"] == aigpu.RESET_GUILTY and st["fault_va"] == 0x7F0000000
    with pytest.raises(aigpu.ContextLostError):
        ctx.submit(cb)


def test_mem_error_double_free(ctx):
    b = ctx.alloc(4096)
    va = b.address
    ctx.free_address(va)
    assert b.closed  # freed through its address: the Buffer will not free it again
    with pytest.raises(aigpu.MemError) as ei:
        ctx.free_address(va)
    check_error(ei, aigpu.MemError, "UMD_ERR_MEM_DOUBLE_FREE", A.FIX_CALL, "umdMemFreeAddress")
    with pytest.raises(aigpu.MemError) as ei:
        ctx.alloc(1 << 50)
    assert ei.value.name == "UMD_ERR_MEM_TOO_LARGE"


def test_out_of_memory_error_and_retry():
    out = run_py(
        "import aigpu\n"
        "with aigpu.Device(0) as dev, dev.context() as ctx:\n"
        "    held = [ctx.alloc(8 << 20) for _ in range(7)]\n"
        "    try:\n"
        "        ctx.alloc(32 << 20)\n"
        "    except aigpu.OutOfMemoryError as e:\n"
        "        print(e.name, e.action.name, e.retryable, isinstance(e, aigpu.MemError))\n"
        "        for b in held: b.close()\n"
        "        print(ctx.alloc(32 << 20).nbytes)\n",
        UMD_SIM_MEM_MIB="64",
    )
    assert out == "UMD_ERR_MEM_OUT_OF_MEMORY FREE_MEMORY_AND_RETRY True True\n33554432\n"


def test_submit_error_bad_wait_fence(dev, ctx):
    cb = ctx.cmdbuf()
    with cb.record():
        cb.fill(ctx.alloc(64), 64, 0)  # the command buffer keeps the temporary buffer alive
    bogus = aigpu.Fence(ctx, 1000)
    with pytest.raises(aigpu.SubmitError) as ei:
        ctx.submit(cb, waits=[bogus])
    check_error(ei, aigpu.SubmitError, "UMD_ERR_SUBMIT_BAD_WAIT_FENCE", A.FIX_CALL, "umdSubmit")


def test_sync_error_never_submitted(ctx):
    with pytest.raises(aigpu.SyncError) as ei:
        aigpu.Fence(ctx, 99).wait(1)
    check_error(ei, aigpu.SyncError, "UMD_ERR_SYNC_FENCE_NEVER_SUBMITTED", A.FIX_CALL, "umdFenceWait")


def test_sync_timeout_error_then_retry(ctx):
    sem = ctx.alloc(4096)
    sem.write(np.zeros(1, np.uint64))
    cb = ctx.cmdbuf()
    with cb.record():
        cb.wait_value(sem, 1)
    f = ctx.submit(cb)
    assert f.query() is False
    with pytest.raises(aigpu.SyncTimeoutError) as ei:
        f.wait(0.01)
    e = check_error(ei, aigpu.SyncTimeoutError, "UMD_ERR_SYNC_TIMEOUT", A.RETRY, "umdFenceWait")
    assert e.retryable and isinstance(e, TimeoutError) and isinstance(e, aigpu.SyncError)
    sem.write(np.ones(1, np.uint64))
    f.wait(10)  # the retry succeeds
    assert f.query() is True


def test_log_error_bad_filter():
    with pytest.raises(aigpu.LogError) as ei:
        aigpu.log.set_filter("umd::memory=loud")
    check_error(ei, aigpu.LogError, "UMD_ERR_LOG_BAD_FILTER", A.FIX_CALL, "umdLogSetFilter")


def test_internal_error_class():
    # No correct call can make libumd fail internally; the class follows from the code range.
    assert aigpu.error_class(-900) is aigpu.InternalError
    assert aigpu.error_class(-901) is aigpu.InternalError
    assert aigpu.error_action(-900) == A.REPORT_BUG
    assert aigpu.error_class(-12345) is aigpu.UmdError


def test_close_order_and_gc_without_double_free(dev):
    """Children first, parents first, or the collector: each C object is destroyed once.
    A second destroy would fail with INVALID_HANDLE and show in the thread's last error."""
    before = aigpu.last_error_detail()
    ctx = dev.context()
    bufs = [ctx.alloc(128) for _ in range(4)]
    cbs = [ctx.cmdbuf() for _ in range(2)]
    bufs[0].close()
    ctx.close()  # destroys the rest in C; the Python objects are marked closed
    assert all(b.closed for b in bufs) and all(c.closed for c in cbs)
    del bufs, cbs
    gc.collect()
    with dev.context() as c2:
        b = c2.alloc(64)
        m = b.map()
        arr = m.as_array(np.uint8)
        del b, m
        gc.collect()
        arr[:] = 1  # still mapped: the array holds the mapping, the mapping the buffer
    del arr
    gc.collect()
    after = aigpu.last_error_detail()
    assert (after.code, after.mono_ns) == (before.code, before.mono_ns), after


def test_context_managers(dev):
    with dev.context() as c:
        with c.alloc(64) as b, c.cmdbuf() as cb:
            pass
        assert b.closed and cb.closed and not c.closed
    assert c.closed


def test_error_actions_match_the_header():
    """ErrorAction has exactly umd.h's umdErrorAction enumerators (a new one must be added)."""
    import os
    import re

    inc = os.environ.get("AIGPU_INCLUDE_DIR") or os.path.join(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "include"
    )
    header = os.path.join(inc, "umd.h")
    if not os.path.isfile(header):
        pytest.skip("no umd.h next to this test")
    want = {m.group(1): int(m.group(2)) for m in re.finditer(r"UMD_ACTION_(\w+) = (\d+),", open(header).read())}
    assert {a.name: int(a) for a in A} == want
    for code in aigpu.Result:
        assert isinstance(aigpu.error_action(code), A), code
