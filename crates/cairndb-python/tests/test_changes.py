"""Change streams (``collection.watch()``) and TTL indexes from Python.

Properties: every committed change of a watched collection is delivered
once, in commit order, while another thread writes (no skip, no repeat),
and from a resume token after the file is reopened; events are shaped as
pymongo's; a token older than the change log's retention raises
``ChangeStreamHistoryLost``; a TTL index deletes expired documents
(MongoDB manual, "Change Events", "Resume a Change Stream", "TTL
Indexes").
"""

import asyncio
import threading
import time

import pytest

import cairndb


def test_watch_needs_the_option(db):
    c = db.collection("c")
    c.insert_one({"_id": 0})
    assert c.change_stream_enabled() is False
    with pytest.raises(cairndb.ChangeStreamError, match="enable_change_stream"):
        c.watch()
    c.enable_change_stream()
    assert c.change_stream_enabled() is True
    assert issubclass(cairndb.ChangeStreamHistoryLost, cairndb.ChangeStreamError)
    assert issubclass(cairndb.ChangeStreamError, cairndb.DocumentError)
    assert issubclass(cairndb.IdempotencyConflictError, cairndb.EventError)


def test_event_shape_and_try_next(db):
    c = db.collection("c")
    c.enable_change_stream()
    with c.watch(full_document="updateLookup") as s:
        assert s.try_next() is None
        assert s.alive
        c.insert_one({"_id": 1, "a": 1})
        c.update_one({"_id": 1}, {"$set": {"a": 2}, "$unset": {"x": ""}})
        c.replace_one({"_id": 1}, {"b": 1})
        c.delete_one({"_id": 1})
        evs = [s.try_next() for _ in range(4)]
        assert s.try_next() is None
    ins, upd, rep, dele = evs
    assert ins["operationType"] == "insert"
    assert ins["fullDocument"] == {"_id": 1, "a": 1}
    assert ins["documentKey"] == {"_id": 1}
    assert ins["ns"] == {"coll": "c"}
    assert set(ins["_id"]) == {"_data"} and len(ins["_id"]["_data"]) == 34
    assert isinstance(ins["clusterTime"], int) and ins["wallTime"] > 1_600_000_000_000
    assert upd["operationType"] == "update"
    assert upd["updateDescription"]["updatedFields"] == {"a": 2}
    assert upd["fullDocument"] == {"_id": 1, "a": 2}
    assert rep["operationType"] == "replace" and rep["fullDocument"] == {"_id": 1, "b": 1}
    assert dele["operationType"] == "delete" and "fullDocument" not in dele
    assert [e["clusterTime"] for e in evs] == sorted(e["clusterTime"] for e in evs)
    # Closed: no more calls.
    assert not s.alive
    with pytest.raises(cairndb.ClosedError):
        s.try_next()


def test_pipeline_and_bad_arguments(db):
    c = db.collection("c")
    c.enable_change_stream()
    s = c.watch([{"$match": {"operationType": "delete"}}, {"$project": {"documentKey": 1}}])
    c.insert_one({"_id": 1})
    c.delete_one({"_id": 1})
    ev = s.next(timeout=5)
    assert ev["documentKey"] == {"_id": 1} and "operationType" not in ev
    with pytest.raises(TypeError):
        c.watch({"$match": {}})
    with pytest.raises(ValueError):
        c.watch(full_document="whenAvailable")
    with pytest.raises(cairndb.ChangeStreamError):
        c.watch(resume_after="zz")
    with pytest.raises(TypeError):
        c.watch(resume_after=5)
    with pytest.raises(ValueError):
        s.try_next(-1)
    # Finite but too large for a duration: an error, not a Rust panic.
    with pytest.raises(ValueError):
        s.try_next(1e300)


def test_thread_writes_while_another_iterates_no_skip_no_repeat(db):
    c = db.collection("c")
    c.enable_change_stream()
    n = 300
    s = c.watch()

    def writer():
        for i in range(n):
            if i % 3 == 0:
                c.insert_many([{"_id": i}])
            else:
                c.insert_one({"_id": i})

    t = threading.Thread(target=writer)
    t.start()
    got = []
    while len(got) < n:
        # Waits without the GIL; the writer runs meanwhile.
        ev = s.next(timeout=10)
        assert ev is not None, f"no change within 10 s after {got[-5:]}"
        got.append(ev["documentKey"]["_id"])
    t.join()
    assert got == list(range(n))
    assert s.try_next() is None
    s.close()


def test_resume_after_reopen(path):
    db = cairndb.open(path)
    c = db.collection("c")
    c.enable_change_stream()
    s = c.watch()
    for i in range(10):
        c.insert_one({"_id": i})
    first = [s.try_next()["documentKey"]["_id"] for _ in range(4)]
    token = s.resume_token
    s.close()
    db.close()
    db = cairndb.open(path)
    c = db.collection("c")
    for i in range(10, 12):
        c.insert_one({"_id": i})
    # The token as a dict (an event's _id) or as its hex string.
    for t in (token, token["_data"]):
        with c.watch(resume_after=t) as s2:
            rest = []
            while (ev := s2.try_next()) is not None:
                rest.append(ev["documentKey"]["_id"])
        assert first + rest == list(range(12))
    # A token of this collection is refused on another, naming both.
    other = db.collection("other")
    other.enable_change_stream()
    with pytest.raises(cairndb.ChangeStreamError, match='"c".*"other"|"other".*"c"'):
        other.watch(resume_after=token)
    db.close()


