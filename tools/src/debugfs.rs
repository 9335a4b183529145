//! Reading aigpu's debugfs (docs/debugfs.md): the per-device directories under
//! `/sys/kernel/debug/dri/`, found by their `name` file (`aigpu ...`), and the crash dumps.

use crate::host::{Host, Notes, ReadErr};
use crate::kv::{self, Kv};
use crate::util::Wall;

/// One crash dump (`crashdumps/crash-<n>`), or what `crashdumps/list` says of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CrashDump {
    /// `crash-3`.
    pub name: String,
    /// 3.
    pub number: u64,
    /// `page_fault`, `hang`, `mem_error`.
    pub kind: String,
    /// When (from `time_wall` or the list's `time`).
    pub time: Option<Wall>,
    /// The machine path it was read from.
    pub source: String,
    /// Device name.
    pub device: Option<String>,
    /// Kernel release it was taken on.
    pub kernel: Option<String>,
    /// Process id.
    pub pid: Option<u64>,
    /// Command name.
    pub comm: Option<String>,
    /// Context id.
    pub ctx: Option<u64>,
    /// Queue.
    pub queue: Option<u64>,
    /// Fault type (`unmapped`, `permission`, `bus-error`, ...).
    pub fault: Option<String>,
    /// Access (`read`, `write`).
    pub access: Option<String>,
    /// Faulting VA.
    pub va: Option<String>,
    /// Packet offset.
    pub offset: Option<u64>,
    /// Job id.
    pub job: Option<u64>,
    /// The job's seqno.
    pub seqno: Option<u64>,
    /// A hang's facts (the `hang` line).
    pub hang: Option<crate::timeout::TimeoutFacts>,
    /// A fault injection made it (`injected=1` on the `job` line: debugfs `inject_hang`,
    /// `inject_page_fault`).
    pub injected: bool,
    /// The registers line.
    pub registers: Option<String>,
    /// The line to cite as evidence (`fault ...`, `kind=...` or the list line).
    pub evidence: String,
    /// The dump's text (empty when only the list line was readable).
    pub text: String,
}

/// Parses a crash dump's text.
pub fn parse_crash(name: &str, source: &str, text: &str) -> CrashDump {
    let mut c = CrashDump {
        name: name.to_string(),
        number: number_of(name),
        source: source.to_string(),
        text: text.to_string(),
        ..CrashDump::default()
    };
    let mut kind_line = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let k = Kv::parse(line);
        let first = k.words.first().map(String::as_str);
        match first {
            Some("aigpu") => {
                if let Some(n) = line.rsplit(' ').next().and_then(|n| n.parse().ok()) {
                    c.number = n;
                }
            }
            Some("process") => {
                c.pid = k.num("pid");
                c.comm = k.get("comm").map(str::to_string);
            }
            Some("context") => {
                c.ctx = k.num("ctx");
                c.queue = k.num("queue");
            }
            Some("fault") => {
                c.fault = k.get("type").map(str::to_string);
                c.access = k.get("access").map(str::to_string);
                c.va = k.get("va").map(str::to_string);
                c.offset = k.num("offset");
                c.job = k.num("job").or(c.job);
                c.evidence = line.trim().to_string();
            }
            Some("hang") => {
                c.hang = crate::timeout::TimeoutFacts::from_kv(&k);
                c.offset = k.num("offset");
                c.job = k.num("job").or(c.job);
                c.evidence = line.trim().to_string();
            }
            Some("job") => {
                c.job = c.job.or(k.num("id"));
                c.seqno = k.num("seqno");
                c.injected |= k.num("injected") == Some(1);
            }
            Some("registers:") => {
                c.registers = lines.peek().map(|l| l.trim().to_string());
            }
            _ => {
                if let Some(v) = k.get("kernel") {
                    c.kernel = Some(v.to_string());
                    c.device = k.get("device").map(str::to_string);
                }
                if let Some(t) = k.get("time_wall") {
                    c.time = Wall::parse(t);
                }
                if let Some(v) = k.get("kind") {
                    c.kind = v.to_string();
                    kind_line = line.trim().to_string();
                }
            }
        }
    }
    if c.evidence.is_empty() {
        c.evidence = kind_line;
    }
    c
}

/// Fills what a `crashdumps/list` line says into `c` (without overriding the dump's own).
pub fn apply_list_line(c: &mut CrashDump, line: &Kv) {
    if c.kind.is_empty() {
        c.kind = line.or_dash("kind").to_string();
    }
    if c.time.is_none() {
        c.time = line.get("time").and_then(Wall::parse);
    }
    if c.ctx.is_none() {
        c.ctx = line.num("ctx");
    }
    if c.evidence.is_empty() {
        c.evidence = line.line.clone();
    }
}

