//! Generation-checked opaque handles.
//!
//! A handle is a `u64`: bits 63..56 the object type, 55..32 a generation, 31..0 the slot index.
//! A slot's generation grows each time its object is destroyed, so a stale handle is told apart
//! from one that was never issued, and the type tag catches a context handle passed where a
//! buffer is expected. `0` is never a valid handle (C code can use it as "none").

use crate::error::{umdResult, UmdError};
use std::sync::{Arc, RwLock};

/// Object types that have handles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// `umdDevice`.
    Device = 1,
    /// `umdContext`.
    Context = 2,
    /// `umdBuffer`.
    Buffer = 3,
    /// `umdCmdBuf`.
    CmdBuf = 4,
}

impl Kind {
    fn from_tag(t: u8) -> Option<Kind> {
        match t {
            1 => Some(Kind::Device),
            2 => Some(Kind::Context),
            3 => Some(Kind::Buffer),
            4 => Some(Kind::CmdBuf),
            _ => None,
        }
    }
    /// The C type name, for messages.
    pub fn c_name(self) -> &'static str {
        match self {
            Kind::Device => "umdDevice",
            Kind::Context => "umdContext",
            Kind::Buffer => "umdBuffer",
            Kind::CmdBuf => "umdCmdBuf",
        }
    }
}

const GEN_MASK: u64 = 0xFF_FFFF;

fn pack(kind: Kind, gen: u64, index: usize) -> u64 {
    ((kind as u64) << 56) | ((gen & GEN_MASK) << 32) | index as u64
}

struct Slot<T> {
    gen: u64,
    /// The fork generation the object was created in (`crate::fork`): a child process sees the
    /// parent's objects in its copy of the table, and must not use them.
    fork_gen: u64,
    obj: Option<Arc<T>>,
}

/// A table of objects of one kind.
pub struct Table<T> {
    kind: Kind,
    slots: RwLock<Vec<Slot<T>>>,
    free: std::sync::Mutex<Vec<usize>>,
}

