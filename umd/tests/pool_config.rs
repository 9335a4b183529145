//! A bad pool setting in the environment fails the context creation that creates the pool with
//! UMD_ERR_INIT_BAD_CONFIG naming the variable (its own process: it sets the environment).

#[path = "pool_util.rs"]
mod util;

use std::sync::Arc;
use umd::error::umdResult::*;

#[test]
fn a_bad_pool_variable_is_named() {
    util::env();
    std::env::set_var("UMD_POOL_RELEASE_THRESHOLD", "lots");
    let r = umd::registry::resolved().unwrap();
    let dev = Arc::new(umd::device::Device::open(&r, 0).unwrap());
    let e = umd::context::Context::create(&dev, 1)
        .err()
        .expect("bad config");
    assert_eq!(e.code, UMD_ERR_INIT_BAD_CONFIG);
    assert!(
        e.message.starts_with("UMD_POOL_RELEASE_THRESHOLD=\"lots\""),
        "{}",
        e.message
    );
    std::env::set_var("UMD_POOL_RELEASE_THRESHOLD", "1M");
    std::env::set_var("UMD_POOL", "off");
    let ctx = umd::context::Context::create(&dev, 1).unwrap();
    let s = ctx.pool.stats();
    assert!(!s.pool_enabled);
    assert_eq!(s.release_threshold, 1 << 20);
}
