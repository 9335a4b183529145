//! Reading libumd's log files: the parser for both record formats (docs/logging.md) and the
//! discovery and ordering of files across rotation.
//!
//! Text, one record per line, fields in this fixed order:
//!
//! ```text
//! <wall UTC RFC3339 µs> <mono ns> <LEVEL> tid=<n> <module> <function|-> <file:line|-> ctx=<id|-> code=<name|-> "<message>" k=v k=v...
//! ```
//!
//! The message is a JSON-quoted string; a value is JSON-quoted when it needs to be. JSON lines
//! carry the same keys: `ts mono_ns level tid module function file line ctx code msg fields`.
//!
//! Files in a log directory: `umd-<pid>.log` (the active file), `umd-<pid>.<n>.log` (rotated;
//! a larger `n` is older) and `umd-blackbox-<pid>-<time>.log` (the emergency ring written on
//! device loss, fatal signals or request: `#` comment lines, then text records, a record longer
//! than the ring's slot cut with `…`).

pub mod analyze;
pub mod facts;
pub mod symbolize;

use crate::host::Notes;
use crate::kv;
use crate::util::Wall;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Record severity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// ERROR.
    Error,
    /// WARN.
    Warn,
    /// INFO.
    Info,
    /// DEBUG.
    Debug,
    /// TRACE.
    Trace,
}

impl Level {
    /// From the printed name.
    pub fn parse(s: &str) -> Option<Level> {
        Some(match s {
            "ERROR" => Level::Error,
            "WARN" => Level::Warn,
            "INFO" => Level::Info,
            "DEBUG" => Level::Debug,
            "TRACE" => Level::Trace,
            _ => return None,
        })
    }

    /// The printed name.
    pub fn name(&self) -> &'static str {
        match self {
            Level::Error => "ERROR",
            Level::Warn => "WARN",
            Level::Info => "INFO",
            Level::Debug => "DEBUG",
            Level::Trace => "TRACE",
        }
    }
}

/// Where a record was read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Src {
    /// File name (no directory).
    pub file: String,
    /// 1-based line number.
    pub line: usize,
}

impl std::fmt::Display for Src {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// One log record.
#[derive(Clone, Debug, PartialEq)]
pub struct Rec {
    /// Wall time.
    pub wall: Wall,
    /// CLOCK_MONOTONIC, ns.
    pub mono: u64,
    /// Severity.
    pub level: Level,
    /// OS thread id.
    pub tid: u64,
    /// Module (tracing target).
    pub module: String,
    /// The API function, when the call site named one.
    pub function: Option<String>,
    /// Source file of the call site.
    pub file: Option<String>,
    /// Source line of the call site.
    pub line: Option<u32>,
    /// Context id.
    pub ctx: Option<String>,
    /// Result code name.
    pub code: Option<String>,
    /// Message.
    pub msg: String,
    /// The call site's key=value parameters.
    pub fields: Vec<(String, Value)>,
    /// Process id (from the file name).
    pub pid: Option<u32>,
    /// Where it was read.
    pub src: Src,
    /// The line as read.
    pub raw: String,
}

impl Rec {
    /// A field's value.
    pub fn field(&self, k: &str) -> Option<&Value> {
        self.fields.iter().find(|(n, _)| n == k).map(|(_, v)| v)
    }

    /// A field as text (strings unquoted, numbers printed).
    pub fn field_str(&self, k: &str) -> Option<String> {
        self.field(k).map(value_text)
    }

    /// A field as an unsigned number (a decimal or `0x` string is accepted).
    pub fn field_u64(&self, k: &str) -> Option<u64> {
        match self.field(k)? {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => kv::parse_num(s),
            _ => None,
        }
    }

    /// The context id as a number.
    pub fn ctx_u64(&self) -> Option<u64> {
        self.ctx.as_deref().and_then(kv::parse_num)
    }

    /// `function` when named, else `module file:line`.
    pub fn site(&self) -> String {
        let fl = match (&self.file, self.line) {
            (Some(f), Some(l)) => format!("{f}:{l}"),
            (Some(f), None) => f.clone(),
            _ => "-".into(),
        };
        match &self.function {
            Some(func) => format!("{func} ({} {fl})", self.module),
            None => format!("{} {fl}", self.module),
        }
    }

