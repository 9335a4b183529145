//! The simulator backend: the whole UAPI (GEM, per-file VM, contexts, rings, fences, faults,
//! hangs and resets) implemented in-process over the same device model the kernel driver runs,
//! so every test of libumd runs without a kernel and completion is genuinely asynchronous.
//!
//! A [`SimFile`] is one "open of the render node": its own GEM handles and address space. The
//! [`gpu::Gpu`] behind it is shared by all files of the same device index in the process.

pub mod config;
mod debugfs;
pub mod gem;
pub mod gpu;
pub mod physmem;
pub mod publish;
mod recovery;
mod sleep;
pub mod vm;

use super::{Backend, HostMap, KmdError, KmdResult};
use config::SimConfig;
use gem::SimBo;
use gpu::Gpu;
use rules::Refusal;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};
use uapi::ioctl::{Cmdbuf, CtxState, Fence, Query};
use uapi::reason as r;
use vm::Vm;

pub use gpu::{Counters, Injection};

/// The simulated GPUs of this process by index, each with the fork generation it was started
/// in: a forked child has no device thread behind its parent's GPUs, so it starts its own
/// (`crate::fork`).
static GPUS: OnceLock<Mutex<Vec<StartedGpu>>> = OnceLock::new();

/// A simulated GPU and the fork generation it was started in.
type StartedGpu = (u64, Weak<Gpu>);
static NEXT_FILE: AtomicU64 = AtomicU64::new(1);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Number of simulated devices the environment asks for.
pub fn device_count() -> Result<u32, String> {
    Ok(SimConfig::from_env()?.devices)
}

/// The shared GPU for `index`, started on first use.
fn gpu(index: u32) -> Result<Arc<Gpu>, String> {
    let cfg = SimConfig::from_env()?;
    if index >= cfg.devices {
        return Err(format!(
            "simulated device {index} does not exist (UMD_SIM_DEVICES={})",
            cfg.devices
        ));
    }
    let mut gpus = lock(GPUS.get_or_init(|| Mutex::new(Vec::new())));
    if gpus.len() <= index as usize {
        gpus.resize(index as usize + 1, (0, Weak::new()));
    }
    let generation = crate::fork::generation();
    let (started_in, weak) = &gpus[index as usize];
    if *started_in == generation {
        if let Some(g) = weak.upgrade() {
            return Ok(g);
        }
    }
    let g = Gpu::start(index, cfg)?;
    gpus[index as usize] = (generation, Arc::downgrade(&g));
    Ok(g)
}

/// Why a simulated device could not be opened.
#[derive(Debug)]
pub enum OpenError {
    /// Bad `UMD_SIM_*` settings or the device could not start.
    Config(String),
    /// What the simulated KMD said (device lost, too many files).
    Kmd(KmdError),
}

/// One open file on a simulated device.
pub struct SimFile {
    gpu: Arc<Gpu>,
    /// Bytes of this file's live objects (shared with them and with the debugfs view).
    mem_bytes: Arc<std::sync::atomic::AtomicU64>,
    id: u64,
    vm: Mutex<Vm>,
    objects: Mutex<HashMap<u32, Arc<SimBo>>>,
    next_handle: Mutex<u32>,
}

impl SimFile {
    /// Opens simulated device `index`.
    pub fn open(index: u32) -> Result<SimFile, OpenError> {
        let gpu = gpu(index).map_err(OpenError::Config)?;
        let vm = Vm::new(gpu.mem.clone()).map_err(OpenError::Kmd)?;
        let id = NEXT_FILE.fetch_add(1, Ordering::Relaxed);
        let mem_bytes = Arc::new(std::sync::atomic::AtomicU64::new(0));
        gpu.attach_file(id, vm.root, mem_bytes.clone())
            .map_err(OpenError::Kmd)?;
        Ok(SimFile {
            gpu,
            mem_bytes,
            id,
            vm: Mutex::new(vm),
            objects: Mutex::new(HashMap::new()),
            next_handle: Mutex::new(1),
        })
    }

    /// The shared device (tests: injections and counters).
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// As aigpu.ko's ioctl entry: a file that saw the device lost fails every call but a
    /// context destroy (GEM close and munmap are not the driver's calls there either).
    fn check_alive(&self) -> KmdResult<()> {
        if self.gpu.file_lost(self.id) {
            return Err(KmdError::refused(r::DEVICE_LOST));
        }
        Ok(())
    }

    fn bo(&self, handle: u32) -> KmdResult<Arc<SimBo>> {
        lock(&self.objects)
            .get(&handle)
            .cloned()
            .ok_or(KmdError::refused(r::HANDLE_INVALID))
    }

