//! UAPI conformance: the same tests against whichever backend `UMD_BACKEND` selects (the
//! simulator on the host; the real module in the QEMU guest, where this binary runs with
//! `UMD_BACKEND=kmd`). Each case gets exactly one thing wrong, so the expected errno and reason
//! do not depend on the order in which a driver checks its arguments.
//!
//! Test names start with the UAPI area they cover (`gem_`, `vm_`, `ctx_`, `submit_`, `wait_`),
//! so the guest can run the areas its module implements.

use libc::{E2BIG, EINVAL, ENOENT, ENOMEM};
use uapi::ioctl::{Cmdbuf, VM_ACCESS_READ as R, VM_ACCESS_WRITE as W};
use uapi::reason as r;
use umd::backend::{select, Backend};

#[path = "backend_util.rs"]
mod backend_util;
use backend_util::{expect_err, expect_err_at};

const PAGE: u64 = 4096;
const VA: u64 = 0x4000_0000;

fn open() -> Box<dyn Backend> {
    if std::env::var_os("UMD_BACKEND").is_none() {
        std::env::set_var("UMD_BACKEND", "sim");
    }
    let resolved = select::resolve().expect("backend resolves");
    select::open(&resolved, 0).expect("device 0 opens")
}

#[test]
fn query_reports_the_contract() {
    let b = open();
    let q = b.query().expect("query");
    assert_eq!(
        (q.uapi_major, q.uapi_minor),
        (uapi::UAPI_MAJOR, uapi::UAPI_MINOR)
    );
    assert_eq!(
        (q.va_start, q.va_end, q.page_size),
        (uapi::VA_START, uapi::VA_END, 4096)
    );
    assert_eq!(q.num_queues, 4);
    assert_eq!(q.max_cmdbufs, uapi::ioctl::MAX_CMDBUFS);
    assert_eq!(q.caps & !uapi::CAPS_ALL, 0);
    assert!(q.mem_total >= 16 << 20 && q.max_bo_size <= q.mem_total);
}

#[test]
fn gem_create_sizes() {
    let b = open();
    let q = b.query().expect("query");
    expect_err(b.gem_create(0), EINVAL, r::SIZE_ZERO);
    expect_err(b.gem_create(q.max_bo_size + PAGE), E2BIG, r::SIZE_TOO_LARGE);
    expect_err(b.gem_create(u64::MAX), E2BIG, r::SIZE_TOO_LARGE);
    let h = b.gem_create(1).expect("1 byte rounds up to a page");
    let h2 = b.gem_create(3 * PAGE).expect("3 pages");
    assert_ne!(h, h2);
    b.gem_close(h).expect("close");
    b.gem_close(h2).expect("close");
    assert_eq!(
        b.gem_close(h).map_err(|e| e.errno),
        Err(EINVAL),
        "double GEM close"
    );
}

#[test]
fn gem_out_of_memory_then_recovers() {
    let b = open();
    let q = b.query().expect("query");
    let half = (q.mem_total / 2 + PAGE) & !(PAGE - 1);
    let a = b.gem_create(half).expect("first half");
    expect_err(b.gem_create(half), ENOMEM, r::OUT_OF_MEMORY);
    // The other tests of this binary share the device and free their objects concurrently, so
    // only `a`'s own share of the usage is certain (comparing with a reading taken before the
    // create raced with them).
    let used = b.query().expect("query").mem_used;
    assert!(used >= half, "mem_used {used} < the live object's {half}");
    b.gem_close(a).expect("close");
    let c = b.gem_create(half).expect("fits again after the close");
    b.gem_close(c).expect("close");
}

#[test]
fn gem_mmap_reads_and_writes_the_object() {
    let b = open();
    let h = b.gem_create(2 * PAGE).expect("create");
    let m = b.gem_mmap(h, 2 * PAGE).expect("mmap");
    // SAFETY: m is a live 2-page mapping of the object.
    unsafe {
        assert_eq!(*m.ptr, 0, "new objects are zeroed");
        m.ptr.add(PAGE as usize + 7).write(0x5A);
        assert_eq!(m.ptr.add(PAGE as usize + 7).read(), 0x5A);
    }
    expect_err(b.gem_mmap(0xdead, PAGE), ENOENT, r::HANDLE_INVALID);
    b.gem_munmap(m).expect("munmap");
    b.gem_close(h).expect("close");
}

