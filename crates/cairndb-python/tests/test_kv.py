import pytest

import cairndb


def test_put_get_delete_bytes(db):
    t = db.table("kv")
    assert t.name == "kv" and t.key_type == "bytes" and t.value_type == "bytes"
    assert t.get(b"a") is None
    assert t.get(b"a", b"dflt") == b"dflt"
    t.put(b"a", b"1")
    t[b"b"] = bytearray(b"2")
    t["c"] = "3"  # str is stored as UTF-8 in a bytes table
    assert t.get(b"a") == b"1"
    assert t[b"b"] == b"2"
    assert t[b"c"] == b"3"
    assert len(t) == 3
    assert b"a" in t and b"z" not in t
    assert t.delete(b"a") is True
    assert t.delete(b"a") is False
    del t[b"b"]
    with pytest.raises(KeyError):
        del t[b"b"]
    with pytest.raises(KeyError):
        t[b"nope"]
    assert list(t) == [b"c"]


def test_missing_table_reads_empty(db):
    t = db.table("never")
    assert len(t) == 0
    assert list(t.range()) == []
    assert t.get(b"x") is None
    assert t.delete(b"x") is False
    assert "never" not in db.list_tables()


def test_str_and_int_kinds(db):
    s = db.table("s", key_type=str, value_type=str)
    s["b"] = "two"
    s["a"] = "one"
    assert list(s.items()) == [("a", "one"), ("b", "two")]
    with pytest.raises(TypeError):
        s[b"x"] = "y"
    i = db.table("i", key_type="int", value_type=int)
    for k in [5, -3, 0, 2**63 - 1, -(2**63)]:
        i[k] = k * 2 if abs(k) < 2**40 else 1
    assert list(i.keys()) == [-(2**63), -3, 0, 5, 2**63 - 1]
    with pytest.raises(OverflowError):
        i[2**63] = 1
    with pytest.raises(TypeError):
        i[True] = 1
    with pytest.raises(TypeError):
        i["1"] = 1
    # Reopening without types uses the stored ones.
    again = db.table("i")
    assert again.key_type == "int" and again.value_type == "int"
    assert again[-3] == -6


def test_table_type_mismatch(db):
    db.table("t", key_type=str, value_type=str)["a"] = "b"
    with pytest.raises(cairndb.TableTypeError):
        db.table("t", key_type=bytes)
    with pytest.raises(TypeError):
        db.table("u", key_type=float)


def test_invalid_table_name(db):
    with pytest.raises(cairndb.InvalidArgumentError):
        db.table("$reserved")
    with pytest.raises(cairndb.InvalidArgumentError):
        db.table("")


def test_range_bounds_and_reverse(db):
    t = db.table("r", key_type=int, value_type=int)
    with db.transaction() as tx:
        w = tx.table("r", int, int)
        for k in range(1000):
            w[k] = k * k
    assert len(t) == 1000
    assert [k for k, _ in t.range(10, 15)] == [10, 11, 12, 13, 14]
    assert [k for k, _ in t.range(995)] == [995, 996, 997, 998, 999]
    assert [k for k, _ in t.range(end=3)] == [0, 1, 2]
    assert [k for k, _ in t.range(10, 15, reverse=True)] == [14, 13, 12, 11, 10]
    assert list(t.range(5, 5)) == []
    assert list(t.range(9, 2)) == []
    # Several batches, both directions.
    fwd = list(t.range())
    assert fwd == [(k, k * k) for k in range(1000)]
    assert list(t.range(reverse=True)) == fwd[::-1]


def test_range_iterator_holds_one_snapshot(db):
    t = db.table("snap", key_type=int, value_type=int)
    for k in range(600):
        t[k] = 0
    it = t.range()
    first = next(it)
    for k in range(600):
        t[k] = 1
    t[10_000] = 1
    rest = list(it)
    assert first == (0, 0)
    assert len(rest) == 599 and all(v == 0 for _, v in rest)


def test_list_and_drop_tables(db):
    db.table("a")[b"k"] = b"v"
    db.table("b")[b"k"] = b"v"
    db.collection("docs").insert_one({"x": 1})
    assert db.list_tables() == ["a", "b"]
    assert db.drop_table("a") is True
    assert db.drop_table("a") is False
    assert db.list_tables() == ["b"]


def test_limits(db):
    t = db.table("big")
    with pytest.raises(cairndb.LimitError):
        t[b"k" * 100_000] = b"v"
