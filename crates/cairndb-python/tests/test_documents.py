import pytest

import cairndb
from cairndb import ObjectId


@pytest.fixture
def people(filled):
    return filled(
        "people",
        [
            {"_id": 1, "name": "ada", "age": 36, "tags": ["math", "code"]},
            {"_id": 2, "name": "bob", "age": 25, "tags": ["code"]},
            {"_id": 3, "name": "cy", "age": 41},
            {"_id": 4, "name": "dee", "age": 25, "addr": {"city": "Oslo"}},
        ],
    )


def test_insert_one_generates_object_id(db):
    c = db.collection("c")
    doc = {"x": 1}
    r = c.insert_one(doc)
    assert isinstance(r.inserted_id, ObjectId)
    assert doc["_id"] == r.inserted_id  # set in the dict, as pymongo does
    got = c.find_one({"_id": r.inserted_id})
    assert got == {"_id": r.inserted_id, "x": 1}
    assert c.insert_one({"_id": "mine"}).inserted_id == "mine"


def test_object_id_class():
    a = ObjectId()
    b = ObjectId(str(a))
    assert a == b and hash(a) == hash(b)
    assert len(a.hex) == 24 and repr(a) == f"ObjectId('{a.hex}')"
    assert a != ObjectId()
    assert a.timestamp_millis > 0
    with pytest.raises(cairndb.DocumentError):
        ObjectId("xyz")


def test_insert_many_is_all_or_nothing(db):
    c = db.collection("c")
    r = c.insert_many([{"_id": 1}, {"_id": 2}, {}])
    assert r.inserted_ids[:2] == [1, 2] and isinstance(r.inserted_ids[2], ObjectId)
    with pytest.raises(cairndb.DuplicateKeyError) as e:
        c.insert_many([{"_id": 10}, {"_id": 1}])
    assert e.value.index == "_id" and e.value.collection == "c"
    assert c.count_documents() == 3
    assert c.find_one({"_id": 10}) is None


def test_value_mapping_round_trip(db):
    c = db.collection("v")
    doc = {
        "_id": 1,
        "none": None,
        "t": True,
        "f": False,
        "int": -(2**63),
        "big": 2**63 - 1,
        "float": 1.5,
        "str": "héllo",
        "bytes": b"\x00\xff",
        "ba": bytearray(b"ab"),
        "oid": ObjectId(),
        "list": [1, "two", [3.0], {"four": 4}],
        "tuple": (1, 2),
        "nested": {"a": {"b": {"c": []}}},
    }
    c.insert_one(doc)
    got = c.find_one({"_id": 1})
    want = dict(doc, ba=b"ab", tuple=[1, 2])
    assert got == want
    assert type(got["t"]) is bool and type(got["int"]) is int
    assert list(got) == list(want)  # field order kept


def test_unsupported_values(db):
    import datetime
    import uuid

    c = db.collection("v")
    with pytest.raises(OverflowError):
        c.insert_one({"n": 2**63})
    # datetime.datetime and uuid.UUID are supported (test_types.py); a bare
    # date is not (pymongo refuses it too).
    with pytest.raises(TypeError):
        c.insert_one({"d": datetime.date.today()})
    with pytest.raises(TypeError):
        c.insert_one({"t": datetime.time()})
    assert isinstance(uuid.uuid4(), uuid.UUID)
    with pytest.raises(TypeError):
        c.insert_one({1: "int key"})
    with pytest.raises(TypeError):
        c.insert_one(["not", "a", "dict"])
    cyclic = {}
    cyclic["me"] = cyclic
    with pytest.raises(ValueError):
        c.insert_one(cyclic)
    assert c.count_documents() == 0


def test_find_filter_projection_sort_skip_limit(people):
    names = lambda docs: [d["name"] for d in docs]  # noqa: E731
    assert names(people.find({"age": {"$gt": 30}}, sort=[("age", 1)])) == ["ada", "cy"]
    assert names(people.find({"tags": "code"})) == ["ada", "bob"]
    assert names(people.find({"addr.city": "Oslo"})) == ["dee"]
    assert names(people.find(sort=[("age", -1), ("name", 1)])) == ["cy", "ada", "bob", "dee"]
    assert names(people.find(sort="name", skip=1, limit=2)) == ["bob", "cy"]
    assert list(people.find({"_id": 1}, {"name": 1})) == [{"_id": 1, "name": "ada"}]
    assert list(people.find({"_id": 1}, {"name": 1, "_id": 0})) == [{"name": "ada"}]
    assert list(people.find({"_id": 2}, ["age"])) == [{"_id": 2, "age": 25}]
    assert list(people.find({"_id": 3}, {"age": 0})) == [{"_id": 3, "name": "cy"}]
    assert people.find({"$or": [{"name": "bob"}, {"age": 41}]}).to_list() == [
        {"_id": 2, "name": "bob", "age": 25, "tags": ["code"]},
        {"_id": 3, "name": "cy", "age": 41},
    ]


