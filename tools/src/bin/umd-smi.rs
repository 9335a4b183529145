//! `umd-smi`: look at the aigpu devices; `umd-smi triage`: one snapshot with a layered verdict;
//! `umd-smi dmon`: one line per sample; `umd-smi exporter`: Prometheus metrics.
//! docs/tools.md is the manual; tools/src/cli.rs the command line.

use aigpu_tools::cli::{self, emit, warn, Closed, Smi, SmiCmd, Source};
use aigpu_tools::exporter;
use aigpu_tools::host::{Host, Notes};
use aigpu_tools::query;
use aigpu_tools::smi::{self, SimSession, SmiView};
use aigpu_tools::triage;
use aigpu_tools::umdlog;
use aigpu_tools::util::Wall;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Where views come from: the machine (or a recorded tree) or the simulator.
struct Viewer {
    host: Host,
    fixed_now: bool,
    sim: Option<SimSession>,
    views: u64,
}

impl Viewer {
    fn new(src: &Source) -> Result<Viewer, ExitCode> {
        let mut host = Host::default();
        if let Some(r) = &src.root {
            host.root = r.clone();
            host.offline = true;
        }
        host.uname_r = src.uname_r.clone();
        if let Some(t) = src.now {
            host.now = t;
        }
        let sim = if src.sim {
            match SimSession::open(!src.no_demo) {
                Ok(s) => Some(s),
                Err(e) => {
                    warn(&format!("umd-smi: cannot start the simulator: {e}\n"));
                    return Err(ExitCode::FAILURE);
                }
            }
        } else {
            None
        };
        Ok(Viewer {
            host,
            fixed_now: src.now.is_some(),
            sim,
            views: 0,
        })
    }

    /// The next view (on the simulator, after another round of the demo workload).
    fn view(&mut self) -> SmiView {
        if !self.fixed_now {
            self.host.now = Wall::now();
        }
        let n = self.views;
        self.views += 1;
        match &self.sim {
            Some(s) => {
                if n > 0 {
                    if let Err(e) = s.step() {
                        warn(&format!("umd-smi: demo workload: {e}\n"));
                    }
                }
                s.view(self.host.now)
            }
            None => smi::kernel(&self.host),
        }
    }
}

fn main() -> ExitCode {
    let args: Smi = cli::parse_or_exit();
    match args.cmd {
        Some(SmiCmd::Triage(t)) => triage_cmd(t),
        Some(SmiCmd::Dmon(d)) => dmon(d),
        Some(SmiCmd::Exporter(e)) => exporter_cmd(e),
        Some(SmiCmd::Completions { shell, bin }) => {
            let _ =
                std::io::Write::write_all(&mut std::io::stdout(), &cli::completions(shell, &bin));
            ExitCode::SUCCESS
        }
        Some(SmiCmd::ManPages { dir }) => match cli::man_pages(&dir) {
            Ok(names) => {
                let _ = emit(&(names.join("\n") + "\n"));
                ExitCode::SUCCESS
            }
            Err(e) => {
                warn(&format!("umd-smi: {}: {e}\n", dir.display()));
                ExitCode::FAILURE
            }
        },
        None => view_cmd(args.view),
    }
}

