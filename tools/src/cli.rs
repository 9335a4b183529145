//! The command lines of both binaries (clap derive), and the man pages and shell completions
//! generated from the same definitions. docs/tools.md is the manual; the exit statuses are in
//! each command's `--help`.

use crate::query::{self, CsvFormat, Fields};
use crate::util::Wall;
use clap::{Args, CommandFactory, Parser, Subcommand};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

const SMI_EXIT: &str = "\
Exit status:
  0  a device was shown (with -l: the last view showed one)
  1  no aigpu device, or it could not be looked at (the reason is printed)
  2  usage error (unknown option, bad value)
Output into a closed pipe (`umd-smi | head -1`) ends any command quietly with status 0.";

const TRIAGE_EXIT: &str = "\
Exit status:
  0  the report was written, whatever it found
  1  the report could not be written
  2  usage error";

const DMON_EXIT: &str = "\
Exit status:
  0  stopped after --count samples, or by a closed pipe
  1  the first sample found no aigpu device
  2  usage error";

const EXPORTER_EXIT: &str = "\
Exit status:
  0  stopped as asked (--max-scrapes served, --count files written)
  1  the address could not be listened on, or the text file could not be written
  2  usage error";

const LOG_EXIT: &str = "\
Exit status:
  0  the command ran (whatever it found)
  1  no log directory or no libumd log file in it
  2  usage error
Output into a closed pipe (`umd-log errors | head -1`) ends quietly with status 0.";

/// `umd-smi`: the command line.
#[derive(Parser, Debug)]
#[command(
    name = "umd-smi",
    version,
    about = "Look at the aigpu devices: versions, memory, queues, counters, state, clients",
    long_about = "Lists every aigpu device (versions, memory, queues, counters, state, clients) or says\n\
precisely why there is none. Run as root to include debugfs (queues, clients, contexts, crash\n\
dumps). 'umd-smi triage' writes a bug report with a verdict per layer, 'umd-smi dmon' prints one\n\
line per device per sample, 'umd-smi exporter' serves Prometheus metrics.",
    after_help = SMI_EXIT,
    args_conflicts_with_subcommands = true
)]
pub struct Smi {
    /// What to do (default: show the devices).
    #[command(subcommand)]
    pub cmd: Option<SmiCmd>,
    /// The device view's options.
    #[command(flatten)]
    pub view: ViewArgs,
}

/// `umd-smi`'s subcommands.
#[derive(Subcommand, Debug)]
pub enum SmiCmd {
    /// One snapshot of the whole scene (dmesg, modinfo, nodes, debugfs, logs) with a verdict
    /// per layer, written as a directory and a .tar.gz.
    #[command(after_help = TRIAGE_EXIT)]
    Triage(TriageArgs),
    /// One line per device per sample (like nvidia-smi dmon).
    #[command(after_help = DMON_EXIT)]
    Dmon(DmonArgs),
    /// Prometheus metrics: served over HTTP (--listen) or written for node_exporter's textfile
    /// collector (--textfile).
    #[command(after_help = EXPORTER_EXIT)]
    Exporter(ExporterArgs),
    /// Prints a shell completion script for umd-smi or umd-log.
    #[command(hide = true)]
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
        /// The program to complete.
        #[arg(long, default_value = "umd-smi", value_parser = ["umd-smi", "umd-log"])]
        bin: String,
    },
    /// Writes the man pages of umd-smi (and its commands) and umd-log into DIR.
    #[command(hide = true)]
    ManPages {
        /// Where the pages go (created).
        dir: PathBuf,
    },
}

/// Where the device view comes from (shared by the view, dmon and the exporter).
#[derive(Args, Debug, Clone)]
pub struct Source {
    /// The in-process simulator (UMD_SIM_DEVICES, UMD_SIM_MEM_MIB); a small demo workload runs
    /// unless --no-demo.
    #[arg(long, conflicts_with = "root")]
    pub sim: bool,
    /// With --sim: no demo workload.
    #[arg(long, requires = "sim")]
    pub no_demo: bool,
    /// Read a recorded tree standing for / (offline: no commands, no ioctls).
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// The running kernel release instead of /proc/sys/kernel/osrelease.
    #[arg(long = "uname-r", value_name = "RELEASE")]
    pub uname_r: Option<String>,
    /// The time to print (RFC 3339; for reproducible output).
    #[arg(long, value_name = "TIME", value_parser = parse_now)]
    pub now: Option<Wall>,
}

