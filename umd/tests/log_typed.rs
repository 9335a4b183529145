//! The typed front end (`umd::record!`, docs/logging.md "Two front ends"): the same bytes as
//! `tracing::info!` with the same fields, in text and JSON, on its fast path and on every path
//! it hands to `tracing` (a thread's first record, a record too long for a lane, WARN and
//! worse, a scoped dispatcher); filters changed at run time reach its call sites.

#[path = "log_util.rs"]
mod util;
use util::*;

/// A record of this test's module (text or JSON).
fn ours(l: &str) -> bool {
    l.contains(" log_typed ") || l.contains("\"module\":\"log_typed\"")
}

/// A string longer than a lane takes (so that record goes through the shared queue).
fn long() -> String {
    "x".repeat(300)
}

/// Logs each record twice on one line, once per front end: `(line, count)`.
#[rustfmt::skip]
fn log_pairs() -> Vec<u32> {
    let (ctx, size) = (7u64, 4096usize);
    let name = "optimizer.m";
    let long = long();
    let mut at = Vec::new();
    // Integers of every width, a negative, a bool, a float, short and long strings, the `va`
    // integer written in hex, the shorthand `name` for `name = name`.
    at.push(line!()); umd::record!(INFO, "alloc", ctx, size, va = 0x20_0000u64, small = 3u8, neg = -5i32, hit = true, ratio = 0.25f64, pool = "slab", name, tag = "a-much-longer-tag-value"); tracing::info!(ctx, size, va = 0x20_0000u64, small = 3u8, neg = -5i32, hit = true, ratio = 0.25f64, pool = "slab", name, tag = "a-much-longer-tag-value", "alloc");
    // No field but the message.
    at.push(line!()); umd::record!(INFO, "just a message"); tracing::info!("just a message");
    // Too long for a lane: `record!` hands it to `tracing` (shared queue).
    at.push(line!()); umd::record!(INFO, "long", tag = long.as_str()); tracing::info!(tag = long.as_str(), "long");
    // WARN goes through `tracing` (the emergency ring formats it on the caller).
    at.push(line!()); umd::record!(WARN, "warned", ctx, code = "UMD_ERR_MEM_OUT_OF_MEMORY"); tracing::warn!(ctx, code = "UMD_ERR_MEM_OUT_OF_MEMORY", "warned");
    // DEBUG is off in the file: neither is written.
    umd::record!(DEBUG, "never", ctx); tracing::debug!(ctx, "never");
    at
}

