//! The application's call site of an `alloc` or `free` record: its `caller` and `caller_fn`
//! fields (docs/logging.md, "Call sites"), and the file:line the module's DWARF gives for it.
//!
//! `caller=<module path>+0x<offset>` is the return address relative to the module's load base,
//! so it stays valid after the process is gone; the call is the instruction before it, so the
//! line is looked up at `offset - 1` plus the module's lowest loaded address (0 for a shared
//! object or a position-independent executable). A module that is gone, has no debug info or
//! does not cover the address gives no line, and the site reads `main+0x1f (app+0x1234)` or
//! `app+0x1234`.

use super::Rec;
use object::{Object, ObjectSection, ObjectSegment};
use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

/// A call site from a record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallSite {
    /// The module's path as libumd saw it.
    pub module: String,
    /// Return address minus the module's load base.
    pub offset: u64,
    /// `main+0x1f` when the module exports the function.
    pub function: Option<String>,
}

/// `file:line` of a call, with the function DWARF names for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    /// Source file name (no directory).
    pub file: String,
    /// 1-based line.
    pub line: u32,
    /// The function (DWARF's name, C++ and Rust names demangled).
    pub function: Option<String>,
}

impl CallSite {
    /// The record's call site: `None` without a `caller` field, or when it is `-` or a bare
    /// address outside any module.
    pub fn of(r: &Rec) -> Option<CallSite> {
        let c = r.field_str("caller")?;
        let (module, off) = c.rsplit_once("+0x")?;
        let offset = u64::from_str_radix(off, 16).ok()?;
        let function = r
            .field_str("caller_fn")
            .filter(|f| f != "-" && !f.is_empty());
        Some(CallSite {
            module: module.to_string(),
            offset,
            function,
        })
    }

    /// The module's file name.
    pub fn module_name(&self) -> &str {
        self.module.rsplit('/').next().unwrap_or(&self.module)
    }

    /// `app+0x1234`.
    pub fn module_offset(&self) -> String {
        format!("{}+{:#x}", self.module_name(), self.offset)
    }

    /// `main.c:42 in main (app+0x1234)` with DWARF, `main+0x1f (app+0x1234)` with a symbol,
    /// else `app+0x1234`.
    pub fn describe(&self) -> String {
        match (self.line(), &self.function) {
            (Some(l), _) => match &l.function {
                Some(f) => format!("{}:{} in {f} ({})", l.file, l.line, self.module_offset()),
                None => format!("{}:{} ({})", l.file, l.line, self.module_offset()),
            },
            (None, Some(f)) => format!("{f} ({})", self.module_offset()),
            (None, None) => self.module_offset(),
        }
    }

    /// file:line from the module's DWARF (cached per module and address).
    pub fn line(&self) -> Option<Line> {
        static CACHE: OnceLock<Mutex<Lines>> = OnceLock::new();
        let key = (self.module.clone(), self.offset);
        let cache = CACHE.get_or_init(Default::default);
        if let Some(l) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
            return l.clone();
        }
        let l = modules()
            .get(&self.module)
            .and_then(|m| m.line(self.offset));
        cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, l.clone());
        l
    }
}

/// Lines looked up so far, by (module path, offset).
type Lines = HashMap<(String, u64), Option<Line>>;

/// Modules read so far (by path).
fn modules() -> &'static Modules {
    static M: OnceLock<Modules> = OnceLock::new();
    M.get_or_init(|| Modules(Mutex::new(HashMap::new())))
}

struct Modules(Mutex<HashMap<String, Option<Arc<Module>>>>);

impl Modules {
    fn get(&self, path: &str) -> Option<Arc<Module>> {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        m.entry(path.to_string())
            .or_insert_with(|| Module::read(Path::new(path)).map(Arc::new))
            .clone()
    }
}

/// A module's bytes and where it is loaded from (its lowest segment address).
struct Module {
    data: Vec<u8>,
    base: u64,
}

impl Module {
    fn read(path: &Path) -> Option<Module> {
        let data = std::fs::read(path).ok()?;
        let base = {
            let f = object::File::parse(&*data).ok()?;
            f.segments().map(|s| s.address()).min().unwrap_or(0) & !0xfff
        };
        Some(Module { data, base })
    }

