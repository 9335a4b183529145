//! Generation-checked opaque handles.
//!
//! A handle is a `u64`: bits 63..56 the object type, 55..32 a generation, 31..0 the slot index.
//! A slot's generation grows each time its object is destroyed, so a stale handle is told apart
//! from one that was never issued, and the type tag catches a context handle passed where a
//! buffer is expected. `0` is never a valid handle (C code can use it as "none").

use crate::error::{umdResult, UmdError};
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// The shared reference a table keeps and hands out: `std::sync::Arc` by default; a table of
/// objects nobody holds weakly can use `triomphe::Arc`, whose last release is one locked
/// instruction fewer (no weak count: docs/memory.md, "What a pair costs").
pub trait Shared<T>: Clone + Deref<Target = T> {}
impl<T> Shared<T> for Arc<T> {}
impl<T> Shared<T> for triomphe::Arc<T> {}

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

struct Slot<P> {
    gen: u64,
    /// What [`Tombstone::keep`] kept of the object last removed from this slot (until the slot
    /// is reused).
    kept: [u64; 3],
    /// The fork generation the object was created in (`crate::fork`): a child process sees the
    /// parent's objects in its copy of the table, and must not use them.
    fork_gen: u64,
    obj: Option<P>,
}

/// The slots and the free list, under one lock.
struct Slots<P> {
    slots: Vec<Slot<P>>,
    free: Vec<usize>,
}

/// What a table keeps of a removed object until its slot is reused, so that a later use of the
/// destroyed handle (a double free, a use after free) can say which object it was and where it
/// was created and destroyed, not only "was destroyed".
pub struct Tombstone<T> {
    /// What to keep of the object when it is removed.
    pub keep: fn(&T) -> [u64; 3],
    /// The kept words described for the error message (None: nothing to add). Called without
    /// the table's lock.
    pub describe: fn([u64; 3]) -> Option<String>,
}

/// Why a handle names no live object (built into an error after the lock is let go).
enum Miss {
    /// Destroyed; with what the tombstone kept when the slot still holds it.
    Destroyed(Option<[u64; 3]>),
    /// No object was ever created with it.
    Never,
    /// Created by the parent process before `fork()`.
    Inherited,
}

/// A table of objects of one kind. Every call takes its lock once (a lookup the read lock, an
/// insert or remove the write lock); errors are built only on the failure path.
pub struct Table<T, P: Shared<T> = Arc<T>> {
    kind: Kind,
    inner: RwLock<Slots<P>>,
    /// Objects of this process's generation in the table: what [`Table::live_count`] reads
    /// without the lock (from a fatal-signal handler, which must not take it).
    live: AtomicU64,
    tomb: Option<Tombstone<T>>,
}

impl<T, P: Shared<T>> Table<T, P> {
    /// An empty table for `kind`.
    pub const fn new(kind: Kind) -> Self {
        Table {
            kind,
            inner: RwLock::new(Slots {
                slots: Vec::new(),
                free: Vec::new(),
            }),
            live: AtomicU64::new(0),
            tomb: None,
        }
    }

    /// An empty table for `kind` that keeps a tombstone of every removed object.
    pub const fn with_tombstone(kind: Kind, tomb: Tombstone<T>) -> Self {
        let mut t = Table::new(kind);
        t.tomb = Some(tomb);
        t
    }

    /// Stores `obj` and returns its new handle.
    pub fn insert(&self, obj: P) -> u64 {
        self.insert_with(obj, |_, _| {})
    }

