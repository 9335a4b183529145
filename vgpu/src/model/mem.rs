//! The device's two windows on the outside world: physical memory ([`PhysMem`]) and time
//! ([`Clock`]), both provided by whoever hosts the device.

use core::cell::Cell;

/// The memory interface reported an uncorrectable error, or the physical address is not backed
/// by memory. The device turns it into a `BUS_ERROR` fault of the queue that made the access.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BusError;

/// Physical (bus) memory as the device sees it.
///
/// The device only ever issues accesses that stay inside one 4 KiB page (it translates and
/// accesses page by page), so an implementation backed by scattered pages never has to split
/// one. Accesses are little-endian byte copies; the device has no alignment requirement beyond
/// that page rule.
pub trait PhysMem {
    /// Reads `buf.len()` bytes at physical address `pa` into `buf`.
    fn read(&self, pa: u64, buf: &mut [u8]) -> Result<(), BusError>;
    /// Writes `data` at physical address `pa`.
    fn write(&self, pa: u64, data: &[u8]) -> Result<(), BusError>;
}

impl<T: PhysMem + ?Sized> PhysMem for &T {
    fn read(&self, pa: u64, buf: &mut [u8]) -> Result<(), BusError> {
        (**self).read(pa, buf)
    }
    fn write(&self, pa: u64, data: &[u8]) -> Result<(), BusError> {
        (**self).write(pa, data)
    }
}

/// The source of the device's `TIMESTAMP` register and packet: monotonic time in nanoseconds.
pub trait Clock {
    /// Current device time in ns; must never go backwards.
    fn now_ns(&self) -> u64;
}

impl<T: Clock + ?Sized> Clock for &T {
    fn now_ns(&self) -> u64 {
        (**self).now_ns()
    }
}

/// Reads the little-endian u64 at `pa` in one access (an 8-byte aligned `pa` stays in a page).
pub fn read_u64<M: PhysMem + ?Sized>(mem: &M, pa: u64) -> Result<u64, BusError> {
    let mut b = [0u8; 8];
    mem.read(pa, &mut b)?;
    Ok(u64::from_le_bytes(b))
}

/// Writes `value` little-endian at `pa` in one access.
pub fn write_u64<M: PhysMem + ?Sized>(mem: &M, pa: u64, value: u64) -> Result<(), BusError> {
    mem.write(pa, &value.to_le_bytes())
}

/// The device's memory interface during one step: the host's memory plus the pending injected
/// bus error (hw-spec §9), which makes the next access, whatever it is, fail once.
pub(crate) struct Bus<'a, M: PhysMem + ?Sized> {
    mem: &'a M,
    fail_next: Cell<bool>,
}

impl<'a, M: PhysMem + ?Sized> Bus<'a, M> {
    /// Wraps `mem`; `fail_next` says whether a bus error is pending.
    pub(crate) fn new(mem: &'a M, fail_next: bool) -> Self {
        Bus {
            mem,
            fail_next: Cell::new(fail_next),
        }
    }

    /// Whether the injected bus error is still pending (no access consumed it).
    pub(crate) fn fail_pending(&self) -> bool {
        self.fail_next.get()
    }

    fn injected(&self) -> Result<(), BusError> {
        if self.fail_next.replace(false) {
            Err(BusError)
        } else {
            Ok(())
        }
    }
}

impl<M: PhysMem + ?Sized> PhysMem for Bus<'_, M> {
    fn read(&self, pa: u64, buf: &mut [u8]) -> Result<(), BusError> {
        self.injected()?;
        self.mem.read(pa, buf)
    }
    fn write(&self, pa: u64, data: &[u8]) -> Result<(), BusError> {
        self.injected()?;
        self.mem.write(pa, data)
    }
}
