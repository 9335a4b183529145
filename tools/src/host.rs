//! Where the tools read the machine from. Every external input is injectable so fixture tests
//! are exact: a root directory standing for `/` (sysfs, procfs, `/dev`, `/lib/modules`, debugfs
//! and `/etc` below it), a dmesg text, the previous boot's journal, `uname -r`, the clock. With
//! a root given the tools are *offline*: they read files only, run no commands and issue no
//! ioctls (a recorded tree has no devices to talk to).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::Wall;

/// The machine being looked at.
#[derive(Clone, Debug)]
pub struct Host {
    /// Stands for `/`.
    pub root: PathBuf,
    /// True when `root` was given: files only, no commands, no ioctls.
    pub offline: bool,
    /// `uname -r` override.
    pub uname_r: Option<String>,
    /// dmesg text file override.
    pub dmesg: Option<PathBuf>,
    /// Previous boot's kernel journal text file override.
    pub journal: Option<PathBuf>,
    /// The time printed and used for directory names.
    pub now: Wall,
}

impl Default for Host {
    fn default() -> Self {
        Host {
            root: PathBuf::from("/"),
            offline: false,
            uname_r: None,
            dmesg: None,
            journal: None,
            now: Wall::now(),
        }
    }
}

/// Why something could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadErr {
    /// It does not exist.
    Missing,
    /// Permission denied.
    Denied,
    /// Anything else, with the system's words.
    Other(String),
}

impl ReadErr {
    /// From an I/O error.
    pub fn from_io(e: &std::io::Error) -> ReadErr {
        match e.kind() {
            std::io::ErrorKind::NotFound => ReadErr::Missing,
            std::io::ErrorKind::PermissionDenied => ReadErr::Denied,
            _ => ReadErr::Other(e.to_string()),
        }
    }

    /// `missing`, `permission denied`, or the error text.
    pub fn describe(&self) -> String {
        match self {
            ReadErr::Missing => "missing".into(),
            ReadErr::Denied => "permission denied".into(),
            ReadErr::Other(s) => s.clone(),
        }
    }
}

/// Something the tool could not read or collect, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// What (a path as seen on the machine, or a command).
    pub what: String,
    /// Why.
    pub why: String,
}

/// The list of things that could not be read.
#[derive(Clone, Debug, Default)]
pub struct Notes(pub Vec<Note>);

impl Notes {
    /// Records one.
    pub fn add(&mut self, what: impl Into<String>, why: impl Into<String>) {
        let n = Note {
            what: what.into(),
            why: why.into(),
        };
        if !self.0.contains(&n) {
            self.0.push(n);
        }
    }
}

impl Host {
    /// The real path of machine path `abs` (e.g. `/sys/module/aigpu`).
    pub fn path(&self, abs: &str) -> PathBuf {
        self.root.join(abs.trim_start_matches('/'))
    }

    /// The machine path of a real path below the root (for messages: a fixture tree prints as
    /// the machine it stands for).
    pub fn show(&self, p: &Path) -> String {
        match p.strip_prefix(&self.root) {
            Ok(rel) => format!("/{}", rel.display()),
            Err(_) => p.display().to_string(),
        }
    }

    /// Reads machine file `abs` as text (lossy UTF-8).
    pub fn read(&self, abs: &str) -> Result<String, ReadErr> {
        read_text(&self.path(abs))
    }

    /// Reads a file, trimmed; `None` when it cannot be read.
    pub fn read_trim(&self, abs: &str) -> Option<String> {
        self.read(abs).ok().map(|s| s.trim().to_string())
    }

    /// True when machine path `abs` exists (without following a final symlink).
    pub fn exists(&self, abs: &str) -> bool {
        std::fs::symlink_metadata(self.path(abs)).is_ok()
    }

    /// Sorted entry names of machine directory `abs`.
    pub fn list(&self, abs: &str) -> Result<Vec<String>, ReadErr> {
        list_dir(&self.path(abs))
    }

    /// The running kernel release: the override, else `/proc/sys/kernel/osrelease`.
    pub fn uname_r(&self) -> Option<String> {
        self.uname_r
            .clone()
            .or_else(|| self.read_trim("/proc/sys/kernel/osrelease"))
            .filter(|s| !s.is_empty())
    }
}

/// Reads a file as text (lossy UTF-8), at most 64 MiB.
pub fn read_text(p: &Path) -> Result<String, ReadErr> {
    let f = std::fs::File::open(p).map_err(|e| ReadErr::from_io(&e))?;
    let mut buf = Vec::new();
    f.take(64 << 20)
        .read_to_end(&mut buf)
        .map_err(|e| ReadErr::from_io(&e))?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// Sorted entry names of a directory.
pub fn list_dir(p: &Path) -> Result<Vec<String>, ReadErr> {
    let rd = std::fs::read_dir(p).map_err(|e| ReadErr::from_io(&e))?;
    let mut v: Vec<String> = rd
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort_by(|a, b| natural_cmp(a, b));
    Ok(v)
}

/// Orders `renderD9` before `renderD10` and `crash-2` before `crash-10`.
pub fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    let split = |s: &str| {
        let n = s.len() - s.bytes().rev().take_while(|c| c.is_ascii_digit()).count();
        (s[..n].to_string(), s[n..].parse::<u64>().ok())
    };
    split(a).cmp(&split(b)).then_with(|| a.cmp(b))
}

/// Output of a command run with a time limit.
pub struct CmdOut {
    /// Exit status success.
    pub ok: bool,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// Runs `prog args` with no input, at most `limit`; Err says why it did not run or finish.
/// Kept by hand (std::process and a polling wait): the one timeout the tools need, where a
/// crate (wait-timeout, subprocess) would add a dependency for a dozen lines.
pub fn run(prog: &str, args: &[&str], limit: Duration) -> Result<CmdOut, String> {
    let mut child = Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => format!("{prog} is not installed"),
            _ => format!("cannot run {prog}: {e}"),
        })?;
    let mut out = child.stdout.take();
    let mut err = child.stderr.take();
    let t_out = std::thread::spawn(move || {
        let mut s = Vec::new();
        if let Some(o) = out.as_mut() {
            let _ = o.take(64 << 20).read_to_end(&mut s);
        }
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = Vec::new();
        if let Some(o) = err.as_mut() {
            let _ = o.take(1 << 20).read_to_end(&mut s);
        }
        s
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if start.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{prog} did not finish within {} s",
                    limit.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("waiting for {prog}: {e}")),
        }
    };
    let stdout = String::from_utf8_lossy(&t_out.join().unwrap_or_default()).into_owned();
    let stderr = String::from_utf8_lossy(&t_err.join().unwrap_or_default()).into_owned();
    Ok(CmdOut {
        ok: status.success(),
        stdout,
        stderr,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_order() {
        let mut v = vec!["renderD129", "card0", "renderD128", "crash-10", "crash-9"];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(
            v,
            vec!["card0", "crash-9", "crash-10", "renderD128", "renderD129"]
        );
    }

    #[test]
    fn paths_show_as_the_machine() {
        let h = Host {
            root: PathBuf::from("/tmp/fx"),
            ..Host::default()
        };
        assert_eq!(h.path("/sys/module"), PathBuf::from("/tmp/fx/sys/module"));
        assert_eq!(
            h.show(&h.path("/dev/dri/renderD128")),
            "/dev/dri/renderD128"
        );
    }
}