    /// `k=v` for every field, as in the text format.
    pub fn fields_text(&self) -> String {
        self.fields
            .iter()
            .map(|(k, v)| format!("{k}={}", value_token(v)))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// A value as plain text.
pub fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// A value as a text-format token (quoted when it needs to be).
pub fn value_token(v: &Value) -> String {
    match v {
        Value::String(s)
            if s.is_empty()
                || s == "-"
                || s.bytes()
                    .any(|b| b <= b' ' || b == b'"' || b == b'=' || b == b'\\' || b == 0x7f) =>
        {
            Value::String(s.clone()).to_string()
        }
        other => value_text(other),
    }
}

/// Why a line is not a record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadLine(pub String);

fn typed(v: &str) -> Value {
    if v.starts_with('"') {
        return Value::String(kv::unquote(v));
    }
    match v {
        "true" => return Value::Bool(true),
        "false" => return Value::Bool(false),
        _ => {}
    }
    let n = kv::scalar(v);
    if n.is_number() {
        return n;
    }
    if v.contains(['.', 'e', 'E']) && !v.starts_with("0x") {
        if let Ok(f) = v.parse::<f64>() {
            if let Some(x) = serde_json::Number::from_f64(f) {
                return Value::Number(x);
            }
        }
    }
    Value::String(v.to_string())
}

fn opt(s: &str) -> Option<String> {
    let u = kv::unquote(s);
    if s == "-" {
        None
    } else {
        Some(u)
    }
}

/// Parses one text record.
pub fn parse_text(line: &str) -> Result<Rec, BadLine> {
    let t = kv::tokens(line);
    if t.len() < 9 {
        return Err(BadLine(format!(
            "{} fields, a record has at least 9",
            t.len()
        )));
    }
    let wall = Wall::parse(&t[0]).ok_or_else(|| BadLine(format!("bad wall time {:?}", t[0])))?;
    let mono = t[1]
        .parse()
        .map_err(|_| BadLine(format!("bad monotonic time {:?}", t[1])))?;
    let level = Level::parse(&t[2]).ok_or_else(|| BadLine(format!("bad level {:?}", t[2])))?;
    let tid = t[3]
        .strip_prefix("tid=")
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| BadLine(format!("bad tid {:?}", t[3])))?;
    let (file, lno) = if t[6] == "-" {
        (None, None)
    } else {
        match t[6].rsplit_once(':') {
            Some((f, l)) if l.parse::<u32>().is_ok() => (Some(kv::unquote(f)), l.parse().ok()),
            _ => (Some(kv::unquote(&t[6])), None),
        }
    };
    let ctx = t[7]
        .strip_prefix("ctx=")
        .ok_or_else(|| BadLine(format!("expected ctx=, found {:?}", t[7])))?;
    let code = t[8]
        .strip_prefix("code=")
        .ok_or_else(|| BadLine(format!("expected code=, found {:?}", t[8])))?;
    let mut msg = String::new();
    let mut fields = Vec::new();
    for (i, tok) in t[9..].iter().enumerate() {
        if i == 0 && tok.starts_with('"') {
            msg = kv::unquote(tok);
            if msg == *tok {
                // An unterminated quote (a black-box line cut with `…`).
                msg = tok.trim_start_matches('"').to_string();
            }
            continue;
        }
        match tok.split_once('=') {
            Some((k, v)) if !k.is_empty() && !k.starts_with('"') => {
                fields.push((k.to_string(), typed(v)))
            }
            _ => {
                // A message written without quotes: its words come before the first pair.
                if fields.is_empty() {
                    if !msg.is_empty() {
                        msg.push(' ');
                    }
                    msg.push_str(tok);
                }
            }
        }
    }
    Ok(Rec {
        wall,
        mono,
        level,
        tid,
        module: t[4].clone(),
        function: opt(&t[5]),
        file,
        line: lno,
        ctx: opt(ctx),
        code: opt(code),
        msg,
        fields,
        pid: None,
        src: Src {
            file: String::new(),
            line: 0,
        },
        raw: line.to_string(),
    })
}

/// Parses one JSON record.
pub fn parse_json(line: &str) -> Result<Rec, BadLine> {
    let v: Value = serde_json::from_str(line).map_err(|e| BadLine(format!("bad JSON: {e}")))?;
    let o = v
        .as_object()
        .ok_or_else(|| BadLine("not a JSON object".into()))?;
    let s = |k: &str| -> Option<String> {
        match o.get(k) {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Null) | None => None,
            Some(other) => Some(other.to_string()),
        }
    };
    let wall = s("ts")
        .and_then(|t| Wall::parse(&t))
        .ok_or_else(|| BadLine("missing or bad \"ts\"".into()))?;
    let level = s("level")
        .and_then(|l| Level::parse(&l))
        .ok_or_else(|| BadLine("missing or bad \"level\"".into()))?;
    let fields = match o.get("fields") {
        Some(Value::Object(m)) => m.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        _ => Vec::new(),
    };
    Ok(Rec {
        wall,
        mono: o.get("mono_ns").and_then(Value::as_u64).unwrap_or(0),
        level,
        tid: o.get("tid").and_then(Value::as_u64).unwrap_or(0),
        module: s("module").unwrap_or_else(|| "-".into()),
        function: s("function"),
        file: s("file"),
        line: o.get("line").and_then(Value::as_u64).map(|l| l as u32),
        ctx: s("ctx"),
        code: s("code"),
        msg: s("msg").unwrap_or_default(),
        fields,
        pid: None,
        src: Src {
            file: String::new(),
            line: 0,
        },
        raw: line.to_string(),
    })
}

/// Parses a line in either format.
pub fn parse_line(line: &str) -> Result<Rec, BadLine> {
    if line.trim_start().starts_with('{') {
        parse_json(line.trim())
    } else {
        parse_text(line)
    }
}

/// A log file found on disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogFile {
    /// Path.
    pub path: PathBuf,
    /// File name.
    pub name: String,
    /// Process id from the name.
    pub pid: Option<u32>,
    /// Rotation index (0: the active file; larger is older).
    pub rot: u32,
    /// An emergency-ring dump.
    pub blackbox: bool,
}