    /// Stores `obj` and returns its new handle, telling `registered` the handle first (under
    /// the table's lock, before any other thread can look the handle up), so an object that
    /// keeps its own handle needs no second reference for that. `registered` must not use this
    /// table.
    pub fn insert_with(&self, obj: P, registered: impl FnOnce(&T, u64)) -> u64 {
        let mut g = self.inner.write().unwrap_or_else(|p| p.into_inner());
        let index = match g.free.pop() {
            Some(i) => i,
            None => {
                g.slots.push(Slot {
                    gen: 1,
                    kept: [0; 3],
                    fork_gen: 0,
                    obj: None,
                });
                g.slots.len() - 1
            }
        };
        let slot = &mut g.slots[index];
        let handle = pack(self.kind, slot.gen, index);
        registered(&obj, handle);
        slot.obj = Some(obj);
        slot.fork_gen = crate::fork::generation();
        // Changed only under the write lock, so a plain load and store count exactly (a locked
        // read-modify-write here would be one more bus-locked instruction per call); readers
        // without the lock (a fatal-signal handler) still see a whole value.
        self.live
            .store(self.live.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        handle
    }

    /// Looks `handle` up, with a precise error when it is not a live handle of this kind.
    pub fn get(&self, handle: u64) -> Result<P, UmdError> {
        self.check_tag(handle)?;
        let miss = {
            let g = self.inner.read().unwrap_or_else(|p| p.into_inner());
            match self.live_slot(&g.slots, handle) {
                Ok(index) => match &g.slots[index].obj {
                    Some(o) => return Ok(o.clone()),
                    None => Miss::Destroyed(None),
                },
                Err(m) => m,
            }
        };
        Err(self.missed(handle, miss))
    }

    /// Removes the object behind `handle` (its handle becomes "destroyed").
    pub fn remove(&self, handle: u64) -> Result<P, UmdError> {
        self.check_tag(handle)?;
        let miss = {
            let mut g = self.inner.write().unwrap_or_else(|p| p.into_inner());
            // Never destroyed from a forked child: that would act on the parent's objects.
            match self.live_slot(&g.slots, handle) {
                Ok(index) => {
                    let keep = self.tomb.as_ref().map(|t| t.keep);
                    let slot = &mut g.slots[index];
                    match slot.obj.take() {
                        Some(obj) => {
                            if let Some(keep) = keep {
                                slot.kept = keep(&obj);
                            }
                            // Generations wrap after 16M reuses of one slot; the slot is then
                            // retired rather than risk a stale handle matching again.
                            slot.gen += 1;
                            if slot.gen <= GEN_MASK {
                                g.free.push(index);
                            }
                            // Under the write lock: see `insert`.
                            self.live.store(
                                self.live.load(Ordering::Relaxed).saturating_sub(1),
                                Ordering::Relaxed,
                            );
                            return Ok(obj);
                        }
                        None => Miss::Destroyed(None),
                    }
                }
                Err(m) => m,
            }
        };
        Err(self.missed(handle, miss))
    }

    /// How many objects of this process the table holds (what [`Table::live`] would list).
    /// Lock-free and async-signal-safe: one atomic load.
    pub fn live_count(&self) -> u64 {
        self.live.load(Ordering::Relaxed)
    }

    /// In a forked child: the objects inherited from the parent are not the child's (see
    /// `crate::fork`), so none of them counts. An atomic store: async-signal-safe.
    pub fn forget_inherited(&self) {
        self.live.store(0, Ordering::Relaxed);
    }

    /// All live objects of this process (for teardown and reports; a forked child's copies of
    /// its parent's objects are not among them).
    pub fn live(&self) -> Vec<(u64, P)> {
        let g = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let fork_gen = crate::fork::generation();
        g.slots
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

    /// Validates the type tag of `handle` (no lock needed).
    #[inline]
    fn check_tag(&self, handle: u64) -> Result<(), UmdError> {
        if handle != 0 && (handle >> 56) as u8 == self.kind as u8 {
            return Ok(());
        }
        Err(self.tag_err(handle))
    }

    #[cold]
    #[inline(never)]
    fn tag_err(&self, handle: u64) -> UmdError {
        if handle == 0 {
            return self.err(handle, "is the null handle 0");
        }
        match Kind::from_tag((handle >> 56) as u8) {
            Some(k) => self.err(handle, &format!("is a {} handle (wrong type)", k.c_name())),
            None => self.err(handle, "was never valid (unknown handle type)"),
        }
    }

    /// The index of the live slot `handle` names, in this process, or why not (under the
    /// caller's lock).
    #[inline]
    fn live_slot(&self, slots: &[Slot<P>], handle: u64) -> Result<usize, Miss> {
        let index = (handle & 0xFFFF_FFFF) as usize;
        let gen = (handle >> 32) & GEN_MASK;
        match slots.get(index) {
            Some(s) if s.gen == gen && s.obj.is_some() => {
                if s.fork_gen != crate::fork::generation() {
                    return Err(Miss::Inherited);
                }
                Ok(index)
            }
            Some(s) if gen < s.gen => Err(Miss::Destroyed(self.kept_in(s, gen))),
            _ => Err(Miss::Never),
        }
    }

    /// What the tombstone of slot `s` keeps for a handle of generation `gen`: the slot's last
    /// removal was that handle's, until the next removal overwrites it (the slot's generation
    /// then moves past `gen + 1`). A forked child does not describe its parent's objects (their
    /// description reads pool state the parent's threads may have held locked at the fork).
    fn kept_in(&self, s: &Slot<P>, gen: u64) -> Option<[u64; 3]> {
        (self.tomb.is_some() && s.gen == gen + 1 && s.fork_gen == crate::fork::generation())
            .then_some(s.kept)
    }

    /// The live object behind `handle`, if any, with no error built (a failure path's lookup).
    pub fn find(&self, handle: u64) -> Option<P> {
        self.check_tag(handle).ok()?;
        let g = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let index = self.live_slot(&g.slots, handle).ok()?;
        g.slots.get(index)?.obj.clone()
    }

    /// What the tombstone kept of the object `handle` named, while the slot still holds it.
    pub fn kept(&self, handle: u64) -> Option<[u64; 3]> {
        self.check_tag(handle).ok()?;
        let g = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let s = g.slots.get((handle & 0xFFFF_FFFF) as usize)?;
        self.kept_in(s, (handle >> 32) & GEN_MASK)
    }

    /// The error for a handle that names no live object (called without the lock: a
    /// tombstone's description may take other locks).
    #[cold]
    #[inline(never)]
    #[track_caller]
    fn missed(&self, handle: u64, m: Miss) -> UmdError {
        match m {
            Miss::Destroyed(kept) => {
                let what = kept
                    .and_then(|k| self.tomb.as_ref().and_then(|t| (t.describe)(k)))
                    .map_or_else(
                        || "was destroyed".to_string(),
                        |d| format!("was destroyed: it was {d}"),
                    );
                self.err(handle, &what)
            }
            Miss::Never => self.err(
                handle,
                "was never valid (no object was ever created with it)",
            ),
            Miss::Inherited => self.inherited(handle),
        }
    }

    #[cold]
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

    #[cold]
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

    fn msg<T>(r: Result<Arc<T>, UmdError>) -> String {
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

    /// `insert_with` tells the object its handle before anyone can look it up, and counts it
    /// live; `remove` uncounts it.
    #[test]
    fn insert_with_tells_the_handle_it_returns() {
        use std::sync::atomic::AtomicU64;
        let t: Table<AtomicU64> = Table::new(Kind::Buffer);
        let h = t.insert_with(Arc::new(AtomicU64::new(0)), |o, h| {
            o.store(h, Ordering::Relaxed)
        });
        assert_eq!(t.get(h).expect("live").load(Ordering::Relaxed), h);
        assert_eq!(t.live_count(), 1);
        t.remove(h).expect("remove");
        assert_eq!(t.live_count(), 0);
    }

    /// A table with a tombstone names the destroyed object in the error of a later use of its
    /// handle, until the slot's next removal overwrites what it kept; other misses are as before.
    #[test]
    fn a_tombstone_names_the_destroyed_object_until_its_slot_moves_on() {
        static T: Table<u64> = Table::with_tombstone(
            Kind::Buffer,
            Tombstone {
                keep: |v: &u64| [*v, 7, 9],
                describe: |k: [u64; 3]| Some(format!("object {} (kept {})", k[0], k[1])),
            },
        );
        let a = T.insert(Arc::new(41));
        T.remove(a).expect("remove");
        let gone = format!("umdBuffer handle 0x{a:016x} was destroyed: it was object 41 (kept 7).");
        assert_eq!(msg(T.remove(a)), gone, "double remove");
        assert_eq!(T.kept(a), Some([41, 7, 9]));
        assert!(T.find(a).is_none());
        assert_eq!(msg(T.get(a)), gone, "use after remove");
        let b = T.insert(Arc::new(42));
        assert_eq!(b & 0xFFFF_FFFF, a & 0xFFFF_FFFF, "the slot is reused");
        assert_eq!(
            msg(T.get(a)),
            gone,
            "still named while the slot holds the next object"
        );
        T.remove(b).expect("remove");
        assert_eq!(
            msg(T.get(a)),
            format!("umdBuffer handle 0x{a:016x} was destroyed."),
            "the next removal kept the next object"
        );
        assert_eq!(T.kept(a), None);
        assert!(msg(T.get(b)).ends_with("was destroyed: it was object 42 (kept 7)."));
        assert!(msg(T.get(b + (1 << 32)))
            .ends_with("was never valid (no object was ever created with it)."));
    }
}