def test_history_lost(db):
    c = db.collection("c")
    c.enable_change_stream()
    db.set_change_log_retention(3)
    assert db.change_log_retention() == 3
    s = c.watch()
    c.insert_one({"_id": 0})
    tok = s.try_next()["_id"]
    for i in range(1, 12):
        c.insert_one({"_id": i})
    with pytest.raises(cairndb.ChangeStreamHistoryLost) as e:
        c.watch(resume_after=tok)
    assert e.value.collection == "c" and e.value.oldest > e.value.position
    assert isinstance(e.value, cairndb.Error)
    # The open stream, behind too, raises it on its next read.
    with pytest.raises(cairndb.ChangeStreamHistoryLostError):
        s.try_next()


def test_invalidate_ends_iteration_and_start_after(db):
    c = db.collection("c")
    c.enable_change_stream()
    s = c.watch()
    c.insert_one({"_id": 1})
    c.drop()
    ops = [ev["operationType"] for ev in s]
    assert ops == ["insert", "drop", "invalidate"]
    assert not s.alive
    inv = s.resume_token
    with pytest.raises(cairndb.ChangeStreamError):
        c.watch(resume_after=inv)
    c.enable_change_stream()
    s2 = c.watch(start_after=inv)
    c.insert_one({"_id": 2})
    assert s2.next()["documentKey"] == {"_id": 2}


def test_close_from_another_thread_ends_a_blocked_iteration(db):
    c = db.collection("c")
    c.enable_change_stream()
    s = c.watch()
    out = []
    t = threading.Thread(target=lambda: out.extend(s))
    t.start()
    time.sleep(0.2)
    s.close()
    t.join(timeout=5)
    assert not t.is_alive() and out == []


def test_async_iteration(db):
    c = db.collection("c")
    c.enable_change_stream()
    s = c.watch()
    for i in range(3):
        c.insert_one({"_id": i})
    c.drop()

    async def run():
        return [ev["operationType"] async for ev in s]

    assert asyncio.run(run()) == ["insert"] * 3 + ["drop", "invalidate"]


def test_ttl_index_and_delete_expired(db):
    c = db.collection("t")
    now = int(time.time() * 1000)
    c.insert_many([{"_id": 1, "at": now - 3_600_000}, {"_id": 2, "at": now}, {"_id": 3, "at": "x"}])
    name = c.create_index("at", expireAfterSeconds=60)
    assert name == "at_1"
    ttl = [i for i in c.list_indexes() if i["name"] == "at_1"]
    assert ttl == [{"name": "at_1", "key": {"at": 1}, "unique": False, "sparse": False, "expireAfterSeconds": 60}]
    # Creating it deleted the hour-old document; another expired one goes
    # with delete_expired().
    assert sorted(d["_id"] for d in c.find()) == [2, 3]
    db.collection("t2").insert_one({"_id": 9})
    c2 = db.collection("t2")
    c2.create_index("at", expireAfterSeconds=1)
    c2.insert_one({"_id": 10, "at": now - 10_000})
    # The insert itself may already have deleted it (writes delete a batch).
    assert c2.delete_expired() in (0, 1)
    assert [d["_id"] for d in c2.find()] == [9]
    assert c2.delete_expired() == 0
    with pytest.raises(cairndb.InvalidArgumentError):
        c.create_index([("a", 1), ("b", 1)], expireAfterSeconds=5)
    with pytest.raises(cairndb.DocumentError):
        c.create_index("b", expireAfterSeconds=1 << 40)


def test_idempotency_conflict(db):
    a, b, c = ("0190d3c4-0000-7000-8000-00000000000%d" % i for i in (1, 2, 3))
    db.append("s", [{"type": "T", "data": b"", "id": a}, {"type": "T", "data": b"", "id": b}])
    with pytest.raises(cairndb.IdempotencyConflictError) as e:
        db.append(
            "s",
            [{"type": "T", "data": b"", "id": a}, {"type": "T", "data": b"", "id": c}],
            expected_version=cairndb.NO_STREAM,
        )
    assert (e.value.stream, e.value.repeated, e.value.count) == ("s", 1, 2)
    assert len(db.read("s")) == 2


def test_help_documents_the_new_calls():
    for f in (
        cairndb.Collection.watch,
        cairndb.Collection.enable_change_stream,
        cairndb.Collection.delete_expired,
        cairndb.ChangeStream.try_next,
        cairndb.Database.set_change_log_retention,
    ):
        assert f.__doc__ and len(f.__doc__) > 20, f
    assert "resume token" in cairndb.ChangeStream.__doc__


def test_durability_per_collection_handle(db):
    fast = db.collection("c", durability="none")
    assert fast.durability == "none" and db.collection("c").durability == "immediate"
    with pytest.raises(ValueError):
        db.collection("c", durability="sometimes")
    # A durable commit flushes the device; the handle with "none" does not.
    before = db.io_counters()
    db.collection("c").insert_one({"_id": 0})
    mid = db.io_counters()
    assert mid["syncs"] > before["syncs"] and mid["commits"] == before["commits"] + 1
    fast.insert_one({"_id": 1})
    fast.update_one({"_id": 1}, {"$set": {"a": 1}})
    end = db.io_counters()
    assert end["syncs"] == mid["syncs"] and end["commits"] == mid["commits"] + 2
    assert db.collection("c").count_documents() == 2
