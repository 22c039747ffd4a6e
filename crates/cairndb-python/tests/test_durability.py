"""Durability per call: every write method takes ``durability=`` ("immediate"
or "none"), overriding the handle's and the database's for that one commit.
Checked through the engine's I/O counters: a commit with "none" makes no
device flush (``syncs`` unchanged), one with "immediate" makes at least one.
"""

import datetime

import pytest

import cairndb


def _seed(db):
    c = db.collection("c")
    c.insert_many([{"_id": i, "k": i} for i in range(5)])
    c.create_index("k", name="k_1")
    db.table("t", str, int).put("a", 1)
    db.append("s", [("A", b"1"), ("B", b"2")])


# Each write, made with the durability given; every one changes something.
WRITES = {
    "insert_one": lambda db, d: db.collection("c").insert_one({"_id": 10}, durability=d),
    "insert_many": lambda db, d: db.collection("c").insert_many([{"_id": 11}, {"_id": 12}], durability=d),
    "upsert_many": lambda db, d: db.collection("c").upsert_many([{"_id": 1, "k": 9}], durability=d),
    "update_one": lambda db, d: db.collection("c").update_one({"_id": 1}, {"$set": {"x": 1}}, durability=d),
    "update_many": lambda db, d: db.collection("c").update_many({}, {"$inc": {"k": 1}}, durability=d),
    "replace_one": lambda db, d: db.collection("c").replace_one({"_id": 2}, {"k": 7}, durability=d),
    "delete_one": lambda db, d: db.collection("c").delete_one({"_id": 3}, durability=d),
    "delete_many": lambda db, d: db.collection("c").delete_many({"k": {"$gte": 2}}, durability=d),
    "find_one_and_update": lambda db, d: db.collection("c").find_one_and_update(
        {"_id": 1}, {"$set": {"y": 2}}, durability=d
    ),
    "find_one_and_replace": lambda db, d: db.collection("c").find_one_and_replace({"_id": 1}, {"z": 3}, durability=d),
    "find_one_and_delete": lambda db, d: db.collection("c").find_one_and_delete({"_id": 4}, durability=d),
    "create_index": lambda db, d: db.collection("c").create_index([("k", -1)], durability=d),
    "drop_index": lambda db, d: db.collection("c").drop_index("k_1", durability=d),
    "drop": lambda db, d: db.collection("c").drop(durability=d),
    "rename": lambda db, d: db.collection("c").rename("c2", durability=d),
    "enable_change_stream": lambda db, d: db.collection("c").enable_change_stream(durability=d),
    "delete_expired": lambda db, d: db.collection("ttl").delete_expired(durability=d),
    "table.put": lambda db, d: db.table("t", str, int).put("b", 2, durability=d),
    "table.delete": lambda db, d: db.table("t", str, int).delete("a", durability=d),
    "drop_table": lambda db, d: db.drop_table("t", durability=d),
    "append": lambda db, d: db.append("s", [("C", b"3")], durability=d),
    "delete_stream": lambda db, d: db.delete_stream("s", durability=d),
    "set_stream_metadata": lambda db, d: db.set_stream_metadata("s", max_count=1, durability=d),
    "save_snapshot": lambda db, d: db.save_snapshot("s", 1, b"state", durability=d),
}


def _seed_ttl(db):
    # Documents expired long ago, more than the first pass (made by
    # create_index, 64 documents) deletes: delete_expired has work left.
    ttl = db.collection("ttl", durability="none")
    old = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)
    ttl.insert_many([{"_id": i, "at": old} for i in range(200)])
    ttl.create_index("at", expireAfterSeconds=1)
    assert 0 < ttl.estimated_document_count() < 200


def _measure(db, write, durability):
    before = db.io_counters()
    write(db, durability)
    after = db.io_counters()
    assert after["commits"] > before["commits"], "the write committed nothing"
    return after["syncs"] - before["syncs"]


@pytest.mark.parametrize("name", sorted(WRITES))
def test_a_call_with_durability_none_does_not_flush(path, name):
    with cairndb.open(path) as db:  # the database's default: immediate
        _seed(db)
        if name == "delete_expired":
            _seed_ttl(db)
        assert _measure(db, WRITES[name], "none") == 0
        assert db.check()["ok"]


@pytest.mark.parametrize("name", sorted(WRITES))
def test_a_call_with_durability_immediate_flushes(path, name):
    with cairndb.open(path, durability="none") as db:
        _seed(db)
        if name == "delete_expired":
            _seed_ttl(db)
        assert _measure(db, WRITES[name], "immediate") >= 1


def test_the_default_is_the_handles_then_the_databases(path):
    with cairndb.open(path) as db:
        _seed(db)
        fast = db.collection("c", durability="none")
        assert _measure(db, lambda db, d: fast.insert_one({"_id": 20}, durability=d), None) == 0
        assert _measure(db, lambda db, d: fast.insert_one({"_id": 21}, durability=d), "immediate") >= 1
        slow = fast.with_options(durability="immediate")
        assert slow.durability == "immediate" and fast.durability == "none"
        assert fast.with_options().durability == "none"
        assert _measure(db, lambda db, d: slow.insert_one({"_id": 22}, durability=d), None) >= 1
        t = db.table("t", str, int, durability="none")
        assert t.durability == "none"
        assert _measure(db, lambda db, d: t.put("x", 1, durability=d), None) == 0
        assert _measure(db, lambda db, d: t.__setitem__("y", 2), None) == 0
        assert _measure(db, lambda db, d: db.table("t").put("z", 3, durability=d), None) >= 1
    with cairndb.open(path, durability="none") as db:
        assert _measure(db, lambda db, d: db.collection("c").insert_one({"_id": 30}, durability=d), None) == 0


def _txn_writer(id_):
    def write(db, d):
        with db.transaction(durability=d) as tx:
            tx.collection("c").insert_one({"_id": id_})

    return write


def test_a_transactions_durability(path):
    with cairndb.open(path) as db:
        _seed(db)

        def in_txn(db, d):
            with db.transaction(durability=d) as tx:
                tx.collection("c").insert_one({"_id": 40})
                tx.table("t", str, int)["q"] = 1

        assert _measure(db, in_txn, "none") == 0
        assert _measure(db, _txn_writer(41), "immediate") >= 1
        assert db.collection("c").count_documents({"_id": {"$in": [40, 41]}}) == 2
        # A write inside a transaction takes the transaction's durability.
        with db.transaction() as tx:
            with pytest.raises(cairndb.InvalidArgumentError, match="transaction"):
                tx.table("t", str, int).put("r", 1, durability="none")
            tx.table("t", str, int).put("r", 1)
        assert db.table("t", str, int)["r"] == 1


def test_bad_durability_values_are_refused_before_writing(db):
    _seed(db)
    c = db.collection("c")
    for bad in ("sometimes", "", "IMMEDIATE"):
        with pytest.raises(ValueError, match="durability"):
            c.insert_one({"_id": 99}, durability=bad)
        with pytest.raises(ValueError, match="durability"):
            db.table("t", str, int).put("n", 1, durability=bad)
        with pytest.raises(ValueError, match="durability"):
            db.append("s", [("X", b"")], durability=bad)
        with pytest.raises(ValueError, match="durability"):
            c.with_options(durability=bad)
    with pytest.raises(TypeError):
        c.insert_one({"_id": 99}, durability=1)
    assert c.find_one({"_id": 99}) is None
    assert db.read("s")[-1].type == "B"