fn triage_cmd(t: cli::TriageArgs) -> ExitCode {
    let mut host = Host::default();
    if let Some(r) = t.root {
        host.root = r;
        host.offline = true;
    }
    host.dmesg = t.dmesg;
    host.journal = t.journal;
    host.uname_r = t.uname_r;
    if let Some(n) = t.now {
        host.now = n;
    }
    let opts = triage::Options {
        host,
        log_dirs: t.log_dirs,
        env: std::env::vars().collect(),
        log_budget: t.log_budget_mib.saturating_mul(1 << 20),
    };
    let rep = triage::run(opts, &t.out, !t.no_archive);
    let text = if t.json {
        format!("{:#}\n", triage::render_json(&rep))
    } else {
        triage::render_screen(&rep)
    };
    // A closed pipe does not change the outcome: the report is written.
    let _ = emit(&text);
    if rep.dir.is_some() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn view_cmd(a: cli::ViewArgs) -> ExitCode {
    if a.help_query_gpu {
        let _ = emit(&query::help(
            "umd-smi --query-gpu=FIELD[,FIELD...] [--format=csv[,noheader][,nounits]]: the fields, one line per device",
            query::GPU_FIELDS,
        ));
        return ExitCode::SUCCESS;
    }
    if a.help_query_compute_apps {
        let _ = emit(&query::help(
            "umd-smi --query-compute-apps=FIELD[,FIELD...] [--format=csv[,noheader][,nounits]]: the fields, one line per process and device (debugfs: root)",
            query::APP_FIELDS,
        ));
        return ExitCode::SUCCESS;
    }
    let mut viewer = match Viewer::new(&a.source) {
        Ok(v) => v,
        Err(c) => return c,
    };
    let interval = a.interval.filter(|d| !d.is_zero());
    let frames = match interval {
        None => Some(1),
        Some(_) => a.count,
    };
    let mut n = 0u64;
    let mut any;
    loop {
        let view = viewer.view();
        any = !view.devices.is_empty();
        let text = if let Some(f) = &a.query_gpu {
            query::gpu_csv(&view, f, a.format, n == 0)
        } else if let Some(f) = &a.query_compute_apps {
            if n == 0 {
                for w in query::apps_not_shown(&view) {
                    warn(&format!("umd-smi: {w}\n"));
                }
            }
            query::apps_csv(&view, f, a.format, n == 0)
        } else if a.json {
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
        if emit(&text).is_err() {
            return ExitCode::SUCCESS;
        }
        n += 1;
        if frames.is_some_and(|f| n >= f) {
            break;
        }
        std::thread::sleep(interval.unwrap_or(Duration::from_secs(1)));
    }
    if any {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn dmon(a: cli::DmonArgs) -> ExitCode {
    let mut viewer = match Viewer::new(&a.source) {
        Ok(v) => v,
        Err(c) => return c,
    };
    let mut run = || -> Result<ExitCode, Closed> {
        if !a.no_header {
            emit(&query::dmon_header())?;
        }
        let mut n = 0u64;
        loop {
            let view = viewer.view();
            if n == 0 && view.devices.is_empty() {
                let why = view
                    .no_device
                    .as_ref()
                    .map(|w| format!("{} [{}]", w.describe(), w.code().name()))
                    .unwrap_or_else(|| "none found".into());
                warn(&format!("umd-smi dmon: no aigpu device: {why}\n"));
                return Ok(ExitCode::FAILURE);
            }
            emit(&query::dmon_rows(&view))?;
            n += 1;
            if a.count.is_some_and(|c| n >= c) {
                return Ok(ExitCode::SUCCESS);
            }
            std::thread::sleep(a.delay);
        }
    };
    run().unwrap_or(ExitCode::SUCCESS)
}

fn log_dirs(given: &[PathBuf]) -> Vec<PathBuf> {
    if !given.is_empty() {
        return given.to_vec();
    }
    let env = |k: &str| std::env::var(k).ok();
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    umdlog::default_dirs(&env, uid)
        .into_iter()
        .find(|d| d.is_dir())
        .into_iter()
        .collect()
}

fn exporter_cmd(a: cli::ExporterArgs) -> ExitCode {
    let mut viewer = match Viewer::new(&a.source) {
        Ok(v) => v,
        Err(c) => return c,
    };
    let dirs = log_dirs(&a.log_dirs);
    let mut metrics = move || {
        let view = viewer.view();
        let drops = (!dirs.is_empty()).then(|| {
            let mut notes = Notes::default();
            exporter::log_drops(&dirs, &mut notes)
        });
        exporter::render(&view, drops.as_deref())
    };
    if let Some(addr) = a.listen {
        let listener = match std::net::TcpListener::bind(addr) {
            Ok(l) => l,
            Err(e) => {
                warn(&format!("umd-smi exporter: cannot listen on {addr}: {e}\n"));
                return ExitCode::FAILURE;
            }
        };
        let bound = listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let _ = emit(&format!(
            "umd-smi exporter: serving http://{bound}/metrics\n"
        ));
        exporter::serve(listener, a.max_scrapes, &mut metrics);
        return ExitCode::SUCCESS;
    }
    let Some(path) = a.textfile else {
        return ExitCode::from(2);
    };
    let mut n = 0u64;
    loop {
        if let Err(e) = exporter::write_textfile(&path, &metrics()) {
            warn(&format!("umd-smi exporter: {}: {e}\n", path.display()));
            return ExitCode::FAILURE;
        }
        n += 1;
        match a.interval {
            None => return ExitCode::SUCCESS,
            Some(_) if a.count.is_some_and(|c| n >= c) => return ExitCode::SUCCESS,
            Some(d) => std::thread::sleep(d),
        }
    }
}
