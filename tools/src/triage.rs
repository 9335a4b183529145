//! `umd-smi triage`: collect the scene once (docs/tools.md, "What the report holds": versions, kernel log filtered to the
//! driver, modules, device nodes and permissions, the processes holding the device, the
//! driver's own logs), write it to one timestamped directory and a `.tar.gz`, and end with the
//! layered verdict. Runs unprivileged with what it can read and says what it could not; never
//! uses the network.

use crate::dmesg::{self, KernelLog};
use crate::host::{self, Host, Notes};
use crate::modinfo::{self, ModInfo};
use crate::smi::{self, KernelScan, SmiView};
use crate::system::{self, Holder, Ids};
use crate::umdlog::{self, LogSet};
use crate::verdict::{self, Verdict};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Everything collected.
pub struct Snapshot {
    /// The machine.
    pub host: Host,
    /// What could not be read.
    pub notes: Notes,
    /// `uname -r`.
    pub uname_r: Option<String>,
    /// `/etc/os-release` `PRETTY_NAME`.
    pub os: Option<String>,
    /// `/proc/version`.
    pub proc_version: Option<String>,
    /// `/proc/cmdline`.
    pub cmdline: Option<String>,
    /// `/proc/modules`.
    pub proc_modules: Option<String>,
    /// This process: uid, gid, groups (for permission evidence).
    pub identity: String,
    /// The kernel side.
    pub ks: KernelScan,
    /// The device view built from it.
    pub view: SmiView,
    /// `.modinfo` of aigpu.ko for the running kernel, or why there is none.
    pub modinfo: Result<ModInfo, String>,
    /// Current boot's kernel log.
    pub dmesg: Option<KernelLog>,
    /// Previous boot's kernel log.
    pub journal: Option<KernelLog>,
    /// Processes holding a node.
    pub holders: Vec<Holder>,
    /// The variables that steer libumd.
    pub env: Vec<(String, String)>,
    /// libumd log directories looked at.
    pub log_dirs: Vec<PathBuf>,
    /// libumd's log records.
    pub logs: LogSet,
    /// `lspci -k` (live only, where installed).
    pub lspci: Option<String>,
    /// Pending aigpu devcoredumps (collected, not dismissed).
    pub devcoredumps: Vec<crate::devcoredump::PendingDump>,
}

/// What to collect from where.
pub struct Options {
    /// The machine.
    pub host: Host,
    /// libumd log directories (empty: libumd's defaults from the environment).
    pub log_dirs: Vec<PathBuf>,
    /// The environment to report (injected in tests).
    pub env: Vec<(String, String)>,
    /// Bytes of libumd logs to read at most, newest first (`umdlog::discover_within`).
    pub log_budget: u64,
}

fn identity() -> String {
    // SAFETY: getuid/getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut groups = vec![0 as libc::gid_t; 256];
    // SAFETY: the buffer holds 256 entries, as passed.
    let n = unsafe { libc::getgroups(groups.len() as i32, groups.as_mut_ptr()) };
    groups.truncate(n.max(0) as usize);
    format!(
        "uid {uid} gid {gid} groups {}",
        groups
            .iter()
            .map(|g| g.to_string())
            .collect::<Vec<_>>()
            .join(",")
    )
}

