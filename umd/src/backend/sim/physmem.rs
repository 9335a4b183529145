//! The simulated GPU's "system memory": one anonymous mapping (reserved lazily by the OS, so a
//! 1 GiB device costs only what is touched) addressed by fake physical addresses starting at
//! [`PA_BASE`], plus a page-granular range allocator for buffer objects and page-table pages.
//!
//! Objects are physically contiguous here (unlike shmem pages in the kernel), which lets a CPU
//! mapping be a plain pointer into the region; the GPU still reaches them only through the page
//! tables, so the MMU path is exercised exactly as with scattered pages.

use std::collections::BTreeMap;
use std::sync::Mutex;
use vgpu::model::{BusError, PhysMem};

/// First physical address of the region (never 0, so a zero PA is always a bus error).
pub const PA_BASE: u64 = 0x8000_0000;
const PAGE: u64 = uapi::PAGE_SIZE;

/// The region and its allocator.
pub struct PhysRegion {
    base: *mut u8,
    size: u64,
    free: Mutex<FreeList>,
}

// SAFETY: the region is plain memory shared by the CPU threads and the device thread, like
// system RAM shared with a real GPU; all accesses go through bounds-checked copies or through
// pointers handed out for objects the caller owns.
unsafe impl Send for PhysRegion {}
// SAFETY: as above.
unsafe impl Sync for PhysRegion {}

struct FreeList {
    /// start PA -> length, non-adjacent (coalesced on free).
    ranges: BTreeMap<u64, u64>,
    used: u64,
}

impl PhysRegion {
    /// Reserves `size` bytes (rounded up to pages). Returns `None` if the OS refuses.
    pub fn new(size: u64) -> Option<PhysRegion> {
        let size = size.div_ceil(PAGE) * PAGE;
        // SAFETY: anonymous private mapping with no address hint; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        let mut ranges = BTreeMap::new();
        ranges.insert(PA_BASE, size);
        Some(PhysRegion {
            base: p as *mut u8,
            size,
            free: Mutex::new(FreeList { ranges, used: 0 }),
        })
    }

    /// Bytes in the region.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Bytes allocated now.
    pub fn used(&self) -> u64 {
        self.free.lock().map(|f| f.used).unwrap_or(0)
    }

    /// Largest free contiguous range.
    pub fn largest_free(&self) -> u64 {
        self.free
            .lock()
            .map(|f| f.ranges.values().copied().max().unwrap_or(0))
            .unwrap_or(0)
    }

    /// Allocates `size` bytes (page multiple), zeroed, first fit. `None` when no range fits.
    pub fn alloc(&self, size: u64) -> Option<u64> {
        let size = size.div_ceil(PAGE) * PAGE;
        let pa = {
            let mut f = self.free.lock().ok()?;
            let (&start, &len) = f.ranges.iter().find(|(_, &len)| len >= size)?;
            f.ranges.remove(&start);
            if len > size {
                f.ranges.insert(start + size, len - size);
            }
            f.used += size;
            start
        };
        // Freed memory is zeroed here, not at free, so a device still finishing a job on a
        // buffer freed too early cannot see another process's data appear under it mid-job.
        if let Some(p) = self.host_ptr(pa, size) {
            // SAFETY: [p, p+size) lies inside the region (host_ptr checked it) and was just
            // taken off the free list, so nobody else owns it.
            unsafe { std::ptr::write_bytes(p, 0, size as usize) };
        }
        Some(pa)
    }

    /// Returns `[pa, pa+size)` to the free list, merging with its neighbours.
    pub fn free(&self, pa: u64, size: u64) {
        let size = size.div_ceil(PAGE) * PAGE;
        let Ok(mut f) = self.free.lock() else { return };
        f.used = f.used.saturating_sub(size);
        let (mut start, mut len) = (pa, size);
        if let Some((&ps, &pl)) = f.ranges.range(..pa).next_back() {
            if ps + pl == pa {
                f.ranges.remove(&ps);
                start = ps;
                len += pl;
            }
        }
        if let Some(&nl) = f.ranges.get(&(pa + size)) {
            f.ranges.remove(&(pa + size));
            len += nl;
        }
        f.ranges.insert(start, len);
    }

    /// CPU pointer to `[pa, pa+len)` if it lies inside the region.
    pub fn host_ptr(&self, pa: u64, len: u64) -> Option<*mut u8> {
        let off = pa.checked_sub(PA_BASE)?;
        if off.checked_add(len)? > self.size {
            return None;
        }
        // SAFETY: off + len <= size, so the result stays inside the mapping.
        Some(unsafe { self.base.add(off as usize) })
    }

    /// Reads a little-endian u64 at `pa` (8-byte aligned), or `None` outside the region.
    pub fn read_u64(&self, pa: u64) -> Option<u64> {
        let mut b = [0u8; 8];
        self.read(pa, &mut b).ok()?;
        Some(u64::from_le_bytes(b))
    }

    /// Writes a little-endian u64 at `pa`.
    pub fn write_u64(&self, pa: u64, v: u64) -> bool {
        self.write(pa, &v.to_le_bytes()).is_ok()
    }
}

impl PhysMem for PhysRegion {
    fn read(&self, pa: u64, buf: &mut [u8]) -> Result<(), BusError> {
        let p = self.host_ptr(pa, buf.len() as u64).ok_or(BusError)?;
        // SAFETY: host_ptr bounds-checked the range; the region outlives `self`. Concurrent CPU
        // writes to the same bytes are the usual device/CPU sharing of system memory.
        unsafe { std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }
    fn write(&self, pa: u64, data: &[u8]) -> Result<(), BusError> {
        let p = self.host_ptr(pa, data.len() as u64).ok_or(BusError)?;
        // SAFETY: as in `read`.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
        Ok(())
    }
}

impl Drop for PhysRegion {
    fn drop(&mut self) {
        // SAFETY: base/size are exactly what mmap returned; nothing uses the region any more
        // (every owner holds an Arc to it).
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.size as usize) };
    }
}

/// `PhysMem` through a shared region (the device model owns its memory interface by value).
#[derive(Clone)]
pub struct SharedMem(pub std::sync::Arc<PhysRegion>);

impl PhysMem for SharedMem {
    fn read(&self, pa: u64, buf: &mut [u8]) -> Result<(), BusError> {
        self.0.read(pa, buf)
    }
    fn write(&self, pa: u64, data: &[u8]) -> Result<(), BusError> {
        self.0.write(pa, data)
    }
}
