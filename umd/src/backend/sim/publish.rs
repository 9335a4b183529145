//! Publishing a simulated device's debugfs views for tools outside the process
//! (docs/libumd.md, "Simulated devices seen from outside"; the files in docs/debugfs.md,
//! "Published simulator devices"): `<UMD_SIM_DIR or /tmp>/aigpu-sim-<uid>/<pid>/dev<N>/` holds
//! `name`, `status`, `queues`, `clients`, `contexts` (the texts of `debugfs.rs`) and `owner`
//! ([`Owner`]). The device thread calls [`Publisher::tick`] on every round (one atomic load
//! unless a period has passed); the files are rewritten when their text changed, each through a
//! temporary file and a rename. At device close the views are written once more and the
//! directory is removed.
//!
//! Nothing here fails a call: a refused per-user directory or a failed write is one WARN
//! record, after which the device is not published.

use super::gpu::{lock, Gpu};
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// How often a changed device is written at most.
const PERIOD_MS: u64 = 200;

/// The published files, in the order they are written (`owner` last: it dates the others).
pub const FILES: [&str; 6] = ["name", "status", "queues", "clients", "contexts", "owner"];

/// Why the simulator runs instead of the kernel device, once libumd's backend selection said
/// (`requested`, or the kernel probe's reason name: `NoKernelDevice::name`).
static BACKEND_WHY: OnceLock<&'static str> = OnceLock::new();

/// Off for this process whatever the environment says (`umd-smi --sim`: a tool's own simulator
/// is not a process to show, and the tools never write to the published directories).
static OFF: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The publisher that owns `dev<N>` now (a lost device re-created under the same index must not
/// be removed by its predecessor's close).
static CURRENT: [AtomicU64; 8] = [const { AtomicU64::new(0) }; 8];
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Records why the process runs on the simulator (called by the backend selection).
pub fn set_backend_why(why: &'static str) {
    let _ = BACKEND_WHY.set(why);
}

/// Turns publishing off for this process.
pub fn turn_off() {
    OFF.store(true, Ordering::Relaxed);
}

/// The `owner` file: one line of typed fields, `comm` last (it may hold spaces).
///
/// ```text
/// pid=4411 uid=1000 start_time=81234 backend=sim backend_why=requested device=sim0 updated_unix_ms=1764700000123 comm=python
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// The process.
    pub pid: u32,
    /// Its real uid.
    pub uid: u32,
    /// Its start time, clock ticks after boot (`/proc/<pid>/stat` field 22): a reused pid has
    /// another.
    pub start_time: u64,
    /// Why it runs on the simulator: `requested` (`UMD_BACKEND=sim`), the kernel probe's reason
    /// name (`module_not_loaded`, ...) when `auto` fell back, `unknown` when the simulator was
    /// opened without libumd's backend selection (the Rust API).
    pub backend_why: String,
    /// `sim<N>`.
    pub device: String,
    /// Wall time of the last update, ms since the Unix epoch.
    pub updated_unix_ms: u64,
    /// Its command name.
    pub comm: String,
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "pid={} uid={} start_time={} backend=sim backend_why={} device={} updated_unix_ms={} comm={}",
            self.pid,
            self.uid,
            self.start_time,
            self.backend_why,
            self.device,
            self.updated_unix_ms,
            self.comm
        )
    }
}

impl Owner {
    /// Parses an `owner` file; `None` when a field is missing or not a number.
    pub fn parse(text: &str) -> Option<Owner> {
        let line = text.lines().next()?;
        let (fields, comm) = line.split_once(" comm=")?;
        let get = |k: &str| {
            fields
                .split(' ')
                .find_map(|p| p.strip_prefix(k)?.strip_prefix('='))
        };
        let num = |k: &str| get(k)?.parse::<u64>().ok();
        if get("backend") != Some("sim") {
            return None;
        }
        Some(Owner {
            pid: u32::try_from(num("pid")?).ok()?,
            uid: u32::try_from(num("uid")?).ok()?,
            start_time: num("start_time")?,
            backend_why: get("backend_why")?.to_string(),
            device: get("device")?.to_string(),
            updated_unix_ms: num("updated_unix_ms")?,
            comm: comm.to_string(),
        })
    }
}