/// Collects the snapshot.
pub fn collect(opts: Options) -> Snapshot {
    let host = opts.host;
    let mut notes = Notes::default();
    let ids = Ids::read(&host);
    let uname_r = host.uname_r();
    if uname_r.is_none() {
        notes.add(
            "/proc/sys/kernel/osrelease",
            "not readable (kernel release unknown)",
        );
    }
    let os = host.read("/etc/os-release").ok().and_then(|t| {
        t.lines()
            .find_map(|l| l.strip_prefix("PRETTY_NAME="))
            .map(crate::kv::unquote)
    });
    let ks = smi::scan(&host, &ids, &mut notes);
    let view = smi::kernel_view(&host, &ks, Notes::default());
    let found = modinfo::find(&host, uname_r.as_deref());
    let modinfo = match found.first() {
        Some(p) => modinfo::read(&host, p),
        None => Err(match &uname_r {
            Some(r) => format!("no aigpu.ko under /lib/modules/{r} (nor /lib/modules/aigpu.ko)"),
            None => "kernel release unknown".into(),
        }),
    };
    let dmesg = dmesg::read_dmesg(&host, &mut notes);
    let journal = dmesg::read_journal(&host, &mut notes);
    let holders = system::holders(&host, &mut notes);
    let devcoredumps = crate::devcoredump::scan(&host, &mut notes);
    let env = system::umd_env(opts.env.iter().cloned());
    let log_dirs = if opts.log_dirs.is_empty() {
        let get = |k: &str| {
            opts.env
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
        };
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        let cands = umdlog::default_dirs(&get, uid);
        let existing: Vec<PathBuf> = cands.iter().filter(|d| d.is_dir()).cloned().collect();
        if existing.is_empty() {
            notes.add(
                "libumd log directory",
                format!(
                    "none of {} exists (no libumd process logged under this account, or UMD_LOG_DIR pointed elsewhere: give --log-dir)",
                    cands
                        .iter()
                        .map(|d| d.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
        }
        existing
    } else {
        opts.log_dirs
    };
    let logs = LogSet::read(
        umdlog::discover_within(&log_dirs, opts.log_budget, &mut notes),
        &mut notes,
    );
    let lspci = if host.offline {
        None
    } else {
        match host::run("lspci", &["-k"], Duration::from_secs(10)) {
            Ok(o) if o.ok => Some(o.stdout),
            Ok(o) => {
                notes.add("lspci -k", o.stderr.trim().to_string());
                None
            }
            Err(e) => {
                notes.add("lspci -k", e);
                None
            }
        }
    };
    // (A failure is already noted by module_state.)
    let proc_modules = host.read("/proc/modules").ok();
    Snapshot {
        uname_r,
        os,
        proc_version: host.read_trim("/proc/version"),
        cmdline: host.read_trim("/proc/cmdline"),
        proc_modules,
        identity: identity(),
        ks,
        view,
        modinfo,
        dmesg,
        journal,
        holders,
        env,
        log_dirs,
        logs,
        lspci,
        devcoredumps,
        notes,
        host,
    }
}

/// What `run` produced.
pub struct Report {
    /// The snapshot.
    pub snap: Snapshot,
    /// The verdict.
    pub verdict: Verdict,
    /// The directory written.
    pub dir: Option<PathBuf>,
    /// The archive written.
    pub archive: Option<PathBuf>,
    /// Why the report could not be written, if so.
    pub write_error: Option<String>,
}

/// Collects, judges and writes the report into `out`.
pub fn run(opts: Options, out: &Path, archive: bool) -> Report {
    let snap = collect(opts);
    let verdict = verdict::verdict(&snap);
    let mut rep = Report {
        snap,
        verdict,
        dir: None,
        archive: None,
        write_error: None,
    };
    match write_dir(&rep.snap, &rep.verdict, out) {
        Ok(dir) => {
            if archive {
                match write_archive(&dir) {
                    Ok(a) => rep.archive = Some(a),
                    Err(e) => rep.write_error = Some(format!("archive: {e}")),
                }
            }
            rep.dir = Some(dir);
        }
        Err(e) => rep.write_error = Some(e),
    }
    rep
}

fn put(dir: &Path, rel: &str, text: &str) -> Result<(), String> {
    let p = dir.join(rel);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))
}

fn or_not_read(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or("(not read)")
}

/// The files of the report, in the order summary.txt lists them: (name, contents).
pub fn files(s: &Snapshot, v: &Verdict) -> Vec<(String, String)> {
    let mut f: Vec<(String, String)> = Vec::new();
    let mut system = format!(
        "umd-smi {} triage at {}\nkernel release: {}\nos: {}\n/proc/version: {}\n/proc/cmdline: {}\nthis process: {}\nlibumd UAPI (built in): {}.{} (kernel minor >= {})\n",
        env!("CARGO_PKG_VERSION"),
        s.host.now.rfc3339(),
        or_not_read(&s.uname_r),
        or_not_read(&s.os),
        or_not_read(&s.proc_version),
        or_not_read(&s.cmdline),
        s.identity,
        uapi::UAPI_MAJOR,
        uapi::UAPI_MINOR,
        uapi::MIN_KERNEL_MINOR
    );
    if s.host.offline {
        system += &format!(
            "offline: read from a recorded tree at {} (no commands, no ioctls)\n",
            s.host.root.display()
        );
    }
    f.push(("system.txt".into(), system));
    for d in &s.devcoredumps {
        f.push((format!("devcoredump/{}.txt", d.name), d.dump.text.clone()));
    }
    let m = &s.ks.module;
    let mut module = format!(
        "/sys/module/aigpu: {}\n",
        if m.loaded {
            "present (loaded)"
        } else {
            "missing (not loaded)"
        }
    );
    for (k, val) in [
        ("initstate", &m.initstate),
        ("version", &m.version),
        ("srcversion", &m.srcversion),
        ("taint", &m.taint),
        ("refcnt", &m.refcnt),
    ] {
        if let Some(x) = val {
            module += &format!("{k}: {x}\n");
        }
    }
    for (k, val) in &m.params {
        module += &format!("parameters/{k}: {val}\n");
    }
    module += &format!(
        "/proc/modules: {}\n",
        m.proc_modules.as_deref().unwrap_or("(no aigpu line)")
    );
    f.push(("module.txt".into(), module));
    if let Some(pm) = &s.proc_modules {
        f.push(("lsmod.txt".into(), system::lsmod(pm)));
    }
    f.push((
        "modinfo.txt".into(),
        match &s.modinfo {
            Ok(mi) => mi.text(),
            Err(e) => format!("{e}\n"),
        },
    ));
    f.push((
        "dev-dri.txt".into(),
        match &s.ks.nodes {
            Ok(v) if v.is_empty() => "/dev/dri is empty\n".into(),
            Ok(v) => v.iter().map(|n| n.ls_line() + "\n").collect(),
            Err(e) => format!("/dev/dri: {}\n", e.describe()),
        },
    ));
    f.push((
        "sys-class-drm.txt".into(),
        match &s.ks.drm {
            Ok(v) if v.is_empty() => "no card or renderD entries\n".into(),
            Ok(v) => v
                .iter()
                .map(|e| {
                    format!(
                        "{} device={} dev={} link={}\n",
                        e.name,
                        e.device.as_deref().unwrap_or("-"),
                        e.dev.as_deref().unwrap_or("-"),
                        e.link.as_deref().unwrap_or("-")
                    )
                })
                .collect(),
            Err(e) => format!("/sys/class/drm: {}\n", e.describe()),
        },
    ));
    f.push((
        "probe.txt".into(),
        match &s.ks.probe {
            Ok(nodes) => nodes
                .iter()
                .map(|n| format!("libumd can use {}\n", s.host.show(n)))
                .collect(),
            Err(why) => format!("libumd probe: {} [{}]\n", why.describe(), why.code().name()),
        },
    ));
    for d in s.ks.debugfs.devices() {
        let base = d.dir.rsplit('/').next().unwrap_or("dev");
        for (rel, text) in &d.files {
            f.push((format!("debugfs/dri-{base}/{rel}"), text.clone()));
        }
    }
    if let Some(w) = s.ks.debugfs.why_not() {
        f.push(("debugfs/NOT-READ.txt".into(), format!("{w}\n")));
    }
    // The simulator devices other processes publish, as the kernel's debugfs is kept.
    for d in &s.ks.sims.live {
        let base = format!("pid{}-{}", d.owner.pid, d.owner.device);
        for (rel, text) in &d.views.files {
            f.push((format!("sim/{base}/{rel}"), text.clone()));
        }
    }
    if !s.ks.sims.stale.is_empty() {
        f.push((
            "sim/STALE.txt".into(),
            s.ks.sims
                .stale
                .iter()
                .map(|x| {
                    format!(
                        "dir={} pid={} why={} comm={}\n",
                        x.dir,
                        x.pid,
                        x.why,
                        x.comm.as_deref().unwrap_or("?")
                    )
                })
                .collect(),
        ));
    }
    match &s.dmesg {
        Some(l) => f.push((
            "dmesg-aigpu.txt".into(),
            lines(&dmesg::filter_for(l, &log_pids(s))),
        )),
        None => f.push((
            "dmesg-aigpu.txt".into(),
            "(not read: see not-read.txt)\n".into(),
        )),
    }
    if let Some(l) = &s.journal {
        f.push((
            "journal-previous-boot-aigpu.txt".into(),
            lines(&dmesg::filter_for(l, &log_pids(s))),
        ));
    }
    f.push((
        "processes.txt".into(),
        if s.holders.is_empty() {
            "no process (that this user may inspect) holds a /dev/dri node\n".into()
        } else {
            s.holders
                .iter()
                .map(|h| {
                    format!(
                        "pid {} comm {} uid {} fd {} -> {}\n",
                        h.pid,
                        h.comm,
                        h.uid.map(|u| u.to_string()).unwrap_or_else(|| "?".into()),
                        h.fd,
                        h.target
                    )
                })
                .collect()
        },
    ));
    f.push(("environment.txt".into(), environment_text(s)));
    f.push(("umd-smi.txt".into(), smi::render_text(&s.view)));
    f.push((
        "umd-smi.json".into(),
        format!("{:#}\n", smi::render_json(&s.view)),
    ));
    if !s.logs.files.is_empty() {
        let a = &umdlog::analyze::leaks(&s.logs);
        let lj = &umdlog::analyze::last_job(&s.logs);
        f.push((
            "umd-log-report.txt".into(),
            format!(
                "{}\n{}\n{}",
                umdlog::analyze::errors_text(&s.logs),
                umdlog::analyze::last_job_text(&s.logs, lj),
                umdlog::analyze::leaks_text(&s.logs, a)
            ),
        ));
    }
    if let Some(l) = &s.lspci {
        f.push(("lspci-k.txt".into(), l.clone()));
    }
    f.push(("not-read.txt".into(), not_read_text(&s.notes)));
    f.push((
        "verdict.json".into(),
        format!("{:#}\n", verdict::render_json(v)),
    ));
    f
}

/// The processes whose libumd logs were read (their kernel reports belong to the snapshot).
fn log_pids(s: &Snapshot) -> Vec<u32> {
    let mut v: Vec<u32> = s.logs.recs.iter().filter_map(|r| r.pid).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// `environment.txt`: the variables of triage's own shell, then each logged process's own
/// (from its `process start` record: what it ran with, which is what matters).
fn environment_text(s: &Snapshot) -> String {
    let mut out = String::from("this shell (umd-smi triage):\n");
    if s.env.is_empty() {
        out += "  no UMD_*, AIGPU_* or loader variables set\n";
    }
    for (k, v) in &s.env {
        out += &format!("  {k}={v}\n");
    }
    for p in crate::umdlog::facts::processes(&s.logs) {
        if let Some((crate::umdlog::facts::Fact::Start { env, .. }, r)) = p.start() {
            out += &format!(
                "pid {} (its process start record, {}):\n",
                p.pid.map(|x| x.to_string()).unwrap_or_else(|| "?".into()),
                r.src
            );
            if env.is_empty() {
                out += "  no UMD_* variables set\n";
            }
            for (k, v) in env {
                out += &format!("  {k}={v}\n");
            }
        }
    }
    out
}

fn lines(v: &[String]) -> String {
    if v.is_empty() {
        return "(no line concerns the driver)\n".into();
    }
    v.iter().map(|l| format!("{l}\n")).collect()
}

/// The "could not read" list.
pub fn not_read_text(n: &Notes) -> String {
    if n.0.is_empty() {
        return "everything was readable\n".into();
    }
    n.0.iter()
        .map(|x| format!("{}: {}\n", x.what, x.why))
        .collect()
}

fn write_dir(s: &Snapshot, v: &Verdict, out: &Path) -> Result<PathBuf, String> {
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let base = format!("aigpu-triage-{}", s.host.now.compact());
    let mut dir = out.join(&base);
    let mut n = 1;
    while dir.exists() || PathBuf::from(format!("{}.tar.gz", dir.display())).exists() {
        n += 1;
        dir = out.join(format!("{base}-{n}"));
    }
    std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let files = files(s, v);
    let mut index = String::new();
    for (name, text) in &files {
        put(&dir, name, text)?;
        index += &format!("  {name}\n");
    }
    // The libumd logs and black boxes, as they are (the tail of a very large one).
    let mut copied = String::new();
    for lf in &s.logs.files {
        let dst = dir.join("umd-logs").join(&lf.name);
        match copy_tail(&lf.path, &dst, 32 << 20) {
            Ok(true) => copied += &format!("  umd-logs/{} (last 32 MiB)\n", lf.name),
            Ok(false) => copied += &format!("  umd-logs/{}\n", lf.name),
            Err(e) => copied += &format!("  umd-logs/{}: not copied: {e}\n", lf.name),
        }
    }
    let summary = format!(
        "aigpu triage {}\n\n{}\nall findings:\n{}\ncould not read:\n{}\nfiles:\n  summary.txt\n{index}{copied}",
        s.host.now.rfc3339(),
        verdict::render_text(v),
        indent(&verdict::render_all(v)),
        indent(&not_read_text(&s.notes)),
    );
    put(&dir, "summary.txt", &summary)?;
    Ok(dir)
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("  {l}\n")).collect()
}

/// Copies `src` to `dst`, only the last `max` bytes of a larger file; true when cut.
fn copy_tail(src: &Path, dst: &Path, max: u64) -> Result<bool, String> {
    use std::io::{Seek, SeekFrom};
    if let Some(p) = dst.parent() {
        std::fs::create_dir_all(p).map_err(|e| e.to_string())?;
    }
    let mut f = std::fs::File::open(src).map_err(|e| e.to_string())?;
    let len = f.metadata().map_err(|e| e.to_string())?.len();
    let cut = len > max;
    if cut {
        f.seek(SeekFrom::Start(len - max))
            .map_err(|e| e.to_string())?;
    }
    let mut o = std::fs::File::create(dst).map_err(|e| e.to_string())?;
    std::io::copy(&mut std::io::Read::take(f, max), &mut o).map_err(|e| e.to_string())?;
    Ok(cut)
}

/// Writes `<dir>.tar.gz` holding `<dir name>/...`.
pub fn write_archive(dir: &Path) -> Result<PathBuf, String> {
    let name = dir
        .file_name()
        .ok_or("report directory has no name")?
        .to_string_lossy()
        .into_owned();
    let path = dir.with_file_name(format!("{name}.tar.gz"));
    let f = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let gz = flate2::write::GzEncoder::new(f, flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    tar.mode(tar::HeaderMode::Deterministic);
    tar.append_dir_all(&name, dir)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let gz = tar
        .into_inner()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    gz.finish()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// The screen output: where the report is, what could not be read, the verdict.
pub fn render_screen(r: &Report) -> String {
    let mut out = String::new();
    match (&r.dir, &r.archive) {
        (Some(d), Some(a)) => {
            out += &format!(
                "umd-smi triage: report in {}/ and {}\n",
                d.display(),
                a.display()
            )
        }
        (Some(d), None) => out += &format!("umd-smi triage: report in {}/\n", d.display()),
        _ => {}
    }
    if let Some(e) = &r.write_error {
        out += &format!("umd-smi triage: could not write the report: {e}\n");
    }
    let n = &r.snap.notes;
    if n.0.is_empty() {
        out += "everything was readable\n";
    } else {
        out += &format!("could not read ({}):\n", n.0.len());
        for x in &n.0 {
            out += &format!("  {}: {}\n", x.what, x.why);
        }
    }
    out += &verdict::render_text(&r.verdict);
    out
}

/// The screen output for machines.
pub fn render_json(r: &Report) -> serde_json::Value {
    json!({
        "tool": "umd-smi triage",
        "time": r.snap.host.now.rfc3339(),
        "report_dir": r.dir.as_ref().map(|d| d.display().to_string()),
        "archive": r.archive.as_ref().map(|d| d.display().to_string()),
        "write_error": r.write_error,
        "not_read": r.snap.notes.0.iter().map(|n| json!({"what": n.what, "why": n.why})).collect::<Vec<_>>(),
        "verdict": verdict::render_json(&r.verdict),
    })
}
