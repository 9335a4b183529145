//! `umd-log`: read libumd's log files (text or JSON lines, across rotated files in order).
//! docs/tools.md is the manual.

use aigpu_tools::cli::Args;
use aigpu_tools::host::Notes;
use aigpu_tools::umdlog::{self, analyze, LogSet};
use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage: umd-log [--json] [-d DIR]... [-f FILE]... COMMAND [PATH...]

commands:
  leaks            pair every alloc with its free per context; list the unpaired ones
                   with size, age and call site
  errors           the error timeline with the detail fields
  ctx ID [--pid P] one context's operations in order (context ids are per process)
  last-job         the last submitted and last completed job of every context before a
                   hang or device loss

  -d DIR           a log directory (repeatable); default: UMD_LOG_DIR, else libumd's default
                   ($XDG_STATE_HOME/aigpu, ~/.local/state/aigpu, /tmp/aigpu-<uid>)
  -f FILE          one log file (repeatable); a PATH after the command is either
  --json           machine-readable output";

fn usage_err(msg: &str) -> ExitCode {
    eprintln!("umd-log: {msg}\n{USAGE}");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let mut args = Args::new(std::env::args().skip(1).collect());
    let mut json = false;
    let mut dirs: Vec<PathBuf> = Vec::new();
    let mut files: Vec<PathBuf> = Vec::new();
    let mut cmd: Option<String> = None;
    let mut ctx: Option<u64> = None;
    let mut pid: Option<u32> = None;
    while let Some(a) = args.next_arg() {
        let r: Result<(), String> = (|| {
            match a.as_str() {
                "--json" => json = true,
                "-d" | "--dir" => dirs.push(PathBuf::from(args.value(&a)?)),
                "-f" | "--file" => files.push(PathBuf::from(args.value(&a)?)),
                "--pid" => pid = Some(args.number(&a)?),
                "-h" | "--help" => return Err(String::new()),
                c @ ("leaks" | "errors" | "ctx" | "last-job") if cmd.is_none() => {
                    cmd = Some(c.to_string());
                    if c == "ctx" {
                        let v = args.value("ctx")?;
                        ctx = Some(
                            v.parse()
                                .map_err(|_| format!("ctx {v:?}: a context id is a number"))?,
                        );
                    }
                }
                other if other.starts_with('-') => return Err(format!("unknown option {other:?}")),
                path if cmd.is_some() => {
                    let p = PathBuf::from(path);
                    if p.is_dir() {
                        dirs.push(p)
                    } else if p.exists() {
                        files.push(p)
                    } else {
                        return Err(format!("{path}: no such file or directory"));
                    }
                }
                other => return Err(format!("unknown command {other:?}")),
            }
            Ok(())
        })();
        if let Err(e) = r {
            if e.is_empty() {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            return usage_err(&e);
        }
    }
    let Some(cmd) = cmd else {
        return usage_err("which command? leaks, errors, ctx ID or last-job");
    };
    if dirs.is_empty() && files.is_empty() {
        let env = |k: &str| std::env::var(k).ok();
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        let cands = umdlog::default_dirs(&env, uid);
        match cands.iter().find(|d| d.is_dir()) {
            Some(d) => dirs.push(d.clone()),
            None => {
                eprintln!(
                    "umd-log: no log directory: none of {} exists (give -d DIR or -f FILE)",
                    cands
                        .iter()
                        .map(|d| d.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                return ExitCode::FAILURE;
            }
        }
    }
    let mut notes = Notes::default();
    let set = LogSet::load(&dirs, &files, &mut notes);
    for n in &notes.0 {
        eprintln!("umd-log: {}: {}", n.what, n.why);
    }
    if set.files.is_empty() {
        eprintln!(
            "umd-log: no libumd log files (umd-<pid>.log, umd-<pid>.<n>.log, umd-blackbox-*.log) in {}",
            dirs.iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        return ExitCode::FAILURE;
    }
    let (text, js) = match cmd.as_str() {
        "leaks" => {
            let r = analyze::leaks(&set);
            (analyze::leaks_text(&set, &r), analyze::leaks_json(&set, &r))
        }
        "errors" => (analyze::errors_text(&set), analyze::errors_json(&set)),
        "ctx" => {
            let c = ctx.unwrap_or(0);
            (
                analyze::ctx_text(&set, c, pid),
                analyze::ctx_json(&set, c, pid),
            )
        }
        _ => {
            let lj = analyze::last_job(&set);
            (
                analyze::last_job_text(&set, &lj),
                analyze::last_job_json(&set, &lj),
            )
        }
    };
    if json {
        println!("{js:#}");
    } else {
        print!("{text}");
    }
    ExitCode::SUCCESS
}