fn number_of(name: &str) -> u64 {
    name.rsplit('-')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// One aigpu device's debugfs directory.
#[derive(Clone, Debug, Default)]
pub struct DebugfsDevice {
    /// Machine path (`/sys/kernel/debug/dri/0`).
    pub dir: String,
    /// The `name` file.
    pub name_line: String,
    /// Device name (`status`'s `device=`, else the `name` file's `dev=`).
    pub device: Option<String>,
    /// `status`.
    pub status: Option<Kv>,
    /// `queues`.
    pub queues: Vec<Kv>,
    /// `clients`.
    pub clients: Vec<Kv>,
    /// `contexts`.
    pub contexts: Vec<Kv>,
    /// Crash dumps, oldest first.
    pub crashes: Vec<CrashDump>,
    /// Every file read: (path relative to `dir`, text), for the triage snapshot.
    pub files: Vec<(String, String)>,
}

impl DebugfsDevice {
    /// `state=` of `status`.
    pub fn state(&self) -> Option<&str> {
        self.status.as_ref().and_then(|s| s.get("state"))
    }
}

/// What reading debugfs gave.
#[derive(Clone, Debug)]
pub enum Debugfs {
    /// `/sys/kernel/debug` is empty or absent.
    NotMounted,
    /// A directory on the way could not be read.
    Unreadable {
        /// Machine path.
        path: String,
        /// Why.
        why: ReadErr,
    },
    /// The aigpu devices found (possibly none).
    Read(Vec<DebugfsDevice>),
}

impl Debugfs {
    /// The devices read (none unless `Read`).
    pub fn devices(&self) -> &[DebugfsDevice] {
        match self {
            Debugfs::Read(v) => v,
            _ => &[],
        }
    }

    /// Why there are no debugfs details, for a person.
    pub fn why_not(&self) -> Option<String> {
        match self {
            Debugfs::NotMounted => Some(
                "debugfs is not mounted at /sys/kernel/debug (mount -t debugfs none /sys/kernel/debug)"
                    .into(),
            ),
            Debugfs::Unreadable { path, why } => Some(format!("{path}: {}", root_only(why))),
            Debugfs::Read(_) => None,
        }
    }
}

fn root_only(why: &ReadErr) -> String {
    format!(
        "{} (debugfs is root-only: run as root for queues, clients, contexts and crash dumps)",
        why.describe()
    )
}

const DEBUGFS: &str = "/sys/kernel/debug";
const DRI: &str = "/sys/kernel/debug/dri";

/// Reads every aigpu device's debugfs directory.
pub fn scan(host: &Host, notes: &mut Notes) -> Debugfs {
    match host.list(DEBUGFS) {
        Err(ReadErr::Missing) => return Debugfs::NotMounted,
        Ok(v) if v.is_empty() => return Debugfs::NotMounted,
        Err(why) => {
            notes.add(DEBUGFS, root_only(&why));
            return Debugfs::Unreadable {
                path: DEBUGFS.into(),
                why,
            };
        }
        Ok(_) => {}
    }
    let entries = match host.list(DRI) {
        Ok(v) => v,
        Err(ReadErr::Missing) => return Debugfs::Read(Vec::new()),
        Err(why) => {
            notes.add(DRI, root_only(&why));
            return Debugfs::Unreadable {
                path: DRI.into(),
                why,
            };
        }
    };
    let mut seen = std::collections::HashSet::new();
    // (dir, name line, has a status file)
    let mut dirs: Vec<(String, String, bool)> = Vec::new();
    for e in entries {
        let dir = format!("{DRI}/{e}");
        // Not every entry is a device directory (7.3 has a `bridges` file there).
        if !host.path(&dir).is_dir() {
            continue;
        }
        // The same device may appear twice (a minor number and a symlink to it).
        let canon = std::fs::canonicalize(host.path(&dir)).unwrap_or_else(|_| host.path(&dir));
        if !seen.insert(canon) {
            continue;
        }
        let name = match host.read(&format!("{dir}/name")) {
            Ok(n) => n.trim().to_string(),
            Err(ReadErr::Missing) => continue,
            Err(why) => {
                notes.add(format!("{dir}/name"), why.describe());
                continue;
            }
        };
        if name.split_whitespace().next() != Some("aigpu") {
            continue;
        }
        let has_status = host.exists(&format!("{dir}/status"));
        dirs.push((dir, name, has_status));
    }
    // A render minor's directory carries only the DRM core's files: skip it when the primary
    // node's directory of the same device has aigpu's.
    let dev_of = |n: &str| Kv::parse(n).get("dev").map(str::to_string);
    let with_status: Vec<Option<String>> =
        dirs.iter().filter(|d| d.2).map(|d| dev_of(&d.1)).collect();
    let mut out = Vec::new();
    for (dir, name, has_status) in dirs {
        if !has_status && with_status.contains(&dev_of(&name)) {
            continue;
        }
        out.push(read_device(host, &dir, name, notes));
    }
    Debugfs::Read(out)
}

/// The `name`, `status`, `queues`, `clients` and `contexts` of a device directory: aigpu.ko's
/// debugfs, or a simulator device another process publishes (`simdir.rs`), with one parser.
pub fn read_views(host: &Host, dir: &str, name_line: String, notes: &mut Notes) -> DebugfsDevice {
    let mut d = DebugfsDevice {
        dir: dir.to_string(),
        files: vec![("name".into(), format!("{name_line}\n"))],
        name_line,
        ..DebugfsDevice::default()
    };
    let read = |rel: &str, d: &mut DebugfsDevice, notes: &mut Notes| -> Option<String> {
        let t = read_file(host, dir, rel, notes)?;
        d.files.push((rel.to_string(), t.clone()));
        Some(t)
    };
    // Only key=value lines are records: the DRM core's own `clients` file (a column table:
    // "command tgid dev master a uid magic") has none, and is then shown as no clients.
    let records = |t: &str| -> Vec<Kv> {
        kv::lines(t)
            .into_iter()
            .filter(|k| !k.pairs.is_empty())
            .collect()
    };
    if let Some(t) = read("status", &mut d, notes) {
        d.status = records(&t).into_iter().next();
    }
    if let Some(t) = read("queues", &mut d, notes) {
        d.queues = records(&t);
    }
    if let Some(t) = read("clients", &mut d, notes) {
        d.clients = records(&t);
    }
    if let Some(t) = read("contexts", &mut d, notes) {
        d.contexts = records(&t);
    }
    d.device = d
        .status
        .as_ref()
        .and_then(|s| s.get("device"))
        .map(str::to_string)
        .or_else(|| Kv::parse(&d.name_line).get("dev").map(str::to_string));
    d
}

fn read_file(host: &Host, dir: &str, rel: &str, notes: &mut Notes) -> Option<String> {
    match host.read(&format!("{dir}/{rel}")) {
        Ok(t) => Some(t),
        Err(why) => {
            notes.add(format!("{dir}/{rel}"), why.describe());
            None
        }
    }
}

fn read_device(host: &Host, dir: &str, name_line: String, notes: &mut Notes) -> DebugfsDevice {
    let mut d = read_views(host, dir, name_line, notes);
    if let Some(t) = read_file(host, dir, "vm", notes) {
        d.files.push(("vm".into(), t));
    }
    // Crash dumps: the list names them; each file holds one.
    let cdir = format!("{dir}/crashdumps");
    let list = match host.read(&format!("{cdir}/list")) {
        Ok(t) => {
            d.files.push(("crashdumps/list".into(), t.clone()));
            kv::lines(&t)
        }
        Err(ReadErr::Missing) => Vec::new(),
        Err(why) => {
            notes.add(format!("{cdir}/list"), why.describe());
            Vec::new()
        }
    };
    let mut names: Vec<String> = list
        .iter()
        .filter_map(|k| k.words.first().cloned())
        .collect();
    if let Ok(files) = host.list(&cdir) {
        for f in files {
            if f.starts_with("crash-") && !names.contains(&f) {
                names.push(f);
            }
        }
    }
    names.sort_by(|a, b| crate::host::natural_cmp(a, b));
    for n in names {
        let path = format!("{cdir}/{n}");
        let mut c = match host.read(&path) {
            Ok(t) => {
                d.files.push((format!("crashdumps/{n}"), t.clone()));
                parse_crash(&n, &path, &t)
            }
            Err(why) => {
                if why != ReadErr::Missing {
                    notes.add(path.clone(), why.describe());
                }
                CrashDump {
                    name: n.clone(),
                    number: number_of(&n),
                    source: format!("{cdir}/list"),
                    ..CrashDump::default()
                }
            }
        };
        if let Some(l) = list.iter().find(|k| k.words.first() == Some(&n)) {
            apply_list_line(&mut c, l);
        }
        d.crashes.push(c);
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crash_dump_fields() {
        let t = "aigpu crash dump 3\nkernel=7.3.4 driver=0.1.0 uapi=1.0 device=aigpu0\ntime_wall=2026-11-29T02:13:07.123456Z time_mono_ns=123456789\nkind=page_fault\nprocess pid=4411 comm=python client=5\ncontext ctx=12 queue=1 prio=normal submitted=57 completed=56\nfault type=unmapped access=read va=0x7f0010000 offset=24 job=4711\njob id=4711 seqno=57 cmdbuf=0 va=0x10000000 size=64\nregisters:\n  IRQ_RAWSTAT=0x00010000 STATUS=0x00000002\nend\n";
        let c = parse_crash("crash-3", "/x/crash-3", t);
        assert_eq!(c.number, 3);
        assert_eq!(c.kind, "page_fault");
        assert_eq!((c.pid, c.comm.as_deref()), (Some(4411), Some("python")));
        assert_eq!(
            (c.ctx, c.queue, c.job, c.seqno),
            (Some(12), Some(1), Some(4711), Some(57))
        );
        assert_eq!(c.va.as_deref(), Some("0x7f0010000"));
        assert_eq!(
            c.evidence,
            "fault type=unmapped access=read va=0x7f0010000 offset=24 job=4711"
        );
        assert_eq!(
            c.registers.as_deref(),
            Some("IRQ_RAWSTAT=0x00010000 STATUS=0x00000002")
        );
        assert_eq!(c.time.map(|t| t.hms()), Some("02:13:07".into()));
    }
}
