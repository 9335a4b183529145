// SPDX-License-Identifier: GPL-2.0
//! The device's debugfs files (docs/debugfs.md), in the DRM device's debugfs directory
//! (`/sys/kernel/debug/dri/<unique>`, reachable as `dri/<minor>` for both the primary and the
//! render minor): `status`, `queues`, `clients`, `contexts`, `vm`, `crashdumps/` and the root-only
//! fault injection files.
//!
//! The DRM core creates a `clients` table of its own there (command, tgid, uid, magic); aigpu
//! replaces it with its per-client usage lines (the fdinfo equivalent: the kernel's fdinfo hook is
//! not reachable from Rust in 7.3).
//!
//! Text files are rendered when opened (so one `read` sequence sees one consistent snapshot) and
//! freed at release. The `file_operations` name this module as owner, so the module cannot be
//! unloaded while one of these files is open; the files themselves go away with the DRM device's
//! debugfs directory at unregistration, which waits for operations in flight.

use core::ffi::{c_int, c_void};

use kernel::ffi::c_char;

use kernel::{
    bindings,
    prelude::*,
    sync::Arc,
    uaccess::{UserPtr, UserSlice},
};

use crate::{
    dump,
    gpu::Gpu,
    text::Text,
    tprint,
    uapi::{regs, version},
};

unsafe extern "C" {
    /// This module's `struct module` (the `owner` of its file operations); only its address is
    /// used.
    static __this_module: u8;
}

/// `file_operations` in a static (they hold raw pointers, which are not `Sync` by themselves).
#[repr(transparent)]
pub(crate) struct Fops(bindings::file_operations);

// SAFETY: the table is immutable and only read by the VFS.
unsafe impl Sync for Fops {}

const fn fops(
    open: unsafe extern "C" fn(*mut bindings::inode, *mut bindings::file) -> c_int,
    read: Option<unsafe extern "C" fn(*mut bindings::file, *mut c_char, usize, *mut bindings::loff_t) -> isize>,
    write: Option<unsafe extern "C" fn(*mut bindings::file, *const c_char, usize, *mut bindings::loff_t) -> isize>,
    release: Option<unsafe extern "C" fn(*mut bindings::inode, *mut bindings::file) -> c_int>,
) -> Fops {
    // SAFETY: an all-zero `file_operations` is valid (null owner, every hook absent).
    let mut f: bindings::file_operations = unsafe { core::mem::zeroed() };
    f.owner = core::ptr::addr_of!(__this_module).cast::<bindings::module>().cast_mut();
    f.open = Some(open);
    f.read = read;
    f.write = write;
    f.release = release;
    f.llseek = Some(bindings::default_llseek);
    Fops(f)
}

/// What a text file shows.
#[derive(Clone, Copy)]
enum Kind {
    Status,
    Queues,
    Clients,
    Contexts,
    Vm,
    CrashList,
}

const K_STATUS: u8 = 0;
const K_QUEUES: u8 = 1;
const K_CLIENTS: u8 = 2;
const K_CONTEXTS: u8 = 3;
const K_VM: u8 = 4;
const K_CRASHLIST: u8 = 5;

fn kind_of(k: u8) -> Kind {
    match k {
        K_STATUS => Kind::Status,
        K_QUEUES => Kind::Queues,
        K_CLIENTS => Kind::Clients,
        K_CONTEXTS => Kind::Contexts,
        K_VM => Kind::Vm,
        _ => Kind::CrashList,
    }
}

/// `open` of a text file: renders it into a buffer owned by the open file.
///
/// # Safety
///
/// Called by the VFS only, through the `file_operations` of a file this module created: `inode`
/// is that file's inode (its private data the device's `Gpu`), `file` the file being opened.
unsafe extern "C" fn text_open<const K: u8>(inode: *mut bindings::inode, file: *mut bindings::file) -> c_int {
    // SAFETY: the inode's private data is the device's `Gpu` (set at creation); the files are
    // removed with the DRM device's debugfs tree before the `Gpu` can go away, and debugfs makes
    // that removal wait for this call.
    let gpu = unsafe { &*(*inode).i_private.cast::<Gpu>() };
    let mut t = Text::new();
    render(gpu, kind_of(K), &mut t);
    let Ok(b) = KBox::new(t.into_bytes(), GFP_KERNEL) else {
        return ENOMEM.to_errno();
    };
    // SAFETY: `file` is the file being opened; the buffer is freed in `text_release`.
    unsafe { (*file).private_data = KBox::into_raw(b).cast::<c_void>() };
    0
}

