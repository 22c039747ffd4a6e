"""A small benchmark of the Python package beside the libraries a Python
user would pick: ``sqlite3`` (standard library, JSON1 for documents),
``lmdb`` for key-value work and ``TinyDB`` for documents (each only if
importable: ``pip install lmdb tinydb``), plus the cost of the binding
itself (a CairnDB read from Python against the same reads in a Rust loop).

    python -m cairndb.bench [--n 20000] [--commits 500] [--dir DIR] [--json FILE]

Every engine writes durably (CairnDB durability "immediate"; SQLite WAL with
synchronous=FULL; LMDB sync=True), except TinyDB, which never flushes (its
column says so). Each engine gets a fresh directory. Reported: operations
per second (median of --repeats runs) and CairnDB's ratio to each peer
(above 1: CairnDB is faster).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import statistics
import tempfile
import time
from typing import Callable, Dict, List, Optional, Tuple

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


# ---------------------------------------------------------------------------
# Engines: each returns {workload: ops/s} for one run in directory d.


def run_cairndb(d: str, n: int, commits: int, seed: int) -> Dict[str, float]:
    rng = random.Random(seed)
    out: Dict[str, float] = {}
    with cairndb.open(os.path.join(d, "bench.cairn")) as db:
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


def run_sqlite(d: str, n: int, commits: int, seed: int) -> Dict[str, float]:
    rng = random.Random(seed)
    out: Dict[str, float] = {}
    con = sqlite3.connect(os.path.join(d, "bench.sqlite"), isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
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


def run_lmdb(d: str, n: int, commits: int, seed: int) -> Optional[Dict[str, float]]:
    try:
        import lmdb  # type: ignore
    except ImportError:
        return None
    rng = random.Random(seed)
    out: Dict[str, float] = {}
    env = lmdb.open(os.path.join(d, "bench.lmdb"), map_size=1 << 32, sync=True)
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


def run_tinydb(d: str, n: int, commits: int, seed: int) -> Optional[Dict[str, float]]:
    try:
        from tinydb import Query, TinyDB  # type: ignore
    except ImportError:
        return None
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


ENGINES: List[Tuple[str, Callable[..., Optional[Dict[str, float]]]]] = [
    ("cairndb", run_cairndb),
    ("sqlite3", run_sqlite),
    ("lmdb", run_lmdb),
    ("tinydb (no fsync)", run_tinydb),
]


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


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cairndb.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20000, help="entries / documents (default 20000)")
    ap.add_argument("--commits", type=int, default=300, help="operations that commit one by one (default 300)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per engine; the median is shown (default 3)")
    ap.add_argument("--dir", default=None, help="where the files go (default: a temporary directory)")
    ap.add_argument("--json", default=None, help="also write the results as JSON here")
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args(argv)
    base = args.dir or tempfile.mkdtemp(prefix="cairndb-bench-")
    os.makedirs(base, exist_ok=True)
    results: Dict[str, Dict[str, float]] = {}
    for name, fn in ENGINES:
        runs: List[Dict[str, float]] = []
        for r in range(args.repeats):
            d = tempfile.mkdtemp(dir=base)
            try:
                res = fn(d, args.n, args.commits, args.seed + r)
            finally:
                shutil.rmtree(d, ignore_errors=True)
            if res is None:
                break
            runs.append(res)
        if not runs:
            print(f"({name}: not installed, skipped)")
            continue
        results[name] = {w: statistics.median(x[w] for x in runs) for w in runs[0]}
    workloads: List[str] = []
    for res in results.values():
        workloads += [w for w in res if w not in workloads]
    peers = [e for e in results if e != "cairndb"]
    print(f"\nops/s, median of {args.repeats}; n={args.n}, commits={args.commits}; cairndb {cairndb.__version__}")
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
    for i, r in enumerate(rows):
        print("| " + " | ".join(x.ljust(widths[j]) for j, x in enumerate(r)) + " |")
        if i == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
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
            json.dump({"n": args.n, "commits": args.commits, "results": results, "binding_us": {"python": py * 1e6, "rust": rust * 1e6}}, f, indent=2)
    if not args.dir:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
