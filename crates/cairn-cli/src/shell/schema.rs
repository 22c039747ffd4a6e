//! `.schema COLL`: the field paths of a sample of documents, with their
//! kinds and how often each appears (also the field paths completion
//! offers).

use std::collections::BTreeMap;

use cairndb::document::{Document, Value};

/// What a sample showed of one field path.
#[derive(Debug, Default, Clone)]
pub struct FieldStats {
    /// Documents in which the path appears.
    pub docs: u64,
    /// How many values of each kind (array elements counted under the
    /// array's path too, as the query language matches them).
    pub kinds: BTreeMap<&'static str, u64>,
}

/// The paths of a sample, in order of first appearance.
#[derive(Debug, Default)]
pub struct Schema {
    pub sampled: u64,
    pub fields: Vec<(String, FieldStats)>,
}

impl Schema {
    /// Adds a document of the sample.
    pub fn add(&mut self, doc: &Document) {
        self.sampled += 1;
        let mut seen = Vec::new();
        self.walk_doc(doc, "", &mut seen);
    }

    fn entry(&mut self, path: &str) -> &mut FieldStats {
        let i = match self.fields.iter().position(|(p, _)| p == path) {
            Some(i) => i,
            None => {
                self.fields.push((path.to_string(), FieldStats::default()));
                self.fields.len() - 1
            }
        };
        &mut self.fields[i].1
    }

    fn walk_doc(&mut self, doc: &Document, prefix: &str, seen: &mut Vec<String>) {
        for (k, v) in doc.iter() {
            let path = if prefix.is_empty() {
                k.to_string()
            } else {
                format!("{prefix}.{k}")
            };
            self.walk(v, &path, seen, 0);
        }
    }

    fn walk(&mut self, v: &Value, path: &str, seen: &mut Vec<String>, depth: usize) {
        if !seen.iter().any(|p| p == path) {
            seen.push(path.to_string());
            self.entry(path).docs += 1;
        }
        *self.entry(path).kinds.entry(v.kind().name()).or_default() += 1;
        // Deep nesting is capped so that a sample stays cheap.
        if depth > 32 {
            return;
        }
        match v {
            Value::Object(d) => self.walk_doc(d, path, seen),
            Value::Array(items) => {
                for item in items {
                    if let Value::Object(d) = item {
                        self.walk_doc(d, path, seen);
                    }
                }
            }
            _ => {}
        }
    }

    /// One row per path: `path`, `kinds` (with shares) and `present` (the
    /// share of sampled documents that have it).
    pub fn rows(&self) -> Vec<serde_json::Value> {
        self.fields
            .iter()
            .map(|(path, s)| {
                let total: u64 = s.kinds.values().sum();
                let mut kinds: Vec<(&str, u64)> = s.kinds.iter().map(|(k, n)| (*k, *n)).collect();
                kinds.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
                let kinds: Vec<String> = kinds
                    .iter()
                    .map(|(k, n)| {
                        if kinds.len() == 1 {
                            k.to_string()
                        } else {
                            format!("{k} {}%", percent(*n, total))
                        }
                    })
                    .collect();
                serde_json::json!({
                    "path": path,
                    "kinds": kinds.join(", "),
                    "present": format!("{}% ({}/{})", percent(s.docs, self.sampled), s.docs, self.sampled),
                })
            })
            .collect()
    }
}

fn percent(n: u64, of: u64) -> u64 {
    (n * 100 + of / 2).checked_div(of).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_kinds_and_frequencies() {
        let mut s = Schema::default();
        let a = Value::from_json(
            serde_json::json!({"a": 1, "b": {"c": "x"}, "t": [{"u": 1}, {"u": 2}]}),
        )
        .unwrap();
        let b = Value::from_json(serde_json::json!({"a": "s"})).unwrap();
        s.add(a.as_object().unwrap());
        s.add(b.as_object().unwrap());
        let rows = s.rows();
        assert_eq!(rows[0]["path"], "a");
        assert_eq!(rows[0]["kinds"], "int 50%, string 50%");
        assert_eq!(rows[0]["present"], "100% (2/2)");
        let paths: Vec<&str> = rows.iter().map(|r| r["path"].as_str().unwrap()).collect();
        assert_eq!(paths, ["a", "b", "b.c", "t", "t.u"]);
        assert_eq!(rows[4]["present"], "50% (1/2)");
    }
}