/// `read` of a text file: copies from the buffer `text_open` rendered.
///
/// # Safety
///
/// Called by the VFS only, on a file opened by `text_open` and not yet released; `buf` and
/// `pos` are the VFS's arguments for this read.
unsafe extern "C" fn text_read(
    file: *mut bindings::file,
    buf: *mut c_char,
    count: usize,
    pos: *mut bindings::loff_t,
) -> isize {
    // SAFETY: `private_data` is the buffer `text_open` stored.
    let v = unsafe { &*(*file).private_data.cast::<KVec<u8>>() };
    // SAFETY: copies at most `count` bytes of the buffer to the user buffer.
    unsafe { bindings::simple_read_from_buffer(buf.cast(), count, pos, v.as_ptr().cast(), v.len()) }
}

/// `release` of a text file: frees the rendered buffer.
///
/// # Safety
///
/// Called by the VFS only, once, on a file opened by `text_open`.
unsafe extern "C" fn text_release(_inode: *mut bindings::inode, file: *mut bindings::file) -> c_int {
    // SAFETY: `private_data` is the buffer `text_open` stored, freed exactly once here.
    drop(unsafe { KBox::from_raw((*file).private_data.cast::<KVec<u8>>()) });
    0
}

/// What an injection file does.
const I_MEM_ERROR: u8 = 0;
const I_RESET_FAILURE: u8 = 1;
const I_FALL_OFF_BUS: u8 = 2;
const I_HANG: u8 = 3;
const I_PAGE_FAULT: u8 = 4;

/// `open` of an injection file: keeps the device's `Gpu` for the writes.
///
/// # Safety
///
/// Called by the VFS only, with the inode of a file this module created (its private data the
/// device's `Gpu`) and the file being opened.
unsafe extern "C" fn inject_open(inode: *mut bindings::inode, file: *mut bindings::file) -> c_int {
    // SAFETY: as in `text_open`; the pointer is only used during `write` calls, which debugfs
    // also protects against removal.
    unsafe { (*file).private_data = (*inode).i_private };
    0
}

/// What a `write` to a debugfs file hands in: its first `out.len()` bytes as trimmed text (not
/// UTF-8: empty), or the errno to return.
fn written<'a>(buf: *const c_char, count: usize, out: &'a mut [u8]) -> core::result::Result<&'a str, isize> {
    let n = count.min(out.len());
    let mut r = UserSlice::new(UserPtr::from_addr(buf as usize), n).reader();
    r.read_slice(&mut out[..n]).map_err(|_| EFAULT.to_errno() as isize)?;
    Ok(core::str::from_utf8(&out[..n]).unwrap_or("").trim())
}

/// `write` of an injection file: `1` (or `y`) arms it.
///
/// # Safety
///
/// Called by the VFS only, on a file opened by `inject_open`; `buf` is a user pointer of at
/// least `count` bytes.
unsafe extern "C" fn inject_write<const K: u8>(
    file: *mut bindings::file,
    buf: *const c_char,
    count: usize,
    _pos: *mut bindings::loff_t,
) -> isize {
    // SAFETY: `private_data` is the device's `Gpu` (see `inject_open`).
    let gpu = unsafe { &*(*file).private_data.cast::<Gpu>() };
    if count == 0 {
        return 0;
    }
    let mut b = [0u8; 1];
    let arm = match written(buf, count, &mut b) {
        Ok(t) => matches!(t.as_bytes().first(), Some(b'1' | b'y' | b'Y')),
        Err(e) => return e,
    };
    if !arm {
        return EINVAL.to_errno() as isize;
    }
    match K {
        I_MEM_ERROR => gpu.inject_mem_error(),
        I_RESET_FAILURE => gpu.inject_reset_failure(),
        I_FALL_OFF_BUS => gpu.inject_fall_off_bus(),
        I_HANG => gpu.inject_job(true),
        _ => gpu.inject_job(false),
    }
    count as isize
}

