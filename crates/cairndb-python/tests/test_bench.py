import json
import random

import pytest

import cairndb
from cairndb import _native, bench


def test_bench_runs_small(tmp_path, capsys):
    out = tmp_path / "r.json"
    args = ["--n", "300", "--commits", "5", "--repeats", "1", "--lite-sizes", "4,10", "--lite-ops", "10"]
    args += ["--tiedot-n", "60", "--dir", str(tmp_path / "b"), "--json", str(out)]
    assert bench.main(args) == 0
    text = capsys.readouterr().out
    assert "kv: random get" in text and "sqlite3" in text and "binding cost" in text
    assert "N=10 bulk upsert, half new" in text and "lookup query" in text and "÷ sqlite3" in text
    data = json.loads(out.read_text())
    res = data["results"]
    assert res["basic"]["cairndb"]["kv: random get"] > 0
    for row, _, _ in bench.LITE_ROWS:
        for n in (4, 10):
            assert res["lite"]["cairndb"]["N=%d %s" % (n, row)] > 0
            assert res["lite"]["sqlite3"]["N=%d %s" % (n, row)] > 0
    for phase in ("insert", "read by id", "lookup query", "update", "delete"):
        assert res["tiedot"]["cairndb"][phase] > 0 and res["tiedot"]["sqlite3"][phase] > 0
    assert data["binding_us"]["python"] > 0 and data["binding_us"]["rust"] > 0


def test_bench_one_suite_without_flushes(tmp_path, capsys):
    args = ["--suite", "lite", "--durability", "none", "--repeats", "1", "--lite-sizes", "2", "--lite-ops", "2"]
    assert bench.main(args + ["--n", "50", "--dir", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "durability none" in text and "synchronous=NORMAL" in text
    assert "kv: random get" not in text and "lookup query" not in text


def test_bench_rejects_bad_arguments(capsys):
    for bad in (["--suite", "nope"], ["--lite-sizes", "1"], ["--lite-sizes", "x"], ["--tiedot-n", "0"]):
        with pytest.raises(SystemExit):
            bench.main(bad)


HAVE_TINYDB = bench._tinydb() is not None
LITE = [bench._CairnLite, bench._SqliteLite] + ([bench._TinyLite] if HAVE_TINYDB else [])
TIEDOT = [bench._CairnTiedot, bench._SqliteTiedot] + ([bench._TinyTiedot] if HAVE_TINYDB else [])


@pytest.mark.parametrize("adapter", LITE)
def test_lite_adapters_run_every_operation(tmp_path, adapter):
    a = adapter(str(tmp_path), False)
    try:
        g0, g1 = bench.lite_entities(6, 0, 1), bench.lite_entities(6, 1, 1)
        assert [e["_id"] for e in g0] == [e["_id"] for e in g1] and g0 != g1
        assert set(g0[0]) == {"_id", "id", "transform", "properties"}
        a.insert_many(g0[:3])
        a.upsert_many(g1)
        a.upsert_one(g0[5])
        a.reset()
        a.insert_one(g0[0])
        a.upsert_one(g1[0])
        a.upsert_one(g1[1])
    finally:
        a.close()
    assert bench.lite_iterations(10, 300) == 30 and bench.lite_iterations(1000, 300) == 1


def _check_lookups(adapter, n):
    rng = random.Random(7)
    docs = [bench.tiedot_doc(rng, i, n) for i in range(n)]
    for d in docs:
        adapter.insert(d)
    assert adapter.get(3)["nested"] == docs[3]["nested"]
    for _ in range(25):
        a, b, r = rng.randrange(n), rng.randrange(n), rng.randrange(n)
        want = sorted(d["_id"] for d in docs if bench.tiedot_matches(d, a, b, r))
        assert sorted(adapter.lookup(a, b, r)) == want
    # Hits of each branch: XOR's two sides and the range.
    d = docs[5]
    x, y = d["nested"]["nested"]["int"], d["ints"][0]
    if x != y and x not in d["ints"]:
        assert 5 in adapter.lookup(x, n + 10, n + 10)
    fresh = bench.tiedot_doc(rng, 5, n)
    adapter.replace(fresh)
    assert adapter.get(5)["ints"] == fresh["ints"]
    assert sorted(adapter.lookup(-1, fresh["ints"][0], n + 10)) == sorted(
        dd["_id"] for dd in docs[:5] + [fresh] + docs[6:] if bench.tiedot_matches(dd, -1, fresh["ints"][0], n + 10)
    )
    adapter.delete(5)
    adapter.delete(5)  # already gone: nothing happens
    assert adapter.get(5) is None


@pytest.mark.parametrize("adapter", TIEDOT)
def test_tiedot_lookups_answer_like_the_reference(tmp_path, adapter):
    a = adapter(str(tmp_path))
    try:
        _check_lookups(a, 80)
    finally:
        a.close()


def test_tiedot_matches_is_xor_then_union():
    d = {"nested": {"nested": {"int": 5}}, "ints": [9, 500]}
    assert bench.tiedot_matches(d, 5, 1, 900)
    assert bench.tiedot_matches(d, 6, 9, 900)
    assert not bench.tiedot_matches(d, 5, 9, 900)
    assert bench.tiedot_matches(d, 5, 9, 498)
    assert not bench.tiedot_matches(d, 6, 8, 501)


def test_rust_timed_gets_needs_a_bytes_table(db):
    t = db.table("t", key_type=str, value_type=str)
    with pytest.raises(ValueError):
        _native._rust_timed_gets(t, [b"a"])
    b = db.table("b")
    b[b"a"] = b"1"
    assert _native._rust_timed_gets(b, [b"a", b"zz"]) >= 0
