//! Helpers shared by the `pool_*` tests (included with `#[path]`; as its own test target it has
//! no tests). Everything goes through the backend `UMD_BACKEND` selects (the simulator by
//! default; the real module in the guest), so the same tests run on both.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use umd::cmdbuf::CmdBuf;
use umd::context::Context;
use umd::device::Device;
use umd::memory::pool::config::Config;
use umd::memory::pool::Pool;

/// Selects the simulator unless the environment chose a backend.
pub fn env() {
    if std::env::var_os("UMD_BACKEND").is_none() {
        std::env::set_var("UMD_BACKEND", "sim");
    }
}

/// A fresh device open (own address space) with a pool of `config`, and one context.
pub fn setup(config: Config) -> (Arc<Device>, Arc<Pool>, Arc<Context>) {
    env();
    let r = umd::registry::resolved().expect("backend resolves");
    let dev = Arc::new(Device::open(&r, 0).expect("device opens"));
    let pool = Pool::install(&dev, config).expect("pool installs");
    let ctx = Arc::new(Context::create(&dev, 1).expect("context"));
    (dev, pool, ctx)
}

/// Default settings.
pub fn on() -> Config {
    Config::default()
}

/// A command buffer with `packets` recorded and ended.
pub fn cmdbuf(ctx: &Arc<Context>, packets: &[&[u32]]) -> Arc<CmdBuf> {
    let cb = Arc::new(CmdBuf::new(ctx.clone()));
    cb.begin().expect("begin");
    for p in packets {
        cb.record(p).expect("record");
    }
    cb.end().expect("end");
    cb
}

/// Events captured by [`Capture`]: "message k=v k=v".
#[derive(Clone, Default)]
pub struct Lines(pub Arc<Mutex<Vec<String>>>);

impl Lines {
    /// Lines containing `needle`.
    pub fn grep(&self, needle: &str) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(needle))
            .cloned()
            .collect()
    }
}

/// A minimal tracing subscriber that records every event as one line (set as the thread's
/// default with `tracing::subscriber::with_default`).
pub struct Capture(pub Lines);

struct Visit<'a>(&'a mut String);

impl tracing::field::Visit for Visit<'_> {
    fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
        if f.name() == "message" {
            self.0.insert_str(0, &format!("{v:?}"));
        } else {
            self.0.push_str(&format!(" {}={v:?}", f.name()));
        }
    }
    fn record_str(&mut self, f: &tracing::field::Field, v: &str) {
        if f.name() == "message" {
            self.0.insert_str(0, v);
        } else {
            self.0.push_str(&format!(" {}={v}", f.name()));
        }
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, e: &tracing::Event<'_>) {
        let mut s = String::new();
        e.record(&mut Visit(&mut s));
        s.insert_str(0, &format!("{} ", e.metadata().level()));
        self.0 .0.lock().unwrap().push(s);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}