/// `write` of `inject_uapi_version`: `MAJOR.MINOR` makes QUERY report that UAPI version (the
/// test of libumd's version refusal, docs/uapi.md "Versioning"); `0` restores the real one.
///
/// # Safety
///
/// As for `inject_write`.
unsafe extern "C" fn uapi_version_write(
    file: *mut bindings::file,
    buf: *const c_char,
    count: usize,
    _pos: *mut bindings::loff_t,
) -> isize {
    // SAFETY: `private_data` is the device's `Gpu` (see `inject_open`).
    let gpu = unsafe { &*(*file).private_data.cast::<Gpu>() };
    let mut b = [0u8; 16];
    let text = match written(buf, count, &mut b) {
        Ok(t) => t,
        Err(e) => return e,
    };
    let part = |p: &str| p.parse::<u16>().ok();
    let v = match text.split_once('.') {
        None if text == "0" => 0,
        Some((a, c)) => match (part(a), part(c)) {
            (Some(a), Some(c)) => (u64::from(a) << 32) | u64::from(c),
            _ => return EINVAL.to_errno() as isize,
        },
        None => return EINVAL.to_errno() as isize,
    };
    gpu.uapi_override.store(v, kernel::sync::atomic::Relaxed);
    count as isize
}

static STATUS_FOPS: Fops = fops(text_open::<K_STATUS>, Some(text_read), None, Some(text_release));
static QUEUES_FOPS: Fops = fops(text_open::<K_QUEUES>, Some(text_read), None, Some(text_release));
static CLIENTS_FOPS: Fops = fops(text_open::<K_CLIENTS>, Some(text_read), None, Some(text_release));
static CONTEXTS_FOPS: Fops = fops(text_open::<K_CONTEXTS>, Some(text_read), None, Some(text_release));
static VM_FOPS: Fops = fops(text_open::<K_VM>, Some(text_read), None, Some(text_release));
static LIST_FOPS: Fops = fops(text_open::<K_CRASHLIST>, Some(text_read), None, Some(text_release));
static CRASH_FOPS: Fops = fops(dump::crash_open, Some(dump::crash_read), None, Some(dump::crash_release));
static INJ_MEM_FOPS: Fops = fops(inject_open, None, Some(inject_write::<I_MEM_ERROR>), None);
static INJ_RESET_FOPS: Fops = fops(inject_open, None, Some(inject_write::<I_RESET_FAILURE>), None);
static INJ_BUS_FOPS: Fops = fops(inject_open, None, Some(inject_write::<I_FALL_OFF_BUS>), None);
static INJ_HANG_FOPS: Fops = fops(inject_open, None, Some(inject_write::<I_HANG>), None);
static INJ_FAULT_FOPS: Fops = fops(inject_open, None, Some(inject_write::<I_PAGE_FAULT>), None);
static INJ_UAPI_FOPS: Fops = fops(inject_open, None, Some(uapi_version_write), None);

/// The operations of a `crash-<n>` file.
pub(crate) fn crash_fops() -> *const bindings::file_operations {
    &CRASH_FOPS.0
}

/// Whether a debugfs return value is an error pointer (or null).
pub(crate) fn is_err(d: *mut bindings::dentry) -> bool {
    d.is_null() || (d as isize) < 0 && (d as isize) >= -4095
}

/// Creates the device's files in the DRM device's debugfs directory `root`.
///
/// # Safety
///
/// `root` is the DRM device's live debugfs directory, and `gpu` outlives it (the directory is
/// removed when the DRM device is unregistered, before the `Gpu` is shut down).
pub(crate) unsafe fn create(root: *mut bindings::dentry, gpu: &Arc<Gpu>) {
    if is_err(root) {
        return;
    }
    let data = Arc::as_ptr(gpu).cast_mut().cast::<c_void>();
    // The DRM core's own `clients` table gives way to ours (same role, docs/debugfs.md format).
    // SAFETY: `root` is a live debugfs directory.
    unsafe { bindings::debugfs_lookup_and_remove(c"clients".as_char_ptr(), root) };
    let files: [(&CStr, u16, &Fops); 11] = [
        (c"status", 0o400, &STATUS_FOPS),
        (c"queues", 0o400, &QUEUES_FOPS),
        (c"clients", 0o400, &CLIENTS_FOPS),
        (c"contexts", 0o400, &CONTEXTS_FOPS),
        (c"vm", 0o400, &VM_FOPS),
        (c"inject_mem_error", 0o200, &INJ_MEM_FOPS),
        (c"inject_reset_failure", 0o200, &INJ_RESET_FOPS),
        (c"inject_fall_off_bus", 0o200, &INJ_BUS_FOPS),
        (c"inject_hang", 0o200, &INJ_HANG_FOPS),
        (c"inject_page_fault", 0o200, &INJ_FAULT_FOPS),
        (c"inject_uapi_version", 0o200, &INJ_UAPI_FOPS),
    ];
    for (name, mode, f) in files {
        // SAFETY: `root` is live; `data` outlives the file (function contract); the fops are
        // static.
        unsafe { bindings::debugfs_create_file_full(name.as_char_ptr(), mode, root, data, core::ptr::null(), &f.0) };
    }
    // SAFETY: as above.
    let dir = unsafe { bindings::debugfs_create_dir(c"crashdumps".as_char_ptr(), root) };
    if is_err(dir) {
        return;
    }
    // SAFETY: as above.
    unsafe { bindings::debugfs_create_file_full(c"list".as_char_ptr(), 0o400, dir, data, core::ptr::null(), &LIST_FOPS.0) };
    gpu.dumps.lock().dir = dir;
}

