"""Model-based test: a KV table against a dict, through random operation
sequences (autocommit, transactions that commit or abort, ranges)."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cairndb

keys = st.binary(min_size=0, max_size=6)
values = st.binary(max_size=20)
op = st.one_of(
    st.tuples(st.just("put"), keys, values),
    st.tuples(st.just("delete"), keys, st.none()),
    st.tuples(st.just("get"), keys, st.none()),
    st.tuples(st.just("range"), keys, keys),
    st.tuples(st.just("txn"), st.lists(st.tuples(keys, st.one_of(values, st.none())), max_size=5), st.booleans()),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op, max_size=40))
def test_kv_matches_dict(tmp_path_factory, ops):
    path = str(tmp_path_factory.mktemp("model") / "m.cairn")
    model = {}
    with cairndb.open(path, durability="none") as db:
        t = db.table("m")
        for kind, a, b in ops:
            if kind == "put":
                t.put(a, b)
                model[a] = b
            elif kind == "delete":
                assert t.delete(a) == (a in model)
                model.pop(a, None)
            elif kind == "get":
                assert t.get(a) == model.get(a)
            elif kind == "range":
                got = list(t.range(a, b))
                want = sorted((k, v) for k, v in model.items() if a <= k < b)
                assert got == want
                assert list(t.range(a, b, reverse=True)) == want[::-1]
            else:
                staged = dict(model)
                try:
                    with db.transaction() as tx:
                        w = tx.table("m")
                        for k, v in a:
                            if v is None:
                                w.delete(k)
                                staged.pop(k, None)
                            else:
                                w[k] = v
                                staged[k] = v
                            assert w.get(k) == staged.get(k)
                        assert list(w.range()) == sorted(staged.items())
                        if b:
                            raise RuntimeError("abort")
                    model = staged
                except RuntimeError:
                    pass
            assert len(t) == len(model)
        assert list(t.items()) == sorted(model.items())
    # Reopened, the file holds the same (a clean close keeps non-durable commits).
    with cairndb.open(path) as db:
        assert list(db.table("m").items()) == sorted(model.items())
