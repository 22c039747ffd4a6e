import threading
import time
import uuid

import pytest

import cairndb


def test_append_and_read(db):
    r = db.append("order-1", [{"type": "Created", "data": b'{"n": 1}'}], expected_version=cairndb.NO_STREAM)
    assert (r.version, r.first_position, r.count, r.idempotent) == (0, 0, 1, False)
    r = db.append("order-1", [("Paid", b"p"), {"type": "Shipped", "data": "s", "metadata": b"m"}], expected_version=0)
    assert (r.version, r.first_position, r.count) == (2, 1, 2)
    evs = db.read("order-1")
    assert [e.type for e in evs] == ["Created", "Paid", "Shipped"]
    assert [e.version for e in evs] == [0, 1, 2]
    assert [e.position for e in evs] == [0, 1, 2]
    assert evs[2].data == b"s" and evs[2].metadata == b"m" and evs[0].metadata == b""
    assert isinstance(evs[0].id, uuid.UUID) and evs[0].stream == "order-1"
    assert evs[0].recorded_at_micros > 1_600_000_000_000_000
    assert [e.version for e in db.read("order-1", 1)] == [1, 2]
    assert [e.version for e in db.read("order-1", backward=True)] == [2, 1, 0]
    assert [e.version for e in db.read("order-1", limit=2)] == [0, 1]
    assert db.stream_version("order-1") == 2
    assert db.stream_version("nope") is None


def test_expected_versions(db):
    db.append("s", [("A", b"")])
    with pytest.raises(cairndb.WrongExpectedVersionError) as e:
        db.append("s", [("B", b"")], expected_version=cairndb.NO_STREAM)
    assert e.value.stream == "s" and e.value.actual == 0
    with pytest.raises(cairndb.WrongExpectedVersionError) as e:
        db.append("s", [("B", b"")], expected_version=5)
    assert e.value.actual == 0
    with pytest.raises(cairndb.WrongExpectedVersionError) as e:
        db.append("t", [("B", b"")], expected_version=cairndb.EXISTS)
    assert e.value.actual is None
    db.append("s", [("B", b"")], expected_version=cairndb.EXISTS)
    db.append("s", [("C", b"")], expected_version=cairndb.ANY)
    with pytest.raises(ValueError):
        db.append("s", [("C", b"")], expected_version="sometime")
    assert issubclass(cairndb.WrongExpectedVersionError, cairndb.EventError)


def test_idempotent_append(db):
    ev = {"type": "A", "data": b"x", "id": uuid.uuid4()}
    assert db.append("s", [ev], expected_version=cairndb.NO_STREAM).count == 1
    # A retry with the same ids and expectation writes nothing.
    again = db.append("s", [ev], expected_version=cairndb.NO_STREAM)
    assert again.idempotent and (again.first_position, again.count) == (0, 1)
    assert db.stream_version("s") == 0
    assert db.read("s")[0].id == ev["id"]
    # With "any" too, a repeat of the stream's newest events writes nothing
    # (as KurrentDB's); other events after them make it a new append.
    again = db.append("s", [ev])
    assert again.idempotent and (again.first_position, again.count) == (0, 1)
    db.append("s", [{"type": "B", "data": b"y"}])
    assert db.append("s", [ev]).count == 1


def test_bad_events(db):
    with pytest.raises(cairndb.InvalidArgumentError):
        db.append("s", [("", b"x")])
    with pytest.raises(cairndb.InvalidArgumentError):
        db.append("$system", [("A", b"x")])
    with pytest.raises(TypeError):
        db.append("s", [("A", 5)])
    with pytest.raises(ValueError):
        db.append("s", [{"data": b"no type"}])
    with pytest.raises(TypeError):
        db.append("s", [42])


def test_read_all_and_filters(db):
    db.append("a-1", [("X", b"1"), ("Y", b"2")])
    db.append("b-1", [("X", b"3")])
    db.append("a-2", [("Z", b"4")])
    assert [e.data for e in db.read_all()] == [b"1", b"2", b"3", b"4"]
    assert [e.position for e in db.read_all(2)] == [2, 3]
    assert [e.position for e in db.read_all(backward=True, limit=2)] == [3, 2]
    assert [e.data for e in db.read_all(event_types=["X"])] == [b"1", b"3"]
    assert [e.data for e in db.read_all(stream_prefix="a-")] == [b"1", b"2", b"4"]


def test_delete_stream(db):
    db.append("soft", [("A", b"")])
    db.delete_stream("soft")
    assert db.stream_version("soft") is None
    db.append("hard", [("A", b"")])
    db.delete_stream("hard", 0, hard=True)
    with pytest.raises(cairndb.StreamDeletedError):
        db.append("hard", [("B", b"")])
    with pytest.raises(cairndb.StreamDeletedError):
        db.read("hard")


