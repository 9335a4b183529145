"""Devices, contexts, buffers, numpy in and out, command buffers, fences, stats, logging."""

import ctypes
import os
import re
import subprocess
import shutil
import sys

import numpy as np
import pytest

import aigpu
from aigpu import _lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def workspace_version():
    with open(os.path.join(ROOT, "Cargo.toml")) as f:
        text = f.read()
    return re.search(r'\[workspace\.package\][^\[]*?version = "([0-9.]+)"', text).group(1)


def test_versions_agree():
    v = aigpu.version()
    assert "%d.%d.%d" % (v.major, v.minor, v.patch) == aigpu.__version__
    if os.path.isfile(os.path.join(ROOT, "Cargo.toml")):
        assert aigpu.__version__ == workspace_version()


def test_library_is_the_abi_soname():
    path = aigpu.library_path()
    assert os.path.isfile(path), path
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    assert "Library soname: [libumd.so.1]" in out


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_struct_layouts_match_the_header(tmp_path):
    """Every ctypes struct has the size and field offsets the C compiler gives umd.h's."""
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "umd.h"', "int main(void) {"]
    for s in _lib.STRUCTS:
        n = s.__name__
        lines.append('printf("%s %%zu\\n", sizeof(struct %s));' % (n, n))
        for f, _ in s._fields_:
            lines.append('printf("%s.%s %%zu\\n", offsetof(struct %s, %s));' % (n, f, n, f))
    lines.append("return 0; }")
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines))
    inc = os.environ.get("AIGPU_INCLUDE_DIR", os.path.join(ROOT, "include"))
    exe = tmp_path / "layout"
    subprocess.run(["cc", "-std=c11", "-I", inc, str(src), "-o", str(exe)], check=True)
    got = dict(l.split() for l in subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines())
    for s in _lib.STRUCTS:
        n = s.__name__
        assert int(got[n]) == ctypes.sizeof(s), n
        for f, _ in s._fields_:
            assert int(got["%s.%s" % (n, f)]) == getattr(s, f).offset, "%s.%s" % (n, f)


def test_handles_are_uint64_with_type_bits(dev, ctx):
    b = ctx.alloc(64)
    cb = ctx.cmdbuf()
    tags = {dev.handle >> 56, ctx.handle >> 56, b.handle >> 56, cb.handle >> 56}
    assert tags == {1, 2, 3, 4}  # umd/src/handle.rs: device, context, buffer, cmdbuf
    assert all(h > 2**32 for h in (dev.handle, ctx.handle, b.handle, cb.handle))
    b.close()
    cb.close()


def test_device_info(dev):
    info = dev.info
    assert info["backend"] == "sim"
    assert info["location"] == "sim:0"
    assert info["mem_total"] > 0 and info["page_size"] > 0
    assert info["pci_address"] == ""  # the simulator is on no bus
    assert aigpu.device_count() >= 1


def test_numpy_round_trip(ctx):
    a = np.arange(1000, dtype=np.int32).reshape(10, 100)
    with ctx.from_numpy(a) as b:
        assert b.nbytes == a.nbytes
        np.testing.assert_array_equal(b.to_numpy(np.int32, a.shape), a)
        np.testing.assert_array_equal(b.to_numpy(np.int32, (10,), offset=4 * 100), a[1, :10])
        # Non-contiguous input is copied in C order.
        b.write(a[:, ::2].copy(order="F"))
        np.testing.assert_array_equal(b.to_numpy(np.int32, (10, 50)), a[:, ::2])
        assert b.read(8) == a[:, ::2].tobytes()[:8]
        b.write(bytearray(b"\x01\x02\x03\x04"), offset=8)
        assert b.read(4, offset=8) == b"\x01\x02\x03\x04"


def test_mapping_is_zero_copy(ctx):
    with ctx.alloc(256) as b:
        with b.map() as m:
            view = m.as_array(np.int32, (8, 8))
            view[:] = np.arange(64, dtype=np.int32).reshape(8, 8)
            np.testing.assert_array_equal(b.to_numpy(np.int32, (8, 8)), view)
            assert np.asarray(m).nbytes == 256
            mv = m.memoryview()
            mv[0] = 7
            assert b.read(1) == b"\x07"
            b.write(np.full(64, -1, np.int32))
            assert (view == -1).all()  # the same memory


def test_mapping_keeps_the_buffer_alive(ctx):
    """An array made from a mapping holds the mapping, which holds the buffer: the collector
    cannot free device memory under a live array."""
    import gc
    import weakref

    b = ctx.alloc(64)
    b.write(np.arange(16, dtype=np.int32))
    view = b.map().as_array(np.int32)
    ref = weakref.ref(b)
    del b
    gc.collect()
    assert ref() is not None
    assert list(view[:4]) == [0, 1, 2, 3]
    del view
    gc.collect()
    assert ref() is None


