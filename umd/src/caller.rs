//! The application's call site of the C ABI entries that create or destroy a buffer
//! (`umdMemAlloc`, `umdMemAllocEx`, `umdMemFree`, `umdMemFreeAddress`, and `umdContextDestroy` /
//! `umdDeviceClose` for the leaked buffers they free): the return address of
//! the `extern "C"` function's own frame, one load on the caller's thread ([`caller!`]), kept
//! with the buffer and its ghost, and symbolized only when something is reported: by the log
//! writer thread when it formats the `caller` field of a record (docs/logging.md, "Call
//! sites"), or on the error path of a double free or use after free and in the leak report.
//!
//! Symbolizing is `dladdr(3)`: the module's path and load base (so `module+offset` does not
//! depend on where ASLR put it) and, when the module exports a symbol that covers the address,
//! `function+0xoff`. Results are cached per address. File and line come later, from the
//! module's DWARF, in the tools (tools/src/umdlog/symbolize.rs).
//!
//! The load is only sound in a frame that keeps a frame pointer: the workspace builds with
//! `-C force-frame-pointers=yes` (.cargo/config.toml) and build.rs sets `umd_frame_pointers`
//! only when the rustflags say so. On other architectures than x86_64 and aarch64, or without
//! frame pointers, nothing is captured (the field reads `-`).
//!
//! Why inline assembly: the compiler's own `__builtin_return_address(0)` is only on nightly
//! (`core::arch::return_address!`, feature `return_address`), and a stack walker (glibc's
//! `backtrace(3)`, which `UMD_POOL_HISTORY` uses: src/memory/pool/history.rs) costs
//! microseconds per call, where this load costs about a nanosecond (docs/benchmarks.md, "Call
//! sites").

use std::ffi::{c_void, CStr};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

/// A return address into the caller of a C ABI entry (0: not captured).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Caller(pub usize);

/// Where a buffer was allocated and freed (zeros while unknown).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Callers {
    /// The `umdMemAlloc`/`umdMemAllocEx` call.
    pub alloc: Caller,
    /// The `umdMemFree`/`umdMemFreeAddress` call.
    pub free: Caller,
}

/// The return address of the enclosing `extern "C"` function: `[rbp+8]` on x86_64,
/// `[x29+8]` on aarch64 (the frame record the prologue pushed). Use it in the entry point's own
/// body, not in a closure or helper (their frame is not the entry's).
#[macro_export]
#[doc(hidden)]
macro_rules! caller {
    () => {{
        #[cfg(all(umd_frame_pointers, target_arch = "x86_64"))]
        let ra: usize = {
            let ra: usize;
            // SAFETY: built with frame pointers (build.rs sets `umd_frame_pointers` only then),
            // so in this function's body rbp points at its frame record [saved rbp, return
            // address], which lives on the stack until the function returns (inlined into a
            // caller, the record is that caller's, as valid); the load reads it, writes nothing.
            unsafe {
                ::core::arch::asm!("mov {}, [rbp + 8]", out(reg) ra,
                    options(nostack, readonly, preserves_flags))
            };
            ra
        };
        #[cfg(all(umd_frame_pointers, target_arch = "aarch64"))]
        let ra: usize = {
            let ra: usize;
            // SAFETY: as on x86_64: x29 points at this frame's record [saved x29, saved x30].
            unsafe {
                ::core::arch::asm!("ldr {}, [x29, #8]", out(reg) ra,
                    options(nostack, readonly, preserves_flags))
            };
            ra
        };
        #[cfg(not(all(umd_frame_pointers, any(target_arch = "x86_64", target_arch = "aarch64"))))]
        let ra: usize = 0;
        $crate::caller::Caller(ra)
    }};
}

/// What `dladdr` says of an address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// The address.
    pub ip: usize,
    /// Path of the module containing it (absolute when it could be made so); `None`: no module.
    pub module: Option<String>,
    /// `ip` minus the module's load base.
    pub offset: usize,
    /// The exported symbol covering it, and `ip` minus the symbol's address.
    pub function: Option<(String, usize)>,
}

impl Resolved {
    /// The `caller` field: `<module path>+0x<offset>`, `0x<ip>` outside any module, `-` for 0.
    pub fn field(&self) -> String {
        match (&self.module, self.ip) {
            (_, 0) => "-".into(),
            (Some(m), _) => format!("{m}+{:#x}", self.offset),
            (None, ip) => format!("{ip:#x}"),
        }
    }

    /// The `caller_fn` field: `<symbol>+0x<offset>`, or `-`.
    pub fn function_field(&self) -> String {
        match &self.function {
            Some((f, off)) if self.ip != 0 => format!("{f}+{off:#x}"),
            _ => "-".into(),
        }
    }

