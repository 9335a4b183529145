//! The verdict as text (the screen, summary.txt) and as JSON (verdict.json), with every
//! finding's facts.

use super::{Facts, Status, Verdict};
use serde_json::{json, Value};

/// The verdict for people: one line per layer (OK or the first finding), its evidence lines
/// indented below.
pub fn render_text(v: &Verdict) -> String {
    let mut out =
        String::from("verdict (bottom up: the first finding of each layer, with its evidence):\n");
    for l in &v.0 {
        match &l.status {
            Status::Ok(basis) => out += &format!("  {}: OK — {basis}\n", l.layer.name()),
            Status::NotChecked(why) => {
                out += &format!("  {}: not checked — {why}\n", l.layer.name())
            }
            Status::Findings(fs) => {
                if let Some(f) = fs.first() {
                    out += &format!("  {}: {}\n", l.layer.name(), f.text);
                    for e in &f.evidence {
                        out += &format!("    evidence ({}): {}\n", e.source, e.line);
                    }
                    if !f.facts.fix.is_empty() {
                        out += &format!("    fix: {}\n", f.facts.fix);
                    }
                    if fs.len() > 1 {
                        out += &format!(
                            "    ({} more finding{}: see \"all findings\" in summary.txt)\n",
                            fs.len() - 1,
                            if fs.len() == 2 { "" } else { "s" }
                        );
                    }
                }
            }
        }
    }
    out
}

/// Every finding of every layer (summary.txt).
pub fn render_all(v: &Verdict) -> String {
    let mut out = String::new();
    for l in &v.0 {
        match &l.status {
            Status::Ok(b) => out += &format!("{}: OK — {b}\n", l.layer.name()),
            Status::NotChecked(w) => out += &format!("{}: not checked — {w}\n", l.layer.name()),
            Status::Findings(fs) => {
                for (i, f) in fs.iter().enumerate() {
                    out += &format!(
                        "{}{}: {}\n",
                        l.layer.name(),
                        if i == 0 { "" } else { " (also)" },
                        f.text
                    );
                    for e in &f.evidence {
                        out += &format!("    evidence ({}): {}\n", e.source, e.line);
                    }
                    if !f.facts.fix.is_empty() {
                        out += &format!("    fix: {}\n", f.facts.fix);
                    }
                }
            }
        }
    }
    out
}

/// The verdict for machines.
pub fn render_json(v: &Verdict) -> Value {
    Value::from(
        v.0.iter()
            .map(|l| {
                let (status, text, findings) = match &l.status {
                    Status::Ok(b) => ("ok", b.clone(), Vec::new()),
                    Status::NotChecked(w) => ("not_checked", w.clone(), Vec::new()),
                    Status::Findings(fs) => (
                        "finding",
                        fs.first().map(|f| f.text.clone()).unwrap_or_default(),
                        fs.clone(),
                    ),
                };
                json!({
                    "layer": l.layer.name(),
                    "status": status,
                    "text": text,
                    "findings": findings.iter().map(|f| {
                        let mut o = facts_json(&f.facts);
                        o.insert("text".into(), json!(f.text));
                        o.insert("evidence".into(), json!(f.evidence.iter().map(|e| json!({"source": e.source, "line": e.line})).collect::<Vec<_>>()));
                        Value::Object(o)
                    }).collect::<Vec<_>>(),
                })
            })
            .collect::<Vec<_>>(),
    )
}

/// A finding's facts as JSON fields: absent facts are left out, addresses are `0x` strings.
pub fn facts_json(f: &Facts) -> serde_json::Map<String, Value> {
    let mut o = serde_json::Map::new();
    if !f.kind.is_empty() {
        o.insert("kind".into(), json!(f.kind));
    }
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            o.insert(k.into(), v);
        }
    };
    put("pid", f.pid.map(Value::from));
    put("ctx", f.ctx.map(Value::from));
    put("call", f.call.clone().map(Value::from));
    put("packet", f.packet.clone().map(Value::from));
    put("va", f.va.map(|v| Value::from(format!("{v:#x}"))));
    put("size", f.size.map(Value::from));
    put("buffer", f.buffer.map(Value::from));
    put("culprit", f.culprit.map(Value::from));
    put("setting", f.setting.clone().map(Value::from));
    put("signal", f.signal.clone().map(Value::from));
    put("cause", f.cause.map(Value::from));
    put("injected", f.injected.map(Value::from));
    put("ran_ms", f.ran_ms.map(Value::from));
    put("state", f.state.clone().map(Value::from));
    put("wait_va", f.wait_va.map(|v| Value::from(format!("{v:#x}"))));
    put("wait_pa", f.wait_pa.map(|v| Value::from(format!("{v:#x}"))));
    put("wait_value", f.wait_value.map(Value::from));
    put("timeout_ms", f.timeout_ms.map(Value::from));
    put("timeout_source", f.timeout_source.clone().map(Value::from));
    put("recent_ms", f.recent_ms.clone().map(Value::from));
    put("allocated_at", f.allocated_at.clone().map(Value::from));
    put("freed_at", f.freed_at.clone().map(Value::from));
    if !f.innocent.is_empty() {
        put(
            "innocent",
            Some(json!(f
                .innocent
                .iter()
                .map(|(c, what)| json!({"ctx": c, "work": what}))
                .collect::<Vec<_>>())),
        );
    }
    if !f.fix.is_empty() {
        put("fix", Some(Value::from(f.fix.clone())));
    }
    o
}