/// Field 22 (`starttime`) of a `/proc/<pid>/stat` text. The command name (field 2) is in
/// parentheses and may hold spaces and parentheses: the fields after it follow the last `)`.
pub fn start_time(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    // Field 3 (state) is the first after the name.
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// [`start_time`] of a process that still runs: `None` for a zombie (state `Z`, killed or
/// exited and not yet reaped) or a dead one (`X`).
pub fn running_start_time(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    match rest.split_whitespace().next()? {
        "Z" | "X" => None,
        _ => start_time(stat),
    }
}

/// The per-user directory below `base`.
pub fn user_dir(base: &Path, uid: u32) -> PathBuf {
    base.join(format!("aigpu-sim-{uid}"))
}

fn uid() -> u32 {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() }
}

fn pid() -> u32 {
    std::process::id()
}

/// Why publishing is off for a device.
#[derive(Debug, thiserror::Error)]
enum Refused {
    #[error("it is a symbolic link")]
    Symlink,
    #[error("it is not a directory")]
    NotDir,
    #[error("it belongs to uid {0}, not to this process's uid {1}")]
    Owner(u32, u32),
    #[error("it is writable by other users (mode {0:o})")]
    Mode(u32),
    #[error("{0}")]
    Io(std::io::Error),
}

/// Creates `dir` (mode 0700) or checks the existing one without following a symlink: a
/// directory owned by this uid that no one else may write.
fn own_dir(dir: &Path) -> Result<(), Refused> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(Refused::Io(e)),
    }
    let m = std::fs::symlink_metadata(dir).map_err(Refused::Io)?;
    if m.file_type().is_symlink() {
        return Err(Refused::Symlink);
    }
    if !m.is_dir() {
        return Err(Refused::NotDir);
    }
    if m.uid() != uid() {
        return Err(Refused::Owner(m.uid(), uid()));
    }
    if m.mode() & 0o022 != 0 {
        return Err(Refused::Mode(m.mode() & 0o7777));
    }
    Ok(())
}

/// Writes `text` to `dir/name` through `dir/.name.tmp` and a rename.
fn write_atomic(dir: &Path, name: &str, text: &str) -> std::io::Result<()> {
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(text.as_bytes())?;
    drop(f);
    std::fs::rename(&tmp, dir.join(name))
}

struct Written {
    /// The texts last written, in [`FILES`] order without `owner` (`None`: not yet).
    texts: [Option<String>; 5],
    /// A write failed: silent from then on.
    failed: bool,
    /// The device is open (a file is attached): its directory exists.
    open: bool,
}

/// One device's published directory.
pub struct Publisher {
    id: u64,
    index: u32,
    /// The process that publishes (a forked child is another and never writes here).
    pid: u32,
    start_time: u64,
    comm: String,
    dir: PathBuf,
    /// Monotonic ms (since `epoch`) before which [`Publisher::tick`] does nothing.
    next_ms: AtomicU64,
    epoch: Instant,
    written: Mutex<Written>,
}

