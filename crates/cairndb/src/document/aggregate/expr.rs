//! Aggregation expressions: field paths (`"$a.b"`), `$$ROOT`, literals,
//! object and array expressions, and the operators listed in the
//! [`aggregate`](super) module docs. An expression evaluates to a value or
//! to *missing* (`None`), which differs from `null` as in MongoDB: a path
//! that reaches nothing is missing, and `$project` / `$addFields` leave a
//! field out when its expression is missing.

use std::cmp::Ordering;

use super::super::keys;
use super::super::value::{Document, Value};

/// An expression error: the operator and what was wrong (the stage index
/// is added by the stage that evaluates it).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ExprError {
    pub operator: String,
    pub reason: String,
}

pub(crate) type ExprResult<T> = Result<T, ExprError>;

pub(crate) fn err<T>(operator: &str, reason: impl Into<String>) -> ExprResult<T> {
    Err(ExprError {
        operator: operator.to_string(),
        reason: reason.into(),
    })
}

/// An operator taking evaluated arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Add,
    Subtract,
    Multiply,
    Divide,
    Concat,
    ToLower,
    ToUpper,
    IfNull,
    Eq,
    Ne,
    Gt,
    Gte,
    Lt,
    Lte,
    Cmp,
    And,
    Or,
    Not,
    Size,
    ArrayElemAt,
}

impl Op {
    fn of(name: &str) -> Option<Op> {
        Some(match name {
            "$add" => Op::Add,
            "$subtract" => Op::Subtract,
            "$multiply" => Op::Multiply,
            "$divide" => Op::Divide,
            "$concat" => Op::Concat,
            "$toLower" => Op::ToLower,
            "$toUpper" => Op::ToUpper,
            "$ifNull" => Op::IfNull,
            "$eq" => Op::Eq,
            "$ne" => Op::Ne,
            "$gt" => Op::Gt,
            "$gte" => Op::Gte,
            "$lt" => Op::Lt,
            "$lte" => Op::Lte,
            "$cmp" => Op::Cmp,
            "$and" => Op::And,
            "$or" => Op::Or,
            "$not" => Op::Not,
            "$size" => Op::Size,
            "$arrayElemAt" => Op::ArrayElemAt,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Op::Add => "$add",
            Op::Subtract => "$subtract",
            Op::Multiply => "$multiply",
            Op::Divide => "$divide",
            Op::Concat => "$concat",
            Op::ToLower => "$toLower",
            Op::ToUpper => "$toUpper",
            Op::IfNull => "$ifNull",
            Op::Eq => "$eq",
            Op::Ne => "$ne",
            Op::Gt => "$gt",
            Op::Gte => "$gte",
            Op::Lt => "$lt",
            Op::Lte => "$lte",
            Op::Cmp => "$cmp",
            Op::And => "$and",
            Op::Or => "$or",
            Op::Not => "$not",
            Op::Size => "$size",
            Op::ArrayElemAt => "$arrayElemAt",
        }
    }

    /// The accepted number of arguments: (min, max).
    fn arity(self) -> (usize, usize) {
        match self {
            Op::Add | Op::Multiply | Op::Concat | Op::And | Op::Or => (0, usize::MAX),
            Op::IfNull => (2, usize::MAX),
            Op::ToLower | Op::ToUpper | Op::Not | Op::Size => (1, 1),
            _ => (2, 2),
        }
    }
}

/// A parsed expression.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Expr {
    /// A constant.
    Lit(Value),
    /// A field path from the current document (`"$a.b"`, `"$$ROOT.a"`;
    /// empty for `"$$ROOT"` itself).
    Field(Vec<String>),
    /// An object whose fields are expressions.
    Object(Vec<(String, Expr)>),
    /// An array whose elements are expressions.
    Array(Vec<Expr>),
    /// `$cond`.
    Cond(Box<Expr>, Box<Expr>, Box<Expr>),
    /// An operator.
    Op(Op, Vec<Expr>),
    /// `{"$meta": "textScore"}`: the document's `$text` score.
    TextScore,
}

