import json

import pytest

import cairndb
from cairndb import _native, bench


def test_bench_runs_small(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert bench.main(["--n", "300", "--commits", "5", "--repeats", "1", "--dir", str(tmp_path / "b"), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "kv: random get" in text and "sqlite3" in text and "binding cost" in text
    data = json.loads(out.read_text())
    assert data["results"]["cairndb"]["kv: random get"] > 0
    assert data["binding_us"]["python"] > 0 and data["binding_us"]["rust"] > 0


def test_rust_timed_gets_needs_a_bytes_table(db):
    t = db.table("t", key_type=str, value_type=str)
    with pytest.raises(ValueError):
        _native._rust_timed_gets(t, [b"a"])
    b = db.table("b")
    b[b"a"] = b"1"
    assert _native._rust_timed_gets(b, [b"a", b"zz"]) >= 0