impl Publisher {
    /// The publisher of device `index` below `base` (`UMD_SIM_DIR`, else `/tmp`), or `None`
    /// when publishing is off or refused (then with one WARN record).
    pub fn new(index: u32, base: Option<&Path>) -> Option<Publisher> {
        if OFF.load(Ordering::Relaxed) || index as usize >= CURRENT.len() {
            return None;
        }
        let base = base.unwrap_or(Path::new("/tmp"));
        let user = user_dir(base, uid());
        if let Err(why) = own_dir(&user) {
            tracing::warn!(
                event = "sim_publish_off",
                path = %user.display(),
                reason = %why,
                "simulated device {index} is not published for umd-smi: {} cannot be used ({why}); the device works as before",
                user.display()
            );
            return None;
        }
        sweep_once(&user);
        let pid_dir = user.join(pid().to_string());
        let dir = pid_dir.join(format!("dev{index}"));
        if let Err(e) = own_dir(&pid_dir).and_then(|_| own_dir(&dir)) {
            warn_write(&dir, &e.to_string());
            return None;
        }
        remember(&dir);
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let comm = std::fs::read_to_string("/proc/self/comm")
            .unwrap_or_default()
            .trim()
            .replace('\n', "?");
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        CURRENT[index as usize].store(id, Ordering::Release);
        Some(Publisher {
            id,
            index,
            pid: pid(),
            start_time: start_time(&stat).unwrap_or(0),
            comm,
            dir,
            next_ms: AtomicU64::new(0),
            epoch: Instant::now(),
            written: Mutex::new(Written {
                texts: Default::default(),
                failed: false,
                open: true,
            }),
        })
    }

    /// True in the process that created it, while it owns `dev<N>`.
    fn mine(&self) -> bool {
        pid() == self.pid && CURRENT[self.index as usize].load(Ordering::Acquire) == self.id
    }

    /// Publishes what changed, at most once per [`PERIOD_MS`] (the device thread's round).
    pub fn tick(&self, gpu: &Gpu) {
        let now = self.epoch.elapsed().as_millis() as u64;
        if now < self.next_ms.load(Ordering::Relaxed) {
            return;
        }
        self.next_ms.store(now + PERIOD_MS, Ordering::Relaxed);
        self.publish(gpu);
    }

    /// Writes every view whose text changed, then `owner`.
    fn publish(&self, gpu: &Gpu) {
        if !self.mine() {
            return;
        }
        let mut w = lock(&self.written);
        self.write(gpu, &mut w);
    }

    fn write(&self, gpu: &Gpu, w: &mut Written) {
        if w.failed || !w.open {
            return;
        }
        let texts = [
            format!("aigpu dev=sim{0} unique=sim{0}\n", self.index),
            gpu.debugfs_status(),
            gpu.debugfs_queues(),
            gpu.debugfs_clients(),
            gpu.debugfs_contexts(),
        ];
        let mut changed = false;
        for (i, t) in texts.into_iter().enumerate() {
            if w.texts[i].as_deref() != Some(t.as_str()) {
                if let Err(e) = write_atomic(&self.dir, FILES[i], &t) {
                    w.failed = true;
                    warn_write(&self.dir.join(FILES[i]), &e.to_string());
                    return;
                }
                w.texts[i] = Some(t);
                changed = true;
            }
        }
        if !changed {
            return;
        }
        let owner = Owner {
            pid: self.pid,
            uid: uid(),
            start_time: self.start_time,
            backend_why: BACKEND_WHY.get().copied().unwrap_or("unknown").into(),
            device: format!("sim{}", self.index),
            updated_unix_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            comm: self.comm.clone(),
        };
        if let Err(e) = write_atomic(&self.dir, "owner", &owner.to_string()) {
            w.failed = true;
            warn_write(&self.dir.join("owner"), &e.to_string());
        }
    }

    /// A file attached to a closed device: it is published again.
    pub fn reopen(&self) {
        if !self.mine() {
            return;
        }
        let mut w = lock(&self.written);
        if w.open || w.failed {
            return;
        }
        let pid_dir = self.dir.parent().unwrap_or(&self.dir);
        if let Err(e) = own_dir(pid_dir).and_then(|_| own_dir(&self.dir)) {
            w.failed = true;
            warn_write(&self.dir, &e.to_string());
            return;
        }
        w.texts = Default::default();
        w.open = true;
        self.next_ms.store(0, Ordering::Relaxed);
    }

    /// Device close (its last file went): the views once more, then the directory goes (and
    /// the pid's when empty).
    /// (A process that exits with the device open removes it at exit: [`remember`].)
    pub fn close(&self, gpu: &Gpu) {
        if !self.mine() {
            return;
        }
        let mut w = lock(&self.written);
        if !w.open {
            return;
        }
        self.write(gpu, &mut w);
        w.open = false;
        remove(&self.dir);
    }
}