/// What an expression is evaluated on: the current document and its
/// metadata (the `$text` score, when the pipeline started with a `$text`
/// `$match` and no stage since dropped it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cx<'a> {
    /// The current document.
    pub doc: &'a Value,
    /// Its `$text` score.
    pub score: Option<f64>,
}

/// MongoDB's error for a score asked of a document that has none.
pub(crate) const NO_TEXT_SCORE: &str =
    "query requires text score metadata, but it is not available (the pipeline must start with a $text $match, and no $group, $sortByCount or $count since)";

/// Parses a field path after its `$` (`"a.b"`) or a `$$` variable.
fn parse_path(text: &str) -> ExprResult<Expr> {
    if let Some(var) = text.strip_prefix("$$") {
        let (name, rest) = match var.split_once('.') {
            Some((n, r)) => (n, Some(r)),
            None => (var, None),
        };
        if name != "ROOT" && name != "CURRENT" {
            return err(
                &format!("$${name}"),
                "unknown variable (only $$ROOT and $$CURRENT are supported)",
            );
        }
        return Ok(Expr::Field(match rest {
            Some(r) => split_path(text, r)?,
            None => Vec::new(),
        }));
    }
    let body = text.strip_prefix('$').unwrap_or(text);
    Ok(Expr::Field(split_path(text, body)?))
}

fn split_path(whole: &str, body: &str) -> ExprResult<Vec<String>> {
    let segs: Vec<String> = body.split('.').map(str::to_string).collect();
    if segs.iter().any(|s| s.is_empty() || s.starts_with('$')) {
        return err(
            whole,
            "a field path needs non-empty segments that do not start with $",
        );
    }
    Ok(segs)
}

impl Expr {
    /// Parses an expression.
    pub(crate) fn parse(v: &Value) -> ExprResult<Expr> {
        match v {
            Value::String(s) if s.starts_with('$') => parse_path(s),
            Value::Array(items) => Ok(Expr::Array(
                items.iter().map(Expr::parse).collect::<ExprResult<_>>()?,
            )),
            Value::Object(d) => Expr::parse_object(d),
            other => Ok(Expr::Lit(other.clone())),
        }
    }

    fn parse_object(d: &Document) -> ExprResult<Expr> {
        let first_op = d.keys().find(|k| k.starts_with('$'));
        let Some(op) = first_op else {
            let mut fields = Vec::with_capacity(d.len());
            for (k, v) in d.iter() {
                if k.contains('.') {
                    return err(k, "a field name in an object expression cannot contain '.'");
                }
                fields.push((k.to_string(), Expr::parse(v)?));
            }
            return Ok(Expr::Object(fields));
        };
        if d.len() != 1 {
            return err(
                op,
                "an expression object must have exactly one field, the operator",
            );
        }
        let arg = d.values().next().cloned().unwrap_or(Value::Null);
        match op {
            "$literal" => Ok(Expr::Lit(arg)),
            "$meta" => match &arg {
                Value::String(m) if m == "textScore" => Ok(Expr::TextScore),
                Value::String(m) => err(
                    op,
                    format!("unsupported metadata {m:?}: only \"textScore\" is available"),
                ),
                other => err(
                    op,
                    format!(
                        "needs a string naming the metadata (\"textScore\"), found {}",
                        other.kind().name()
                    ),
                ),
            },
            "$cond" => {
                let (i, t, e) = match &arg {
                    Value::Array(a) if a.len() == 3 => (&a[0], &a[1], &a[2]),
                    Value::Array(_) => return err(op, "needs 3 arguments: [if, then, else]"),
                    Value::Object(o) => {
                        for k in o.keys() {
                            if !matches!(k, "if" | "then" | "else") {
                                return err(op, format!("unknown argument {k:?}"));
                            }
                        }
                        match (o.get("if"), o.get("then"), o.get("else")) {
                            (Some(i), Some(t), Some(e)) => (i, t, e),
                            _ => return err(op, "needs the arguments if, then and else"),
                        }
                    }
                    _ => {
                        return err(
                            op,
                            "needs an array [if, then, else] or an object {if, then, else}",
                        )
                    }
                };
                Ok(Expr::Cond(
                    Box::new(Expr::parse(i)?),
                    Box::new(Expr::parse(t)?),
                    Box::new(Expr::parse(e)?),
                ))
            }
            _ => {
                let Some(o) = Op::of(op) else {
                    return err(op, "unknown expression operator");
                };
                let args: Vec<Expr> = match &arg {
                    Value::Array(a) => a.iter().map(Expr::parse).collect::<ExprResult<_>>()?,
                    other => vec![Expr::parse(other)?],
                };
                let (min, max) = o.arity();
                if args.len() < min || args.len() > max {
                    let want = if min == max {
                        format!("{min}")
                    } else if max == usize::MAX {
                        format!("at least {min}")
                    } else {
                        format!("{min} to {max}")
                    };
                    return err(op, format!("needs {want} arguments, found {}", args.len()));
                }
                Ok(Expr::Op(o, args))
            }
        }
    }

