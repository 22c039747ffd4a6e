"""Read snapshots over collections, tables and event streams: everything read
through ``with db.snapshot() as s:`` sees the commit the snapshot began at,
whatever is committed meanwhile (from this thread or others), and a
snapshot's collections cannot be written."""

import threading

from hypothesis import given, settings, strategies as st
import pytest

import cairndb


def _fill(db):
    c = db.collection("c")
    c.insert_many([{"_id": i, "k": i % 4, "g": "ab"[i % 2], "tags": ["x", "y"][: i % 3]} for i in range(20)])
    c.create_index("k")
    db.collection("other").insert_many([{"_id": 100 + i, "k": i} for i in range(4)])
    t = db.table("t", str, int)
    for i in range(10):
        t[f"key{i:02}"] = i
    db.append("s-1", [("A", b"1"), ("B", b"2")])
    db.append("s-2", [("C", b"3")])
    return c


def _answers(c, ev):
    """Every read through a collection (or snapshot collection) `c` and an
    event reader `ev` (the database or a snapshot), as plain values."""
    return {
        "find": c.find({}, sort=[("_id", 1)]).to_list(),
        "find_k": c.find({"k": {"$gte": 2}}, {"k": 1}, sort=[("k", -1), ("_id", 1)], skip=1, limit=5).to_list(),
        "cursor_chain": c.find({"g": "a"}).sort("_id", -1).skip(2).limit(3).to_list(),
        "find_one": c.find_one({"k": 3}, sort=[("_id", -1)]),
        "count": c.count_documents({"k": {"$lt": 2}}),
        "estimated": c.estimated_document_count(),
        "group": c.aggregate([{"$group": {"_id": "$g", "n": {"$sum": 1}}}, {"$sort": {"_id": 1}}]),
        "lookup": c.aggregate(
            [
                {"$match": {"_id": {"$lt": 6}}},
                {"$lookup": {"from": "other", "localField": "k", "foreignField": "k", "as": "o"}},
                {"$project": {"o._id": 1}},
            ]
        ),
        "distinct": c.distinct("tags"),
        "indexes": [i["name"] for i in c.list_indexes()],
        "explain": c.find({"k": 1}).explain()["returned"],
        "read": [(e.version, e.data) for e in ev.read("s-1")],
        "read_back": [e.version for e in ev.read("s-1", backward=True, limit=1)],
        "read_all": [(e.position, e.stream, e.type) for e in ev.read_all()],
        "read_all_types": [e.position for e in ev.read_all(event_types=["C", "D"])],
        "stream_version": ev.stream_version("s-1"),
        "stream_info": ev.stream_info("s-2"),
        "list_streams": ev.list_streams(),
        "next_position": ev.next_position(),
        "load": [e.version for e in ev.load("s-1").events],
        "collections": ev.list_collections(),
    }


def _write_more(db):
    c = db.collection("c", durability="none")
    c.insert_one({"_id": 50, "k": 3, "g": "a", "tags": ["z"]})
    c.insert_one({"_id": 51, "k": 0, "g": "b"})
    c.update_many({"k": 1}, {"$set": {"k": 2}})
    c.delete_one({"_id": 0})
    c.create_index("g")
    db.collection("other").drop()
    db.append("s-1", [("D", b"4")], durability="none")
    db.append("s-3", [("E", b"5")], durability="none")
    db.set_stream_metadata("s-2", max_count=0)


def test_a_snapshot_reads_its_commit_across_every_read(db):
    c = _fill(db)
    with db.snapshot() as s:
        sc = s.collection("c")
        assert sc.name == "c" and "SnapshotCollection" in repr(sc)
        then = _answers(sc, s)
        # Nothing committed in between: the snapshot reads what a fresh read does.
        assert then == _answers(c, db)
        _write_more(db)
        now = _answers(c, db)
        # Every answer changed...
        assert [k for k in then if then[k] == now[k]] == []
        # ...but not through the snapshot, through a new handle of it or a
        # cursor opened after the writes.
        assert _answers(sc, s) == then
        assert _answers(s.collection("c"), s) == then


def test_a_snapshot_table_keeps_its_commit(db):
    _fill(db)
    with db.snapshot() as s:
        t = s.table("t")
        assert (t.key_type, t.value_type) == ("str", "int")
        before = list(t.range("key02", "key05"))
        db.table("t", str, int).put("key03", 333)
        db.table("t", str, int).delete("key04")
        db.drop_table("t")
        assert "t" not in db.list_tables() and s.list_tables() == ["t"]
        assert t.get("key03") == 3 and t["key04"] == 4 and "key04" in t
        assert list(t.range("key02", "key05")) == before == [("key02", 2), ("key03", 3), ("key04", 4)]
        assert list(t.range(reverse=True))[0] == ("key09", 9)
        assert len(t) == 10
        with pytest.raises(cairndb.ReadOnlyError):
            t.put("key00", 0)


def test_a_snapshot_collection_has_no_write_methods(db):
    _fill(db)
    with db.snapshot() as s:
        sc = s.collection("c")
        for name in ("insert_one", "insert_many", "update_one", "update_many", "replace_one",
                     "delete_one", "delete_many", "create_index", "drop", "find_one_and_update"):
            assert not hasattr(sc, name), name
        with pytest.raises(AttributeError):
            sc.insert_one({"_id": 1})
        assert not hasattr(s, "append")
    assert db.collection("c").count_documents({}) == 20


