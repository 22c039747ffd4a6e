"""A benchmark of the Python package beside the libraries a Python user
would pick: ``sqlite3`` (standard library, JSON1 for documents), ``lmdb``
for key-value work and ``TinyDB`` for documents (each only if importable:
``pip install lmdb tinydb``), plus the cost of the binding itself (a
CairnDB read from Python against the same reads in a Rust loop).

    python -m cairndb.bench [--suite basic,lite,tiedot] [--n 20000] [--commits 300]
                            [--lite-sizes 10,100,1000] [--tiedot-n 10000]
                            [--durability immediate|none] [--repeats 3] [--dir DIR] [--json FILE]

Three suites, one table each (operations per second, median of --repeats
runs, and CairnDB's ratio to each peer: above 1, CairnDB is faster):

- ``basic``: key-value puts, gets and scans and document inserts, finds and
  updates (n entries).
- ``lite``: the LiteDB write table of ``cairn bench docs`` (suite D,
  docs/benchmarks.md): for N in --lite-sizes, individual inserts, a bulk
  insert, individual upserts of new and of existing entities, and bulk
  upserts of new, existing and half-new entities, of a game save's entities
  (``_id`` "save-01/entity-000042", an int id, a transform of 10 floats and
  a properties map). One operation is one entity written; individual rows
  commit each entity, bulk rows commit all N at once. Before each iteration,
  untimed, the collection is emptied and the preload stored.
- ``tiedot``: a reduced tiedot benchmark (suite D's seed 002) on one thread:
  --tiedot-n documents ``{nested: {nested: {str, int, float}}, strs: [2],
  ints: [2], floats: [2]}`` with six indexes (nested.nested.str/int/float,
  strs, ints, floats), then that many inserts, reads by id, lookup queries
  (``(nested.nested.int = a XOR ints has b) OR ints has a value in [r,
  r+2]``, answering ids), updates (a fresh document replaces one) and
  deletes (random ids, drawn with replacement), each one commit.

Durability, per row: ``--durability immediate`` (default) makes every
commit durable (CairnDB "immediate"; SQLite WAL with synchronous=FULL;
LMDB sync=True); ``none`` makes them crash-consistent but not flushed
(CairnDB "none"; SQLite WAL with synchronous=NORMAL; LMDB sync=False, which
survives a process crash only). The tiedot suite always runs in mode
``none``, as tiedot never flushes. TinyDB (its default JSON storage)
rewrites its whole file in place and fsyncs it on every write, in every
mode (it has no setting without the flush; the rewrite is not atomic, so a
crash mid-write can leave a torn file): its column says "fsync, in place".
Being O(n) per write, it runs the basic suite on at most 2,000 documents
and is left out of the tiedot suite above --tinydb-max documents. Each engine gets a fresh directory per
suite and repeat; all data is generated before the clock.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import sqlite3
import statistics
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import cairndb
from cairndb import _native

Row = Tuple[str, str, int]  # workload, engine, operations


def _timed(ops: int, fn: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    return ops / dt if dt > 0 else float("inf")


def _key(i: int) -> bytes:
    return b"key%010d" % i


def _doc(i: int, rng: random.Random) -> dict:
    return {
        "_id": i,
        "name": "user%d" % i,
        "age": rng.randrange(18, 90),
        "city": rng.choice(["Oslo", "Lima", "Pune", "Kyiv", "Perth"]),
        "tags": [rng.choice("abcdef") for _ in range(3)],
    }


def _cairn_durability(durable: bool) -> str:
    return "immediate" if durable else "none"


def _sqlite(path: str, durable: bool) -> sqlite3.Connection:
    """A connection in autocommit mode (each statement outside BEGIN is one
    commit), WAL, synchronous=FULL (durable) or NORMAL (not flushed at
    commit, crash-consistent)."""
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=%s" % ("FULL" if durable else "NORMAL"))
    return con


def _tinydb() -> Optional[Tuple[Any, Any]]:
    try:
        from tinydb import Query, TinyDB  # type: ignore
    except ImportError:
        return None
    return TinyDB, Query


# ---------------------------------------------------------------------------
# Suite "basic": each engine returns {workload: ops/s} for one run in
# directory d.


def basic_cairndb(d: str, n: int, commits: int, seed: int, durable: bool) -> Dict[str, float]:
    rng = random.Random(seed)
    out: Dict[str, float] = {}
    with cairndb.open(os.path.join(d, "bench.cairn"), durability=_cairn_durability(durable)) as db:
        t = db.table("kv")
        val = b"v" * 100

        def put_each() -> None:
            for i in range(commits):
                t.put(_key(i), val)

        out["kv: put, one commit each"] = _timed(commits, put_each)

        def put_batch() -> None:
            with db.transaction() as tx:
                w = tx.table("kv")
                for i in range(n):
                    w.put(_key(i), val)

        out["kv: put, one commit for all"] = _timed(n, put_batch)
        keys = [_key(rng.randrange(n)) for _ in range(n)]

        def gets() -> None:
            for k in keys:
                t.get(k)

        out["kv: random get"] = _timed(n, gets)
        out["kv: full scan"] = _timed(n, lambda: sum(1 for _ in t.range()))
        c = db.collection("people")
        c.create_index("age")
        docs = [_doc(i, rng) for i in range(n)]

        def insert_each() -> None:
            for dd in docs[:commits]:
                c.insert_one(dict(dd))

        out["docs: insert, one commit each"] = _timed(commits, insert_each)
        c.delete_many({})
        out["docs: insert_many, one commit"] = _timed(n, lambda: c.insert_many([dict(x) for x in docs]))
        ages = [rng.randrange(18, 90) for _ in range(200)]

        def finds() -> None:
            for a in ages:
                list(c.find({"age": a}))

        out["docs: find by indexed field"] = _timed(len(ages), finds)

        def updates() -> None:
            for i in range(commits):
                c.update_one({"_id": rng.randrange(n)}, {"$inc": {"age": 1}})

        out["docs: update_one by _id"] = _timed(commits, updates)
    return out


def basic_sqlite(d: str, n: int, commits: int, seed: int, durable: bool) -> Dict[str, float]:
    rng = random.Random(seed)
    out: Dict[str, float] = {}
    con = _sqlite(os.path.join(d, "bench.sqlite"), durable)
    con.execute("CREATE TABLE kv (k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID")
    val = b"v" * 100

    def put_each() -> None:
        for i in range(commits):
            con.execute("INSERT OR REPLACE INTO kv VALUES (?, ?)", (_key(i), val))

    out["kv: put, one commit each"] = _timed(commits, put_each)

    def put_batch() -> None:
        con.execute("BEGIN")
        con.executemany("INSERT OR REPLACE INTO kv VALUES (?, ?)", ((_key(i), val) for i in range(n)))
        con.execute("COMMIT")

    out["kv: put, one commit for all"] = _timed(n, put_batch)
    keys = [_key(rng.randrange(n)) for _ in range(n)]

    def gets() -> None:
        for k in keys:
            con.execute("SELECT v FROM kv WHERE k = ?", (k,)).fetchone()

    out["kv: random get"] = _timed(n, gets)
    out["kv: full scan"] = _timed(n, lambda: sum(1 for _ in con.execute("SELECT k, v FROM kv ORDER BY k")))
    con.execute("CREATE TABLE people (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
    con.execute("CREATE INDEX people_age ON people (json_extract(body, '$.age'))")
    docs = [_doc(i, rng) for i in range(n)]

    def insert_each() -> None:
        for dd in docs[:commits]:
            con.execute("INSERT INTO people VALUES (?, ?)", (dd["_id"], json.dumps(dd)))

    out["docs: insert, one commit each"] = _timed(commits, insert_each)
    con.execute("DELETE FROM people")

    def insert_many() -> None:
        con.execute("BEGIN")
        con.executemany("INSERT INTO people VALUES (?, ?)", ((x["_id"], json.dumps(x)) for x in docs))
        con.execute("COMMIT")

    out["docs: insert_many, one commit"] = _timed(n, insert_many)
    ages = [rng.randrange(18, 90) for _ in range(200)]

    def finds() -> None:
        for a in ages:
            [json.loads(r[0]) for r in con.execute("SELECT body FROM people WHERE json_extract(body, '$.age') = ?", (a,))]

    out["docs: find by indexed field"] = _timed(len(ages), finds)

    def updates() -> None:
        for i in range(commits):
            con.execute(
                "UPDATE people SET body = json_set(body, '$.age', json_extract(body, '$.age') + 1) WHERE id = ?",
                (rng.randrange(n),),
            )

    out["docs: update_one by _id"] = _timed(commits, updates)
    con.close()
    return out


def basic_lmdb(d: str, n: int, commits: int, seed: int, durable: bool) -> Optional[Dict[str, float]]:
    try:
        import lmdb  # type: ignore
    except ImportError:
        return None
    rng = random.Random(seed)
    out: Dict[str, float] = {}
    env = lmdb.open(os.path.join(d, "bench.lmdb"), map_size=1 << 32, sync=durable)
    val = b"v" * 100

    def put_each() -> None:
        for i in range(commits):
            with env.begin(write=True) as tx:
                tx.put(_key(i), val)

    out["kv: put, one commit each"] = _timed(commits, put_each)

    def put_batch() -> None:
        with env.begin(write=True) as tx:
            for i in range(n):
                tx.put(_key(i), val)

    out["kv: put, one commit for all"] = _timed(n, put_batch)
    keys = [_key(rng.randrange(n)) for _ in range(n)]

    def gets() -> None:
        for k in keys:
            with env.begin() as tx:
                tx.get(k)

    out["kv: random get"] = _timed(n, gets)

    def scan() -> None:
        with env.begin() as tx:
            sum(1 for _ in tx.cursor())

    out["kv: full scan"] = _timed(n, scan)
    env.close()
    return out


def basic_tinydb(d: str, n: int, commits: int, seed: int, durable: bool) -> Optional[Dict[str, float]]:
    t = _tinydb()
    if t is None:
        return None
    TinyDB, Query = t
    rng = random.Random(seed)
    out: Dict[str, float] = {}
    # TinyDB rewrites its whole JSON file on every write: keep it small.
    m = min(n, 2000)
    db = TinyDB(os.path.join(d, "bench.json"))
    docs = [_doc(i, rng) for i in range(m)]
    out["docs: insert, one commit each"] = _timed(min(commits, 200), lambda: [db.insert(dict(x)) for x in docs[: min(commits, 200)]])
    db.truncate()
    out["docs: insert_many, one commit"] = _timed(m, lambda: db.insert_multiple([dict(x) for x in docs]))
    q = Query()
    ages = [rng.randrange(18, 90) for _ in range(50)]
    out["docs: find by indexed field"] = _timed(len(ages), lambda: [db.search(q.age == a) for a in ages])
    out["docs: update_one by _id"] = _timed(50, lambda: [db.update({"age": 1}, q._id == rng.randrange(m)) for _ in range(50)])
    db.close()
    return out


# ---------------------------------------------------------------------------
# Suite "lite": the LiteDB write table. Each engine is an adapter with the
# same six operations; one driver times them all alike.


def lite_entities(n: int, generation: int, seed: int) -> List[dict]:
    """``n`` entities of save slot 1; ``generation`` changes every value but
    the keys (0: the originals; 1: what an upsert over existing ids
    writes). The shape of ``crates/cairn-bench/src/data/docs.rs``."""
    rng = random.Random(seed * 1_000_003 + generation)

    def v3(scale: float) -> dict:
        return {k: (rng.random() - 0.5) * scale for k in ("x", "y", "z")}

    out = []
    for i in range(n):
        position = v3(1000.0)
        scale = v3(2.0)
        rotation = {k: rng.random() for k in ("x", "y", "z", "w")}
        out.append(
            {
                "_id": "save-01/entity-%06d" % i,
                "id": i,
                "transform": {"position": position, "rotation": rotation, "scale": scale},
                "properties": {
                    "health": rng.random() * 100.0 + 0.5,
                    "level": 1 + rng.randrange(60) + generation,
                    "mana": rng.random() * 50.0 + 0.25,
                    "name": "Goblin #%d (gen %d)" % (i, generation),
                },
            }
        )
    return out


class _CairnLite:
    def __init__(self, d: str, durable: bool) -> None:
        self.db = cairndb.open(os.path.join(d, "lite.cairn"), durability=_cairn_durability(durable))
        self.c = self.db.collection("ents")

    def reset(self) -> None:
        self.c.delete_many({})

    def insert_one(self, e: dict) -> None:
        self.c.insert_one(e)

    def insert_many(self, es: List[dict]) -> None:
        self.c.insert_many(es)

    def upsert_one(self, e: dict) -> None:
        self.c.replace_one({"_id": e["_id"]}, e, upsert=True)

    def upsert_many(self, es: List[dict]) -> None:
        self.c.upsert_many(es)

    def close(self) -> None:
        self.db.close()


class _SqliteLite:
    UPSERT = "INSERT INTO ents VALUES (?, ?) ON CONFLICT(id) DO UPDATE SET doc = excluded.doc"

    def __init__(self, d: str, durable: bool) -> None:
        self.con = _sqlite(os.path.join(d, "lite.sqlite"), durable)
        self.con.execute("CREATE TABLE ents (id TEXT PRIMARY KEY, doc TEXT NOT NULL) WITHOUT ROWID")

    def reset(self) -> None:
        self.con.execute("DELETE FROM ents")

    def insert_one(self, e: dict) -> None:
        self.con.execute("INSERT INTO ents VALUES (?, ?)", (e["_id"], json.dumps(e)))

    def insert_many(self, es: List[dict]) -> None:
        self.con.execute("BEGIN")
        self.con.executemany("INSERT INTO ents VALUES (?, ?)", ((e["_id"], json.dumps(e)) for e in es))
        self.con.execute("COMMIT")

    def upsert_one(self, e: dict) -> None:
        self.con.execute(self.UPSERT, (e["_id"], json.dumps(e)))

    def upsert_many(self, es: List[dict]) -> None:
        self.con.execute("BEGIN")
        self.con.executemany(self.UPSERT, ((e["_id"], json.dumps(e)) for e in es))
        self.con.execute("COMMIT")

    def close(self) -> None:
        self.con.close()


class _TinyLite:
    """TinyDB has no bulk upsert: upsert_many reads the stored ids once,
    replaces the existing entities in one update and inserts the rest in one
    insert_multiple (two file writes)."""

    def __init__(self, d: str, durable: bool) -> None:
        TinyDB, Query = _tinydb()  # type: ignore[misc]
        self.db = TinyDB(os.path.join(d, "lite.json"))
        self.q = Query()

    def reset(self) -> None:
        self.db.truncate()

    def insert_one(self, e: dict) -> None:
        self.db.insert(e)

    def insert_many(self, es: List[dict]) -> None:
        self.db.insert_multiple(es)

    def upsert_one(self, e: dict) -> None:
        self.db.upsert(e, self.q["_id"] == e["_id"])

    def upsert_many(self, es: List[dict]) -> None:
        stored = {d["_id"] for d in self.db.all()}
        new = {e["_id"]: e for e in es if e["_id"] in stored}

        def replace(doc: dict) -> None:
            e = new[doc["_id"]]
            doc.clear()
            doc.update(e)

        if new:
            self.db.update(replace, self.q["_id"].test(lambda v: v in new))
        rest = [e for e in es if e["_id"] not in stored]
        if rest:
            self.db.insert_multiple(rest)

    def close(self) -> None:
        self.db.close()


#: (row, preload of generation 0: none / all / the first half, what the
#: timed call does with the entities of generation 0 (g0) or 1 (g1)).
def _each(f: Callable[[dict], None], es: List[dict]) -> None:
    for e in es:
        f(e)


LITE_ROWS: List[Tuple[str, str, Callable[[Any, List[dict], List[dict]], None]]] = [
    ("individual inserts", "none", lambda a, g0, g1: _each(a.insert_one, g0)),
    ("bulk insert", "none", lambda a, g0, g1: a.insert_many(g0)),
    ("individual upserts, new ids", "none", lambda a, g0, g1: _each(a.upsert_one, g0)),
    ("individual upserts, existing ids", "all", lambda a, g0, g1: _each(a.upsert_one, g1)),
    ("bulk upsert, new ids", "none", lambda a, g0, g1: a.upsert_many(g0)),
    ("bulk upsert, existing ids", "all", lambda a, g0, g1: a.upsert_many(g1)),
    ("bulk upsert, half new", "half", lambda a, g0, g1: a.upsert_many(g1)),
]


def lite_iterations(n: int, ops: int) -> int:
    """Timed calls per row at size n: about ``ops`` entities in all."""
    return max(1, ops // n)


def _lite_run(adapter: Any, args: argparse.Namespace, seed: int) -> Dict[str, float]:
    out: Dict[str, float] = {}
    try:
        for n in args.lite_sizes:
            g0 = lite_entities(n, 0, seed)
            g1 = lite_entities(n, 1, seed)
            iters = lite_iterations(n, args.lite_ops)
            for row, preload, fn in LITE_ROWS:
                spent = 0.0
                for _ in range(iters):
                    adapter.reset()
                    if preload == "all":
                        adapter.insert_many(g0)
                    elif preload == "half":
                        adapter.insert_many(g0[: n // 2])
                    t0 = time.perf_counter()
                    fn(adapter, g0, g1)
                    spent += time.perf_counter() - t0
                out["N=%d %s" % (n, row)] = n * iters / spent if spent > 0 else float("inf")
    finally:
        adapter.close()
    return out


def lite_cairndb(d: str, args: argparse.Namespace, seed: int) -> Optional[Dict[str, float]]:
    return _lite_run(_CairnLite(d, args.durable), args, seed)


def lite_sqlite(d: str, args: argparse.Namespace, seed: int) -> Optional[Dict[str, float]]:
    return _lite_run(_SqliteLite(d, args.durable), args, seed)


def lite_tinydb(d: str, args: argparse.Namespace, seed: int) -> Optional[Dict[str, float]]:
    if _tinydb() is None:
        return None
    return _lite_run(_TinyLite(d, args.durable), args, seed)


# ---------------------------------------------------------------------------
# Suite "tiedot": tiedot's built-in benchmark, reduced (one thread, no
# bench2), in mode "none" (tiedot never flushes).

TIEDOT_INDEXES = ["nested.nested.str", "nested.nested.int", "nested.nested.float", "strs", "ints", "floats"]


def tiedot_doc(rng: random.Random, i: int, n: int) -> dict:
    """tiedot's ``sampleDoc``: ints below n, floats in [0, 1), strings the
    text of such floats (``%.6f``), and a harness-assigned int ``_id``."""

    def text() -> str:
        return "%.6f" % rng.random()

    return {
        "_id": i,
        "nested": {"nested": {"str": text(), "int": rng.randrange(n), "float": rng.random()}},
        "strs": [text(), text()],
        "ints": [rng.randrange(n), rng.randrange(n)],
        "floats": [rng.random(), rng.random()],
    }


def tiedot_matches(doc: dict, a: int, b: int, r: int) -> bool:
    """tiedot's ``sampleQuery``: (nested.nested.int = a XOR ints has b) OR
    ints has a value in [r, r + 2] (the reference the engines' answers are
    checked against in the tests)."""
    x = doc["nested"]["nested"]["int"] == a
    y = b in doc["ints"]
    return (x != y) or any(r <= v <= r + 2 for v in doc["ints"])


class _CairnTiedot:
    def __init__(self, d: str) -> None:
        self.db = cairndb.open(os.path.join(d, "tiedot.cairn"), durability="none")
        self.c = self.db.collection("docs")
        for f in TIEDOT_INDEXES:
            self.c.create_index(f)

    def insert(self, doc: dict) -> None:
        self.c.insert_one(doc)

    def get(self, i: int) -> Optional[dict]:
        return self.c.find_one({"_id": i})

    def lookup(self, a: int, b: int, r: int) -> List[int]:
        f = {
            "$or": [
                {"nested.nested.int": a, "ints": {"$ne": b}},
                {"ints": b, "nested.nested.int": {"$ne": a}},
                {"ints": {"$elemMatch": {"$gte": r, "$lte": r + 2}}},
            ]
        }
        return [d["_id"] for d in self.c.find(f, {"_id": 1})]

    def replace(self, doc: dict) -> None:
        self.c.replace_one({"_id": doc["_id"]}, doc)

    def delete(self, i: int) -> None:
        self.c.delete_one({"_id": i})

    def close(self) -> None:
        self.db.close()


class _SqliteTiedot:
    """``docs(id INTEGER PRIMARY KEY, doc TEXT)`` with expression indexes on
    the nested fields; each array gets a side table ``(doc_id, pos, v)``
    indexed on v, kept by triggers through json_each in the same
    transaction (SQLite indexes one value per row), as cairn bench does."""

    LOOKUP = (
        "SELECT id FROM docs WHERE json_extract(doc, '$.nested.nested.int') = :a"
        " AND id NOT IN (SELECT doc_id FROM ints WHERE v = :b)"
        " UNION SELECT doc_id FROM ints WHERE v = :b"
        " AND doc_id NOT IN (SELECT id FROM docs WHERE json_extract(doc, '$.nested.nested.int') = :a)"
        " UNION SELECT doc_id FROM ints WHERE v BETWEEN :r AND :r + 2"
    )

    def __init__(self, d: str) -> None:
        self.con = _sqlite(os.path.join(d, "tiedot.sqlite"), False)
        x = self.con.execute
        x("CREATE TABLE docs (id INTEGER PRIMARY KEY, doc TEXT NOT NULL)")
        for f in ("str", "int", "float"):
            x("CREATE INDEX docs_%s ON docs (json_extract(doc, '$.nested.nested.%s'))" % (f, f))
        arrays = ("strs", "ints", "floats")
        for t in arrays:
            x("CREATE TABLE %s (doc_id INTEGER NOT NULL, pos INTEGER NOT NULL, v, PRIMARY KEY (doc_id, pos)) WITHOUT ROWID" % t)
            x("CREATE INDEX %s_v ON %s (v)" % (t, t))
        ins = " ".join("INSERT INTO %s SELECT new.id, key, value FROM json_each(new.doc, '$.%s');" % (t, t) for t in arrays)
        dele = " ".join("DELETE FROM %s WHERE doc_id = old.id;" % t for t in arrays)
        x("CREATE TRIGGER docs_ai AFTER INSERT ON docs BEGIN %s END" % ins)
        x("CREATE TRIGGER docs_ad AFTER DELETE ON docs BEGIN %s END" % dele)
        x("CREATE TRIGGER docs_au AFTER UPDATE OF doc ON docs BEGIN %s %s END" % (dele, ins))

    def insert(self, doc: dict) -> None:
        self.con.execute("INSERT INTO docs VALUES (?, ?)", (doc["_id"], json.dumps(doc)))

    def get(self, i: int) -> Optional[dict]:
        row = self.con.execute("SELECT doc FROM docs WHERE id = ?", (i,)).fetchone()
        return json.loads(row[0]) if row else None

    def lookup(self, a: int, b: int, r: int) -> List[int]:
        return [row[0] for row in self.con.execute(self.LOOKUP, {"a": a, "b": b, "r": r})]

    def replace(self, doc: dict) -> None:
        self.con.execute("UPDATE docs SET doc = ? WHERE id = ?", (json.dumps(doc), doc["_id"]))

    def delete(self, i: int) -> None:
        self.con.execute("DELETE FROM docs WHERE id = ?", (i,))

    def close(self) -> None:
        self.con.close()


class _TinyTiedot:
    """TinyDB has no indexes: documents are stored under doc_id = _id + 1
    (its fast path for reads, replaces and deletes); lookups scan."""

    def __init__(self, d: str) -> None:
        from tinydb.table import Document  # type: ignore

        TinyDB, Query = _tinydb()  # type: ignore[misc]
        self.db = TinyDB(os.path.join(d, "tiedot.json"))
        self.q = Query()
        self.Document = Document

    def insert(self, doc: dict) -> None:
        self.db.insert(self.Document(doc, doc_id=doc["_id"] + 1))

    def get(self, i: int) -> Optional[dict]:
        return self.db.get(doc_id=i + 1)

    def lookup(self, a: int, b: int, r: int) -> List[int]:
        q = self.q
        x = q.nested.nested.int == a
        y = q.ints.any([b])
        z = q.ints.test(lambda v: any(r <= e <= r + 2 for e in v))
        return [d["_id"] for d in self.db.search((x & ~y) | (~x & y) | z)]

    def replace(self, doc: dict) -> None:
        self.db.upsert(self.Document(doc, doc_id=doc["_id"] + 1))

    def delete(self, i: int) -> None:
        if self.db.contains(doc_id=i + 1):
            self.db.remove(doc_ids=[i + 1])

    def close(self) -> None:
        self.db.close()


def _tiedot_run(adapter: Any, n: int, seed: int) -> Dict[str, float]:
    rng = random.Random(seed ^ 0xD71ED07B5EED0)
    docs = [tiedot_doc(rng, i, n) for i in range(n)]
    reads = [rng.randrange(n) for _ in range(n)]
    queries = [(rng.randrange(n), rng.randrange(n), rng.randrange(n)) for _ in range(n)]
    updates = [tiedot_doc(rng, rng.randrange(n), n) for _ in range(n)]
    deletes = [rng.randrange(n) for _ in range(n)]
    out: Dict[str, float] = {}
    try:

        def inserts() -> None:
            for doc in docs:
                adapter.insert(doc)

        out["insert"] = _timed(n, inserts)

        def gets() -> None:
            for i in reads:
                if adapter.get(i) is None:
                    raise RuntimeError("tiedot read: document %d missing" % i)

        out["read by id"] = _timed(n, gets)

        def lookups() -> None:
            for a, b, r in queries:
                adapter.lookup(a, b, r)

        out["lookup query"] = _timed(n, lookups)

        def replaces() -> None:
            for doc in updates:
                adapter.replace(doc)

        out["update"] = _timed(n, replaces)

        def removes() -> None:
            for i in deletes:
                adapter.delete(i)

        out["delete"] = _timed(n, removes)
    finally:
        adapter.close()
    return out


def tiedot_cairndb(d: str, args: argparse.Namespace, seed: int) -> Optional[Dict[str, float]]:
    return _tiedot_run(_CairnTiedot(d), args.tiedot_n, seed)


def tiedot_sqlite(d: str, args: argparse.Namespace, seed: int) -> Optional[Dict[str, float]]:
    return _tiedot_run(_SqliteTiedot(d), args.tiedot_n, seed)


def tiedot_tinydb(d: str, args: argparse.Namespace, seed: int) -> Optional[Dict[str, float]]:
    if _tinydb() is None or args.tiedot_n > args.tinydb_max:
        return None
    return _tiedot_run(_TinyTiedot(d), args.tiedot_n, seed)


# ---------------------------------------------------------------------------

Runner = Callable[[str, argparse.Namespace, int], Optional[Dict[str, float]]]


def _basic(fn: Callable[..., Optional[Dict[str, float]]]) -> Runner:
    return lambda d, args, seed: fn(d, args.n, args.commits, seed, args.durable)


#: suite → [(engine, runner)]; a runner returns None when its engine is not
#: installed (or, for TinyDB's tiedot run, over --tinydb-max documents).
SUITES: Dict[str, List[Tuple[str, Runner]]] = {
    "basic": [
        ("cairndb", _basic(basic_cairndb)),
        ("sqlite3", _basic(basic_sqlite)),
        ("lmdb", _basic(basic_lmdb)),
        ("tinydb (fsync, in place)", _basic(basic_tinydb)),
    ],
    "lite": [
        ("cairndb", lite_cairndb),
        ("sqlite3", lite_sqlite),
        ("tinydb (fsync, in place)", lite_tinydb),
    ],
    "tiedot": [
        ("cairndb", tiedot_cairndb),
        ("sqlite3", tiedot_sqlite),
        ("tinydb (fsync, in place)", tiedot_tinydb),
    ],
}


def _table(results: Dict[str, Dict[str, float]]) -> List[str]:
    """The Markdown table of one suite: ops/s per engine, then CairnDB ÷
    each peer."""
    workloads: List[str] = []
    for res in results.values():
        workloads += [w for w in res if w not in workloads]
    peers = [e for e in results if e != "cairndb"]
    head = ["workload", "cairndb"] + peers + [f"÷ {p}" for p in peers]
    rows = [head]
    for w in workloads:
        c = results.get("cairndb", {}).get(w)
        row = [w, f"{c:,.0f}" if c else "-"]
        for p in peers:
            v = results[p].get(w)
            row.append(f"{v:,.0f}" if v else "-")
        for p in peers:
            v = results[p].get(w)
            row.append(f"{c / v:.2f}" if c and v else "-")
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = []
    for i, r in enumerate(rows):
        lines.append("| " + " | ".join(x.ljust(widths[j]) for j, x in enumerate(r)) + " |")
        if i == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return lines


def _sizes(text: str) -> List[int]:
    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("sizes are integers separated by commas, e.g. 10,100,1000")
    if not sizes or any(x < 2 for x in sizes):
        raise argparse.ArgumentTypeError("sizes must be at least 2")
    return sizes


def _suites(text: str) -> List[str]:
    names = [x.strip() for x in text.split(",") if x.strip()]
    if names == ["all"]:
        return list(SUITES)
    bad = [x for x in names if x not in SUITES]
    if bad or not names:
        raise argparse.ArgumentTypeError("suites are %s or all" % ", ".join(SUITES))
    return names


def binding_cost(d: str, n: int) -> Tuple[float, float]:
    """Seconds per read of one key: from Python (``table.get``), and the
    same reads (a snapshot and a lookup each) in a Rust loop."""
    with cairndb.open(os.path.join(d, "binding.cairn")) as db:
        with db.transaction() as tx:
            w = tx.table("kv")
            for i in range(n):
                w.put(_key(i), b"v" * 100)
        t = db.table("kv")
        keys = [_key(i) for i in range(n)]
        t0 = time.perf_counter()
        for k in keys:
            t.get(k)
        py = (time.perf_counter() - t0) / n
        rust = _native._rust_timed_gets(t, keys) / n
    return py, rust


SUITE_TITLES = {
    "basic": "basic: key-value and document workloads",
    "lite": "lite: the LiteDB write table (ops = entities written per second)",
    "tiedot": "tiedot (reduced: one thread, no bench2; mode none, as tiedot never flushes)",
}


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cairndb.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", type=_suites, default=list(SUITES), help="basic, lite, tiedot (comma-separated) or all (default all)")
    ap.add_argument("--n", type=int, default=20000, help="basic: entries / documents (default 20000)")
    ap.add_argument("--commits", type=int, default=300, help="basic: operations that commit one by one (default 300)")
    ap.add_argument("--lite-sizes", type=_sizes, default=[10, 100, 1000], help="lite: entity counts N (default 10,100,1000)")
    ap.add_argument(
        "--lite-ops", type=int, default=300, help="lite: about this many entities per row and N: max(1, ops // N) timed calls (default 300)"
    )
    ap.add_argument("--tiedot-n", type=int, default=10000, help="tiedot: documents, and operations per phase (default 10000)")
    ap.add_argument("--tinydb-max", type=int, default=1000, help="tiedot: TinyDB runs only up to this many documents (default 1000)")
    ap.add_argument(
        "--durability",
        choices=["immediate", "none"],
        default="immediate",
        help="basic and lite: durable commits (immediate, default) or crash-consistent ones without a flush (none)",
    )
    ap.add_argument("--repeats", type=int, default=3, help="runs per engine; the median is shown (default 3)")
    ap.add_argument("--dir", default=None, help="where the files go (default: a temporary directory)")
    ap.add_argument("--json", default=None, help="also write the results as JSON here")
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args(argv)
    args.durable = args.durability == "immediate"
    if args.tiedot_n < 1 or args.lite_ops < 1 or args.repeats < 1:
        ap.error("--tiedot-n, --lite-ops and --repeats must be at least 1")
    base = args.dir or tempfile.mkdtemp(prefix="cairndb-bench-")
    os.makedirs(base, exist_ok=True)
    all_results: Dict[str, Dict[str, Dict[str, float]]] = {}
    peers_d = "SQLite WAL synchronous=FULL, LMDB sync" if args.durable else "SQLite WAL synchronous=NORMAL, LMDB no sync"
    print(
        f"cairndb {cairndb.__version__}, Python {platform.python_version()}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs; median of {args.repeats}"
    )
    for suite in args.suite:
        results: Dict[str, Dict[str, float]] = {}
        for name, fn in SUITES[suite]:
            runs: List[Dict[str, float]] = []
            for r in range(args.repeats):
                d = tempfile.mkdtemp(dir=base)
                try:
                    res = fn(d, args, args.seed + r)
                finally:
                    shutil.rmtree(d, ignore_errors=True)
                if res is None:
                    break
                runs.append(res)
            if not runs:
                why = "not installed"
                if suite == "tiedot" and "tinydb" in name and _tinydb() is not None:
                    why = f"over --tinydb-max {args.tinydb_max} documents: it rewrites its file on each write and scans for lookups"
                print(f"({suite}: {name}: {why}, skipped)")
                continue
            results[name] = {w: statistics.median(x[w] for x in runs) for w in runs[0]}
        all_results[suite] = results
        if suite == "basic":
            setting = f"n={args.n}, commits={args.commits}; durability {args.durability} (cairndb), {peers_d}"
        elif suite == "lite":
            setting = (
                f"N in {args.lite_sizes}, max(1, {args.lite_ops} // N) timed calls per row; "
                f"durability {args.durability} (cairndb), {peers_d}"
            )
        else:
            setting = (
                f"{args.tiedot_n} documents, 6 indexes, {args.tiedot_n} operations per phase; "
                "cairndb none, SQLite WAL synchronous=NORMAL, TinyDB fsyncs regardless"
            )
        print(f"\n{SUITE_TITLES[suite]}: ops/s; {setting}")
        for line in _table(results):
            print(line)
    py = rust = 0.0
    d = tempfile.mkdtemp(dir=base)
    try:
        py, rust = binding_cost(d, min(args.n, 20000))
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print(
        f"\nbinding cost, one read (snapshot + lookup): {py * 1e6:.2f} µs from Python, "
        f"{rust * 1e6:.2f} µs in a Rust loop: {max(py - rust, 0) * 1e6:.2f} µs per call for the binding"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "n": args.n,
                    "commits": args.commits,
                    "lite_sizes": args.lite_sizes,
                    "lite_ops": args.lite_ops,
                    "tiedot_n": args.tiedot_n,
                    "durability": args.durability,
                    "results": all_results,
                    "binding_us": {"python": py * 1e6, "rust": rust * 1e6},
                },
                f,
                indent=2,
            )
    if not args.dir:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
