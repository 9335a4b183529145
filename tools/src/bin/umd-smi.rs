//! `umd-smi`: look at the aigpu devices; `umd-smi triage`: one snapshot with a layered verdict.
//! docs/tools.md is the manual.

use aigpu_tools::cli::Args;
use aigpu_tools::host::Host;
use aigpu_tools::smi::{self, SimSession};
use aigpu_tools::triage;
use aigpu_tools::util::Wall;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

const USAGE: &str = "usage:
  umd-smi [--json] [-l SECONDS [--count N]] [--sim [--no-demo]]
          [--root DIR] [--uname-r RELEASE] [--now TIME]
  umd-smi triage [-o DIR] [--json] [--no-archive] [--root DIR] [--dmesg FILE]
          [--journal FILE] [--uname-r RELEASE] [--log-dir DIR]... [--now TIME]

umd-smi lists every aigpu device (versions, memory, queues, counters, state, clients) or says
precisely why there is none. triage writes a timestamped directory and .tar.gz with everything a
bug report needs and ends with a verdict per layer (hardware, kernel module, user-space driver,
application). Run as root to include debugfs (queues, clients, contexts, crash dumps).

  --json           machine-readable output
  -l SECONDS       refresh every SECONDS (like nvidia-smi -l); --count N stops after N views
  --sim            the in-process simulator (demo: a small workload runs unless --no-demo)
  --root DIR       read a recorded tree standing for / (offline: no commands, no ioctls)
  --dmesg FILE     kernel log text to use instead of running dmesg
  --journal FILE   previous boot's kernel log instead of journalctl -k -b -1
  --uname-r REL    the running kernel release instead of /proc/sys/kernel/osrelease
  --log-dir DIR    libumd log directory (repeatable; default: UMD_LOG_DIR or libumd's default)
  --now TIME       the time to print and name the report by (RFC 3339; for reproducible output)
  -o DIR           where the report goes (default: the current directory)
  --no-archive     write the directory only";

fn usage_err(msg: &str) -> ExitCode {
    eprintln!("umd-smi: {msg}\n{USAGE}");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let mut args = Args::new(std::env::args().skip(1).collect());
    let mut host = Host::default();
    let mut json = false;
    let mut interval: Option<u64> = None;
    let mut count: Option<u64> = None;
    let mut sim = false;
    let mut demo = true;
    let mut triage_mode = false;
    let mut out = PathBuf::from(".");
    let mut archive = true;
    let mut log_dirs: Vec<PathBuf> = Vec::new();
    let mut fixed_now = false;
    let mut first = true;
    while let Some(a) = args.next_arg() {
        let r: Result<(), String> = (|| {
            match a.as_str() {
                "triage" if first => triage_mode = true,
                "--json" => json = true,
                "-l" | "--loop" => interval = Some(args.number(&a)?),
                "--count" => count = Some(args.number(&a)?),
                "--sim" => sim = true,
                "--no-demo" => demo = false,
                "--root" => {
                    host.root = PathBuf::from(args.value(&a)?);
                    host.offline = true;
                }
                "--dmesg" => host.dmesg = Some(PathBuf::from(args.value(&a)?)),
                "--journal" => host.journal = Some(PathBuf::from(args.value(&a)?)),
                "--uname-r" => host.uname_r = Some(args.value(&a)?),
                "--log-dir" => log_dirs.push(PathBuf::from(args.value(&a)?)),
                "--now" => {
                    let v = args.value(&a)?;
                    host.now = Wall::parse(&v)
                        .ok_or_else(|| format!("--now {v:?}: not an RFC 3339 time"))?;
                    fixed_now = true;
                }
                "-o" | "--output" => out = PathBuf::from(args.value(&a)?),
                "--no-archive" => archive = false,
                "-h" | "--help" => return Err(String::new()),
                other => return Err(format!("unknown argument {other:?}")),
            }
            Ok(())
        })();
        first = false;
        if let Err(e) = r {
            if e.is_empty() {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            return usage_err(&e);
        }
    }
    if triage_mode {
        if sim || interval.is_some() {
            return usage_err("triage looks at the machine: --sim and -l do not apply");
        }
        let opts = triage::Options {
            host,
            log_dirs,
            env: std::env::vars().collect(),
        };
        let rep = triage::run(opts, &out, archive);
        if json {
            println!("{:#}", triage::render_json(&rep));
        } else {
            print!("{}", triage::render_screen(&rep));
        }
        return if rep.dir.is_some() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    if sim && host.offline {
        return usage_err("--sim and --root exclude each other");
    }
    if interval == Some(0) {
        return usage_err("-l needs at least 1 second");
    }
    let session = if sim {
        match SimSession::open(demo) {
            Ok(s) => Some(s),
            Err(e) => {
                eprintln!("umd-smi: cannot start the simulator: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        None
    };
    let frames = match (interval, count) {
        (None, _) => Some(1),
        (Some(_), c) => c,
    };
    let mut n = 0u64;
    let mut any;
    loop {
        if !fixed_now {
            host.now = Wall::now();
        }
        let view = match &session {
            Some(s) => {
                if n > 0 {
                    if let Err(e) = s.step() {
                        eprintln!("umd-smi: demo workload: {e}");
                    }
                }
                s.view(host.now)
            }
            None => smi::kernel(&host),
        };
        any = !view.devices.is_empty();
        let text = if json {
            // One JSON document per view (JSON lines when refreshing).
            if interval.is_some() {
                format!("{}\n", smi::render_json(&view))
            } else {
                format!("{:#}\n", smi::render_json(&view))
            }
        } else if n > 0 {
            format!("\n{}", smi::render_text(&view))
        } else {
            smi::render_text(&view)
        };
        let mut so = std::io::stdout().lock();
        if so
            .write_all(text.as_bytes())
            .and_then(|_| so.flush())
            .is_err()
        {
            // stdout closed (e.g. piped into head): stop quietly.
            return ExitCode::SUCCESS;
        }
        drop(so);
        n += 1;
        if frames.is_some_and(|f| n >= f) {
            break;
        }
        std::thread::sleep(Duration::from_secs(interval.unwrap_or(1)));
    }
    if any {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