    /// Checks every command buffer (`rules::submit`): shape, mapped for reading, every packet
    /// well formed. Operand addresses are left to the GPU MMU (a bad one faults the context at
    /// run time).
    fn validate(&self, cmdbufs: &[Cmdbuf]) -> KmdResult<()> {
        let vm = lock(&self.vm);
        let hang = self.gpu.cfg.hang_debug;
        // Scratch buffers and the last mapping used, for the whole batch: the command buffers of
        // a submit usually sit in one buffer object, and allocating or searching the mapping
        // tree per buffer was most of a batched submit's cost.
        let mut bytes = Vec::new();
        let mut words = Vec::new();
        let mut last = None;
        for (i, cb) in cmdbufs.iter().enumerate() {
            let i = i as u32;
            rules::submit::cmdbuf_shape(i, cb)?;
            read_words(
                &vm,
                &self.gpu,
                cb.va,
                cb.size as usize,
                (&mut bytes, &mut words),
                &mut last,
            )
            .ok_or(Refusal::new(r::CMDBUF_NOT_MAPPED).at(i))?;
            rules::submit::packet_stream(i, &words, hang)?;
        }
        Ok(())
    }
}

/// A mapping as the validation needs it: `[start, end)` at physical `pa` (of `start`).
#[derive(Clone, Copy)]
struct Span {
    start: u64,
    end: u64,
    pa: u64,
}

/// Reads a command buffer's words through the VM (the CPU view the KMD validates) into `out.1`,
/// through the byte scratch `out.0` (one memory read per mapping the buffer spans); `None` if
/// any part is not mapped readable. `last` caches the mapping of the previous read.
fn read_words(
    vm: &Vm,
    gpu: &Gpu,
    va: u64,
    size: usize,
    out: (&mut Vec<u8>, &mut Vec<u32>),
    last: &mut Option<Span>,
) -> Option<()> {
    let (buf, words) = out;
    buf.clear();
    buf.resize(size, 0);
    let mut done = 0usize;
    while done < size {
        let cur = va + done as u64;
        let span = match *last {
            Some(s) if s.start <= cur && cur < s.end => s,
            _ => {
                let (start, m) = vm.lookup(cur)?;
                if m.access & uapi::ioctl::VM_ACCESS_READ == 0 {
                    return None;
                }
                let s = Span {
                    start,
                    end: start + m.size,
                    pa: m.bo.pa + m.bo_offset,
                };
                *last = Some(s);
                s
            }
        };
        let n = ((span.end - cur) as usize).min(size - done);
        let pa = span.pa + (cur - span.start);
        vgpu::model::PhysMem::read(&*gpu.mem, pa, &mut buf[done..done + n]).ok()?;
        done += n;
    }
    // `size` is a multiple of 4 (checked by the caller).
    words.clear();
    words.extend(
        buf.chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
    );
    Some(())
}

