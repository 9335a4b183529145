//! `umd-log`: read libumd's log files (text or JSON lines, across rotated files in order).
//! docs/tools.md is the manual.

use aigpu_tools::cli::{self, emit, warn, Log, LogCmd};
use aigpu_tools::host::Notes;
use aigpu_tools::umdlog::{self, analyze, LogSet};
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Log = cli::parse_or_exit();
    let (mut dirs, mut files) = (args.dirs, args.files);
    let paths = match &args.cmd {
        LogCmd::Leaks(p) | LogCmd::Errors(p) | LogCmd::LastJob(p) => p.paths.clone(),
        LogCmd::Ctx { paths, .. } => paths.paths.clone(),
        LogCmd::Completions { shell } => {
            let _ = std::io::Write::write_all(
                &mut std::io::stdout(),
                &cli::completions(*shell, "umd-log"),
            );
            return ExitCode::SUCCESS;
        }
    };
    for p in paths {
        if p.is_dir() {
            dirs.push(p)
        } else if p.exists() {
            files.push(p)
        } else {
            warn(&format!(
                "umd-log: {}: no such file or directory\n",
                p.display()
            ));
            return ExitCode::from(2);
        }
    }
    if dirs.is_empty() && files.is_empty() {
        let env = |k: &str| std::env::var(k).ok();
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        let cands = umdlog::default_dirs(&env, uid);
        match cands.iter().find(|d| d.is_dir()) {
            Some(d) => dirs.push(d.clone()),
            None => {
                warn(&format!(
                    "umd-log: no log directory: none of {} exists (give -d DIR or -f FILE)\n",
                    cands
                        .iter()
                        .map(|d| d.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
                return ExitCode::FAILURE;
            }
        }
    }
    let mut notes = Notes::default();
    let set = LogSet::load(&dirs, &files, &mut notes);
    for n in &notes.0 {
        warn(&format!("umd-log: {}: {}\n", n.what, n.why));
    }
    if set.files.is_empty() {
        warn(&format!(
            "umd-log: no libumd log files (umd-<pid>.log, umd-<pid>.<n>.log, umd-blackbox-*.log) in {}\n",
            dirs.iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
        return ExitCode::FAILURE;
    }
    let (text, js) = match args.cmd {
        LogCmd::Leaks(_) => {
            let r = analyze::leaks(&set);
            (analyze::leaks_text(&set, &r), analyze::leaks_json(&set, &r))
        }
        LogCmd::Errors(_) => (analyze::errors_text(&set), analyze::errors_json(&set)),
        LogCmd::Ctx { id: c, pid, .. } => (
            analyze::ctx_text(&set, c, pid),
            analyze::ctx_json(&set, c, pid),
        ),
        _ => {
            let lj = analyze::last_job(&set);
            (
                analyze::last_job_text(&set, &lj),
                analyze::last_job_json(&set, &lj),
            )
        }
    };
    // Into a closed pipe (`| head`): stop quietly, the command ran.
    let _ = if args.json {
        emit(&format!("{js:#}\n"))
    } else {
        emit(&text)
    };
    ExitCode::SUCCESS
}