    /// For messages: `main+0x1f (app+0x1234)`, `app+0x1234` without a symbol (the module's
    /// file name only), `0x7f..` outside any module.
    pub fn describe(&self) -> String {
        let module = self
            .module
            .as_deref()
            .map(|m| m.rsplit('/').next().unwrap_or(m));
        let mut s = String::new();
        match (&self.function, module) {
            (Some((f, off)), Some(m)) => {
                let _ = write!(s, "{f}+{off:#x} ({m}+{:#x})", self.offset);
            }
            (None, Some(m)) => {
                let _ = write!(s, "{m}+{:#x}", self.offset);
            }
            (_, None) => {
                let _ = write!(s, "{:#x}", self.ip);
            }
        }
        s
    }
}

/// The two log fields of a call site, formatted once per address: the writer thread writes them
/// into every record of that call site (docs/logging.md, "Call sites").
#[derive(Debug, PartialEq, Eq)]
pub struct Fields {
    /// [`Resolved::field`].
    pub caller: String,
    /// [`Resolved::function_field`].
    pub caller_fn: String,
}

/// A cache of what is known of addresses (a program has few call sites; emptied if it ever holds
/// [`CACHE_MAX`]). Keyed by address with `foldhash`: the writer thread looks an address up for
/// every record that carries one.
pub struct Cache<V = Resolved> {
    map: Mutex<foldhash::HashMap<usize, Arc<V>>>,
}

/// Addresses kept at most.
pub(crate) const CACHE_MAX: usize = 4096;

impl<V> Cache<V> {
    /// Empty.
    pub fn new() -> Cache<V> {
        Cache {
            map: Mutex::new(foldhash::HashMap::default()),
        }
    }

    /// `ip` resolved by `resolve` the first time, from the cache after. The cache is only ever
    /// tried, never waited for: a lock held by another thread (or by a thread of the parent that
    /// forked this process, which never lets it go) means resolving uncached instead.
    pub fn get_with(&self, ip: usize, resolve: impl FnOnce(usize) -> V) -> Arc<V> {
        if let Some(m) = self.try_lock() {
            if let Some(r) = m.get(&ip) {
                return r.clone();
            }
        }
        // Resolved outside the lock: dladdr takes the loader's lock.
        let r = Arc::new(resolve(ip));
        match self.try_lock() {
            Some(mut m) => {
                if m.len() >= CACHE_MAX {
                    m.clear();
                }
                m.entry(ip).or_insert(r).clone()
            }
            None => r,
        }
    }

    /// Addresses cached.
    pub fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn try_lock(&self) -> Option<std::sync::MutexGuard<'_, foldhash::HashMap<usize, Arc<V>>>> {
        match self.map.try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }
}

impl<V> Default for Cache<V> {
    fn default() -> Self {
        Cache::new()
    }
}

static CACHE: std::sync::OnceLock<Cache> = std::sync::OnceLock::new();
static FIELDS: std::sync::OnceLock<Cache<Fields>> = std::sync::OnceLock::new();

impl Caller {
    /// Symbolized (cached per address; dladdr on the first lookup).
    pub fn resolve(self) -> Arc<Resolved> {
        CACHE.get_or_init(Cache::new).get_with(self.0, dladdr)
    }

    /// The `caller` and `caller_fn` fields of a log record (cached per address, formatted once).
    pub fn fields(self) -> Arc<Fields> {
        FIELDS.get_or_init(Cache::new).get_with(self.0, |_| {
            let r = self.resolve();
            Fields {
                caller: r.field(),
                caller_fn: r.function_field(),
            }
        })
    }

    /// For messages ([`Resolved::describe`]); `None` when not captured.
    pub fn describe(self) -> Option<String> {
        (self.0 != 0).then(|| self.resolve().describe())
    }
}

/// Resolves `ip` with `dladdr(3)`.
fn dladdr(ip: usize) -> Resolved {
    let none = Resolved {
        ip,
        module: None,
        offset: 0,
        function: None,
    };
    if ip == 0 {
        return none;
    }
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: dladdr only reads the loader's tables and writes `info`; any address is allowed.
    if unsafe { libc::dladdr(ip as *const c_void, &mut info) } == 0 {
        return none;
    }
    let text = |p: *const libc::c_char| {
        // SAFETY: dladdr returns NUL-terminated strings owned by the loader (or NULL, checked).
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    };
    let base = info.dli_fbase as usize;
    let function = match text(info.dli_sname) {
        Some(f) if !info.dli_saddr.is_null() && !f.is_empty() => {
            Some((f, ip.wrapping_sub(info.dli_saddr as usize)))
        }
        _ => None,
    };
    Resolved {
        ip,
        module: Some(absolute(text(info.dli_fname).unwrap_or_default())),
        offset: ip.wrapping_sub(base),
        function,
    }
}

