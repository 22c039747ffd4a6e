import os

import pytest

import cairndb


def test_hierarchy():
    for name in [
        "StorageError", "CorruptionError", "PoisonedError", "DatabaseLockedError",
        "NotADatabaseError", "DatabaseNotFoundError", "LimitError", "ReadOnlyError",
        "TableTypeError", "TransactionError", "InvalidArgumentError", "ClosedError",
        "DocumentError", "EventError",
    ]:
        assert issubclass(getattr(cairndb, name), cairndb.Error), name
    assert issubclass(cairndb.DuplicateKeyError, cairndb.DocumentError)
    assert issubclass(cairndb.StreamNotFoundError, cairndb.EventError)
    assert issubclass(cairndb.Error, Exception)


def test_database_locked(path):
    with cairndb.open(path):
        with pytest.raises(cairndb.DatabaseLockedError) as e:
            cairndb.open(path)
        assert "locked" in str(e.value)


def test_not_found_and_not_a_database(tmp_path):
    with pytest.raises(cairndb.DatabaseNotFoundError):
        cairndb.open(str(tmp_path / "missing.cairn"), create=False)
    junk = tmp_path / "junk.cairn"
    junk.write_bytes(b"this is not a database at all" * 1000)
    with pytest.raises(cairndb.NotADatabaseError):
        cairndb.open(str(junk))


def test_corruption_names_page_and_offset(path):
    with cairndb.open(path) as db:
        t = db.table("t")
        with db.transaction() as tx:
            w = tx.table("t")
            for i in range(2000):
                w[b"%06d" % i] = b"v" * 100
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        data = bytearray(f.read())
        # Flip bytes across the data pages (past the header pages).
        for off in range(16384, size, 4096):
            data[off + 100] ^= 0xFF
        f.seek(0)
        f.write(data)
    err = None
    try:
        with cairndb.open(path) as db:
            report = db.check()
            assert not report["ok"] and report["problems"]
            list(db.table("t").range())
    except cairndb.CorruptionError as e:
        err = e
    if err is not None:
        assert isinstance(err.page, int) and isinstance(err.offset, int)
        assert "page" in str(err)


def test_close_and_closed(path):
    db = cairndb.open(path)
    t = db.table("t")
    c = db.collection("c")
    assert not db.closed
    db.close()
    db.close()  # twice is fine
    assert db.closed
    with pytest.raises(cairndb.ClosedError):
        t[b"a"] = b"b"
    with pytest.raises(cairndb.ClosedError):
        c.insert_one({})
    with pytest.raises(cairndb.ClosedError):
        db.transaction()
    # The file can be opened again.
    with cairndb.Database(path) as db2:
        assert repr(db2) == f"Database({path!r})".replace("'", '"')
        assert db2.path == path


def test_stats_check_compact_backup(tmp_path, db):
    t = db.table("t")
    with db.transaction() as tx:
        w = tx.table("t")
        for i in range(3000):
            w[b"%06d" % i] = b"x" * 200
    s = db.stats()
    assert s["tables"]["t"]["entries"] == 3000
    assert s["file_bytes"] > 0 and s["page_size"] >= 512
    assert db.check() == {"ok": True, "problems": [], "txn": db.check()["txn"], "page_count": db.check()["page_count"]}
    with db.transaction() as tx:
        w = tx.table("t")
        for i in range(3000):
            w.delete(b"%06d" % i)
    snap = db.snapshot()
    with pytest.raises(cairndb.TransactionError):
        db.compact()  # a live snapshot pins pages
    snap.close()
    r = db.compact()
    assert r["after_bytes"] <= r["before_bytes"]
    t[b"k"] = b"v"
    out = str(tmp_path / "copy.cairn")
    db.backup(out)
    with pytest.raises(cairndb.Error):
        db.backup(out)  # must not exist
    with cairndb.open(out) as copy:
        assert copy.table("t")[b"k"] == b"v"
        assert copy.check()["ok"]


def test_open_options(path):
    with cairndb.open(path, page_size=8192, cache_size=1 << 20, max_readers=4) as db:
        db.table("t")[b"a"] = b"b"
        assert db.stats()["page_size"] == 8192
        snaps = [db.snapshot() for _ in range(4)]
        with pytest.raises(cairndb.LimitError):
            db.snapshot()
        for s in snaps:
            s.close()
    with pytest.raises(cairndb.InvalidArgumentError):
        cairndb.open(path + "2", page_size=3)
    with cairndb.open(path + "3", max_file_size=1 << 20) as db:
        with pytest.raises(cairndb.LimitError):
            with db.transaction() as tx:
                w = tx.table("t")
                for i in range(10_000):
                    w[b"%08d" % i] = b"y" * 500


def test_version_and_docstrings():
    assert cairndb.__version__
    assert "transaction" in cairndb.Database.transaction.__doc__
    assert cairndb.Database.__doc__ and cairndb.Collection.find.__doc__
