"""Event snapshots (save_snapshot / load) and stream metadata
(set_stream_metadata / stream_info / next_position)."""

import pytest

import cairndb


def _fill(db, stream, n):
    db.append(stream, [("E%d" % i, b"%d" % i) for i in range(n)])


def test_load_without_snapshot_returns_every_event(db):
    _fill(db, "acct-1", 3)
    l = db.load("acct-1")
    assert isinstance(l, cairndb.LoadedStream)
    assert l.stream == "acct-1"
    assert l.snapshot_version is None and l.state is None
    assert [e.version for e in l.events] == [0, 1, 2]
    assert l.version == 2
    assert "snapshot_version=None" in repr(l)


def test_save_snapshot_then_load_returns_the_events_after_it(db):
    _fill(db, "acct-1", 5)
    db.save_snapshot("acct-1", 2, b"balance=2")
    l = db.load("acct-1")
    assert (l.snapshot_version, l.state) == (2, b"balance=2")
    assert [e.version for e in l.events] == [3, 4]
    assert l.version == 4
    # A load up to a version picks the newest snapshot at or below it.
    db.save_snapshot("acct-1", 4, "balance=4")  # str is stored as UTF-8
    assert db.load("acct-1").state == b"balance=4" and db.load("acct-1").events == []
    assert db.load("acct-1").version == 4
    l = db.load("acct-1", 3)
    assert (l.snapshot_version, [e.version for e in l.events], l.version) == (2, [3], 3)
    l = db.load("acct-1", 1)
    assert l.snapshot_version is None and [e.version for e in l.events] == [0, 1]
    # Saving again at the same version replaces it.
    db.save_snapshot("acct-1", 2, bytearray(b"again"))
    assert db.load("acct-1", 2).state == b"again"


def test_snapshot_errors(db):
    with pytest.raises(cairndb.StreamNotFoundError):
        db.save_snapshot("nope", 0, b"x")
    with pytest.raises(cairndb.StreamNotFoundError):
        db.load("nope")
    _fill(db, "s", 2)
    with pytest.raises(cairndb.EventError, match="past|end"):
        db.save_snapshot("s", 2, b"x")  # versions are 0 and 1
    with pytest.raises(cairndb.EventError):
        db.load("s", 7)
    # Events hidden by truncation are not loaded; the version asked for is
    # still the one reached.
    db.set_stream_metadata("s", truncate_before=2)
    l = db.load("s", 1)
    assert (l.events, l.snapshot_version, l.version) == ([], None, 1)
    db.set_stream_metadata("s")
    with pytest.raises(TypeError):
        db.save_snapshot("s", 0, None)
    with pytest.raises(TypeError):
        db.save_snapshot("s", 0, 12)
    with pytest.raises(OverflowError):
        db.save_snapshot("s", -1, b"x")
    with pytest.raises(cairndb.InvalidArgumentError):
        db.save_snapshot("$system", 0, b"x")
    db.delete_stream("s")
    with pytest.raises(cairndb.StreamNotFoundError):
        db.save_snapshot("s", 0, b"x")
    _fill(db, "t", 1)
    db.delete_stream("t", hard=True)
    with pytest.raises(cairndb.StreamDeletedError):
        db.save_snapshot("t", 0, b"x")
    with pytest.raises(cairndb.StreamDeletedError):
        db.load("t")


def test_snapshots_in_a_transaction_commit_and_abort_with_it(db):
    _fill(db, "s", 3)
    with db.transaction() as tx:
        tx.save_snapshot("s", 1, b"one")
        tx.set_stream_metadata("s", truncate_before=1)
    assert db.load("s").snapshot_version == 1
    assert db.stream_info("s")["truncate_before"] == 1
    with pytest.raises(RuntimeError):
        with db.transaction() as tx:
            tx.save_snapshot("s", 2, b"two")
            tx.set_stream_metadata("s", max_count=1)
            raise RuntimeError("abort")
    assert db.load("s").snapshot_version == 1
    assert db.stream_info("s")["max_count"] is None
    # An append and its snapshot in one transaction.
    with db.transaction() as tx:
        r = tx.append("s", [("E3", b"")], expected_version=2)
        tx.save_snapshot("s", r.version, b"three")
    assert (db.load("s").snapshot_version, db.load("s").events) == (3, [])
    with db.transaction() as tx:
        with pytest.raises(cairndb.StreamNotFoundError):
            tx.save_snapshot("nope", 0, b"")
    tx = db.transaction()
    tx.commit()
    with pytest.raises(cairndb.TransactionError):
        tx.save_snapshot("s", 0, b"")


def test_stream_info_and_metadata(db):
    assert db.stream_info("s") is None
    assert db.next_position() == 0
    _fill(db, "s", 5)
    assert db.next_position() == 5
    info = db.stream_info("s")
    assert info == {
        "name": "s",
        "version": 4,
        "state": "live",
        "first_visible": 0,
        "max_count": None,
        "truncate_before": None,
    }
    db.set_stream_metadata("s", max_count=2)
    assert [e.version for e in db.read("s")] == [3, 4]
    info = db.stream_info("s")
    assert (info["max_count"], info["first_visible"]) == (2, 3)
    db.set_stream_metadata("s", truncate_before=1)  # replaces: max_count cleared
    assert [e.version for e in db.read("s")] == [1, 2, 3, 4]
    assert db.stream_info("s")["max_count"] is None
    db.set_stream_metadata("s", max_count=3, truncate_before=3)
    assert [e.version for e in db.read("s")] == [3, 4]
    db.set_stream_metadata("s")
    assert [e.version for e in db.read("s")] == [0, 1, 2, 3, 4]
    # Hidden events stay in the global log.
    db.set_stream_metadata("s", max_count=1)
    assert len(db.read_all()) == 5
    # list_streams carries the same keys.
    assert db.list_streams() == [db.stream_info("s")]
    # Settings ahead of a stream's first event.
    db.set_stream_metadata("later", max_count=1)
    assert db.stream_info("later")["version"] is None
    _fill(db, "later", 3)
    assert [e.version for e in db.read("later")] == [2]


def test_stream_metadata_errors(db):
    with pytest.raises(cairndb.InvalidArgumentError):
        db.set_stream_metadata("", max_count=1)
    with pytest.raises(cairndb.InvalidArgumentError):
        db.stream_info("$x")
    with pytest.raises(OverflowError):
        db.set_stream_metadata("s", max_count=-1)
    with pytest.raises(TypeError):
        db.set_stream_metadata("s", 3)  # keyword-only
    _fill(db, "t", 1)
    db.delete_stream("t", hard=True)
    with pytest.raises(cairndb.StreamDeletedError):
        db.set_stream_metadata("t", max_count=1)
    assert db.stream_info("t")["state"] == "tombstoned"


def test_read_only_handle_refuses_snapshot_and_metadata_writes(path):
    with cairndb.open(path) as db:
        _fill(db, "s", 2)
    with cairndb.open(path, read_only=True) as ro:
        assert ro.load("s").version == 1
        with pytest.raises(cairndb.ReadOnlyError):
            ro.save_snapshot("s", 0, b"x")
        with pytest.raises(cairndb.ReadOnlyError):
            ro.set_stream_metadata("s", max_count=1)


def test_closed_database(path):
    db = cairndb.open(path)
    db.close()
    for call in (
        lambda: db.save_snapshot("s", 0, b""),
        lambda: db.load("s"),
        lambda: db.stream_info("s"),
        lambda: db.set_stream_metadata("s"),
        lambda: db.next_position(),
    ):
        with pytest.raises(cairndb.ClosedError):
            call()
