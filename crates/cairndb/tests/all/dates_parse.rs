//! Extended JSON `$date` strings read as the instant they name: ISO-8601
//! date-times (MongoDB Extended JSON v2; RFC 3339's internet date-time)
//! before 1970 and up to 9999-12-31, with the offsets `Z`, `+hh:mm`,
//! `-hh:mm` and `±hhmm`, fractions of any length truncated to milliseconds
//! (BSON keeps milliseconds), every month's last day and leap years by the
//! Gregorian rule, and malformed strings refused with a message naming the
//! string. The same strings read through a typed collection
//! (`Collection<serde_json::Value>`, the codec's path) give the same dates;
//! a date written back is the relaxed form MongoDB writes: an ISO string
//! for the years 1970–9999, `{"$numberLong": "<ms>"}` otherwise. A
//! property test compares the parser with a reference that counts days
//! one year and one month at a time.

use cairndb::document::{Document, DocumentError, Value};
use cairndb::Database;
use proptest::prelude::*;
use serde_json::json;

/// The date a `$date` string reads as, or the error's message.
fn parse(s: &str) -> Result<i64, String> {
    match Value::from_json(json!({ "$date": s })) {
        Ok(Value::Date(ms)) => Ok(ms),
        Ok(other) => Err(format!("not a date: {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}

fn ms(s: &str) -> i64 {
    parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
}

/// The milliseconds of a UTC civil date-time, counted one year and one
/// month at a time (an algorithm unlike the library's).
fn reference_ms(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64) -> i64 {
    let leap = |y: i64| y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    let year_days = |y: i64| if leap(y) { 366 } else { 365 };
    let mut days = 0i64;
    if y >= 1970 {
        for yy in 1970..y {
            days += year_days(yy);
        }
    } else {
        for yy in y..1970 {
            days -= year_days(yy);
        }
    }
    for m in 1..mo {
        days += month_days(y, m);
    }
    days += d - 1;
    ((days * 24 + h) * 60 + mi) * 60_000 + s * 1000
}

fn month_days(y: i64, m: i64) -> i64 {
    let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    match m {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

#[test]
fn dates_before_1970_are_negative_milliseconds() {
    assert_eq!(ms("1970-01-01T00:00:00Z"), 0);
    assert_eq!(ms("1969-12-31T23:59:59.999Z"), -1);
    assert_eq!(ms("1969-12-31T23:59:59.5Z"), -500);
    assert_eq!(ms("1969-07-20T20:17:40Z"), -14_182_940_000);
    assert_eq!(ms("1900-01-01T00:00:00Z"), -2_208_988_800_000);
    assert_eq!(ms("1600-03-01T00:00:00Z"), -11_670_912_000_000);
    assert_eq!(ms("0001-01-01T00:00:00Z"), -62_135_596_800_000);
    assert_eq!(ms("0000-01-01T00:00:00Z"), -62_167_219_200_000);
    // Written back as MongoDB's relaxed form writes them: $numberLong
    // before 1970 and after 9999, an ISO string between.
    let back = |ms: i64| Value::Date(ms).to_json();
    assert_eq!(back(-1), json!({"$date": {"$numberLong": "-1"}}));
    assert_eq!(back(0), json!({"$date": "1970-01-01T00:00:00.000Z"}));
    assert_eq!(
        back(253_402_300_799_999),
        json!({"$date": "9999-12-31T23:59:59.999Z"})
    );
    assert_eq!(
        back(253_402_300_800_000),
        json!({"$date": {"$numberLong": "253402300800000"}})
    );
    // And read back from either form.
    for ms in [-62_167_219_200_000, -1, 0, 1, 253_402_300_800_000] {
        assert_eq!(Value::from_json(back(ms)).unwrap(), Value::Date(ms));
    }
}

#[test]
fn offsets_move_the_instant() {
    let utc = ms("2024-01-02T03:04:05Z");
    assert_eq!(ms("2024-01-02T03:04:05z"), utc);
    assert_eq!(ms("2024-01-02t03:04:05Z"), utc);
    assert_eq!(ms("2024-01-02T03:04:05+00:00"), utc);
    assert_eq!(ms("2024-01-02T03:04:05-00:00"), utc);
    assert_eq!(ms("2024-01-02T04:04:05+01:00"), utc);
    assert_eq!(ms("2024-01-02T04:04:05+0100"), utc);
    assert_eq!(ms("2024-01-01T21:34:05-05:30"), utc);
    assert_eq!(ms("2024-01-01T21:34:05-0530"), utc);
    assert_eq!(ms("2024-01-02T16:49:05+13:45"), utc);
    assert_eq!(ms("2024-01-01T03:05:05-23:59"), utc);
    // Across a day, a year and the epoch.
    assert_eq!(
        ms("2024-01-01T00:30:00+01:00"),
        ms("2023-12-31T23:30:00.000Z")
    );
    assert_eq!(
        ms("2023-12-31T23:30:00-01:00"),
        ms("2024-01-01T00:30:00.000Z")
    );
    assert_eq!(ms("1970-01-01T00:00:00+00:01"), -60_000);
    assert_eq!(ms("1969-12-31T23:59:00-00:01"), 0);
    // Past 9999-12-31 in UTC: a date, written as $numberLong.
    let late = ms("9999-12-31T23:59:59.999-01:00");
    assert_eq!(late, 253_402_300_799_999 + 3_600_000);
    assert_eq!(
        Value::Date(late).to_json(),
        json!({"$date": {"$numberLong": late.to_string()}})
    );
}

#[test]
fn fractions_are_truncated_to_milliseconds() {
    let base = ms("2024-01-02T03:04:05Z");
    for (frac, add) in [
        (".0", 0),
        (".1", 100),
        (".12", 120),
        (".123", 123),
        (".1239", 123),
        (".999999999", 999),
        (".000000000000000000000001", 0),
    ] {
        assert_eq!(
            ms(&format!("2024-01-02T03:04:05{frac}Z")),
            base + add,
            "{frac}"
        );
        assert_eq!(
            ms(&format!("2024-01-02T04:04:05{frac}+01:00")),
            base + add,
            "{frac}"
        );
    }
    // Before 1970 too: the fraction adds to the (negative) second.
    assert_eq!(ms("1969-12-31T23:59:59.001Z"), -999);
}

#[test]
fn month_ends_and_leap_years() {
    for y in [
        1600, 1899, 1900, 1969, 1970, 1999, 2000, 2023, 2024, 2100, 9999,
    ] {
        for m in 1..=12 {
            let last = month_days(y, m);
            let s = format!("{y:04}-{m:02}-{last:02}T23:59:59.999Z");
            assert_eq!(ms(&s), reference_ms(y, m, last, 23, 59, 59) + 999, "{s}");
            // The day after the month's last is refused.
            let past = format!("{y:04}-{m:02}-{:02}T00:00:00Z", last + 1);
            assert!(parse(&past).is_err(), "{past} was read");
            // And the next day, the first of the next month, follows it.
            if m < 12 {
                assert_eq!(
                    ms(&format!("{y:04}-{:02}-01T00:00:00Z", m + 1)),
                    ms(&s) + 1,
                    "{s}"
                );
            }
        }
    }
    assert_eq!(
        ms("2024-02-29T12:00:00Z") + 86_400_000,
        ms("2024-03-01T12:00:00Z")
    );
    assert_eq!(
        ms("2000-02-29T00:00:00Z"),
        ms("2000-03-01T00:00:00Z") - 86_400_000
    );
    for s in [
        "2023-02-29T00:00:00Z",
        "1900-02-29T00:00:00Z",
        "2100-02-29T00:00:00Z",
        "2024-02-30T00:00:00Z",
        "2024-04-31T00:00:00Z",
        "2024-06-31T00:00:00Z",
        "2024-09-31T00:00:00Z",
        "2024-11-31T00:00:00Z",
        "2024-01-32T00:00:00Z",
        "2024-01-00T00:00:00Z",
        "2024-00-10T00:00:00Z",
        "2024-13-01T00:00:00Z",
    ] {
        assert!(parse(s).is_err(), "{s} was read");
    }
}

#[test]
fn malformed_dates_are_refused_naming_the_string() {
    for s in [
        "",
        "now",
        "2024-01-02",
        "2024-01-02T03:04",
        "2024-01-02T03:04:05",
        "2024-01-02T03:04:05.123",
        "2024-01-02 03:04:05Z",
        "2024-1-02T03:04:05Z",
        "24-01-02T03:04:05Z",
        "+2024-01-02T03:04:05Z",
        "-2024-01-02T03:04:05Z",
        "12024-01-02T03:04:05Z",
        "2024/01/02T03:04:05Z",
        "2024-01-02T3:04:05Z",
        "2024-01-02T24:00:00Z",
        "2024-01-02T23:60:00Z",
        "2024-01-02T23:59:60Z",
        "2024-01-02T03:04:05.Z",
        "2024-01-02T03:04:05,5Z",
        "2024-01-02T03:04:05ZZ",
        "2024-01-02T03:04:05Z ",
        " 2024-01-02T03:04:05Z",
        "2024-01-02T03:04:05+01",
        "2024-01-02T03:04:05+1:00",
        "2024-01-02T03:04:05+01:0",
        "2024-01-02T03:04:05+01:000",
        "2024-01-02T03:04:05+0100:",
        "2024-01-02T03:04:05+24:00",
        "2024-01-02T03:04:05+01:60",
        "2024-01-02T03:04:05+01-00",
        "2024-01-02T03:04:05 +01:00",
        "2024-01-02T03:04:05UTC",
        "2024-01-02T03:04:05GMT+1",
        "２０２４-01-02T03:04:05Z",
        "2024-01-02T03:04:05.1\u{0661}Z",
        "2024-01-02T03:04:05\u{2212}01:00",
    ] {
        let err = parse(s).expect_err(s);
        assert_eq!(
            err,
            format!(
                "invalid JSON for a document value: $date {s:?} is not an ISO-8601 date-time \
                 such as \"2024-01-02T03:04:05.678Z\""
            ),
            "{s}"
        );
    }
    // Other content of $date.
    let other = |v: serde_json::Value| match Value::from_json(json!({ "$date": v })) {
        Err(e @ DocumentError::InvalidJson { .. }) => e.to_string(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        other(json!(1.5)),
        "invalid JSON for a document value: $date needs an integer number of milliseconds"
    );
    assert_eq!(
        other(json!(1e20)),
        "invalid JSON for a document value: $date needs an integer number of milliseconds"
    );
    assert_eq!(
        other(json!({"$numberLong": "1e3"})),
        "invalid JSON for a document value: $numberLong \"1e3\" is not a 64-bit integer"
    );
    assert_eq!(
        other(json!({"$numberLong": "9223372036854775808"})),
        "invalid JSON for a document value: $numberLong \"9223372036854775808\" is not a \
         64-bit integer"
    );
    for v in [
        json!(true),
        json!(null),
        json!([1]),
        json!({"$numberLong": 5}),
        json!({"$numberLong": "5", "x": 1}),
    ] {
        assert_eq!(
            other(v),
            "invalid JSON for a document value: $date needs a string, an integer or \
             {\"$numberLong\": \"...\"}"
        );
    }
    // Integers, as legacy Extended JSON writes them, are milliseconds.
    assert_eq!(
        Value::from_json(json!({"$date": -5})).unwrap(),
        Value::Date(-5)
    );
    // In a document, the error is the same.
    let e = Document::from_json_str(r#"{"at": {"$date": "2024-02-30T00:00:00Z"}}"#).unwrap_err();
    assert!(e.to_string().contains("\"2024-02-30T00:00:00Z\""), "{e}");
}

/// A typed collection (`Collection<serde_json::Value>`, the codec's path)
/// reads the same strings as the same dates.
#[test]
fn a_typed_collection_reads_the_same_dates() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("d.cairn")).unwrap();
    let typed = db.collection::<serde_json::Value>("d");
    let strings = [
        "1969-12-31T23:59:59.999Z",
        "1900-02-28T23:59:59.999-00:30",
        "2024-02-29T12:00:00.123456+05:45",
        "2024-01-01T00:30:00+0100",
        "9999-12-31T23:59:59.999-01:00",
        "0000-03-01T00:00:00Z",
    ];
    for (i, s) in strings.iter().enumerate() {
        typed
            .insert(&json!({"_id": i, "at": {"$date": s}}))
            .unwrap();
    }
    let docs = db.collection::<Document>("d");
    for (i, s) in strings.iter().enumerate() {
        let d = docs.find_one(json!({"_id": i})).unwrap().unwrap();
        assert_eq!(d.get("at"), Some(&Value::Date(ms(s))), "{s}");
    }
}

/// Builds a `$date` string from its parts.
fn date_string(
    (y, mo, d): (i64, i64, i64),
    (h, mi, s): (i64, i64, i64),
    frac: &str,
    offset_min: Option<i64>,
    colon: bool,
) -> String {
    let zone = match offset_min {
        None => "Z".to_string(),
        Some(o) => {
            let sign = if o < 0 { '-' } else { '+' };
            let (oh, om) = (o.abs() / 60, o.abs() % 60);
            if colon {
                format!("{sign}{oh:02}:{om:02}")
            } else {
                format!("{sign}{oh:02}{om:02}")
            }
        }
    };
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}{frac}{zone}")
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Any valid date-time, fraction and offset reads as the reference's
    /// instant; a date in the years 1970–9999 is written back as the same
    /// instant's ISO string and reads back exactly.
    #[test]
    fn the_parser_agrees_with_the_reference(
        y in 0i64..=9999,
        mo in 1i64..=12,
        day in 1i64..=31,
        h in 0i64..24,
        mi in 0i64..60,
        s in 0i64..60,
        frac in proptest::option::of("[0-9]{1,12}"),
        offset in proptest::option::of(-(23 * 60 + 59)..=(23 * 60 + 59i64)),
        colon in any::<bool>(),
    ) {
        let d = day.min(month_days(y, mo));
        let frac = frac.map(|f| format!(".{f}")).unwrap_or_default();
        let text = date_string((y, mo, d), (h, mi, s), &frac, offset, colon);
        let frac_ms = frac
            .get(1..)
            .map(|f| format!("{f:0<3}")[..3].parse::<i64>().unwrap())
            .unwrap_or(0);
        let want = reference_ms(y, mo, d, h, mi, s) + frac_ms
            - offset.unwrap_or(0) * 60_000;
        prop_assert_eq!(parse(&text), Ok(want), "{}", text);
        let back = Value::Date(want).to_json();
        if (0..=253_402_300_799_999).contains(&want) {
            prop_assert!(back["$date"].is_string(), "{}", back);
        } else {
            prop_assert_eq!(&back["$date"]["$numberLong"], &json!(want.to_string()));
        }
        prop_assert_eq!(Value::from_json(back).unwrap(), Value::Date(want));
    }

    /// A day past its month's end, or an hour, minute or second out of
    /// range, is refused.
    #[test]
    fn impossible_dates_are_refused(
        y in 0i64..=9999,
        mo in 1i64..=12,
        past in 1i64..=68,
        field in 0usize..4,
    ) {
        let last = month_days(y, mo);
        let (d, h, mi, s) = match field {
            0 => (last + past.min(99 - last), 0, 0, 0),
            1 => (1, 23 + past.min(76), 0, 0),
            2 => (1, 0, 59 + past.min(40), 0),
            _ => (1, 0, 0, 59 + past.min(40)),
        };
        let text = date_string((y, mo, d), (h, mi, s), "", None, true);
        prop_assert!(parse(&text).is_err(), "{} was read", text);
    }
}