/// Removes a device directory the process wrote (only the files it writes: nothing else is
/// followed or deleted), then the pid's directory when it is empty.
fn remove(dir: &Path) {
    for f in FILES {
        let _ = std::fs::remove_file(dir.join(f));
        let _ = std::fs::remove_file(dir.join(format!(".{f}.tmp")));
    }
    let _ = std::fs::remove_dir(dir);
    // Fails while another device of the process is still published there.
    if let Some(p) = dir.parent() {
        let _ = std::fs::remove_dir(p);
    }
}

/// The device directories this process published: (pid, dir), removed by [`at_exit`].
static PUBLISHED: Mutex<Vec<(u32, PathBuf)>> = Mutex::new(Vec::new());

/// Records a published directory, and registers [`at_exit`] once.
fn remember(dir: &Path) {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    lock(&PUBLISHED).push((pid(), dir.to_path_buf()));
    REGISTERED.call_once(|| crate::util::on_exit(at_exit));
}

/// At `exit()`: the directories this process still publishes go (a device left open is not a
/// device once the process is gone). A forked child inherits the handler and the list: it
/// removes only what its own pid published, never its parent's.
extern "C" fn at_exit(_status: libc::c_int, _arg: *mut libc::c_void) {
    let _ = std::panic::catch_unwind(|| {
        // Never wait at exit: a thread that held the lock is gone or still running.
        let Ok(v) = PUBLISHED.try_lock() else { return };
        let me = pid();
        for (_, dir) in v.iter().filter(|(p, _)| *p == me) {
            remove(dir);
        }
    });
}

/// Removes, once per process, the directories of this user's processes that are gone (killed,
/// or exited before [`at_exit`] ran): their `owner` names a pid that no longer runs with that
/// start time. A directory without `owner` is being created and stays.
fn sweep_once(user: &Path) {
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(|| {
        let Ok(pids) = std::fs::read_dir(user) else {
            return;
        };
        for e in pids.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(devs) = std::fs::read_dir(e.path()) else {
                continue;
            };
            for d in devs.flatten() {
                let dir = d.path();
                let Some(o) = std::fs::read_to_string(dir.join("owner"))
                    .ok()
                    .and_then(|t| Owner::parse(&t))
                else {
                    continue;
                };
                let now = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .ok()
                    .and_then(|s| running_start_time(&s));
                if o.pid != pid || now != Some(o.start_time) {
                    remove(&dir);
                }
            }
        }
    });
}

/// The one WARN of a device whose files cannot be written.
fn warn_write(path: &Path, why: &str) {
    tracing::warn!(
        event = "sim_publish_off",
        path = %path.display(),
        reason = why,
        "the simulated device is no longer published for umd-smi: writing {} failed ({why}); the device works as before",
        path.display()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_round_trip() {
        let o = Owner {
            pid: 4411,
            uid: 1000,
            start_time: 81234,
            backend_why: "requested".into(),
            device: "sim0".into(),
            updated_unix_ms: 1_764_700_000_123,
            comm: "my job".into(),
        };
        let t = o.to_string();
        assert_eq!(t, "pid=4411 uid=1000 start_time=81234 backend=sim backend_why=requested device=sim0 updated_unix_ms=1764700000123 comm=my job\n");
        assert_eq!(Owner::parse(&t), Some(o));
        assert_eq!(Owner::parse("pid=x uid=1 comm=a"), None);
    }

    #[test]
    fn start_time_after_a_name_with_parentheses() {
        let stat = "77 (a) b) S 1 77 77 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(start_time(stat), Some(987654));
        assert_eq!(start_time("77 (a) S 1"), None);
        assert_eq!(running_start_time(stat), Some(987654));
        assert_eq!(running_start_time(&stat.replace(" S ", " Z ")), None);
    }
}