def test_a_started_cursor_outlives_its_snapshot_and_a_closed_one_refuses(db):
    _fill(db)
    s = db.snapshot()
    cur = s.collection("c").find({}, sort=[("_id", 1)])
    first = next(cur)
    lazy = s.collection("c").find({})
    sc = s.collection("c")
    s.close()
    db.collection("c").delete_many({})
    # The started cursor holds its share of the snapshot.
    assert [first["_id"]] + [d["_id"] for d in cur] == list(range(20))
    with pytest.raises(cairndb.ClosedError, match="snapshot"):
        next(lazy)
    with pytest.raises(cairndb.ClosedError):
        sc.count_documents({})
    with pytest.raises(cairndb.ClosedError):
        s.read("s-1")


def test_a_missing_collection_or_stream_in_a_snapshot(db):
    with db.snapshot() as s:
        db.collection("late").insert_one({"_id": 1})
        db.append("late", [("A", b"")])
        sc = s.collection("late")
        assert sc.find_one() is None and sc.count_documents() == 0 and sc.estimated_document_count() == 0
        assert sc.aggregate([{"$count": "n"}]) == [] and sc.distinct("_id") == []
        with pytest.raises(cairndb.StreamNotFoundError):
            s.read("late")
        assert s.read_all() == [] and s.next_position() == 0 and s.stream_info("late") is None
        with pytest.raises(cairndb.InvalidQueryError):
            sc.aggregate([{"$nope": 1}])


def test_threads_read_one_snapshot_while_another_writes(db):
    c = _fill(db)
    stop = threading.Event()
    failures = []
    with db.snapshot() as s:
        want = _answers(s.collection("c"), s)

        def reader():
            try:
                sc = s.collection("c")
                t = s.table("t")
                rounds = 0
                while not stop.is_set() or rounds < 5:
                    assert sc.count_documents({}) == 20
                    assert [d["_id"] for d in sc.find({}, sort=[("_id", 1)])] == list(range(20))
                    assert sc.aggregate([{"$group": {"_id": None, "n": {"$sum": "$k"}}}]) == [{"_id": None, "n": 30}]
                    assert len(s.read_all()) == 3
                    assert [v for _, v in t.items()] == list(range(10))
                    rounds += 1
                assert _answers(sc, s) == want
            except BaseException as e:  # reported to the main thread
                failures.append(e)

        def writer():
            w = db.collection("c", durability="none")
            try:
                for i in range(200):
                    w.insert_one({"_id": 1000 + i, "k": 1})
                    w.update_one({"_id": i % 20}, {"$inc": {"k": 10}})
                    if i % 10 == 0:
                        w.delete_one({"_id": 1000 + i})
                        db.append("s-1", [("W", b"w")], durability="none")
                        db.table("t", str, int).put(f"w{i}", i, durability="none")
            finally:
                stop.set()

        threads = [threading.Thread(target=reader) for _ in range(4)] + [threading.Thread(target=writer)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads)
    assert failures == []
    # The writer's commits landed.
    assert c.count_documents({}) == 20 + 200 - 20
    assert len(db.read_all()) == 3 + 20


# A model of the collection: random writes, snapshots taken between them;
# each snapshot, read after every later write, must equal the model's copy
# made when it was taken.
_ops = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), st.integers(0, 30), st.integers(0, 5)),
        st.tuples(st.just("set"), st.integers(0, 5), st.integers(0, 5)),
        st.tuples(st.just("delete"), st.integers(0, 30), st.just(0)),
        st.tuples(st.just("snapshot"), st.just(0), st.just(0)),
        st.tuples(st.just("close"), st.integers(0, 5), st.just(0)),
    ),
    max_size=40,
)


@settings(max_examples=40, deadline=None)
@given(_ops)
def test_snapshots_match_a_model_copy(tmp_path_factory, ops):
    path = str(tmp_path_factory.mktemp("model") / "m.cairn")
    with cairndb.open(path, durability="none") as db:
        c = db.collection("c")
        c.create_index("v")
        model = {}
        snaps = []  # (snapshot, model copy)
        for op, a, b in ops:
            if op == "insert" and a not in model:
                c.insert_one({"_id": a, "v": b})
                model[a] = b
            elif op == "set":
                c.update_many({"v": a}, {"$set": {"v": b}})
                model = {k: (b if v == a else v) for k, v in model.items()}
            elif op == "delete":
                c.delete_one({"_id": a})
                model.pop(a, None)
            elif op == "snapshot":
                snaps.append((db.snapshot(), dict(model)))
            elif op == "close" and snaps:
                s, _ = snaps.pop(a % len(snaps))
                s.close()
            for s, m in snaps:
                sc = s.collection("c")
                assert {d["_id"]: d["v"] for d in sc.find()} == m
                assert sc.count_documents({"v": {"$gte": 3}}) == sum(1 for v in m.values() if v >= 3)
                assert sorted(sc.distinct("v")) == sorted(set(m.values()))
        assert {d["_id"]: d["v"] for d in c.find()} == model
        for s, _ in snaps:
            s.close()