fn render(gpu: &Gpu, k: Kind, out: &mut Text) {
    match k {
        Kind::Status => status(gpu, out),
        Kind::Queues => queues(gpu, out),
        Kind::Clients => clients(gpu, out),
        Kind::Contexts => contexts(gpu, out),
        Kind::Vm => vm(gpu, out),
        Kind::CrashList => dump::render_list(gpu, out),
    }
}

fn status(gpu: &Gpu, out: &mut Text) {
    let dumps = gpu.dumps.lock().total;
    let st = gpu.sched_retired();
    let c = st.counters;
    let contexts = st.contexts.values().filter(|c| c.state.live()).count();
    tprint!(
        out,
        "device={} state={} uapi={}.{} driver={}.{}.{} hw=1.0 mem_total={} mem_used={} clients={} contexts={} jobs={} faults={} hangs={} resets={} job_timeout_ms={} hang_debug={} crashdumps={} irqs={} irqs_direct={} irqs_lazy={} steps={} busy_us={}\n",
        gpu.name.to_str().unwrap_or("aigpu"),
        if st.lost { "lost" } else { "ok" },
        version::UAPI_MAJOR,
        version::UAPI_MINOR,
        version::DRIVER_VERSION.0,
        version::DRIVER_VERSION.1,
        version::DRIVER_VERSION.2,
        gpu.mem.total(),
        gpu.mem.used(),
        st.clients.iter().count(),
        contexts,
        c.jobs,
        c.faults,
        c.hangs,
        c.resets,
        gpu.cfg.job_timeout_ms,
        u32::from(gpu.cfg.hang_debug),
        dumps,
        gpu.irqs.load(kernel::sync::atomic::Relaxed),
        gpu.irqs_direct.load(kernel::sync::atomic::Relaxed),
        gpu.irqs_lazy.load(kernel::sync::atomic::Relaxed),
        gpu.hw.steps.load(kernel::sync::atomic::Relaxed),
        gpu.hw.busy_ns.load(kernel::sync::atomic::Relaxed) / 1000
    );
}

fn queues(gpu: &Gpu, out: &mut Text) {
    let st = gpu.sched_retired();
    let now = crate::hw::mono_ns();
    for (qi, q) in st.queues.iter().enumerate() {
        let b = regs::queue_base(qi);
        let device = (
            gpu.hw.read32(b + regs::Q_STATE),
            gpu.hw.read32(b + regs::Q_HEAD),
            gpu.hw.read64(b + regs::Q_CUR_JOB),
        );
        tprint!(out, "{}\n", q.state.line(qi, q.jobs.len(), now, device));
    }
}

fn clients(gpu: &Gpu, out: &mut Text) {
    let st = gpu.sched_retired();
    for (id, c) in st.clients.iter() {
        let contexts = st.contexts.values().filter(|x| x.client == *id && x.state.live()).count();
        tprint!(
            out,
            "client={} pid={} comm={} mem={} objects={} mappings={} contexts={} jobs={} busy_ns={}\n",
            id,
            c.pid,
            c.comm,
            c.stats.mem.load(kernel::sync::atomic::Relaxed),
            c.stats.objects.load(kernel::sync::atomic::Relaxed),
            c.stats.mappings.load(kernel::sync::atomic::Relaxed),
            contexts,
            c.jobs,
            c.busy_ns
        );
    }
}

fn contexts(gpu: &Gpu, out: &mut Text) {
    let st = gpu.sched_retired();
    for (id, c) in st.contexts.iter() {
        tprint!(out, "{}\n", c.state.line(*id, c.client, Gpu::owner_of(&st, *id)));
    }
}

fn vm(gpu: &Gpu, out: &mut Text) {
    // Collect the address spaces under the scheduler lock, print them outside it.
    let mut vms = KVec::new();
    {
        let st = gpu.sched_retired();
        for (id, c) in st.clients.iter() {
            if vms.push((*id, c.vm.clone()), GFP_KERNEL).is_err() {
                break;
            }
        }
    }
    for (id, vm) in vms.iter() {
        vm.lock().describe(*id, out);
    }
}
