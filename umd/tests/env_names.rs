//! The list of environment variables libumd reads (`umd::log::config::VARIABLES`, which the
//! typo warning uses) is the set of `UMD_*` names the sources read: a variable added to a module
//! without the list would be reported as a typo, one removed would hide a typo.

use std::collections::BTreeSet;

fn names_in(dir: &std::path::Path, out: &mut BTreeSet<String>) {
    for e in std::fs::read_dir(dir).expect("read src") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            names_in(&p, out);
            continue;
        }
        if p.extension().is_none_or(|x| x != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&p).expect("read source");
        for (i, _) in text.match_indices("\"UMD_") {
            let rest = &text[i + 1..];
            let end = rest
                .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
                .unwrap_or(rest.len());
            if !rest[end..].starts_with('"') {
                continue;
            }
            let name = &rest[..end];
            let is_code = [
                "UMD_ERR_",
                "UMD_SUCCESS",
                "UMD_STATUS_",
                "UMD_UNKNOWN_",
                "UMD_ACTION_",
            ]
            .iter()
            .any(|p| name.starts_with(p));
            if !is_code {
                out.insert(name.to_string());
            }
        }
    }
}

#[test]
fn the_variable_list_is_what_the_sources_read() {
    let mut found = BTreeSet::new();
    names_in(
        std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src")),
        &mut found,
    );
    // The family prefixes themselves appear as literals in config.rs.
    for family in umd::log::config::FAMILIES {
        if !umd::log::config::VARIABLES.contains(family) {
            found.remove(*family);
        }
    }
    let listed: BTreeSet<String> = umd::log::config::VARIABLES
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(found, listed);
}

#[test]
fn typos_are_found_with_the_closest_name() {
    let set = [
        "UMD_LOG_DIRR",
        "UMD_LOG",
        "UMD_SIM_DEVICE",
        "UMD_BACKEN",
        "UMD_LOGG",
        "HOME",
        "UMD_TEST_LOG_CHILD",
    ];
    let v = umd::log::config::unknown_variables(set.iter().map(|s| s.to_string()));
    assert_eq!(
        v,
        vec![
            ("UMD_BACKEN".to_string(), "UMD_BACKEND"),
            ("UMD_LOGG".to_string(), "UMD_LOG"),
            ("UMD_LOG_DIRR".to_string(), "UMD_LOG_DIR"),
            ("UMD_SIM_DEVICE".to_string(), "UMD_SIM_DEVICES"),
        ]
    );
}
