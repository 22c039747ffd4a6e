"""Dates (``datetime.datetime``) and UUIDs (``uuid.UUID``) as document
values: stored as BSON stores them (UTC milliseconds; binary subtype 4),
read back as aware UTC datetimes and ``uuid.UUID``, compared and sorted in
MongoDB's order, indexed, and expired by TTL indexes."""

import datetime as dt
import uuid

import pytest
from hypothesis import given, settings, strategies as st

import cairndb

UTC = dt.timezone.utc


def test_datetime_and_uuid_round_trip(db):
    c = db.collection("t")
    u = uuid.UUID("12345678-9abc-def0-1234-56789abcdef0")
    aware = dt.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    c.insert_one({"_id": u, "at": aware, "u": u, "list": [aware, u]})
    got = c.find_one({"_id": u})
    assert got == {"_id": u, "at": aware, "u": u, "list": [aware, u]}
    assert isinstance(got["u"], uuid.UUID)
    assert got["at"].tzinfo is UTC


def test_naive_is_utc_offsets_convert_and_microseconds_truncate(db):
    c = db.collection("t")
    plus2 = dt.timezone(dt.timedelta(hours=2))
    c.insert_many(
        [
            {"_id": 1, "at": dt.datetime(2024, 1, 2, 3, 4, 5, 678999)},  # naive: UTC
            {"_id": 2, "at": dt.datetime(2024, 1, 2, 5, 4, 5, 678000, tzinfo=plus2)},
            {"_id": 3, "at": dt.datetime(1969, 12, 31, 23, 59, 59, 999999)},
            {"_id": 4, "at": dt.datetime(1, 1, 1)},
            {"_id": 5, "at": dt.datetime(9999, 12, 31, 23, 59, 59, 999999)},
        ]
    )
    want = dt.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    assert c.find_one({"_id": 1})["at"] == want
    assert c.find_one({"_id": 2})["at"] == want
    # Truncation is toward the past (floor), as BSON's drivers do.
    assert c.find_one({"_id": 3})["at"] == dt.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)
    assert c.find_one({"_id": 4})["at"] == dt.datetime(1, 1, 1, tzinfo=UTC)
    assert c.find_one({"_id": 5})["at"] == dt.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)
    # The same instant, whatever the input's zone: one equality match.
    assert [d["_id"] for d in c.find({"at": want})] == [1, 2]


def test_dates_query_sort_and_use_an_index(db):
    c = db.collection("t")
    base = dt.datetime(2024, 1, 1, tzinfo=UTC)
    c.insert_many(
        [{"_id": i, "at": base + dt.timedelta(days=i)} for i in range(10)]
        + [{"_id": 100, "at": 5}, {"_id": 101, "at": "2024-01-05"}, {"_id": 102, "at": True}]
    )
    c.create_index("at")
    lo, hi = base + dt.timedelta(days=3), base + dt.timedelta(days=6)
    q = {"at": {"$gte": lo, "$lt": hi}}
    assert [d["_id"] for d in c.find(q)] == [3, 4, 5]
    plan = c.find(q).explain()
    assert plan["plan"].startswith("index scan at_1 at >= {\"$date\":\"2024-01-04T00:00:00.000Z\"}"), plan
    assert plan["returned"] == 3
    # Type bracketing: a number never equals nor ranges with a date.
    assert [d["_id"] for d in c.find({"at": {"$gt": 0}})] == [100]
    assert c.count_documents({"at": {"$type": "date"}}) == 10
    assert c.count_documents({"at": {"$type": 9}}) == 10
    # MongoDB's order: numbers < strings < booleans < dates.
    order = [d["_id"] for d in c.find({}, sort=[("at", -1)])]
    assert order == list(range(9, -1, -1)) + [102, 101, 100]