/// Classifies a file name: `umd-<pid>.log`, `umd-<pid>.<n>.log`, `umd-blackbox-<pid>-<t>.log`.
pub fn classify(path: &Path) -> Option<LogFile> {
    let name = path.file_name()?.to_str()?.to_string();
    let stem = name.strip_suffix(".log")?;
    if let Some(rest) = stem.strip_prefix("umd-blackbox-") {
        let pid = rest.split('-').next().and_then(|p| p.parse().ok());
        return Some(LogFile {
            path: path.to_path_buf(),
            name,
            pid,
            rot: 0,
            blackbox: true,
        });
    }
    let rest = stem.strip_prefix("umd-")?;
    let (pid, rot) = match rest.split_once('.') {
        Some((p, r)) => (p.parse().ok()?, r.parse().ok()?),
        None => (rest.parse().ok()?, 0),
    };
    Some(LogFile {
        path: path.to_path_buf(),
        name,
        pid: Some(pid),
        rot,
        blackbox: false,
    })
}

/// The default log directories libumd writes to when `UMD_LOG_DIR` is unset, in its order:
/// `$XDG_STATE_HOME/aigpu`, `$HOME/.local/state/aigpu`, `/tmp/aigpu-<uid>`.
pub fn default_dirs(env: &dyn Fn(&str) -> Option<String>, uid: u32) -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Some(d) = env("UMD_LOG_DIR").filter(|s| !s.trim().is_empty()) {
        v.push(PathBuf::from(d));
        return v;
    }
    if let Some(x) = env("XDG_STATE_HOME").filter(|s| !s.is_empty()) {
        v.push(Path::new(&x).join("aigpu"));
    }
    if let Some(h) = env("HOME").filter(|s| !s.is_empty()) {
        v.push(Path::new(&h).join(".local/state/aigpu"));
    }
    v.push(PathBuf::from(format!("/tmp/aigpu-{uid}")));
    v
}

/// The log files in `dirs` plus `files`, ordered: per process, oldest rotation first and the
/// active file last; processes by id; black boxes after the regular files.
pub fn discover(dirs: &[PathBuf], files: &[PathBuf], notes: &mut Notes) -> Vec<LogFile> {
    let mut out: Vec<LogFile> = Vec::new();
    for d in dirs {
        match std::fs::read_dir(d) {
            Ok(rd) => {
                for e in rd.flatten() {
                    if let Some(f) = classify(&e.path()) {
                        out.push(f);
                    }
                }
            }
            Err(e) => notes.add(
                format!("log directory {}", d.display()),
                crate::host::ReadErr::from_io(&e).describe(),
            ),
        }
    }
    for f in files {
        let lf = classify(f).unwrap_or_else(|| LogFile {
            path: f.clone(),
            name: f
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            pid: None,
            rot: 0,
            blackbox: false,
        });
        out.push(lf);
    }
    out.sort_by(|a, b| {
        (a.blackbox, a.pid, std::cmp::Reverse(a.rot), &a.name).cmp(&(
            b.blackbox,
            b.pid,
            std::cmp::Reverse(b.rot),
            &b.name,
        ))
    });
    out.dedup_by(|a, b| a.path == b.path);
    out
}