/// Every record of the file, the two of each pair next to each other (one thread, in order).
fn check_pairs(recs: &[String], at: &[u32], json: bool) {
    let f = file!();
    assert_eq!(recs.len(), 2 * at.len(), "{recs:#?}");
    for (k, pair) in recs.chunks(2).enumerate() {
        let strip = |l: &str| -> String {
            if json {
                // Everything after the time stamps.
                l.split_once(",\"level\"")
                    .map(|x| x.1.to_string())
                    .unwrap_or_default()
            } else {
                split_ts(l).2.to_string()
            }
        };
        assert_eq!(strip(&pair[0]), strip(&pair[1]), "pair {k}");
        let line = at[k];
        if json {
            assert!(
                pair[0].contains(&format!("\"file\":\"{f}\",\"line\":{line},")),
                "{}",
                pair[0]
            );
        } else {
            assert!(pair[0].contains(&format!(" {f}:{line} ")), "{}", pair[0]);
        }
    }
    let t = tid();
    if json {
        assert!(recs[0].contains(r#""ctx":7,"code":null,"msg":"alloc","fields":{"size":4096,"va":"0x200000","small":3,"neg":-5,"hit":true,"ratio":0.25,"pool":"slab","name":"optimizer.m","tag":"a-much-longer-tag-value"}}"#), "{}", recs[0]);
    } else {
        assert_eq!(
            split_ts(&recs[0]).2,
            format!("INFO tid={t} log_typed - {f}:{} ctx=7 code=- \"alloc\" size=4096 va=0x200000 small=3 neg=-5 hit=true ratio=0.25 pool=slab name=optimizer.m tag=a-much-longer-tag-value", at[0])
        );
        assert_eq!(
            split_ts(&recs[2]).2,
            format!(
                "INFO tid={t} log_typed - {f}:{} ctx=- code=- \"just a message\"",
                at[1]
            )
        );
        assert!(
            recs[4].ends_with(&format!("\"long\" tag={}", long())),
            "{}",
            recs[4]
        );
        assert_eq!(
            split_ts(&recs[6]).2,
            format!(
                "WARN tid={t} log_typed - {f}:{} ctx=7 code=UMD_ERR_MEM_OUT_OF_MEMORY \"warned\"",
                at[3]
            )
        );
    }
}

fn pairs_child() {
    umd::log::ensure_init();
    // The thread's first record takes the `tracing` path (it has no lane yet): one before the
    // pairs, so the pairs show the fast path, and one on a fresh thread below.
    tracing::info!("first");
    let at = log_pairs();
    flush();
    let dir = std::path::PathBuf::from(std::env::var("UMD_LOG_DIR").unwrap());
    let all = lines(&log_path(&dir, std::process::id()));
    let json = std::env::var("UMD_LOG_FORMAT").as_deref() == Ok("json");
    let recs: Vec<String> = all
        .iter()
        .filter(|l| !l.contains("\"first\""))
        .filter(|l| ours(l))
        .cloned()
        .collect();
    check_pairs(&recs, &at, json);
    // The WARN pair reached the console too, both records byte for byte.
    let s = stats();
    assert_eq!(s.dropped, 0);
}

#[test]
fn text_lines_are_the_tracing_lines() {
    if is_child() {
        pairs_child();
        return;
    }
    let dir = fresh_dir("typed-text");
    let o = run_child(
        "text_lines_are_the_tracing_lines",
        &[
            ("UMD_LOG_DIR", dir.to_str().unwrap()),
            ("UMD_LOG_CONSOLE", "warn"),
        ],
    );
    assert_ok(&o);
    let console: Vec<String> = stderr_lines(&o)
        .into_iter()
        .filter(|l| l.contains("\"warned\""))
        .collect();
    assert_eq!(console.len(), 2, "{console:#?}");
    assert_eq!(split_ts(&console[0]).2, split_ts(&console[1]).2);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn json_lines_are_the_tracing_lines() {
    if is_child() {
        pairs_child();
        return;
    }
    let dir = fresh_dir("typed-json");
    let o = run_child(
        "json_lines_are_the_tracing_lines",
        &[
            ("UMD_LOG_DIR", dir.to_str().unwrap()),
            ("UMD_LOG_CONSOLE", "error"),
            ("UMD_LOG_FORMAT", "json"),
        ],
    );
    assert_ok(&o);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A thread's very first record (no lane yet) and a level switched on at run time through the
/// C ABI (`umdLogSetLevel`, which rebuilds the call sites' cached interest) reach the file; a
/// level switched off again stops the records logged after it, not those logged before.
#[test]
fn first_record_of_a_thread_and_runtime_levels() {
    if is_child() {
        umd::log::ensure_init();
        let dir = std::path::PathBuf::from(std::env::var("UMD_LOG_DIR").unwrap());
        let debug_rec = |i: u64| umd::record!(DEBUG, "dbg", i);
        std::thread::spawn(|| umd::record!(INFO, "fresh thread", n = 1u64))
            .join()
            .unwrap();
        debug_rec(1);
        let r = umd::abi::log::umdLogSetLevel(
            c"log_typed".as_ptr(),
            umd::abi::log::UMD_LOG_LEVEL_DEBUG,
            umd::abi::log::UMD_LOG_SINK_FILE,
        );
        assert_eq!(r, umd::umdResult::UMD_SUCCESS);
        debug_rec(2);
        tracing::debug!(i = 22u64, "dbg");
        let r = umd::abi::log::umdLogSetLevel(
            c"log_typed".as_ptr(),
            umd::abi::log::UMD_LOG_LEVEL_INFO,
            umd::abi::log::UMD_LOG_SINK_FILE,
        );
        assert_eq!(r, umd::umdResult::UMD_SUCCESS);
        debug_rec(3);
        flush();
        let recs: Vec<String> = lines(&log_path(&dir, std::process::id()))
            .into_iter()
            .filter(|l| ours(l))
            .collect();
        // Both DEBUG records were logged while the level was on and are written although it
        // was off again before the writer got to them.
        assert_eq!(recs.len(), 3, "{recs:#?}");
        assert!(recs[0].ends_with("\"fresh thread\" n=1"), "{}", recs[0]);
        assert!(recs[1].contains("DEBUG tid="), "{}", recs[1]);
        assert!(recs[1].ends_with("\"dbg\" i=2"), "{}", recs[1]);
        assert!(recs[2].ends_with("\"dbg\" i=22"), "{}", recs[2]);
        return;
    }
    let dir = fresh_dir("typed-levels");
    let o = run_child(
        "first_record_of_a_thread_and_runtime_levels",
        &[("UMD_LOG_DIR", dir.to_str().unwrap())],
    );
    assert_ok(&o);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Under a scoped dispatcher (a Rust user's or a test's `with_default`) the record goes to that
/// subscriber, like every `tracing` event, and not to libumd's file.
#[test]
fn a_scoped_dispatcher_gets_the_record() {
    if is_child() {
        umd::log::ensure_init();
        tracing::info!("lane made");
        let dir = std::path::PathBuf::from(std::env::var("UMD_LOG_DIR").unwrap());
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        tracing::subscriber::with_default(Names(seen.clone()), || {
            umd::record!(INFO, "scoped", n = 2u64);
        });
        umd::record!(INFO, "global", n = 3u64);
        flush();
        assert_eq!(*seen.lock().unwrap(), ["message n"]);
        let recs: Vec<String> = lines(&log_path(&dir, std::process::id()))
            .into_iter()
            .filter(|l| ours(l) && !l.contains("\"lane made\""))
            .collect();
        assert_eq!(recs.len(), 1, "{recs:#?}");
        assert!(recs[0].ends_with("\"global\" n=3"), "{}", recs[0]);
        return;
    }
    let dir = fresh_dir("typed-scoped");
    let o = run_child(
        "a_scoped_dispatcher_gets_the_record",
        &[("UMD_LOG_DIR", dir.to_str().unwrap())],
    );
    assert_ok(&o);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A subscriber that keeps the field names of each event.
struct Names(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl tracing::Subscriber for Names {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, e: &tracing::Event<'_>) {
        let names: Vec<&str> = e.metadata().fields().iter().map(|f| f.name()).collect();
        self.0.lock().unwrap().push(names.join(" "));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}