/// The device view's options.
#[derive(Args, Debug)]
pub struct ViewArgs {
    /// Machine-readable output (with -l: one JSON document per line).
    #[arg(long, conflicts_with_all = ["query_gpu", "query_compute_apps"])]
    pub json: bool,
    /// Show the view again every SECONDS (like nvidia-smi -l): decimals and ms allowed (0.5,
    /// 250ms); 0 shows it once, as without -l.
    #[arg(short = 'l', long = "loop", value_name = "SECONDS", value_parser = parse_interval)]
    pub interval: Option<Duration>,
    /// With -l: stop after N views.
    #[arg(short = 'c', long, value_name = "N", requires = "interval",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
    /// Print only these device fields, comma-separated (see --help-query-gpu).
    #[arg(long, value_name = "FIELDS", value_parser = parse_gpu_fields,
          conflicts_with = "query_compute_apps")]
    pub query_gpu: Option<Fields>,
    /// Print these fields of every process using a device (see --help-query-compute-apps).
    #[arg(long, value_name = "FIELDS", value_parser = parse_app_fields)]
    pub query_compute_apps: Option<Fields>,
    /// The output of a query: csv, with noheader and nounits as further options
    /// (csv,noheader,nounits).
    #[arg(long, value_name = "FORMAT", default_value = "csv", value_parser = parse_format)]
    pub format: CsvFormat,
    /// List the fields --query-gpu knows, with their meaning and unit.
    #[arg(long)]
    pub help_query_gpu: bool,
    /// List the fields --query-compute-apps knows.
    #[arg(long)]
    pub help_query_compute_apps: bool,
    /// Where the view comes from.
    #[command(flatten)]
    pub source: Source,
}

/// `umd-smi triage`'s options.
#[derive(Args, Debug)]
pub struct TriageArgs {
    /// Where the report goes.
    #[arg(short = 'o', long = "output", value_name = "DIR", default_value = ".")]
    pub out: PathBuf,
    /// Print the verdict as JSON.
    #[arg(long)]
    pub json: bool,
    /// Write the directory only (no .tar.gz).
    #[arg(long)]
    pub no_archive: bool,
    /// Read a recorded tree standing for / (offline: no commands, no ioctls).
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Kernel log text to use instead of running dmesg.
    #[arg(long, value_name = "FILE")]
    pub dmesg: Option<PathBuf>,
    /// The previous boot's kernel log instead of journalctl -k -b -1.
    #[arg(long, value_name = "FILE")]
    pub journal: Option<PathBuf>,
    /// The running kernel release instead of /proc/sys/kernel/osrelease.
    #[arg(long = "uname-r", value_name = "RELEASE")]
    pub uname_r: Option<String>,
    /// A libumd log directory (repeatable; default: UMD_LOG_DIR or libumd's default).
    #[arg(long = "log-dir", value_name = "DIR")]
    pub log_dirs: Vec<PathBuf>,
    /// MiB of libumd logs to read at most, newest files first (older ones are named in a note;
    /// umd-log reads them all).
    #[arg(long = "log-budget-mib", value_name = "MIB", default_value = "512")]
    pub log_budget_mib: u64,
    /// The time to print and name the report by (RFC 3339; for reproducible output).
    #[arg(long, value_name = "TIME", value_parser = parse_now)]
    pub now: Option<Wall>,
}

/// `umd-smi dmon`'s options.
#[derive(Args, Debug)]
pub struct DmonArgs {
    /// Seconds between samples (decimals and ms allowed: 0.5, 250ms).
    #[arg(short = 'd', long = "delay", value_name = "SECONDS", default_value = "1",
          value_parser = parse_positive_interval)]
    pub delay: Duration,
    /// Stop after N samples (default: until interrupted).
    #[arg(short = 'c', long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
    /// Leave out the two header lines.
    #[arg(long)]
    pub no_header: bool,
    /// Where the samples come from.
    #[command(flatten)]
    pub source: Source,
}

