"""CairnDB from Python: an embedded, single-file, crash-safe database.

One file holds ordered key-value tables, JSON-like document collections
with secondary indexes and a MongoDB-style query language, and event
streams with a global log and subscriptions, all changed in ACID
transactions.

    import cairndb

    with cairndb.open("app.cairn") as db:
        users = db.collection("users")
        users.insert_one({"name": "ada", "age": 36})
        print(users.find_one({"age": {"$gt": 30}}))

        kv = db.table("settings", key_type=str, value_type=str)
        kv["theme"] = "dark"

        with db.transaction() as tx:          # commits at the end,
            tx.table("counters", str, int)["n"] = 1   # aborts on an exception

        db.append("order-1", [{"type": "Created", "data": b"{}"}])

Every call releases the GIL while the engine works, and every object can
be shared between threads. Errors are subclasses of ``cairndb.Error``.

Documents map Python values both ways: dict, list (tuples are stored as
lists), str, int (64-bit signed; larger raises OverflowError), float, bool,
None, bytes (bytearray is stored as bytes), ``ObjectId`` (the 12-byte id
the engine generates for a document inserted without ``_id``),
``datetime.datetime`` (a date, in UTC milliseconds; it comes back aware, in
UTC) and ``uuid.UUID``.

Reads that must agree with each other use one snapshot::

    with db.snapshot() as s:                  # later commits are not seen
        n = s.collection("users").count_documents({})
        page = s.collection("users").find({}, limit=10).to_list()
        events = s.read_all()

Every write takes ``durability="immediate"`` (on disk when it returns, the
default) or ``durability="none"`` (no device flush: a crash may lose the
latest such commits, each whole, until the next durable commit or
``db.sync()``), for the call, the collection or table handle
(``db.collection(name, durability=...)``), the transaction
(``db.transaction(durability=...)``) or the database (``cairndb.open``).
"""

from ._native import (
    AppendResult,
    BulkUpsertResult,
    ChangeStream,
    ChangeStreamError,
    ChangeStreamHistoryLost,
    ChangeStreamHistoryLostError,
    ClosedError,
    Collection,
    CorruptionError,
    Cursor,
    Database,
    DatabaseLockedError,
    DatabaseNotFoundError,
    DeleteResult,
    DocumentError,
    DuplicateKeyError,
    Error,
    EventError,
    IdempotencyConflictError,
    InsertManyResult,
    InsertOneResult,
    InvalidArgumentError,
    InvalidQueryError,
    LimitError,
    LoadedStream,
    NotADatabaseError,
    ObjectId,
    PoisonedError,
    RangeIter,
    ReadOnlyError,
    RecordedEvent,
    Snapshot,
    SnapshotCollection,
    StorageError,
    StreamDeletedError,
    StreamNotFoundError,
    Subscription,
    Table,
    TableTypeError,
    Transaction,
    TransactionError,
    TxCollection,
    UpdateResult,
    WrongExpectedVersionError,
    __version__,
    open,
)

#: ``expected_version`` values of ``append`` and ``delete_stream``.
ANY = "any"
NO_STREAM = "no_stream"
EXISTS = "exists"

__all__ = [
    "ANY",
    "EXISTS",
    "NO_STREAM",
    "AppendResult",
    "BulkUpsertResult",
    "ChangeStream",
    "ChangeStreamError",
    "ChangeStreamHistoryLost",
    "ChangeStreamHistoryLostError",
    "ClosedError",
    "Collection",
    "CorruptionError",
    "Cursor",
    "Database",
    "DatabaseLockedError",
    "DatabaseNotFoundError",
    "DeleteResult",
    "DocumentError",
    "DuplicateKeyError",
    "Error",
    "EventError",
    "IdempotencyConflictError",
    "InsertManyResult",
    "InsertOneResult",
    "InvalidArgumentError",
    "InvalidQueryError",
    "LimitError",
    "LoadedStream",
    "NotADatabaseError",
    "ObjectId",
    "PoisonedError",
    "RangeIter",
    "ReadOnlyError",
    "RecordedEvent",
    "Snapshot",
    "SnapshotCollection",
    "StorageError",
    "StreamDeletedError",
    "StreamNotFoundError",
    "Subscription",
    "Table",
    "TableTypeError",
    "Transaction",
    "TransactionError",
    "TxCollection",
    "UpdateResult",
    "WrongExpectedVersionError",
    "__version__",
    "open",
]