/// [`discover`] within a budget of `budget` bytes of log text: the newest files (by
/// modification time) are kept until the next would pass it; older ones are left out, with a
/// note saying how many and how large. Black boxes are always kept: they are small and are the
/// evidence of a crash or a device loss. Reading a whole log set costs several times its size in
/// memory, and a directory holds the logs of several runs (each up to its rotation limit): a
/// triage run on a loaded server must not take its memory.
pub fn discover_within(dirs: &[PathBuf], budget: u64, notes: &mut Notes) -> Vec<LogFile> {
    let found = discover(dirs, &[], notes);
    let meta = |f: &LogFile| {
        std::fs::metadata(&f.path)
            .map(|m| (m.len(), m.modified().ok()))
            .unwrap_or((0, None))
    };
    let mut newest: Vec<(usize, u64, Option<std::time::SystemTime>)> = found
        .iter()
        .enumerate()
        .filter(|(_, f)| !f.blackbox)
        .map(|(i, f)| {
            let (len, at) = meta(f);
            (i, len, at)
        })
        .collect();
    newest.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
    let mut used = 0u64;
    let mut left_out = vec![false; found.len()];
    let (mut n, mut bytes) = (0usize, 0u64);
    for (i, len, _) in newest {
        if used.saturating_add(len) > budget {
            left_out[i] = true;
            n += 1;
            bytes += len;
        } else {
            used += len;
        }
    }
    if n > 0 {
        notes.add(
            "libumd logs",
            format!(
                "{n} older log file(s) ({:.1} MiB) not read: the newest {:.1} MiB are (--log-budget-mib); umd-log reads them all",
                bytes as f64 / 1048576.0,
                budget as f64 / 1048576.0
            ),
        );
    }
    found
        .into_iter()
        .zip(left_out)
        .filter_map(|(f, out)| (!out).then_some(f))
        .collect()
}

/// Every record read from a set of files, in time order.
#[derive(Clone, Debug, Default)]
pub struct LogSet {
    /// The files read, in reading order.
    pub files: Vec<LogFile>,
    /// The records: each process's in file order, processes merged by wall time.
    pub recs: Vec<Rec>,
    /// Lines that are not records (comments and blank lines excluded).
    pub bad: usize,
    /// The first such line, with why.
    pub first_bad: Option<(Src, String)>,
}

impl LogSet {
    /// Reads `files`. A black box repeats the WARN and ERROR records of its process: for a
    /// process with regular log files only the records those files lack are kept (matched by
    /// `mono_ns`, which identifies a record in both, docs/logging.md), e.g. records the
    /// pipeline could not write any more.
    pub fn read(files: Vec<LogFile>, notes: &mut Notes) -> LogSet {
        let mut set = LogSet::default();
        let mut per: Vec<Vec<Rec>> = Vec::new();
        let mut cur_key: Option<Option<u32>> = None;
        let mut monos: std::collections::HashMap<Option<u32>, std::collections::HashSet<u64>> =
            std::collections::HashMap::new();
        // Regular files sort before black boxes (see `discover`).
        for f in files {
            let text = match crate::host::read_text(&f.path) {
                Ok(t) => t,
                Err(e) => {
                    notes.add(f.path.display().to_string(), e.describe());
                    continue;
                }
            };
            if f.blackbox || f.pid.is_none() || cur_key != Some(f.pid) {
                per.push(Vec::new());
                cur_key = if f.blackbox { None } else { Some(f.pid) };
            }
            let known = if f.blackbox {
                monos.get(&f.pid).cloned().unwrap_or_default()
            } else {
                Default::default()
            };
            for (i, line) in text.lines().enumerate() {
                if line.trim().is_empty() || line.starts_with('#') {
                    continue;
                }
                if f.blackbox
                    && line
                        .split(' ')
                        .nth(1)
                        .and_then(|m| m.parse::<u64>().ok())
                        .is_some_and(|m| known.contains(&m))
                {
                    continue;
                }
                let src = Src {
                    file: f.name.clone(),
                    line: i + 1,
                };
                match parse_line(line) {
                    Ok(mut r) => {
                        r.pid = f.pid;
                        r.src = src;
                        if !f.blackbox {
                            monos.entry(f.pid).or_default().insert(r.mono);
                        }
                        if let Some(v) = per.last_mut() {
                            v.push(r);
                        }
                    }
                    Err(BadLine(why)) => {
                        set.bad += 1;
                        if set.first_bad.is_none() {
                            set.first_bad = Some((src, why));
                        }
                    }
                }
            }
            set.files.push(f);
        }
        set.recs = merge(per);
        set
    }