impl<T> Table<T> {
    /// An empty table for `kind`.
    pub const fn new(kind: Kind) -> Self {
        Table {
            kind,
            slots: RwLock::new(Vec::new()),
            free: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Stores `obj` and returns its new handle.
    pub fn insert(&self, obj: Arc<T>) -> u64 {
        let mut slots = self.slots.write().unwrap_or_else(|p| p.into_inner());
        let reuse = self.free.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let index = match reuse {
            Some(i) => i,
            None => {
                slots.push(Slot {
                    gen: 1,
                    fork_gen: 0,
                    obj: None,
                });
                slots.len() - 1
            }
        };
        let slot = &mut slots[index];
        slot.obj = Some(obj);
        slot.fork_gen = crate::fork::generation();
        pack(self.kind, slot.gen, index)
    }

    /// Looks `handle` up, with a precise error when it is not a live handle of this kind.
    pub fn get(&self, handle: u64) -> Result<Arc<T>, UmdError> {
        let index = self.check(handle)?;
        let slots = self.slots.read().unwrap_or_else(|p| p.into_inner());
        let slot = &slots[index];
        let gen = (handle >> 32) & GEN_MASK;
        match &slot.obj {
            Some(_) if slot.gen == gen && slot.fork_gen != crate::fork::generation() => {
                Err(self.inherited(handle))
            }
            Some(o) if slot.gen == gen => Ok(o.clone()),
            _ if gen < slot.gen => Err(self.err(handle, "was destroyed")),
            _ => Err(self.err(
                handle,
                "was never valid (no object was ever created with it)",
            )),
        }
    }

    /// Removes the object behind `handle` (its handle becomes "destroyed").
    pub fn remove(&self, handle: u64) -> Result<Arc<T>, UmdError> {
        let index = self.check(handle)?;
        let mut slots = self.slots.write().unwrap_or_else(|p| p.into_inner());
        let slot = &mut slots[index];
        let gen = (handle >> 32) & GEN_MASK;
        if slot.gen == gen && slot.obj.is_some() && slot.fork_gen != crate::fork::generation() {
            // Never destroyed from the child: that would act on the parent's objects.
            return Err(self.inherited(handle));
        }
        if slot.gen != gen || slot.obj.is_none() {
            drop(slots);
            return Err(match self.get(handle) {
                Err(e) => e,
                Ok(_) => self.err(handle, "was destroyed"),
            });
        }
        let obj = slot
            .obj
            .take()
            .ok_or_else(|| self.err(handle, "was destroyed"))?;
        // Generations wrap after 16M reuses of one slot; the slot is then retired rather than
        // risk a stale handle matching again.
        slot.gen += 1;
        if slot.gen <= GEN_MASK {
            self.free
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(index);
        }
        Ok(obj)
    }

    /// All live objects of this process (for teardown and reports; a forked child's copies of
    /// its parent's objects are not among them).
    pub fn live(&self) -> Vec<(u64, Arc<T>)> {
        let slots = self.slots.read().unwrap_or_else(|p| p.into_inner());
        let fork_gen = crate::fork::generation();
        slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.fork_gen == fork_gen)
            .filter_map(|(i, s)| {
                s.obj
                    .as_ref()
                    .map(|o| (pack(self.kind, s.gen, i), o.clone()))
            })
            .collect()
    }

    /// Validates the tag and index of `handle`; returns the slot index.
    fn check(&self, handle: u64) -> Result<usize, UmdError> {
        if handle == 0 {
            return Err(self.err(handle, "is the null handle 0"));
        }
        let tag = (handle >> 56) as u8;
        match Kind::from_tag(tag) {
            Some(k) if k == self.kind => {}
            Some(k) => {
                return Err(self.err(handle, &format!("is a {} handle (wrong type)", k.c_name())));
            }
            None => return Err(self.err(handle, "was never valid (unknown handle type)")),
        }
        let index = (handle & 0xFFFF_FFFF) as usize;
        let len = self.slots.read().unwrap_or_else(|p| p.into_inner()).len();
        if index >= len {
            return Err(self.err(
                handle,
                "was never valid (no object was ever created with it)",
            ));
        }
        Ok(index)
    }

    #[track_caller]
    fn inherited(&self, handle: u64) -> UmdError {
        let parent = match crate::fork::parent_pid() {
            0 => "the parent process".to_string(),
            p => format!("the parent process (pid {p})"),
        };
        self.err(
            handle,
            &format!(
                "was created by {parent} before fork(): a forked child cannot use its parent's devices, contexts, buffers or command buffers; open the device again in the child (umdDeviceOpen) and create new objects"
            ),
        )
    }

    #[track_caller]
    fn err(&self, handle: u64, what: &str) -> UmdError {
        UmdError::new(
            umdResult::UMD_ERR_INVALID_HANDLE,
            format!("{} handle 0x{handle:016x} {what}.", self.kind.c_name()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(r: Result<Arc<u32>, UmdError>) -> String {
        match r {
            Err(e) => {
                assert_eq!(e.code, umdResult::UMD_ERR_INVALID_HANDLE);
                e.message
            }
            Ok(_) => panic!("handle accepted"),
        }
    }

    #[test]
    fn live_destroyed_forged_wrong_type_null() {
        let t: Table<u32> = Table::new(Kind::Buffer);
        let h = t.insert(Arc::new(5));
        assert_eq!(*t.get(h).expect("live"), 5);
        assert_eq!(h >> 56, Kind::Buffer as u64);
        t.remove(h).expect("remove");
        assert_eq!(
            msg(t.get(h)),
            format!("umdBuffer handle 0x{h:016x} was destroyed.")
        );
        assert_eq!(
            msg(t.remove(h)),
            format!("umdBuffer handle 0x{h:016x} was destroyed.")
        );
        // The slot is reused with a new generation; the old handle stays destroyed.
        let h2 = t.insert(Arc::new(6));
        assert_eq!(h2 & 0xFFFF_FFFF, h & 0xFFFF_FFFF);
        assert_ne!(h2, h);
        assert!(msg(t.get(h)).ends_with("was destroyed."));
        let forged_gen = h2 + (5 << 32);
        assert!(msg(t.get(forged_gen))
            .ends_with("was never valid (no object was ever created with it)."));
        let forged_index = (Kind::Buffer as u64) << 56 | 1 << 32 | 999;
        assert!(msg(t.get(forged_index))
            .ends_with("was never valid (no object was ever created with it)."));
        let ctx_handle = (Kind::Context as u64) << 56 | 1 << 32;
        assert!(msg(t.get(ctx_handle)).ends_with("is a umdContext handle (wrong type)."));
        assert!(
            msg(t.get(0x7700_0001_0000_0000)).ends_with("was never valid (unknown handle type).")
        );
        assert!(msg(t.get(0)).ends_with("is the null handle 0."));
        assert_eq!(t.live().len(), 1);
    }
}