    /// Evaluates on `root` (the current document, without metadata);
    /// `None` is missing.
    pub(crate) fn eval(&self, root: &Value) -> ExprResult<Option<Value>> {
        self.eval_in(&Cx {
            doc: root,
            score: None,
        })
    }

    /// Whether the expression reads the `$text` score somewhere.
    pub(crate) fn uses_text_score(&self) -> bool {
        match self {
            Expr::TextScore => true,
            Expr::Lit(_) | Expr::Field(_) => false,
            Expr::Object(fields) => fields.iter().any(|(_, e)| e.uses_text_score()),
            Expr::Array(items) | Expr::Op(_, items) => items.iter().any(Expr::uses_text_score),
            Expr::Cond(i, t, e) => {
                i.uses_text_score() || t.uses_text_score() || e.uses_text_score()
            }
        }
    }

    /// Evaluates in `cx` (the current document and its metadata).
    pub(crate) fn eval_in(&self, cx: &Cx<'_>) -> ExprResult<Option<Value>> {
        match self {
            Expr::TextScore => match cx.score {
                Some(s) => Ok(Some(Value::Float(s))),
                None => err("$meta", NO_TEXT_SCORE),
            },
            Expr::Lit(v) => Ok(Some(v.clone())),
            Expr::Field(path) => Ok(field_path(cx.doc, path)),
            Expr::Object(fields) => {
                let mut d = Document::with_capacity(fields.len());
                for (k, e) in fields {
                    if let Some(v) = e.eval_in(cx)? {
                        d.insert(k.clone(), v);
                    }
                }
                Ok(Some(Value::Object(d)))
            }
            Expr::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for e in items {
                    // A missing element becomes null, as in MongoDB.
                    out.push(e.eval_in(cx)?.unwrap_or(Value::Null));
                }
                Ok(Some(Value::Array(out)))
            }
            Expr::Cond(i, t, e) => {
                if truthy(i.eval_in(cx)?.as_ref()) {
                    t.eval_in(cx)
                } else {
                    e.eval_in(cx)
                }
            }
            Expr::Op(op, args) => eval_op(*op, args, cx),
        }
    }
}

/// The value of an aggregation field path: object fields by name; through
/// an array, the path applied to each element, giving an array of the
/// values found (numeric segments are field names, not positions).
pub(crate) fn field_path(v: &Value, path: &[String]) -> Option<Value> {
    let Some((seg, rest)) = path.split_first() else {
        return Some(v.clone());
    };
    match v {
        Value::Object(d) => d.get(seg).and_then(|f| field_path(f, rest)),
        Value::Array(a) => Some(Value::Array(
            a.iter()
                .filter(|e| matches!(e, Value::Object(_) | Value::Array(_)))
                .filter_map(|e| field_path(e, path))
                .collect(),
        )),
        _ => None,
    }
}

/// Aggregation truthiness: false, null, missing and zero are false;
/// everything else (empty strings and arrays included) is true.
pub(crate) fn truthy(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Int(i)) => *i != 0,
        Some(Value::Float(f)) => *f != 0.0,
        Some(_) => true,
    }
}