    /// The line of the call whose return address is at `offset`.
    fn line(&self, offset: u64) -> Option<Line> {
        let f = object::File::parse(&*self.data).ok()?;
        let endian = if f.is_little_endian() {
            addr2line::gimli::RunTimeEndian::Little
        } else {
            addr2line::gimli::RunTimeEndian::Big
        };
        let load = |id: addr2line::gimli::SectionId| -> Result<Cow<'_, [u8]>, object::Error> {
            Ok(f.section_by_name(id.name())
                .and_then(|s| s.uncompressed_data().ok())
                .unwrap_or(Cow::Borrowed(&[])))
        };
        let owned = addr2line::gimli::DwarfSections::load(load).ok()?;
        let dwarf = owned.borrow(|s| addr2line::gimli::EndianSlice::new(s, endian));
        let ctx = addr2line::Context::from_dwarf(dwarf).ok()?;
        let probe = self.base + offset.checked_sub(1)?;
        let loc = ctx.find_location(probe).ok()??;
        let file = loc.file?;
        let function = ctx
            .find_frames(probe)
            .skip_all_loads()
            .ok()
            .and_then(|mut frames| {
                let mut last = None;
                // The outermost frame is the function the call is written in (inner ones are
                // inlined into it).
                while let Ok(Some(fr)) = frames.next() {
                    last = fr
                        .function
                        .and_then(|n| n.demangle().ok().map(|s| s.into_owned()));
                }
                last
            });
        Some(Line {
            file: file.rsplit('/').next().unwrap_or(file).to_string(),
            line: loc.line?,
            function,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(module: &str, offset: u64, function: Option<&str>) -> CallSite {
        CallSite {
            module: module.into(),
            offset,
            function: function.map(String::from),
        }
    }

    /// The fields as libumd writes them (text and JSON; `-` quoted in text).
    #[test]
    fn parses_the_caller_fields_of_a_record() {
        let head = "2026-12-02T10:00:00.000000Z 1 INFO tid=7 umd::memory - umd/src/memory/mod.rs:167 ctx=1 code=- \"alloc\" buffer=1";
        let rec = |tail: &str| super::super::parse_line(&format!("{head} {tail}")).expect("parses");
        let r = rec("caller=\"/opt/my app/app+0x12e3\" caller_fn=leak_one+0x2d");
        assert_eq!(
            CallSite::of(&r),
            Some(site("/opt/my app/app", 0x12e3, Some("leak_one+0x2d")))
        );
        let r = rec("caller=/opt/app+0x10 caller_fn=\"-\"");
        assert_eq!(CallSite::of(&r), Some(site("/opt/app", 0x10, None)));
        assert_eq!(CallSite::of(&rec("caller=\"-\" caller_fn=\"-\"")), None);
        assert_eq!(CallSite::of(&rec("caller=0x7f0000001000")), None);
        assert_eq!(CallSite::of(&rec("size=4")), None);
        let j = super::super::parse_line(
            r#"{"ts":"2026-12-02T10:00:00.000000Z","mono_ns":1,"level":"INFO","tid":7,"module":"umd::memory","function":null,"file":"umd/src/memory/mod.rs","line":167,"ctx":1,"code":null,"msg":"free","fields":{"buffer":1,"caller":"/a/b+0xff","caller_fn":"drop_it+0x9"}}"#,
        )
        .expect("json");
        assert_eq!(
            CallSite::of(&j),
            Some(site("/a/b", 0xff, Some("drop_it+0x9")))
        );
        assert_eq!(site("/a/b", 0xff, None).module_offset(), "b+0xff");
    }

    #[inline(never)]
    #[rustfmt::skip]
    fn probe() -> u32 { line!() }

    /// An address of this test binary (built with debug info), as libumd would write it.
    #[test]
    fn dwarf_gives_file_line_and_function() {
        let ip = probe as *const () as usize + 1;
        let r = umd::caller::Caller(ip).resolve();
        let s = site(r.module.as_deref().expect("module"), r.offset as u64, None);
        let l = s.line().expect("a line");
        assert_eq!((l.file.as_str(), l.line), ("symbolize.rs", probe()));
        let f = l.function.clone().expect("function");
        assert_eq!(f, "aigpu_tools::umdlog::symbolize::tests::probe");
        assert_eq!(s.line(), Some(l), "cached");
        assert!(
            s.describe()
                .starts_with(&format!("symbolize.rs:{} in ", probe())),
            "{}",
            s.describe()
        );
    }

    #[test]
    fn without_the_module_the_site_is_its_symbol_or_module_and_offset() {
        let gone = "/nonexistent/dir/app";
        assert_eq!(
            site(gone, 0x1234, Some("main+0x1f")).describe(),
            "main+0x1f (app+0x1234)"
        );
        assert_eq!(site(gone, 0x1234, None).describe(), "app+0x1234");
        assert_eq!(site(gone, 0x1234, None).line(), None);
    }

    #[test]
    fn a_module_without_debug_info_gives_no_line() {
        // The test binary's own path with an offset past its end: no line, no panic.
        let exe = std::env::current_exe().expect("exe");
        let s = site(exe.to_str().expect("utf8"), u64::MAX / 2, None);
        assert_eq!(s.line(), None);
        assert_eq!(site("/", 1, None).line(), None);
        assert_eq!(site("/proc/self/status", 0, None).line(), None);
    }
}
