import threading
import time

import pytest

import cairndb


def test_commit_on_exit(db):
    with db.transaction() as tx:
        assert tx.active
        t = tx.table("t")
        t[b"a"] = b"1"
        assert t[b"a"] == b"1"
        # Not visible outside before the commit.
        assert db.table("t").get(b"a") is None
    assert not tx.active
    assert db.table("t")[b"a"] == b"1"


def test_abort_on_exception(db):
    db.table("t")[b"keep"] = b"1"
    with pytest.raises(ZeroDivisionError):
        with db.transaction() as tx:
            tx.table("t")[b"gone"] = b"2"
            tx.collection("c").insert_one({"_id": 1})
            tx.append("s", [("E", b"")])
            1 / 0
    assert db.table("t").get(b"gone") is None
    assert db.table("t")[b"keep"] == b"1"
    assert db.collection("c").count_documents() == 0
    assert db.stream_version("s") is None


def test_explicit_commit_and_abort(db):
    tx = db.transaction()
    tx.table("t")[b"a"] = b"1"
    txn_id = tx.commit()
    assert isinstance(txn_id, int) and txn_id > 0
    with pytest.raises(cairndb.TransactionError):
        tx.commit()
    with pytest.raises(cairndb.TransactionError):
        tx.table("t")
    tx2 = db.transaction()
    t2 = tx2.table("t")
    t2[b"b"] = b"2"
    tx2.abort()
    tx2.abort()  # twice is fine
    with pytest.raises(cairndb.TransactionError):
        t2[b"c"] = b"3"
    assert db.table("t").get(b"b") is None
    assert db.table("t")[b"a"] == b"1"


def test_same_thread_write_during_transaction_is_an_error(db):
    with db.transaction() as tx:
        with pytest.raises(cairndb.TransactionError):
            db.table("t")[b"x"] = b"y"
        with pytest.raises(cairndb.TransactionError):
            db.transaction()
        with pytest.raises(cairndb.TransactionError):
            db.collection("c").insert_one({})
        # Reads outside the transaction are fine (they see the last commit).
        assert db.table("t").get(b"x") is None
        tx.table("t")[b"x"] = b"z"
    assert db.table("t")[b"x"] == b"z"


def test_other_thread_waits_for_the_transaction(db):
    order = []

    def writer():
        db.table("t")[b"w"] = b"thread"
        order.append("thread")

    tx = db.transaction()
    th = threading.Thread(target=writer)
    th.start()
    time.sleep(0.2)
    order.append("tx")
    tx.table("t")[b"w"] = b"tx"
    tx.commit()
    th.join(10)
    assert order == ["tx", "thread"]
    assert db.table("t")[b"w"] == b"thread"


def test_transaction_range_sees_own_writes(db):
    with db.transaction() as tx:
        t = tx.table("t", key_type=int, value_type=int)
        for i in range(300):
            t[i] = i
        t.delete(5)
        got = list(t.range(0, 10))
        assert got == [(i, i) for i in range(10) if i != 5]
        assert len(t) == 299


def test_snapshot_isolation(db):
    t = db.table("t", key_type=str, value_type=int)
    t["n"] = 1
    with db.snapshot() as s:
        st = s.table("t")
        txn = s.txn_id
        t["n"] = 2
        t["m"] = 3
        assert st["n"] == 1
        assert "m" not in st
        assert len(st) == 1
        assert list(st.items()) == [("n", 1)]
        with pytest.raises(cairndb.ReadOnlyError):
            st["n"] = 5
        assert s.txn_id == txn
    with pytest.raises(cairndb.ClosedError):
        st.get("n")
    assert t["n"] == 2


def test_durability_options(path):
    with pytest.raises(ValueError):
        cairndb.open(path, durability="sometimes")
    with cairndb.open(path, durability="none") as db:
        assert db.durability == "none"
        db.table("t")[b"a"] = b"1"
        with db.transaction(durability="immediate") as tx:
            tx.table("t")[b"b"] = b"2"
        db.sync()
    with cairndb.open(path) as db:
        assert db.durability == "immediate"
        assert list(db.table("t").keys()) == [b"a", b"b"]


def test_read_only(path):
    with cairndb.open(path) as db:
        db.table("t")[b"a"] = b"1"
    with cairndb.open(path, read_only=True) as db:
        assert db.table("t")[b"a"] == b"1"
        with pytest.raises(cairndb.ReadOnlyError):
            db.table("t")[b"b"] = b"2"


def test_reserved_table_names_everywhere(db):
    db.collection("c").insert_one({})
    with pytest.raises(cairndb.InvalidArgumentError):
        db.drop_table("$docs")
    with db.snapshot() as s:
        with pytest.raises(cairndb.InvalidArgumentError):
            s.table("$docs")
    with db.transaction() as tx:
        with pytest.raises(cairndb.InvalidArgumentError):
            tx.table("$docs")


def test_queries_in_a_transaction_take_sort_skip_limit_projection_and_see_its_writes(db):
    db.collection("c").create_index("k")
    db.collection("c").insert_many([{"_id": i, "k": i % 3, "x": i} for i in range(9)])
    with db.transaction() as tx:
        c = tx.collection("c")
        c.insert_one({"_id": 9, "k": 2, "x": 9})
        c.delete_many({"_id": 0})
        got = c.find({"k": {"$gte": 1}}, {"x": 1, "_id": 0}, sort=[("k", -1), ("_id", -1)], skip=1, limit=3)
        assert got == [{"x": 8}, {"x": 5}, {"x": 2}]
        assert c.find_one({"k": 0}, sort=[("_id", -1)]) == {"_id": 6, "k": 0, "x": 6}
        assert c.find_one({"k": 0}, ["x"]) == {"_id": 3, "x": 3}
        assert c.count_documents({"k": 2}) == 4
        with pytest.raises(cairndb.InvalidQueryError):
            c.find({}, sort=[("k", 2)])