/// `umd-smi exporter`'s options.
#[derive(Args, Debug)]
pub struct ExporterArgs {
    /// Serve GET /metrics on this address (IP:PORT; port 0 picks a free one, printed on the
    /// first line).
    #[arg(
        long,
        value_name = "ADDR",
        conflicts_with = "textfile",
        required_unless_present = "textfile"
    )]
    pub listen: Option<std::net::SocketAddr>,
    /// Write the metrics to PATH (atomically: PATH.tmp, then renamed), for node_exporter's
    /// textfile collector (PATH should end in .prom).
    #[arg(long, value_name = "PATH")]
    pub textfile: Option<PathBuf>,
    /// With --textfile: write again every SECONDS (default: once).
    #[arg(short = 'l', long = "loop", value_name = "SECONDS", requires = "textfile",
          value_parser = parse_positive_interval)]
    pub interval: Option<Duration>,
    /// With --textfile -l: stop after N files.
    #[arg(short = 'c', long, value_name = "N", requires = "interval",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
    /// With --listen: stop after answering N requests (default: serve until interrupted).
    #[arg(long, value_name = "N", requires = "listen")]
    pub max_scrapes: Option<u64>,
    /// A libumd log directory to count dropped log records in (repeatable).
    #[arg(long = "log-dir", value_name = "DIR")]
    pub log_dirs: Vec<PathBuf>,
    /// Where the metrics come from.
    #[command(flatten)]
    pub source: Source,
}

/// `umd-log`: the command line.
#[derive(Parser, Debug)]
#[command(
    name = "umd-log",
    version,
    about = "Read libumd's log files: leaks, errors, one context's story, the last job",
    long_about = "Reads libumd's log files: text or JSON lines, across rotated files in order, black\n\
boxes added. Default input: UMD_LOG_DIR, else libumd's default directory ($XDG_STATE_HOME/aigpu,\n\
~/.local/state/aigpu, /tmp/aigpu-<uid>).",
    after_help = LOG_EXIT,
    subcommand_required = true,
    arg_required_else_help = true
)]
pub struct Log {
    /// Machine-readable output (one JSON document).
    #[arg(long, global = true)]
    pub json: bool,
    /// A log directory (repeatable).
    #[arg(short = 'd', long = "dir", value_name = "DIR", global = true)]
    pub dirs: Vec<PathBuf>,
    /// One log file (repeatable).
    #[arg(short = 'f', long = "file", value_name = "FILE", global = true)]
    pub files: Vec<PathBuf>,
    /// What to read.
    #[command(subcommand)]
    pub cmd: LogCmd,
}

/// Log files or directories given after the command.
#[derive(Args, Debug, Clone)]
pub struct Paths {
    /// Log files or directories (like -f and -d).
    #[arg(value_name = "PATH")]
    pub paths: Vec<PathBuf>,
}

/// `umd-log`'s commands.
#[derive(Subcommand, Debug)]
pub enum LogCmd {
    /// Pair every alloc with its free per context; list the unpaired ones with size, age and
    /// call site.
    #[command(after_help = LOG_EXIT)]
    Leaks(Paths),
    /// The error timeline with the detail fields.
    #[command(after_help = LOG_EXIT)]
    Errors(Paths),
    /// One context's operations in order (context ids are libumd's, per process).
    #[command(after_help = LOG_EXIT)]
    Ctx {
        /// The context id (libumd's).
        id: u64,
        /// Only this process's context ID.
        #[arg(long)]
        pid: Option<u32>,
        /// The input.
        #[command(flatten)]
        paths: Paths,
    },
    /// The last submitted and last completed job of every context before a hang or device
    /// loss.
    #[command(after_help = LOG_EXIT)]
    LastJob(Paths),
    /// Prints a shell completion script for umd-log.
    #[command(hide = true)]
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
}

