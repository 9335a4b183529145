//! Fatal-signal hook: on SIGSEGV, SIGBUS or SIGABRT the emergency ring is written out (with
//! async-signal-safe calls only, see [`super::ring`]), then the previous disposition is put back
//! and the signal is delivered again, so the process still dies the way it would have (core
//! dump, the Rust runtime's stack-overflow message, an application's own handler).
//! The writer thread is first asked to write out every record still queued, at most 200 ms
//! (`flush_from_signal`): otherwise the crashing process's log loses exactly its last records.
//! Before the black box is written, the process's `process_exit` record (docs/tools.md, "The
//! process's story") goes into the ring with `how=signal` and the signal's name, so the black box
//! says how the process ended: `exit()` never runs, so `story`'s exit record never would.
//! `UMD_LOG_SIGNALS=0` leaves the signal dispositions alone.

use super::{format, record::Record, ring};
use std::sync::atomic::{AtomicBool, Ordering};
use tracing_core::{callsite::Callsite, metadata::Kind, subscriber::Interest, Level, Metadata};

const SIGNALS: [i32; 3] = [libc::SIGSEGV, libc::SIGBUS, libc::SIGABRT];

struct Old(std::cell::UnsafeCell<[libc::sigaction; 3]>);
// SAFETY: written once in `install` before the handlers that read it are installed.
unsafe impl Sync for Old {}

static OLD: Old = Old(std::cell::UnsafeCell::new(
    // SAFETY: sigaction is plain data; all-zero is SIG_DFL with an empty mask.
    unsafe { std::mem::zeroed() },
));
static INSTALLED: AtomicBool = AtomicBool::new(false);
static FIRED: AtomicBool = AtomicBool::new(false);

/// The call site of the signal's exit record: a static one, because the record is built in
/// the handler without `tracing`'s dispatch (which may lock and allocate).
struct SignalExit;
static SIGNAL_EXIT_SITE: SignalExit = SignalExit;
static SIGNAL_EXIT: Metadata<'static> = tracing_core::metadata! {
    name: "process exit",
    target: "umd::log::story",
    level: Level::ERROR,
    fields: &[
        "message",
        "event",
        "how",
        "signal",
        "status",
        "live_devices",
        "live_context_count",
        "live_buffers",
    ],
    callsite: &SIGNAL_EXIT_SITE,
    kind: Kind::EVENT,
};
impl Callsite for SignalExit {
    fn set_interest(&self, _: Interest) {}
    fn metadata(&self) -> &Metadata<'_> {
        &SIGNAL_EXIT
    }
}

/// The exit record and its text line live here, not on the stack: the handler runs on the
/// alternate signal stack (`SA_ONSTACK`), a few KiB, as `ring`'s black-box scratch does. The
/// record is initialised by [`install`], outside any handler.
struct ExitScratch {
    record: std::cell::UnsafeCell<std::mem::MaybeUninit<Record<{ ring::SLOT_BYTES }>>>,
    line: std::cell::UnsafeCell<[u8; ring::SLOT_BYTES]>,
}
// SAFETY: used once, by the first fatal signal's handler (`FIRED`).
unsafe impl Sync for ExitScratch {}
static EXIT_SCRATCH: ExitScratch = ExitScratch {
    record: std::cell::UnsafeCell::new(std::mem::MaybeUninit::uninit()),
    line: std::cell::UnsafeCell::new([0; ring::SLOT_BYTES]),
};

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGABRT => "SIGABRT",
        _ => "signal",
    }
}