def test_cursor_methods(people):
    cur = people.find({}).sort("age", -1).skip(1).limit(2)
    assert [d["_id"] for d in cur] == [1, 2]
    assert list(cur) == []  # exhausted
    cur = people.find()
    next(iter(cur))
    with pytest.raises(cairndb.InvalidArgumentError):
        cur.limit(1)
    cur.close()
    assert list(cur) == []
    many = people.find().sort([("name", -1)])
    assert [d["name"] for d in many] == ["dee", "cy", "bob", "ada"]


def test_cursor_streams_many_documents(db):
    c = db.collection("many")
    c.insert_many([{"_id": i, "v": i % 7} for i in range(1000)])
    assert sum(1 for _ in c.find()) == 1000
    assert [d["_id"] for d in c.find({"v": 3}, limit=3)] == [3, 10, 17]


def test_explain_uses_index(people):
    before = people.find({"age": 25}).explain()
    assert before["plan"] == "full scan" and before["returned"] == 2
    assert people.create_index("age") == "age_1"
    after = people.find({"age": 25}).explain()
    assert "age_1" in after["plan"] and after["returned"] == 2
    assert after["examined"] <= before["examined"]  # index entries + documents
    assert set(after) == {
        "plan",
        "examined",
        "keys_examined",
        "docs_examined",
        "returned",
        "sorted_in_memory",
        "plan_cache_key",
        "from_plan_cache",
    }
    assert after["keys_examined"] == 2 and after["docs_examined"] == 2


def test_explain_shows_the_plan_cache(people):
    # MongoDB's planCacheKey: one key per query shape, values aside; the
    # second query of a shape reuses the first one's plan. (The cache goes
    # with the collection's metadata, which no other test here shares.)
    people.create_index("age")
    people.create_index("addr.city")
    first = people.find({"age": 25}).explain()
    again = people.find({"age": 31}).explain()
    other = people.find({"name": "x"}).explain()
    assert isinstance(first["plan_cache_key"], str) and first["plan_cache_key"]
    assert again["plan_cache_key"] == first["plan_cache_key"]
    assert other["plan_cache_key"] != first["plan_cache_key"]
    assert first["from_plan_cache"] is False
    assert again["from_plan_cache"] is True
    assert "age_1" in again["plan"]
    # A new index empties the cache: planned afresh.
    people.create_index("tags")
    assert people.find({"age": 25}).explain()["from_plan_cache"] is False


def test_find_one_and_counts(people):
    assert people.find_one({"name": "bob"})["_id"] == 2
    assert people.find_one({"name": "zed"}) is None
    assert people.find_one(sort=[("age", -1)])["name"] == "cy"
    assert people.find_one({"_id": 1}, {"age": 1}) == {"_id": 1, "age": 36}
    assert people.count_documents() == 4
    assert people.count_documents({"age": 25}) == 2
    assert people.estimated_document_count() == 4


def test_update_one_many_upsert(people):
    r = people.update_one({"age": 25}, {"$set": {"seen": True}})
    assert (r.matched_count, r.modified_count, r.upserted_id) == (1, 1, None)
    r = people.update_many({"age": 25}, {"$inc": {"age": 1}})
    assert (r.matched_count, r.modified_count) == (2, 2)
    assert people.count_documents({"age": 26}) == 2
    r = people.update_one({"name": "bob"}, {"$set": {"age": 26}})
    assert (r.matched_count, r.modified_count) == (1, 0)
    r = people.update_one({"name": "eve"}, {"$set": {"age": 1}})
    assert (r.matched_count, r.upserted_id) == (0, None)
    r = people.update_one({"name": "eve"}, {"$set": {"age": 1}}, upsert=True)
    assert isinstance(r.upserted_id, ObjectId)
    assert people.find_one({"_id": r.upserted_id}) == {"_id": r.upserted_id, "name": "eve", "age": 1}
    r = people.update_many({"name": "fay"}, {"$set": {"x": 1}}, upsert=True)
    assert r.upserted_id is not None and people.count_documents({"name": "fay"}) == 1
    with pytest.raises(ValueError):
        people.update_one({"_id": 1}, {"name": "no operators"})
    with pytest.raises(cairndb.InvalidQueryError):
        people.update_one({"_id": 1}, {"$bogus": {"a": 1}})
    with pytest.raises(cairndb.InvalidQueryError):
        people.update_one({"_id": 1}, {"$set": {"_id": 99}})


def test_replace_one(people):
    r = people.replace_one({"_id": 3}, {"name": "cyd"})
    assert (r.matched_count, r.modified_count) == (1, 1)
    assert people.find_one({"_id": 3}) == {"_id": 3, "name": "cyd"}
    r = people.replace_one({"_id": 50}, {"name": "new"}, upsert=True)
    assert r.upserted_id == 50
    with pytest.raises(ValueError):
        people.replace_one({"_id": 3}, {"$set": {"a": 1}})