/// Compares two expression values: missing sorts before null, then the
/// engine's value order ([`keys::compare`]).
pub(crate) fn compare_opt(a: Option<&Value>, b: Option<&Value>) -> Ordering {
    match (a, b) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(x), Some(y)) => keys::compare(x, y),
    }
}

fn nullish(v: &Option<Value>) -> bool {
    matches!(v, None | Some(Value::Null))
}

fn type_name(v: &Option<Value>) -> &'static str {
    match v {
        None => "missing",
        Some(v) => v.kind().name(),
    }
}

/// A running number: integers until a float or an overflow.
#[derive(Clone, Copy)]
enum Num {
    Int(i64),
    Float(f64),
}

fn num_of(op: Op, v: &Option<Value>) -> ExprResult<Num> {
    match v {
        Some(Value::Int(i)) => Ok(Num::Int(*i)),
        Some(Value::Float(f)) => Ok(Num::Float(*f)),
        other => err(
            op.name(),
            format!("only supports numbers, not {}", type_name(other)),
        ),
    }
}

fn as_f(n: Num) -> f64 {
    match n {
        Num::Int(i) => i as f64,
        Num::Float(f) => f,
    }
}

fn arith(a: Num, b: Num, int: IntOp, float: FloatOp) -> Num {
    match (a, b) {
        (Num::Int(x), Num::Int(y)) => match int(x, y) {
            Some(r) => Num::Int(r),
            None => Num::Float(float(x as f64, y as f64)),
        },
        _ => Num::Float(float(as_f(a), as_f(b))),
    }
}

type IntOp = fn(i64, i64) -> Option<i64>;
type FloatOp = fn(f64, f64) -> f64;

fn num_value(n: Num) -> Value {
    match n {
        Num::Int(i) => Value::Int(i),
        Num::Float(f) => Value::Float(f),
    }
}