def test_uuid_is_bindata(db):
    c = db.collection("t")
    u = uuid.UUID(int=1)
    c.insert_many([{"_id": 1, "v": u}, {"_id": 2, "v": b"\x00" * 16}, {"_id": 3, "v": b"\x00" * 17}])
    assert c.count_documents({"v": {"$type": "binData"}}) == 3
    assert c.find_one({"v": u})["_id"] == 1
    # BinData order: length, then subtype (UUID 4 after generic 0), then bytes.
    assert [d["_id"] for d in c.find({}, sort=[("v", 1)])] == [2, 1, 3]


def test_current_date_and_aggregation(db):
    c = db.collection("t")
    before = dt.datetime.now(UTC).replace(microsecond=0) - dt.timedelta(seconds=1)
    c.insert_many([{"_id": 1, "g": "a"}, {"_id": 2, "g": "a"}, {"_id": 3, "g": "b"}])
    c.update_many({}, {"$currentDate": {"at": True, "meta.seen": {"$type": "date"}}})
    after = dt.datetime.now(UTC) + dt.timedelta(seconds=1)
    docs = list(c.find())
    assert all(before <= d["at"] <= after and d["meta"]["seen"] == d["at"] for d in docs)
    with pytest.raises(cairndb.DocumentError):
        c.update_many({}, {"$currentDate": {"at": {"$type": "timestamp"}}})
    day = dt.datetime(2024, 5, 1, tzinfo=UTC)
    c.update_one({"_id": 3}, {"$set": {"at": day}})
    out = c.aggregate([{"$group": {"_id": "$at", "n": {"$sum": 1}}}, {"$sort": {"_id": 1}}])
    assert out[0] == {"_id": day, "n": 1}
    mm = c.aggregate([{"$group": {"_id": None, "lo": {"$min": "$at"}, "hi": {"$max": "$at"}}}])
    assert mm[0]["lo"] == day and mm[0]["hi"] > day


def test_ttl_index_expires_datetimes(db):
    c = db.collection("t")
    old = dt.datetime(2000, 1, 1, tzinfo=UTC)
    fresh = dt.datetime.now(UTC) + dt.timedelta(days=1)
    c.insert_many(
        [
            {"_id": 1, "at": old},
            {"_id": 2, "at": fresh},
            {"_id": 3, "at": [fresh, old]},  # the earliest counts
            {"_id": 4, "at": "2000-01-01"},  # not a date: never expires
            {"_id": 5},
        ]
    )
    c.create_index("at", expireAfterSeconds=3600)
    assert any(i.get("name") == "at_1" for i in c.list_indexes())
    c.insert_one({"_id": 6})  # a write runs an expiry pass
    assert sorted(d["_id"] for d in c.find()) == [2, 4, 5, 6]
    with pytest.raises(cairndb.InvalidArgumentError):
        c.create_index([("a", 1), ("b", 1)], expireAfterSeconds=1)


def test_out_of_range_and_unsupported(db):
    c = db.collection("t")
    with pytest.raises(TypeError):
        c.insert_one({"d": dt.date(2024, 1, 1)})


datetimes = st.datetimes(
    min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31, 23, 59, 59), timezones=st.just(UTC)
)
names = st.text(alphabet="abé_", min_size=1, max_size=3)
values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=5) | datetimes | st.uuids(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3),
    max_leaves=10,
)


def truncated(v):
    if isinstance(v, dt.datetime):
        return v.replace(microsecond=v.microsecond // 1000 * 1000)
    if isinstance(v, list):
        return [truncated(x) for x in v]
    if isinstance(v, dict):
        return {k: truncated(x) for k, x in v.items()}
    return v


@settings(max_examples=150, deadline=None)
@given(doc=st.dictionaries(names, values, max_size=4))
def test_hypothesis_round_trip(tmp_path_factory, doc):
    path = str(tmp_path_factory.mktemp("h") / "h.cairn")
    with cairndb.open(path) as db:
        c = db.collection("h")
        c.insert_one({"_id": 1, **doc})
        got = c.find_one({"_id": 1})
        assert got == {"_id": 1, **truncated(doc)}