def test_delete_one_many(people):
    assert people.delete_one({"age": 25}).deleted_count == 1
    assert people.delete_many({"age": {"$gte": 0}}).deleted_count == 3
    assert people.delete_many({}).deleted_count == 0
    assert people.count_documents() == 0


def test_indexes(people):
    assert people.list_indexes() == []
    name = people.create_index([("name", 1), ("age", -1)], unique=True)
    assert name == "name_1_age_-1"
    people.create_index("addr.city", sparse=True, name="city")
    idx = {i["name"]: i for i in people.list_indexes()}
    assert idx["name_1_age_-1"] == {
        "name": "name_1_age_-1",
        "key": {"name": 1, "age": -1},
        "unique": True,
        "sparse": False,
    }
    assert idx["city"]["sparse"] is True
    with pytest.raises(cairndb.DuplicateKeyError):
        people.insert_one({"name": "ada", "age": 36})
    with pytest.raises(cairndb.DuplicateKeyError):
        people.create_index("age", unique=True)  # two documents have age 25
    assert people.drop_index("city") is True
    assert people.drop_index("city") is False
    assert [i["name"] for i in people.list_indexes()] == ["name_1_age_-1"]


def test_upsert_many_and_drop(db):
    c = db.collection("u")
    c.insert_one({"_id": 1, "v": 0})
    r = c.upsert_many([{"_id": 1, "v": 1}, {"_id": 2, "v": 2}])
    assert (r.inserted_count, r.replaced_count) == (1, 1)
    assert [d["v"] for d in c.find()] == [1, 2]
    assert db.list_collections() == ["u"]
    assert c.drop() is True
    assert c.drop() is False
    assert db.list_collections() == []


def test_invalid_queries(people):
    with pytest.raises(cairndb.InvalidQueryError):
        list(people.find({"age": {"$nope": 1}}))
    with pytest.raises(cairndb.InvalidQueryError):
        list(people.find({}, sort=[("age", 5)]))
    with pytest.raises(TypeError):
        people.find("not a dict")
    assert issubclass(cairndb.InvalidQueryError, cairndb.DocumentError)


def test_collection_in_transaction(db):
    c = db.collection("t")
    c.insert_one({"_id": 0, "n": 0})
    with db.transaction() as tx:
        tc = tx.collection("t")
        assert tc.name == "t"
        tc.insert_one({"_id": 1, "n": 1})
        tc.insert_many([{"_id": 2, "n": 2}, {"_id": 3, "n": 3}])
        assert tc.count_documents() == 4
        assert c.count_documents() == 1  # not visible outside yet
        assert tc.update_many({"n": {"$gte": 2}}, {"$inc": {"n": 10}}).modified_count == 2
        assert tc.update_one({"_id": 9}, {"$set": {"n": 9}}, upsert=True).upserted_id == 9
        assert tc.replace_one({"_id": 0}, {"n": 100}).modified_count == 1
        assert tc.delete_many({"n": 1}).deleted_count == 1
        assert tc.create_index("n") == "n_1"
        assert tc.find_one({"n": 12}) == {"_id": 2, "n": 12}
        assert [d["_id"] for d in tc.find()] == [0, 2, 3, 9]
    assert [d["n"] for d in c.find(sort="_id")] == [100, 12, 13, 9]
    assert [i["name"] for i in c.list_indexes()] == ["n_1"]


def test_text_index_and_search(db):
    # pymongo's TEXT is the string "text"; weights and default_language as in
    # pymongo's create_index.
    posts = db.collection("posts")
    # A malformed item is refused, not skipped (it made a text index on
    # "title" alone).
    with pytest.raises((TypeError, ValueError)):
        posts.create_index([("title", "text"), "body"])
    assert [i for i in posts.list_indexes() if i.get("key", {}).get("_fts")] == []
    posts.insert_many(
        [
            {"_id": 1, "title": "Cold brew coffee", "body": "overnight"},
            {"_id": 2, "title": "Coffee shop", "body": "decaf please"},
            {"_id": 3, "title": "Green tea", "body": "a coffee aside"},
        ]
    )
    with pytest.raises(cairndb.InvalidQueryError, match="text index required"):
        list(posts.find({"$text": {"$search": "coffee"}}))
    with pytest.raises(ValueError):
        posts.create_index([("title", "text"), ("n", 1)])
    name = posts.create_index([("title", "text"), ("body", "text")], weights={"title": 10})
    assert name == "title_text_body_text"
    (info,) = posts.list_indexes()
    assert info["key"] == {"_fts": "text", "_ftsx": 1}
    assert info["weights"] == {"title": 10, "body": 1}
    assert info["default_language"] == "english"
    found = list(
        posts.find(
            {"$text": {"$search": "coffees -decaf"}},
            {"score": {"$meta": "textScore"}},
            sort=[("score", {"$meta": "textScore"})],
        )
    )
    assert [d["_id"] for d in found] == [1, 3]
    assert found[0]["score"] > found[1]["score"]
    assert posts.count_documents({"$text": {"$search": "tea"}}) == 1