def test_subscribe_history_then_live(db):
    db.append("s", [("A", b"0"), ("B", b"1")])
    sub = db.subscribe(0)
    assert sub.next(1).data == b"0"
    assert sub.next(1).data == b"1"
    assert sub.next(0.1) is None
    assert sub.caught_up and sub.checkpoint == 2

    def later():
        time.sleep(0.2)
        db.append("s", [("C", b"2")])

    th = threading.Thread(target=later)
    th.start()
    t0 = time.monotonic()
    ev = sub.next(5)
    th.join()
    assert ev.data == b"2" and ev.position == 2
    assert time.monotonic() - t0 < 4
    sub.close()
    with pytest.raises(cairndb.ClosedError):
        sub.next(0)
    assert list(sub) == []


def test_subscription_timeouts_are_checked_as_change_streams_check_them(db):
    """One rule for every wait's timeout: a number of seconds >= 0 that a
    duration holds; None waits without a deadline."""
    db.append("s", [("A", b"0")])
    sub = db.subscribe(0)
    for bad in (-1, float("nan"), float("inf"), 1e300):
        with pytest.raises(ValueError, match="timeout"):
            sub.next(bad)
    assert sub.next(0).data == b"0"
    assert sub.next(0) is None
    c = db.collection("c")
    c.enable_change_stream()
    s = c.watch()
    for bad in (-1, float("nan"), float("inf"), 1e300):
        with pytest.raises(ValueError, match="timeout"):
            s.try_next(bad)
        with pytest.raises(ValueError, match="timeout"):
            s.next(bad)
    assert s.try_next(0) is None
    sub.close()
    s.close()


def test_subscribe_iterator_and_close_from_thread(db):
    db.append("s", [("A", b"0")])
    got = []
    with db.subscribe(0, event_types=["A"]) as sub:

        def stopper():
            time.sleep(0.3)
            db.append("s", [("B", b"skip"), ("A", b"1")])
            time.sleep(0.3)
            sub.close()

        th = threading.Thread(target=stopper)
        th.start()
        for ev in sub:  # ends when closed
            got.append(ev.data)
        th.join()
    assert got == [b"0", b"1"]


def test_subscribe_from_checkpoint(db):
    db.append("s", [("A", b"0"), ("A", b"1"), ("A", b"2")])
    with db.subscribe(2) as sub:
        assert sub.next(1).position == 2
        assert sub.next(0.05) is None


def test_events_in_transaction(db):
    with db.transaction() as tx:
        assert tx.append("s", [("A", b"")], expected_version=cairndb.NO_STREAM).version == 0
        assert tx.append("s", [("B", b"")], expected_version=0).version == 1
        assert db.stream_version("s") is None
    assert db.stream_version("s") == 1


def test_subscription_wait_is_interruptible(db):
    import os
    import signal

    # Python leaves SIGINT ignored when it starts with it ignored (a process
    # started in the background by a non-interactive shell): install the
    # default handler for this test, as an interactive session has it.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        sub = db.subscribe(0)
        timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
        timer.start()
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            for _ in sub:  # nothing ever comes
                pass
        timer.join()
        assert time.monotonic() - t0 < 5
        sub.close()
    finally:
        signal.signal(signal.SIGINT, previous)


def test_subscribe_stream(db):
    db.append("other", [("X", b"")])
    with db.subscribe_stream("order-9") as sub:
        assert sub.next(0.1) is None  # the stream does not exist yet
        db.append("order-9", [("A", b"0"), ("B", b"1")])
        db.append("other", [("X", b"")])
        evs = [sub.next(2), sub.next(2)]
        assert [(e.stream, e.version) for e in evs] == [("order-9", 0), ("order-9", 1)]
        assert sub.next(0.1) is None
        assert sub.checkpoint == 2
    with db.subscribe_stream("order-9", 1) as sub:
        assert sub.next(1).version == 1
    with pytest.raises(cairndb.InvalidArgumentError):
        db.subscribe_stream("")


def test_list_streams(db):
    db.append("a-1", [("X", b"")])
    db.append("a-2", [("X", b""), ("Y", b"")])
    db.append("b-1", [("X", b"")])
    db.delete_stream("a-1")
    db.delete_stream("b-1", hard=True)
    got = {s["name"]: s for s in db.list_streams()}
    assert set(got) == {"a-1", "a-2", "b-1"}
    assert got["a-2"]["version"] == 1 and got["a-2"]["state"] == "live"
    assert got["a-1"]["state"] == "deleted"
    assert got["b-1"]["state"] == "tombstoned"
    assert [s["name"] for s in db.list_streams("a-")] == ["a-1", "a-2"]


def test_async_iteration(db):
    import asyncio

    db.append("s", [("A", b"0")])

    async def main():
        sub = db.subscribe(0)
        got = []

        async def later():
            await asyncio.sleep(0.2)
            await asyncio.get_running_loop().run_in_executor(None, db.append, "s", [("B", b"1")])

        task = asyncio.ensure_future(later())
        async for ev in sub:
            got.append(ev.data)
            if len(got) == 2:
                sub.close()
        await task
        return got

    assert asyncio.run(main()) == [b"0", b"1"]