#[test]
fn vm_bind_validation() {
    let b = open();
    let h = b.gem_create(4 * PAGE).expect("create");
    expect_err(b.vm_bind(h, VA, 0, PAGE, 0), EINVAL, r::ACCESS_INVALID);
    expect_err(
        b.vm_bind(h, VA, 0, PAGE, 0x8 | R),
        EINVAL,
        r::ACCESS_INVALID,
    );
    expect_err(b.vm_bind(h, VA, 0, 0, R), EINVAL, r::SIZE_ZERO);
    expect_err(b.vm_bind(h, VA + 1, 0, PAGE, R), EINVAL, r::UNALIGNED);
    expect_err(b.vm_bind(h, VA, 512, PAGE, R), EINVAL, r::UNALIGNED);
    expect_err(b.vm_bind(h, VA, 0, PAGE + 8, R), EINVAL, r::UNALIGNED);
    expect_err(b.vm_bind(h, 0, 0, PAGE, R), EINVAL, r::VA_OUT_OF_RANGE);
    expect_err(
        b.vm_bind(h, uapi::VA_END - PAGE, 0, 2 * PAGE, R),
        EINVAL,
        r::VA_OUT_OF_RANGE,
    );
    expect_err(
        b.vm_bind(h, !(PAGE - 1), 0, 2 * PAGE, R),
        EINVAL,
        r::VA_OUT_OF_RANGE,
    );
    expect_err(b.vm_bind(h, VA, 3 * PAGE, 2 * PAGE, R), EINVAL, r::BO_RANGE);
    expect_err(b.vm_bind(h, VA, !(PAGE - 1), PAGE, R), EINVAL, r::BO_RANGE);
    expect_err(b.vm_bind(0xdead, VA, 0, PAGE, R), ENOENT, r::HANDLE_INVALID);
    b.vm_bind(h, VA, 0, 2 * PAGE, R | W).expect("bind");
    expect_err(
        b.vm_bind(h, VA + PAGE, 2 * PAGE, PAGE, R),
        EINVAL,
        r::VA_OVERLAP,
    );
    expect_err(
        b.vm_bind(h, VA - PAGE, 0, 2 * PAGE, R),
        EINVAL,
        r::VA_OVERLAP,
    );
    b.vm_bind(h, VA + 2 * PAGE, 2 * PAGE, 2 * PAGE, R)
        .expect("adjacent bind of the rest");
    b.vm_unbind(VA, 2 * PAGE).expect("unbind");
    b.vm_unbind(VA + 2 * PAGE, 2 * PAGE).expect("unbind");
    b.gem_close(h).expect("close");
}

#[test]
fn vm_unbind_takes_exactly_one_mapping() {
    let b = open();
    let h = b.gem_create(4 * PAGE).expect("create");
    let va = VA + 0x100_0000;
    b.vm_bind(h, va, 0, 4 * PAGE, R).expect("bind");
    expect_err(b.vm_unbind(va, PAGE), EINVAL, r::VA_NOT_MAPPED);
    expect_err(b.vm_unbind(va + PAGE, 3 * PAGE), EINVAL, r::VA_NOT_MAPPED);
    expect_err(b.vm_unbind(va + 0x10_0000, PAGE), EINVAL, r::VA_NOT_MAPPED);
    b.vm_unbind(va, 4 * PAGE).expect("unbind");
    expect_err(b.vm_unbind(va, 4 * PAGE), EINVAL, r::VA_NOT_MAPPED);
    // Rebinding the same range works: tables were torn down cleanly.
    b.vm_bind(h, va, 0, 4 * PAGE, R | W).expect("rebind");
    b.vm_unbind(va, 4 * PAGE).expect("unbind");
    b.gem_close(h).expect("close");
}

#[test]
fn vm_mapping_keeps_the_object_alive_after_close() {
    let b = open();
    let h = b.gem_create(PAGE).expect("create");
    let va = VA + 0x200_0000;
    b.vm_bind(h, va, 0, PAGE, R | W).expect("bind");
    b.gem_close(h).expect("close the handle while mapped");
    b.vm_unbind(va, PAGE)
        .expect("the mapping still exists and unbinds");
}

#[test]
fn vm_spread_over_many_tables_and_file_close_frees_them() {
    // Mappings in different L3/L2/L1 ranges, left in place: closing the file must free them
    // (kmemleak in the guest checks the page-table pages).
    let b = open();
    let h = b.gem_create(PAGE).expect("create");
    for i in 0..8u64 {
        b.vm_bind(
            h,
            VA + i * (1 << 39) % (uapi::VA_END - VA) + i * (1 << 30),
            0,
            PAGE,
            R,
        )
        .expect("bind");
    }
    drop(b);
}