impl Backend for SimFile {
    fn kind(&self) -> &'static str {
        "sim"
    }
    fn location(&self) -> String {
        format!("sim:{}", self.gpu.index)
    }

    fn query(&self) -> KmdResult<Query> {
        self.check_alive()?;
        let (maj, min, pat) = uapi::DRIVER_VERSION;
        let mut caps = uapi::CAPS_ALL & !uapi::CAP_HANG_DEBUG;
        if self.gpu.cfg.hang_debug {
            caps |= uapi::CAP_HANG_DEBUG;
        }
        Ok(Query {
            uapi_major: self.gpu.cfg.uapi.0,
            uapi_minor: self.gpu.cfg.uapi.1,
            driver_major: maj,
            driver_minor: min,
            driver_patch: pat,
            num_queues: uapi::regs::NUM_QUEUES as u32,
            caps,
            va_start: uapi::VA_START,
            va_end: uapi::VA_END,
            page_size: uapi::PAGE_SIZE as u32,
            max_cmdbufs: uapi::ioctl::MAX_CMDBUFS,
            mem_total: self.gpu.mem.size(),
            mem_used: self.gpu.mem.used(),
            max_bo_size: self.gpu.mem.size(),
            max_in_fences: uapi::ioctl::MAX_IN_FENCES,
            max_contexts: uapi::ioctl::MAX_CONTEXTS,
            ..Default::default()
        })
    }

    fn gem_create(&self, size: u64) -> KmdResult<u32> {
        self.check_alive()?;
        if size == 0 {
            return Err(KmdError::refused(r::SIZE_ZERO));
        }
        let rounded = size
            .checked_next_multiple_of(uapi::PAGE_SIZE)
            .ok_or(KmdError::refused(r::SIZE_TOO_LARGE))?;
        if rounded > self.gpu.mem.size() {
            return Err(KmdError::refused(r::SIZE_TOO_LARGE));
        }
        let bo = SimBo::new(&self.gpu.mem, rounded, &self.mem_bytes)
            .ok_or(KmdError::refused(r::OUT_OF_MEMORY))?;
        let mut next = lock(&self.next_handle);
        let handle = *next;
        *next = next.wrapping_add(1).max(1);
        lock(&self.objects).insert(handle, Arc::new(bo));
        self.gpu.account_handle(self.id, true);
        Ok(handle)
    }

    fn gem_close(&self, handle: u32) -> KmdResult<()> {
        let bo = lock(&self.objects)
            .remove(&handle)
            // The DRM core's GEM_CLOSE answers EINVAL for an unknown handle (not the ENOENT of
            // aigpu's own ioctls), and a generic DRM ioctl has no reason field.
            .ok_or(KmdError::new(libc::EINVAL, r::HANDLE_INVALID))?;
        drop(bo);
        self.gpu.account_handle(self.id, false);
        Ok(())
    }

    fn gem_mmap(&self, handle: u32, size: u64) -> KmdResult<HostMap> {
        self.check_alive()?;
        let bo = self.bo(handle)?;
        if size > bo.size {
            return Err(KmdError::refused(r::BO_RANGE));
        }
        let ptr = self
            .gpu
            .mem
            .host_ptr(bo.pa, bo.size)
            .ok_or(KmdError::refused(r::BAD_USER_POINTER))?;
        Ok(HostMap { ptr, len: size })
    }

    fn gem_munmap(&self, _map: HostMap) -> KmdResult<()> {
        Ok(()) // the simulated memory stays mapped for the process lifetime
    }

    fn vm_bind(
        &self,
        handle: u32,
        va: u64,
        bo_offset: u64,
        size: u64,
        access: u32,
    ) -> KmdResult<()> {
        self.check_alive()?;
        let bo = self.bo(handle)?;
        let r = lock(&self.vm).bind(bo, va, bo_offset, size, access);
        if r.is_err() {
            // The rolled-back pages may have been translated meanwhile (a job using the range
            // while it was being bound): the device must forget them.
            self.gpu.invalidate_tlb(self.id);
        }
        r
    }

    fn vm_unbind(&self, va: u64, size: u64) -> KmdResult<()> {
        self.check_alive()?;
        let bo = lock(&self.vm).unbind(va, size)?;
        // The device caches translations across jobs (hw-spec §5): it must forget the removed
        // pages before the object, and with it their memory, can be freed and reused.
        self.gpu.invalidate_tlb(self.id);
        drop(bo);
        Ok(())
    }

    fn ctx_create(&self, priority: u32) -> KmdResult<u32> {
        self.check_alive()?;
        rules::names::Priority::try_from(priority)?;
        self.gpu.ctx_create(self.id, priority)
    }

    fn ctx_destroy(&self, ctx_id: u32) -> KmdResult<()> {
        self.gpu.ctx_destroy(self.id, ctx_id)
    }

    fn submit(
        &self,
        ctx_id: u32,
        cmdbufs: &[Cmdbuf],
        in_fences: &[Fence],
        flags: u32,
    ) -> KmdResult<u64> {
        self.check_alive()?;
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        let flags = rules::submit::arguments(flags, count(cmdbufs.len()), count(in_fences.len()))?;
        self.validate(cmdbufs)?;
        self.gpu
            .queue_job(self.id, ctx_id, cmdbufs, in_fences, flags)
    }

    fn wait(&self, ctx_id: u32, seqno: u64, deadline_ns: u64) -> KmdResult<u64> {
        let now = crate::error::detail::mono_ns();
        let deadline =
            (deadline_ns > now).then(|| Instant::now() + Duration::from_nanos(deadline_ns - now));
        self.gpu.wait(self.id, ctx_id, seqno, deadline)
    }

    fn ctx_state(&self, ctx_id: u32) -> KmdResult<CtxState> {
        self.gpu.ctx_state(self.id, ctx_id)
    }

    fn debug_inject(&self, what: u32) -> KmdResult<()> {
        let inj = match what {
            1 => Injection::MemError,
            2 => Injection::ResetFailure,
            3 => Injection::FallOffBus,
            _ => return Err(KmdError::refused(r::FLAGS_UNKNOWN)),
        };
        self.gpu.inject(inj);
        Ok(())
    }
}

impl Drop for SimFile {
    fn drop(&mut self) {
        self.gpu.detach_file(self.id);
        // The VM (mappings, page tables) and the objects go with the struct's fields.
    }
}