/// The main program's entry in the loader's list has the name it was started by (argv[0]),
/// which may be relative or a bare name: made absolute from the working directory, else the
/// executable's path.
fn absolute(path: String) -> String {
    if path.starts_with('/') {
        return path;
    }
    if path.contains('/') {
        if let Ok(p) = std::fs::canonicalize(&path) {
            return p.to_string_lossy().into_owned();
        }
    }
    std::env::current_exe()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn r(ip: usize, module: Option<&str>, offset: usize, f: Option<(&str, usize)>) -> Resolved {
        Resolved {
            ip,
            module: module.map(String::from),
            offset,
            function: f.map(|(n, o)| (n.to_string(), o)),
        }
    }

    #[test]
    fn formats_with_and_without_a_symbol() {
        let full = r(
            0x5000_1234,
            Some("/opt/app/bin/app"),
            0x1234,
            Some(("main", 0x1f)),
        );
        assert_eq!(full.field(), "/opt/app/bin/app+0x1234");
        assert_eq!(full.function_field(), "main+0x1f");
        assert_eq!(full.describe(), "main+0x1f (app+0x1234)");
        let stripped = r(0x5000_1234, Some("/opt/app/bin/app"), 0x1234, None);
        assert_eq!(stripped.field(), "/opt/app/bin/app+0x1234");
        assert_eq!(stripped.function_field(), "-");
        assert_eq!(stripped.describe(), "app+0x1234");
        let nowhere = r(0x7f00_0010, None, 0, None);
        assert_eq!(nowhere.field(), "0x7f000010");
        assert_eq!(nowhere.function_field(), "-");
        assert_eq!(nowhere.describe(), "0x7f000010");
        let none = r(0, None, 0, None);
        assert_eq!(
            (none.field(), none.function_field()),
            ("-".into(), "-".into())
        );
        assert_eq!(Caller(0).describe(), None);
    }

    #[test]
    fn the_cache_resolves_each_address_once() {
        let c = Cache::new();
        let calls = AtomicUsize::new(0);
        let res = |ip| {
            calls.fetch_add(1, Ordering::Relaxed);
            r(ip, Some("/m"), ip - 0x1000, None)
        };
        let a = c.get_with(0x1010, res);
        let b = c.get_with(0x1010, |_| unreachable!("cached"));
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(b.offset, 0x10);
        let _ = c.get_with(0x1020, res);
        assert_eq!((calls.load(Ordering::Relaxed), c.len()), (2, 2));
        for ip in 0..CACHE_MAX {
            let _ = c.get_with(0x10_0000 + ip, res);
        }
        assert!(c.len() <= CACHE_MAX, "{}", c.len());
    }

    /// A held lock (another thread, or one a fork left held) is not waited for.
    #[test]
    fn a_held_cache_resolves_without_it() {
        let c = Cache::new();
        let _ = c.get_with(0x10, |ip| r(ip, Some("/m"), 1, None));
        let held = c.map.lock().expect("lock");
        let got = c.get_with(0x20, |ip| r(ip, Some("/n"), 2, None));
        assert_eq!((got.module.as_deref(), got.offset), (Some("/n"), 2));
        drop(held);
        assert_eq!(c.len(), 1, "not cached while held");
    }

    #[inline(never)]
    fn here() -> usize {
        here as *const () as usize
    }

    #[test]
    fn dladdr_names_the_module_and_its_offset() {
        let ip = here() + 1;
        let got = dladdr(ip);
        let m = got.module.clone().expect("a module");
        assert!(m.starts_with('/'), "{m}");
        assert_eq!(got.ip, ip);
        // Resolved again through the cache: the same value.
        assert_eq!(*Caller(ip).resolve(), got);
        assert_eq!(dladdr(0).module, None);
    }

    /// The record fields are the resolved address's, formatted once and then served from the
    /// cache.
    #[test]
    fn record_fields_are_formatted_once_per_address() {
        let ip = here() + 3;
        let f = Caller(ip).fields();
        let r = dladdr(ip);
        assert_eq!(
            (f.caller.as_str(), f.caller_fn.as_str()),
            (r.field().as_str(), r.function_field().as_str())
        );
        assert!(
            f.caller.ends_with(&format!("+{:#x}", r.offset)),
            "{}",
            f.caller
        );
        assert!(Arc::ptr_eq(&f, &Caller(ip).fields()));
        assert_eq!(Caller(0).fields().caller, "-");
    }
}