#[test]
fn ctx_create_and_destroy() {
    let b = open();
    expect_err(b.ctx_create(3), EINVAL, r::PRIORITY_INVALID);
    let c = b.ctx_create(uapi::ioctl::PRIORITY_NORMAL).expect("create");
    assert_ne!(c, 0);
    let s = b.ctx_state(c).expect("state");
    assert_eq!(
        (s.reset_status, s.completed_seqno, s.submitted_seqno),
        (uapi::ioctl::RESET_NONE, 0, 0)
    );
    b.ctx_destroy(c).expect("destroy");
    expect_err(b.ctx_destroy(c), EINVAL, r::CTX_INVALID);
    expect_err(b.ctx_state(c), EINVAL, r::CTX_INVALID);
}

/// A mapped command buffer holding `words`, at `va`.
fn cmdbuf(b: &dyn Backend, va: u64, words: &[u32]) -> (u32, Cmdbuf) {
    let size = (words.len() as u64 * 4).next_multiple_of(PAGE);
    let h = b.gem_create(size).expect("create");
    let m = b.gem_mmap(h, size).expect("mmap");
    // SAFETY: the mapping holds `size` >= 4 * words.len() bytes.
    unsafe { std::ptr::copy_nonoverlapping(words.as_ptr() as *const u8, m.ptr, words.len() * 4) };
    b.gem_munmap(m).expect("munmap");
    b.vm_bind(h, va, 0, size, R).expect("bind");
    (
        h,
        Cmdbuf {
            va,
            size: words.len() as u32 * 4,
            flags: 0,
        },
    )
}

#[test]
fn submit_validation_names_the_buffer_and_offset() {
    let b = open();
    let c = b.ctx_create(1).expect("ctx");
    let data = b.gem_create(PAGE).expect("data");
    b.vm_bind(data, VA + 0x300_0000, 0, PAGE, R | W)
        .expect("bind data");
    let mut words = Vec::new();
    words.extend_from_slice(&uapi::packet::encode_fill(VA + 0x300_0000, 64, 7));
    let good_len = words.len() as u64 * 4;
    words.extend_from_slice(&[uapi::packet::header(0x55, 0, 1)]); // unknown opcode
    let (_h1, good) = cmdbuf(
        &*b,
        VA + 0x310_0000,
        &uapi::packet::encode_fill(VA + 0x300_0000, 64, 7),
    );
    let (_h2, bad) = cmdbuf(&*b, VA + 0x320_0000, &words);
    let e = b.submit(c, &[good, bad], &[], 0).unwrap_err();
    assert_eq!(
        (e.errno, e.reason, e.bad_index, e.bad_offset),
        (EINVAL, r::PACKET_MALFORMED, 1, good_len),
        "{}",
        e.describe()
    );
    expect_err(b.submit(c, &[], &[], 0), EINVAL, r::CMDBUF_COUNT);
    expect_err(b.submit(c, &[good], &[], 0x80), EINVAL, r::FLAGS_UNKNOWN);
    // A command buffer's own flags must be zero too; the second buffer is named.
    let flagged_cb = Cmdbuf { flags: 1, ..good };
    expect_err_at(
        b.submit(c, &[good, flagged_cb], &[], 0),
        EINVAL,
        r::FLAGS_UNKNOWN,
        1,
    );
    let unaligned = Cmdbuf {
        va: good.va + 2,
        ..good
    };
    expect_err(b.submit(c, &[unaligned], &[], 0), EINVAL, r::CMDBUF_BAD);
    let unmapped = Cmdbuf {
        va: VA + 0x7000_0000,
        ..good
    };
    expect_err(
        b.submit(c, &[unmapped], &[], 0),
        EINVAL,
        r::CMDBUF_NOT_MAPPED,
    );
    // Validation reuses the mapping of the previous buffer of a batch: a second buffer that
    // starts in it (its last word, a NOP) and runs past its end is refused, and so is one in a
    // mapping without read access; each is named.
    let nop = uapi::packet::encode_nop()[0];
    let (_h3, last_word) = cmdbuf(&*b, VA + 0x330_0000, &vec![nop; (PAGE / 4) as usize]);
    let off_the_end = Cmdbuf {
        va: last_word.va + PAGE - 4,
        size: 8,
        flags: 0,
    };
    expect_err_at(
        b.submit(c, &[last_word, off_the_end], &[], 0),
        EINVAL,
        r::CMDBUF_NOT_MAPPED,
        1,
    );
    let wo = b.gem_create(PAGE).expect("write-only object");
    b.vm_bind(wo, VA + 0x340_0000, 0, PAGE, W)
        .expect("bind write-only");
    let in_wo = Cmdbuf {
        va: VA + 0x340_0000,
        size: 4,
        flags: 0,
    };
    expect_err_at(
        b.submit(c, &[good, in_wo], &[], 0),
        EINVAL,
        r::CMDBUF_NOT_MAPPED,
        1,
    );
    expect_err(b.submit(c + 1000, &[good], &[], 0), EINVAL, r::CTX_INVALID);
    let never = uapi::ioctl::Fence {
        ctx_id: c,
        flags: 0,
        seqno: 5,
    };
    expect_err(
        b.submit(c, &[good], &[never], 0),
        EINVAL,
        r::FENCE_NOT_SUBMITTED,
    );
    // An in-fence's flags must be zero; the second fence is named.
    let done = uapi::ioctl::Fence {
        ctx_id: c,
        flags: 0,
        seqno: 0,
    };
    let flagged = uapi::ioctl::Fence { flags: 1, ..done };
    expect_err_at(
        b.submit(c, &[good], &[done, flagged], 0),
        EINVAL,
        r::FLAGS_UNKNOWN,
        1,
    );
    // A good buffer, then one larger than any command buffer may be: the second is named (the
    // kernel must not size anything after it before checking it).
    let huge = Cmdbuf {
        size: 0xffff_fffc,
        ..good
    };
    expect_err_at(b.submit(c, &[good, huge], &[], 0), EINVAL, r::CMDBUF_BAD, 1);
    let seq = b.submit(c, &[good, good], &[], 0).expect("submit");
    assert_eq!(seq, 1);
    let deadline = umd::error::detail::mono_ns() + 10_000_000_000;
    assert_eq!(b.wait(c, seq, deadline).expect("wait"), 1);
    expect_err(b.wait(c, 2, deadline), EINVAL, r::FENCE_NOT_SUBMITTED);
    b.ctx_destroy(c).expect("destroy");
}