/// The `process_exit` record of a process dying of `sig`, stored in the emergency ring (the
/// black box written next holds it). Async-signal-safe: a stack record, atomic counters, clock
/// reads, `gettid`, the ring's lock-free store. The live contexts are a count here
/// (`live_context_count`), not the list `exit()`'s record gives: listing them takes the table's lock.
fn exit_record(sig: i32) {
    use crate::registry::{BUFFERS, CONTEXTS, DEVICES};
    use tracing::field::Visit;
    // SAFETY: `install` initialised the record before any handler was installed, and only the
    // first fatal signal's handler gets here (`FIRED`), once per process. `reset` works in place:
    // no record-sized temporary on the signal stack.
    let (r, line) = unsafe {
        let r = (*EXIT_SCRATCH.record.get()).assume_init_mut();
        r.reset(&SIGNAL_EXIT);
        (r, &mut *EXIT_SCRATCH.line.get())
    };
    r.mono_ns = crate::error::detail::mono_ns();
    r.tid = crate::error::detail::thread_id() as u32;
    let f = SIGNAL_EXIT.fields();
    let mut put_str = |name: &str, v: &str| {
        if let Some(field) = f.field(name) {
            r.record_str(&field, v);
        }
    };
    put_str("message", "process exit");
    put_str("event", "process_exit");
    put_str("how", "signal");
    put_str("signal", signal_name(sig));
    for (name, v) in [
        ("status", 128 + sig as u64),
        ("live_devices", DEVICES.live_count()),
        ("live_context_count", CONTEXTS.live_count()),
        ("live_buffers", BUFFERS.live_count()),
    ] {
        if let Some(field) = f.field(name) {
            r.record_u64(&field, v);
        }
    }
    let mut w = format::FixedLine::new(line);
    format::write_text(&mut w, r, crate::error::detail::wall_ns());
    let n = w.finish();
    ring::push(&line[..n]);
}

extern "C" fn on_fatal(sig: i32, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    if !FIRED.swap(true, Ordering::AcqRel) {
        // The handler's stderr notice must not turn the death into a SIGPIPE when stderr is a
        // closed pipe (the parent would see the wrong signal): SIGPIPE is ignored while the
        // handler writes (a write then fails with EPIPE) and put back before the signal is
        // delivered again. sigaction is async-signal-safe.
        // SAFETY: plain sigaction calls with valid structs.
        let mut pipe_old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: sigaction is plain data; all-zero is SIG_DFL with an empty mask.
        let mut ign: libc::sigaction = unsafe { std::mem::zeroed() };
        ign.sa_sigaction = libc::SIG_IGN;
        // SAFETY: valid new and old structs.
        let ignored = unsafe { libc::sigaction(libc::SIGPIPE, &ign, &mut pipe_old) } == 0;
        exit_record(sig);
        // The regular log first (its queued records, the process's start among them), then
        // the black box; a writer that does not answer in 200 ms is not waited for.
        super::flush_from_signal(200);
        ring::dump_from_signal(sig);
        if ignored {
            // SAFETY: puts back the disposition saved above.
            unsafe { libc::sigaction(libc::SIGPIPE, &pipe_old, std::ptr::null_mut()) };
        }
    }
    let Some(k) = SIGNALS.iter().position(|&s| s == sig) else {
        return;
    };
    // SAFETY: OLD was filled before this handler was installed; sigaction and raise are
    // async-signal-safe.
    unsafe {
        let old = &(*OLD.0.get())[k];
        libc::sigaction(sig, old, std::ptr::null_mut());
        // A fault raised by the kernel (si_code > 0) repeats when the instruction is restarted,
        // now reaching the previous handler; a signal sent by kill/raise/abort must be resent.
        let user = info.is_null() || (*info).si_code <= 0;
        if user {
            libc::raise(sig);
        }
    }
}

/// Installs the handlers once per process.
pub fn install() {
    if INSTALLED.swap(true, Ordering::AcqRel) {
        return;
    }
    // SAFETY: plain sigaction calls with valid structs; OLD and the exit record's scratch are
    // written before any handler that reads them is installed (each OLD entry before its own
    // signal's handler); `INSTALLED` makes this run once.
    unsafe {
        (*EXIT_SCRATCH.record.get()).write(Record::new(&SIGNAL_EXIT, false));
        let olds = &mut *OLD.0.get();
        for (k, &sig) in SIGNALS.iter().enumerate() {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_fatal as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(sig, std::ptr::null(), &mut olds[k]) != 0 {
                continue;
            }
            if olds[k].sa_sigaction == libc::SIG_IGN {
                continue;
            }
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}
