//! Collecting figures across engines and repeats, and printing them.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{json, Value};

use crate::engine::EngineKind;

/// What a row measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Operations (or entries, or transactions) per second.
    PerSec(&'static str),
    /// MiB per second.
    MibPerSec,
    /// Microseconds (lower is better).
    Micros,
    /// Microseconds per item (lower is better).
    MicrosPer(&'static str),
    /// MiB on disk (lower is better).
    Mib,
    /// A dimensionless factor (higher is better).
    Factor,
}

impl Unit {
    pub fn higher_is_better(self) -> bool {
        matches!(self, Unit::PerSec(_) | Unit::MibPerSec | Unit::Factor)
    }

    pub fn label(self) -> String {
        match self {
            Unit::PerSec(what) => format!("{what}/s"),
            Unit::MibPerSec => "MiB/s".into(),
            Unit::Micros => "µs".into(),
            Unit::MicrosPer(what) => format!("µs/{what}"),
            Unit::Mib => "MiB".into(),
            Unit::Factor => "×".into(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Row {
    pub id: String,
    pub label: String,
    pub unit: Unit,
    /// Whether CairnDB's commits per flush are shown for this row.
    pub show_cpf: bool,
}

/// Every figure of one suite.
#[derive(Debug, Default, Clone)]
pub struct SuiteResults {
    pub rows: Vec<Row>,
    /// (row id, engine) → one sample per repeat.
    pub samples: BTreeMap<(String, EngineKind), Vec<f64>>,
    /// row id → CairnDB commits per flush, one per repeat.
    pub cpf: BTreeMap<String, Vec<f64>>,
    /// Errors and remarks, per engine.
    pub notes: Vec<(EngineKind, String)>,
    /// A column of published reference figures (title, row id → figure),
    /// printed beside the engines (other hardware: for orientation only).
    pub reference: Option<(String, BTreeMap<String, String>)>,
}

impl SuiteResults {
    pub fn record(&mut self, row: &Row, engine: EngineKind, value: f64) {
        if !self.rows.iter().any(|r| r.id == row.id) {
            self.rows.push(row.clone());
        }
        self.samples
            .entry((row.id.clone(), engine))
            .or_default()
            .push(value);
    }

    /// Adds a note once (repeats do not duplicate it).
    pub fn note(&mut self, engine: EngineKind, note: String) {
        if !self.notes.iter().any(|(e, n)| *e == engine && *n == note) {
            self.notes.push((engine, note));
        }
    }

    pub fn record_cpf(&mut self, row: &Row, cpf: f64) {
        self.cpf.entry(row.id.clone()).or_default().push(cpf);
    }

    /// Records CairnDB's commits per device flush over `commits` commits,
    /// from its flush count `before` and `after` them (other engines' are
    /// not counted; no flush, no figure).
    pub fn record_flushes(
        &mut self,
        row: &Row,
        engine: EngineKind,
        before: Option<u64>,
        after: Option<u64>,
        commits: u64,
    ) {
        if engine == EngineKind::Cairn {
            if let (Some(b), Some(a)) = (before, after) {
                if a > b {
                    self.record_cpf(row, commits as f64 / (a - b) as f64);
                }
            }
        }
    }

    pub fn median(&self, row: &str, engine: EngineKind) -> Option<f64> {
        self.samples
            .get(&(row.to_string(), engine))
            .map(|v| median(v))
    }

    /// The best peer (not CairnDB) of a row and its median.
    pub fn best_peer(&self, row: &Row, engines: &[EngineKind]) -> Option<(EngineKind, f64)> {
        let mut best: Option<(EngineKind, f64)> = None;
        for &e in engines.iter().filter(|&&e| e != EngineKind::Cairn) {
            if let Some(m) = self.median(&row.id, e) {
                let better = match best {
                    None => true,
                    Some((_, b)) => {
                        if row.unit.higher_is_better() {
                            m > b
                        } else {
                            m < b
                        }
                    }
                };
                if better {
                    best = Some((e, m));
                }
            }
        }
        best
    }

    /// CairnDB's ratio to the best peer (>1: CairnDB leads).
    pub fn ratio(&self, row: &Row, engines: &[EngineKind]) -> Option<f64> {
        let c = self.median(&row.id, EngineKind::Cairn)?;
        let (_, b) = self.best_peer(row, engines)?;
        if row.unit.higher_is_better() {
            (b > 0.0).then(|| c / b)
        } else {
            (c > 0.0).then(|| b / c)
        }
    }

    /// Whether `engine` has a figure or a note in this suite.
    pub fn has_engine(&self, engine: EngineKind) -> bool {
        self.samples.keys().any(|(_, e)| *e == engine)
            || self.notes.iter().any(|(e, _)| *e == engine)
    }

    /// The notes under a suite's table (nothing when there are none).
    pub fn notes_markdown(&self) -> String {
        let mut s = String::new();
        if !self.notes.is_empty() {
            let _ = writeln!(s, "\nNotes:\n");
            for (e, note) in &self.notes {
                let _ = writeln!(s, "- {}: {note}", e.title());
            }
        }
        s
    }

    pub fn markdown(&self, engines: &[EngineKind]) -> String {
        // No column for an engine that did not take part in this suite.
        let engines: Vec<EngineKind> = engines
            .iter()
            .copied()
            .filter(|&e| self.has_engine(e))
            .collect();
        let engines = &engines[..];
        let mut s = String::new();
        let _ = write!(s, "| Workload | Unit |");
        for e in engines {
            let _ = write!(s, " {} |", e.title());
        }
        let _ = write!(s, " CairnDB ÷ best peer |");
        if let Some((title, _)) = &self.reference {
            let _ = write!(s, " {title} |");
        }
        let _ = writeln!(s);
        let _ = write!(s, "|---|---|");
        for _ in engines {
            let _ = write!(s, "---:|");
        }
        let _ = write!(s, "---:|");
        if self.reference.is_some() {
            let _ = write!(s, "---:|");
        }
        let _ = writeln!(s);
        for row in &self.rows {
            let _ = write!(s, "| {} | {} |", row.label, row.unit.label());
            for &e in engines {
                let cell = match self.median(&row.id, e) {
                    Some(m) => {
                        let mut c = fmt_num(m);
                        if e == EngineKind::Cairn && row.show_cpf {
                            if let Some(cpf) = self.cpf.get(&row.id) {
                                let _ = write!(c, " ({:.2} c/f)", median(cpf));
                            }
                        }
                        c
                    }
                    None => "—".into(),
                };
                let _ = write!(s, " {cell} |");
            }
            let ratio = match (self.ratio(row, engines), self.best_peer(row, engines)) {
                (Some(r), Some((e, _))) => format!("{r:.2} ({})", e.title()),
                _ => "—".into(),
            };
            let _ = write!(s, " {ratio} |");
            if let Some((_, refs)) = &self.reference {
                let _ = write!(s, " {} |", refs.get(&row.id).map_or("—", |r| r.as_str()));
            }
            let _ = writeln!(s);
        }
        s
    }

    /// One object per (row, engine), the rows of every suite's JSON:
    /// `{"suite","id","engine","durability","value","unit","min","max"}`.
    pub fn flat_rows(&self, suite: &str, engines: &[EngineKind]) -> Vec<Value> {
        let mut out = Vec::new();
        for row in &self.rows {
            let durability = row
                .id
                .split('/')
                .find(|p| *p == "D" || *p == "N")
                .map(str::to_string);
            for &e in engines {
                let Some(v) = self.samples.get(&(row.id.clone(), e)) else {
                    continue;
                };
                let min = v.iter().copied().fold(f64::INFINITY, f64::min);
                let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let mut o = json!({
                    "suite": suite,
                    "id": row.id,
                    "label": row.label,
                    "engine": if e == EngineKind::Cairn { "cairndb" } else { e.name() },
                    "durability": durability,
                    "value": median(v),
                    "unit": row.unit.label(),
                    "higher_is_better": row.unit.higher_is_better(),
                    "min": min,
                    "max": max,
                });
                if e == EngineKind::Cairn {
                    if let (Some(c), Some(m)) = (self.cpf.get(&row.id), o.as_object_mut()) {
                        m.insert("commits_per_flush".into(), json!(median(c)));
                    }
                }
                out.push(o);
            }
        }
        out
    }

    pub fn json(&self, engines: &[EngineKind]) -> Value {
        let rows: Vec<Value> = self
            .rows
            .iter()
            .map(|row| {
                let mut results = serde_json::Map::new();
                for &e in engines {
                    if let Some(v) = self.samples.get(&(row.id.clone(), e)) {
                        results.insert(e.name().into(), stats(v));
                    }
                }
                let best = self.best_peer(row, engines);
                json!({
                    "id": row.id,
                    "label": row.label,
                    "unit": row.unit.label(),
                    "higher_is_better": row.unit.higher_is_better(),
                    "results": results,
                    "cairn_commits_per_flush": self.cpf.get(&row.id).map(|v| stats(v)),
                    "best_peer": best.map(|(e, _)| e.name()),
                    "cairn_ratio_to_best_peer": self.ratio(row, engines),
                    "reference": self.reference.as_ref().and_then(|(_, r)| r.get(&row.id)),
                })
            })
            .collect();
        let notes: Vec<Value> = self
            .notes
            .iter()
            .map(|(e, n)| json!({"engine": e.name(), "note": n}))
            .collect();
        json!({
            "rows": rows,
            "notes": notes,
            "reference_source": self.reference.as_ref().map(|(t, _)| t),
        })
    }
}

fn stats(v: &[f64]) -> Value {
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    json!({ "median": median(v), "min": min, "max": max, "samples": v })
}

pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// A figure with three significant digits, grouped by thousands.
pub fn fmt_num(x: f64) -> String {
    if !x.is_finite() {
        return format!("{x}");
    }
    let a = x.abs();
    if a >= 1e9 {
        format!("{:.2}G", x / 1e9)
    } else if a >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}K", x / 1e3)
    } else if a >= 100.0 {
        group(x.round() as i64)
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// A count grouped by thousands: 1234567 → `1,234,567`.
pub fn n_label(n: usize) -> String {
    group(n as i64)
}

fn group(n: i64) -> String {
    let s = n.abs().to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(fmt_num(723_000.0), "723K");
        assert_eq!(fmt_num(2_659_045.0), "2.66M");
        assert_eq!(fmt_num(5_600.0), "5,600");
        assert_eq!(fmt_num(12.34), "12.3");
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
    }
}