// ---------------------------------------------------------------------------------------------
// value parsers

/// `1`, `0.5`, `2s`, `250ms`: at most a day, in steps of a millisecond.
pub fn parse_interval(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else {
        (t, 1.0)
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| "not a number of seconds (1, 0.5, 250ms)".to_string())?;
    let secs = v * scale;
    if !(0.0..=86_400.0).contains(&secs) {
        return Err("must be between 0 and 86400 seconds".into());
    }
    let ms = (secs * 1000.0).round() as u64;
    if secs > 0.0 && ms == 0 {
        return Err("below a millisecond".into());
    }
    Ok(Duration::from_millis(ms))
}

/// Like `parse_interval`, above 0.
pub fn parse_positive_interval(s: &str) -> Result<Duration, String> {
    let d = parse_interval(s)?;
    if d.is_zero() {
        return Err("must be above 0".into());
    }
    Ok(d)
}

fn parse_now(s: &str) -> Result<Wall, String> {
    Wall::parse(s).ok_or_else(|| "not an RFC 3339 time (2026-11-29T02:15:00Z)".to_string())
}

fn parse_gpu_fields(s: &str) -> Result<Fields, String> {
    Fields::parse(s, query::GPU_FIELDS, "--help-query-gpu")
}

fn parse_app_fields(s: &str) -> Result<Fields, String> {
    Fields::parse(s, query::APP_FIELDS, "--help-query-compute-apps")
}

fn parse_format(s: &str) -> Result<CsvFormat, String> {
    CsvFormat::parse(s)
}

// ---------------------------------------------------------------------------------------------
// output

/// Standard output was closed (a pipe into `head`): the command stops quietly.
#[derive(Debug)]
pub struct Closed;

/// Writes `s` to standard output and flushes it; `Err(Closed)` when it cannot be written.
pub fn emit(s: &str) -> Result<(), Closed> {
    let mut so = std::io::stdout().lock();
    so.write_all(s.as_bytes())
        .and_then(|_| so.flush())
        .map_err(|_| Closed)
}

/// Writes `s` to standard error, ignoring failure (there is nowhere left to say it).
pub fn warn(s: &str) {
    let mut se = std::io::stderr().lock();
    let _ = se.write_all(s.as_bytes());
}

/// Parses the process arguments; on `--help`, `--version` or a usage error prints clap's text
/// (into a closed pipe quietly) and exits 0 or 2.
pub fn parse_or_exit<T: Parser>() -> T {
    match T::try_parse() {
        Ok(v) => v,
        Err(e) => {
            let code = e.exit_code();
            let text = e.render().to_string();
            if e.use_stderr() {
                warn(&text);
            } else {
                let _ = emit(&text);
            }
            std::process::exit(code)
        }
    }
}

/// A completion script for `bin` (`umd-smi` or `umd-log`).
pub fn completions(shell: clap_complete::Shell, bin: &str) -> Vec<u8> {
    let mut cmd = if bin == "umd-log" {
        Log::command()
    } else {
        Smi::command()
    };
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, bin, &mut out);
    out
}

/// Writes `umd-smi.1`, `umd-smi-<command>.1` and `umd-log.1`, `umd-log-<command>.1` into `dir`;
/// returns the file names.
pub fn man_pages(dir: &Path) -> std::io::Result<Vec<String>> {
    std::fs::create_dir_all(dir)?;
    clap_mangen::generate_to(Smi::command(), dir)?;
    clap_mangen::generate_to(Log::command(), dir)?;
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".1"))
        .collect();
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definitions_are_consistent() {
        Smi::command().debug_assert();
        Log::command().debug_assert();
    }

    #[test]
    fn intervals() {
        assert_eq!(parse_interval("1"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_interval("0.25"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_interval("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_interval("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_interval("0"), Ok(Duration::ZERO));
        assert!(parse_interval("-1").is_err());
        assert!(parse_interval("soon").is_err());
        assert!(parse_interval("0.0001").is_err());
        assert!(parse_positive_interval("0").is_err());
    }
}