fn eval_op(op: Op, args: &[Expr], cx: &Cx<'_>) -> ExprResult<Option<Value>> {
    // Short-circuiting operators first.
    match op {
        Op::And => {
            for a in args {
                if !truthy(a.eval_in(cx)?.as_ref()) {
                    return Ok(Some(Value::Bool(false)));
                }
            }
            return Ok(Some(Value::Bool(true)));
        }
        Op::Or => {
            for a in args {
                if truthy(a.eval_in(cx)?.as_ref()) {
                    return Ok(Some(Value::Bool(true)));
                }
            }
            return Ok(Some(Value::Bool(false)));
        }
        Op::IfNull => {
            let (last, rest) = match args.split_last() {
                Some(x) => x,
                None => return Ok(None),
            };
            for a in rest {
                let v = a.eval_in(cx)?;
                if !nullish(&v) {
                    return Ok(v);
                }
            }
            return last.eval_in(cx);
        }
        _ => {}
    }
    let vals: Vec<Option<Value>> = args
        .iter()
        .map(|a| a.eval_in(cx))
        .collect::<ExprResult<_>>()?;
    let arg = |i: usize| vals.get(i).cloned().flatten();
    let cmp = |b: bool| Ok(Some(Value::Bool(b)));
    let order = || compare_opt(vals[0].as_ref(), vals[1].as_ref());
    match op {
        Op::Add | Op::Multiply => {
            if vals.iter().any(nullish) {
                return Ok(Some(Value::Null));
            }
            let (mut acc, int, float): (Num, IntOp, FloatOp) = if op == Op::Add {
                (Num::Int(0), i64::checked_add, |a, b| a + b)
            } else {
                (Num::Int(1), i64::checked_mul, |a, b| a * b)
            };
            for v in &vals {
                acc = arith(acc, num_of(op, v)?, int, float);
            }
            Ok(Some(num_value(acc)))
        }
        Op::Subtract => {
            if vals.iter().any(nullish) {
                return Ok(Some(Value::Null));
            }
            let (a, b) = (num_of(op, &vals[0])?, num_of(op, &vals[1])?);
            Ok(Some(num_value(arith(a, b, i64::checked_sub, |a, b| a - b))))
        }
        Op::Divide => {
            if vals.iter().any(nullish) {
                return Ok(Some(Value::Null));
            }
            let (a, b) = (num_of(op, &vals[0])?, num_of(op, &vals[1])?);
            if as_f(b) == 0.0 {
                return err(op.name(), "cannot divide by zero");
            }
            Ok(Some(Value::Float(as_f(a) / as_f(b))))
        }
        Op::Concat => {
            let mut s = String::new();
            for v in &vals {
                match v {
                    None | Some(Value::Null) => return Ok(Some(Value::Null)),
                    Some(Value::String(x)) => s.push_str(x),
                    other => {
                        return err(
                            op.name(),
                            format!("only supports strings, not {}", type_name(other)),
                        )
                    }
                }
            }
            Ok(Some(Value::String(s)))
        }
        Op::ToLower | Op::ToUpper => {
            let s = match arg(0) {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => s,
                Some(Value::Int(i)) => i.to_string(),
                Some(Value::Float(f)) => f.to_string(),
                other => {
                    return err(
                        op.name(),
                        format!("needs a string, not {}", type_name(&other)),
                    )
                }
            };
            Ok(Some(Value::String(if op == Op::ToLower {
                s.to_lowercase()
            } else {
                s.to_uppercase()
            })))
        }
        Op::Eq => cmp(order() == Ordering::Equal),
        Op::Ne => cmp(order() != Ordering::Equal),
        Op::Gt => cmp(order() == Ordering::Greater),
        Op::Gte => cmp(order() != Ordering::Less),
        Op::Lt => cmp(order() == Ordering::Less),
        Op::Lte => cmp(order() != Ordering::Greater),
        Op::Cmp => Ok(Some(Value::Int(match order() {
            Ordering::Less => -1,
            Ordering::Equal => 0,
            Ordering::Greater => 1,
        }))),
        Op::Not => Ok(Some(Value::Bool(!truthy(vals[0].as_ref())))),
        Op::Size => match &vals[0] {
            Some(Value::Array(a)) => {
                Ok(Some(Value::Int(i64::try_from(a.len()).unwrap_or(i64::MAX))))
            }
            other => err(
                op.name(),
                format!("the argument must be an array, not {}", type_name(other)),
            ),
        },
        Op::ArrayElemAt => {
            if vals.iter().any(nullish) {
                return Ok(Some(Value::Null));
            }
            let Some(Value::Array(a)) = &vals[0] else {
                return err(
                    op.name(),
                    format!(
                        "the first argument must be an array, not {}",
                        type_name(&vals[0])
                    ),
                );
            };
            let idx = match &vals[1] {
                Some(Value::Int(i)) => *i,
                Some(Value::Float(f)) if f.fract() == 0.0 && f.abs() < 9.0e18 => *f as i64,
                other => {
                    return err(
                        op.name(),
                        format!(
                            "the second argument must be an integer, not {}",
                            type_name(other)
                        ),
                    )
                }
            };
            let len = i64::try_from(a.len()).unwrap_or(i64::MAX);
            let at = if idx < 0 { len + idx } else { idx };
            Ok(usize::try_from(at).ok().and_then(|i| a.get(i)).cloned())
        }
        Op::And | Op::Or | Op::IfNull => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(
        expr: serde_json::Value,
        doc: serde_json::Value,
    ) -> ExprResult<Option<serde_json::Value>> {
        let e = Expr::parse(&Value::from_json(expr).map_err(|e| ExprError {
            operator: "json".into(),
            reason: e.to_string(),
        })?)?;
        let d = Value::from_json(doc).map_err(|e| ExprError {
            operator: "json".into(),
            reason: e.to_string(),
        })?;
        Ok(e.eval(&d)?.map(|v| v.to_json()))
    }

    #[test]
    fn paths_and_operators() {
        let d = json!({"a": {"b": 2}, "xs": [{"v": 1}, {"w": 2}, {"v": 3}], "s": "Hi"});
        assert_eq!(ev(json!("$a.b"), d.clone()), Ok(Some(json!(2))));
        assert_eq!(ev(json!("$xs.v"), d.clone()), Ok(Some(json!([1, 3]))));
        assert_eq!(ev(json!("$nope"), d.clone()), Ok(None));
        assert_eq!(ev(json!("$$ROOT.a"), d.clone()), Ok(Some(json!({"b": 2}))));
        assert_eq!(
            ev(json!({"$add": ["$a.b", 3, 0.5]}), d.clone()),
            Ok(Some(json!(5.5)))
        );
        assert_eq!(
            ev(json!({"$add": ["$a.b", "$nope"]}), d.clone()),
            Ok(Some(json!(null)))
        );
        assert_eq!(
            ev(json!({"$add": [i64::MAX, 1]}), d.clone()),
            Ok(Some(json!(9.223372036854776e18)))
        );
        assert_eq!(
            ev(json!({"$divide": [3, 2]}), d.clone()),
            Ok(Some(json!(1.5)))
        );
        assert!(ev(json!({"$divide": [3, 0]}), d.clone()).is_err());
        assert!(ev(json!({"$add": ["$s", 1]}), d.clone()).is_err());
        assert_eq!(
            ev(json!({"$concat": ["$s", "!"]}), d.clone()),
            Ok(Some(json!("Hi!")))
        );
        assert_eq!(
            ev(json!({"$toUpper": "$s"}), d.clone()),
            Ok(Some(json!("HI")))
        );
        assert_eq!(
            ev(json!({"$toLower": "$nope"}), d.clone()),
            Ok(Some(json!("")))
        );
        assert_eq!(
            ev(
                json!({"$cond": [{"$gt": ["$a.b", 1]}, "big", "small"]}),
                d.clone()
            ),
            Ok(Some(json!("big")))
        );
        assert_eq!(
            ev(
                json!({"$cond": {"if": false, "then": 1, "else": 2}}),
                d.clone()
            ),
            Ok(Some(json!(2)))
        );
        assert_eq!(
            ev(json!({"$ifNull": ["$nope", null, "x"]}), d.clone()),
            Ok(Some(json!("x")))
        );
        // Missing sorts before null in aggregation comparisons.
        assert_eq!(
            ev(json!({"$eq": ["$nope", null]}), d.clone()),
            Ok(Some(json!(false)))
        );
        assert_eq!(
            ev(json!({"$lt": ["$nope", null]}), d.clone()),
            Ok(Some(json!(true)))
        );
        assert_eq!(
            ev(json!({"$eq": [2, 2.0]}), d.clone()),
            Ok(Some(json!(true)))
        );
        assert_eq!(ev(json!({"$size": "$xs"}), d.clone()), Ok(Some(json!(3))));
        assert!(ev(json!({"$size": "$s"}), d.clone()).is_err());
        assert_eq!(
            ev(json!({"$arrayElemAt": ["$xs.v", -1]}), d.clone()),
            Ok(Some(json!(3)))
        );
        assert_eq!(
            ev(json!({"$arrayElemAt": ["$xs.v", 5]}), d.clone()),
            Ok(None)
        );
        assert_eq!(
            ev(json!({"$and": [1, "$s"]}), d.clone()),
            Ok(Some(json!(true)))
        );
        assert_eq!(
            ev(json!({"$or": [0, "$nope"]}), d.clone()),
            Ok(Some(json!(false)))
        );
        assert_eq!(ev(json!({"$not": [0]}), d.clone()), Ok(Some(json!(true))));
        assert_eq!(
            ev(json!({"$literal": "$a"}), d.clone()),
            Ok(Some(json!("$a")))
        );
        assert_eq!(
            ev(json!({"k": "$a.b", "m": "$nope"}), d.clone()),
            Ok(Some(json!({"k": 2})))
        );
        assert!(ev(json!({"$frobnicate": 1}), d.clone()).is_err());
        assert!(ev(json!({"$subtract": [1]}), d.clone()).is_err());
        assert!(ev(json!("$$NOW"), d).is_err());
    }
}