    /// Reads the files of `dirs` and `files`.
    pub fn load(dirs: &[PathBuf], files: &[PathBuf], notes: &mut Notes) -> LogSet {
        let found = discover(dirs, files, notes);
        LogSet::read(found, notes)
    }
}

/// Merges per-process sequences by wall time, keeping each sequence's own order.
fn merge(seqs: Vec<Vec<Rec>>) -> Vec<Rec> {
    let total = seqs.iter().map(Vec::len).sum();
    let mut out = Vec::with_capacity(total);
    let mut iters: Vec<std::iter::Peekable<std::vec::IntoIter<Rec>>> =
        seqs.into_iter().map(|s| s.into_iter().peekable()).collect();
    loop {
        let mut best: Option<(usize, Wall)> = None;
        for (i, it) in iters.iter_mut().enumerate() {
            if let Some(r) = it.peek() {
                if best.is_none_or(|(_, w)| r.wall < w) {
                    best = Some((i, r.wall));
                }
            }
        }
        match best {
            Some((i, _)) => {
                if let Some(r) = iters[i].next() {
                    out.push(r);
                }
            }
            None => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_log_budget_reads_the_newest_files_and_notes_the_rest() {
        let d = std::env::temp_dir().join(format!("aigpu-budget-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("dir");
        let t0 = std::time::SystemTime::now() - std::time::Duration::from_secs(100);
        // Oldest first: run 100's rotation, its active file, run 200's file, a black box.
        for (i, name) in [
            "umd-100.1.log",
            "umd-100.log",
            "umd-200.log",
            "umd-blackbox-100-1.log",
        ]
        .iter()
        .enumerate()
        {
            let f = std::fs::File::create(d.join(name)).expect("create");
            std::io::Write::write_all(&mut &f, &[b'#'; 600]).expect("write");
            f.set_modified(t0 + std::time::Duration::from_secs(10 * i as u64))
                .expect("mtime");
        }
        let mut notes = Notes::default();
        let kept: Vec<String> = discover_within(std::slice::from_ref(&d), 1300, &mut notes)
            .into_iter()
            .map(|f| f.name)
            .collect();
        let _ = std::fs::remove_dir_all(&d);
        assert_eq!(
            kept,
            vec!["umd-100.log", "umd-200.log", "umd-blackbox-100-1.log"]
        );
        assert_eq!(notes.0.len(), 1);
        assert_eq!(notes.0[0].what, "libumd logs");
        assert_eq!(
            notes.0[0].why,
            "1 older log file(s) (0.0 MiB) not read: the newest 0.0 MiB are (--log-budget-mib); umd-log reads them all"
        );
        // Within the budget nothing is left out and nothing is said.
        let mut quiet = Notes::default();
        std::fs::create_dir_all(&d).expect("dir");
        std::fs::write(d.join("umd-300.log"), "# x\n").expect("write");
        let all = discover_within(std::slice::from_ref(&d), 1 << 20, &mut quiet);
        let _ = std::fs::remove_dir_all(&d);
        assert_eq!(all.len(), 1);
        assert!(quiet.0.is_empty());
    }

    use super::*;

    #[test]
    fn text_record() {
        let r = parse_text(r#"2026-11-29T02:13:07.123456Z 123456789 WARN tid=4412 umd::abi umdMemAlloc umd/src/abi/mod.rs:69 ctx=7 code=UMD_ERR_MEM_OUT_OF_MEMORY "out of memory: 12 MiB" bytes=4096 delta=-3 ratio=0.5 name="a b" ok=true va=0x1000"#).unwrap();
        assert_eq!(r.level, Level::Warn);
        assert_eq!(r.tid, 4412);
        assert_eq!(r.function.as_deref(), Some("umdMemAlloc"));
        assert_eq!(r.file.as_deref(), Some("umd/src/abi/mod.rs"));
        assert_eq!(r.line, Some(69));
        assert_eq!(r.ctx_u64(), Some(7));
        assert_eq!(r.code.as_deref(), Some("UMD_ERR_MEM_OUT_OF_MEMORY"));
        assert_eq!(r.msg, "out of memory: 12 MiB");
        assert_eq!(r.field_u64("bytes"), Some(4096));
        assert_eq!(r.field("delta"), Some(&Value::from(-3)));
        assert_eq!(r.field_str("name").as_deref(), Some("a b"));
        assert_eq!(r.field("ok"), Some(&Value::Bool(true)));
        assert_eq!(r.field_u64("va"), Some(0x1000));
        assert_eq!(
            r.fields_text(),
            r#"bytes=4096 delta=-3 ratio=0.5 name="a b" ok=true va=0x1000"#
        );
    }

    #[test]
    fn dashes_and_json() {
        let r = parse_text(
            r#"2026-11-29T02:13:07.123456Z 5 DEBUG tid=1 log_format - - ctx=- code=- "multi\nline""#,
        )
        .unwrap();
        assert_eq!(
            (r.function, r.file, r.ctx, r.code),
            (None, None, None, None)
        );
        assert_eq!(r.msg, "multi\nline");
        let j = parse_line(r#"{"ts":"2026-11-29T02:13:07.123456Z","mono_ns":5,"level":"INFO","tid":1,"module":"umd::memory","function":null,"file":"umd/src/memory/mod.rs","line":116,"ctx":3,"code":null,"msg":"alloc","fields":{"buffer":7,"size":4096,"va":"0x100000"}}"#).unwrap();
        assert_eq!(j.ctx.as_deref(), Some("3"));
        assert_eq!(j.field_u64("va"), Some(0x100000));
        assert_eq!(j.line, Some(116));
        assert!(parse_line("garbage").is_err());
    }

    #[test]
    fn black_box_adds_only_what_the_file_lacks() {
        let d = std::env::temp_dir().join(format!("aigpu-tools-bb-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let a = r#"2026-11-29T02:13:07.000001Z 11 WARN tid=1 umd::abi umdMemAlloc umd/src/abi/mod.rs:69 ctx=1 code=UMD_ERR_MEM_OUT_OF_MEMORY "a""#;
        let b = r#"2026-11-29T02:13:07.000002Z 12 ERROR tid=1 umd::device - umd/src/device.rs:112 ctx=- code=- "device lost: all further calls fail with UMD_ERR_DEVICE_LOST""#;
        std::fs::write(d.join("umd-7.log"), format!("{a}\n")).unwrap();
        std::fs::write(
            d.join("umd-blackbox-7-20261129T021307.000003Z.log"),
            format!("# libumd black box: pid 7\n{a}\n{b}\n2026-11-29T02:13:07.000002Z 11 WARN tid=1 umd::abi umdMem…\n"),
        )
        .unwrap();
        let mut notes = Notes::default();
        let set = LogSet::load(std::slice::from_ref(&d), &[], &mut notes);
        let msgs: Vec<(&str, &str)> = set
            .recs
            .iter()
            .map(|r| (r.msg.as_str(), r.src.file.as_str()))
            .collect();
        assert_eq!(
            msgs,
            vec![
                ("a", "umd-7.log"),
                (
                    "device lost: all further calls fail with UMD_ERR_DEVICE_LOST",
                    "umd-blackbox-7-20261129T021307.000003Z.log"
                )
            ]
        );
        assert_eq!(set.bad, 0, "{:?}", set.first_bad);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn file_names() {
        let c = |n: &str| classify(Path::new(n)).map(|f| (f.pid, f.rot, f.blackbox));
        assert_eq!(c("umd-4411.log"), Some((Some(4411), 0, false)));
        assert_eq!(c("umd-4411.2.log"), Some((Some(4411), 2, false)));
        assert_eq!(
            c("umd-blackbox-4411-20261129T021307.123456Z.log"),
            Some((Some(4411), 0, true))
        );
        assert_eq!(c("other.log"), None);
    }
}
