import threading

import cairndb


def test_parallel_readers_and_a_writer(db):
    t = db.table("t", key_type=int, value_type=int)
    with db.transaction() as tx:
        w = tx.table("t", int, int)
        for i in range(2000):
            w[i] = i
    c = db.collection("c")
    c.insert_many([{"_id": i, "v": i} for i in range(500)])
    errors = []

    def reader(n):
        try:
            for _ in range(5):
                assert sum(v for _, v in t.range()) == sum(range(2000))
                assert c.count_documents({"v": {"$lt": 100}}) == 100
                assert t[n] == n
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    def writer():
        try:
            for i in range(200):
                db.table("w", key_type=int, value_type=int)[i] = i
        except Exception as e:  # pragma: no cover
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(6)]
    threads.append(threading.Thread(target=writer))
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not errors, errors
    assert len(db.table("w")) == 200


def test_concurrent_transactions_serialize(db):
    n_threads, per = 4, 25

    def bump():
        for _ in range(per):
            with db.transaction() as tx:
                ctr = tx.table("ctr", key_type=str, value_type=int)
                ctr["n"] = ctr.get("n", 0) + 1

    threads = [threading.Thread(target=bump) for _ in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert db.table("ctr")["n"] == n_threads * per


def test_shared_cursor_between_threads(db):
    c = db.collection("c")
    c.insert_many([{"_id": i} for i in range(1000)])
    cur = c.find()
    seen = []
    lock = threading.Lock()

    def drain():
        for d in cur:
            with lock:
                seen.append(d["_id"])

    threads = [threading.Thread(target=drain) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert sorted(seen) == list(range(1000))