/// Reads `n` u32 words of object `h` through a CPU mapping.
fn object_words(b: &dyn Backend, h: u32, n: usize) -> Vec<u32> {
    let m = b.gem_mmap(h, PAGE).expect("mmap");
    let mut out = vec![0u32; n];
    // SAFETY: the mapping holds PAGE >= 4 * n bytes.
    unsafe { std::ptr::copy_nonoverlapping(m.ptr, out.as_mut_ptr() as *mut u8, n * 4) };
    b.gem_munmap(m).expect("munmap");
    out
}

#[test]
fn vm_unbind_reaches_the_device_before_the_next_job() {
    // The device keeps translations across jobs (hw-spec §5, its TLB): the driver must make it
    // forget a VA on unbind. Otherwise the job after a rebind writes the old object, and a job
    // after a plain unbind writes memory the file no longer owns instead of faulting.
    let b = open();
    let c = b.ctx_create(1).expect("ctx");
    let deadline = || umd::error::detail::mono_ns() + 10_000_000_000;
    let dva = VA + 0x500_0000;
    let fill =
        |cva: u64, pattern: u32| cmdbuf(&*b, cva, &uapi::packet::encode_fill(dva, 64, pattern));

    let old = b.gem_create(PAGE).expect("old");
    b.vm_bind(old, dva, 0, PAGE, R | W).expect("bind old");
    let (_h1, first) = fill(VA + 0x510_0000, 0x1111_1111);
    let s = b.submit(c, &[first], &[], 0).expect("submit first");
    assert_eq!(b.wait(c, s, deadline()).expect("wait first"), s);
    assert_eq!(object_words(&*b, old, 16), vec![0x1111_1111; 16]);

    b.vm_unbind(dva, PAGE).expect("unbind old");
    let new = b.gem_create(PAGE).expect("new");
    b.vm_bind(new, dva, 0, PAGE, R | W).expect("bind new");
    let (_h2, second) = fill(VA + 0x520_0000, 0x2222_2222);
    let s = b.submit(c, &[second], &[], 0).expect("submit second");
    assert_eq!(b.wait(c, s, deadline()).expect("wait second"), s);
    assert_eq!(object_words(&*b, new, 16), vec![0x2222_2222; 16]);
    assert_eq!(
        object_words(&*b, old, 16),
        vec![0x1111_1111; 16],
        "the job after the rebind wrote the old object"
    );

    b.vm_unbind(dva, PAGE).expect("unbind new");
    let (_h3, third) = fill(VA + 0x530_0000, 0x3333_3333);
    let s = b.submit(c, &[third], &[], 0).expect("submit third");
    expect_err(b.wait(c, s, deadline()), libc::ECANCELED, r::CTX_LOST);
    let st = b.ctx_state(c).expect("state");
    assert_eq!(
        (st.reset_status, st.fault_type, st.fault_va, st.fault_access),
        (
            uapi::ioctl::RESET_GUILTY,
            uapi::regs::FAULT_UNMAPPED,
            dva,
            uapi::regs::ACCESS_WRITE
        ),
        "{st:?}"
    );
    assert_eq!(object_words(&*b, new, 16), vec![0x2222_2222; 16]);
    b.ctx_destroy(c).expect("destroy");
}