def test_fill_copy_submit_fence(ctx):
    src, dst = ctx.alloc(4096), ctx.alloc(4096)
    cb = ctx.cmdbuf()
    with cb.record():
        cb.fill(src, 4096, 0xDEADBEEF)
        cb.copy(dst.va(16), src, 1024)
        cb.write_value(dst.va(2048), 0x1122334455667788)
        cb.timestamp(dst.va(3072))
    f = ctx.submit([cb])
    f.wait(10)
    assert f.query() is True
    out = dst.to_numpy(np.uint32)
    assert (out[4 : 4 + 256] == 0xDEADBEEF).all()
    assert dst.to_numpy(np.uint64, (1,), offset=2048)[0] == 0x1122334455667788
    assert dst.to_numpy(np.uint64, (1,), offset=3072)[0] > 0
    st = ctx.state()
    assert st["completed_seqno"] == st["submitted_seqno"] == f.seqno
    assert st["reset_status"] == aigpu.RESET_NONE


def test_gemm_against_numpy(ctx):
    rng = np.random.default_rng(1)
    m, n, k = 24, 40, 56
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    ba, bb = ctx.from_numpy(a, read_only=True), ctx.from_numpy(b, read_only=True)
    bc = ctx.empty((m, n), np.int32)
    h8 = ctx.empty((m, n), np.int8)
    cb = ctx.cmdbuf()
    with cb.record():
        cb.gemm_i8(ba, bb, bc, m, n, k)
        cb.eltwise(aigpu.ELTWISE_RELU, m * n, bc, bc)
        cb.requantize(m * n, h8, bc, 3, 8)
    ctx.submit(cb).wait(30)
    ref = np.maximum(a.astype(np.int32) @ b.astype(np.int32), 0)
    np.testing.assert_array_equal(bc.to_numpy(np.int32, (m, n)), ref)
    q = np.clip((ref.astype(np.int64) * 3 + (1 << 7)) >> 8, -128, 127).astype(np.int8)
    np.testing.assert_array_equal(h8.to_numpy(np.int8, (m, n)), q)


def test_cross_context_fence(dev):
    with dev.context() as producer, dev.context(aigpu.PRIORITY_HIGH) as consumer:
        data = producer.alloc(4096)
        out = consumer.alloc(4096)
        p = producer.cmdbuf()
        with p.record():
            p.fill(data, 4096, 0x01020304)
        c = consumer.cmdbuf()
        with c.record():
            c.copy(out, data, 4096)
        fp = producer.submit(p)
        fc = consumer.submit(c, waits=[fp])
        fc.wait(10)
        assert (out.to_numpy(np.uint32) == 0x01020304).all()


def test_stats(dev, ctx):
    dev.reset_peak_stats()
    b = ctx.alloc(1 << 20, tag="stats")
    s = dev.mem_stats()
    assert s["allocation_count"]["all"]["current"] >= 1
    assert s["requested_bytes"]["all"]["current"] >= 1 << 20
    assert s["device_total"] == dev.info["mem_total"]
    cs = ctx.mem_stats()
    assert cs["context_id"] == ctx.id and cs["allocation_count"]["current"] == 1
    b.close()
    assert ctx.mem_stats()["allocation_count"]["current"] == 0
    assert dev.trim() >= 0
    dev.set_release_threshold(2**64 - 1)


def test_logging_controls(tmp_path):
    from aigpu import log

    old = log.get_filter(log.Sink.FILE)
    try:
        log.set_filter("warn,umd::memory=debug", log.Sink.FILE)
        assert log.get_filter(log.Sink.FILE) == "umd::memory=debug,warn"  # canonical order
        log.set_level(log.Level.INFO, sinks=log.Sink.FILE)
        assert log.get_filter(log.Sink.FILE) == "umd::memory=debug,info"
        log.set_level(log.Level.TRACE, "umd::submit", log.Sink.FILE)
        assert "umd::submit=trace" in log.get_filter(log.Sink.FILE).split(",")
    finally:
        log.set_filter(old, log.Sink.FILE)
    log.set_file(tmp_path)
    assert log.file_path().startswith(str(tmp_path))
    log.set_format(log.Format.JSON, log.Sink.FILE)
    log.set_format(log.Format.TEXT, log.Sink.FILE)
    log.flush(5000)
    st = log.stats()
    assert st["queue_capacity"] > 0 and "dropped" in st
    box = log.dump_blackbox()
    assert os.path.isfile(box) and os.path.dirname(box) == str(tmp_path)
    log.set_file(os.environ["UMD_LOG_DIR"])


def test_error_functions():
    assert aigpu.error_name(-300) == "UMD_ERR_CTX_LOST"
    assert aigpu.error_name(12345) == "UMD_UNKNOWN_RESULT"
    assert aigpu.error_action(-400) == aigpu.ErrorAction.FREE_MEMORY_AND_RETRY
    assert aigpu.is_retryable(-600) and not aigpu.is_retryable(-1)
    assert aigpu.Result.ERR_SYNC_TIMEOUT == -600 and aigpu.Result.SUCCESS == 0
    golden = os.path.join(ROOT, "umd", "errors.golden")
    if os.path.isfile(golden):  # in the source tree: every released code, by name and value
        want = {}
        for line in open(golden):
            m = re.match(r"^UMD_(\w+) = (-?\d+)$", line.strip())
            if m:
                want[m.group(1)] = int(m.group(2))
        assert {r.name: int(r) for r in aigpu.Result} == want
