import pytest

import cairndb


@pytest.fixture
def orders(filled):
    c = filled(
        "orders",
        [
            {"_id": 1, "cust": "ann", "total": 10, "tags": ["a", "b"]},
            {"_id": 2, "cust": "bob", "total": 5.5, "tags": ["a"]},
            {"_id": 3, "cust": "ann", "total": 7},
            {"_id": 4, "cust": "cid", "total": 1, "tags": []},
        ],
    )
    filled("customers", [{"_id": "ann", "city": "Lisbon"}, {"_id": "bob", "city": "Porto"}])
    return c


def test_aggregate_group_sort_project(orders):
    out = orders.aggregate(
        [
            {"$match": {"total": {"$gte": 5}}},
            {"$group": {"_id": "$cust", "sum": {"$sum": "$total"}, "n": {"$sum": 1}}},
            {"$sort": {"sum": -1}},
            {"$project": {"_id": 0, "who": {"$toUpper": "$_id"}, "sum": 1}},
        ]
    )
    assert out == [{"sum": 17, "who": "ANN"}, {"sum": 5.5, "who": "BOB"}]


def test_aggregate_unwind_lookup_count(orders):
    out = orders.aggregate([{"$unwind": "$tags"}, {"$sortByCount": "$tags"}])
    assert out == [{"_id": "a", "count": 2}, {"_id": "b", "count": 1}]
    out = orders.aggregate(
        [
            {"$lookup": {"from": "customers", "localField": "cust", "foreignField": "_id", "as": "c"}},
            {"$project": {"city": "$c.city"}},
        ]
    )
    assert out == [
        {"_id": 1, "city": ["Lisbon"]},
        {"_id": 2, "city": ["Porto"]},
        {"_id": 3, "city": ["Lisbon"]},
        {"_id": 4, "city": []},
    ]
    assert orders.aggregate([{"$count": "n"}]) == [{"n": 4}]
    assert orders.aggregate([{"$match": {"cust": "zed"}}, {"$count": "n"}]) == []


def test_aggregate_errors_name_stage_and_operator(orders):
    with pytest.raises(cairndb.InvalidQueryError) as e:
        orders.aggregate([{"$match": {}}, {"$bogus": 1}])
    assert e.value.stage == 1 and e.value.operator == "$bogus"
    with pytest.raises(cairndb.InvalidQueryError) as e:
        orders.aggregate([{"$project": {"x": {"$divide": ["$total", 0]}}}])
    assert e.value.stage == 0 and e.value.operator == "$divide"
    with pytest.raises(TypeError):
        orders.aggregate({"$match": {}})


def test_distinct(orders):
    assert orders.distinct("tags") == ["a", "b"]
    assert orders.distinct("cust", {"total": {"$lt": 8}}) == ["ann", "bob", "cid"]
    assert orders.distinct("nope") == []


def test_in_a_transaction(db, orders):
    with db.transaction() as tx:
        c = tx.collection("orders")
        c.insert_one({"_id": 5, "cust": "dan", "total": 3, "tags": ["z"]})
        assert c.distinct("tags") == ["a", "b", "z"]
        assert c.aggregate([{"$match": {"total": {"$lt": 5}}}, {"$count": "n"}]) == [{"n": 2}]
        tx.abort()
    assert orders.distinct("tags") == ["a", "b"]


def test_find_one_and_modify(db):
    c = db.collection("jobs")
    c.insert_many(
        [
            {"_id": 1, "state": "new", "pri": 2},
            {"_id": 2, "state": "new", "pri": 9},
        ]
    )
    before = c.find_one_and_update(
        {"state": "new"}, {"$set": {"state": "run"}}, sort=[("pri", -1)]
    )
    assert before == {"_id": 2, "state": "new", "pri": 9}
    after = c.find_one_and_update(
        {"state": "new"}, {"$set": {"state": "run"}}, return_document=True
    )
    assert after == {"_id": 1, "state": "run", "pri": 2}
    assert c.find_one_and_update({"state": "new"}, {"$set": {"x": 1}}) is None
    up = c.find_one_and_update(
        {"_id": 3}, {"$set": {"pri": 0}}, upsert=True, return_document=True
    )
    assert up == {"_id": 3, "pri": 0}
    assert c.find_one_and_replace({"_id": 3}, {"state": "x"}, return_document=True) == {
        "_id": 3,
        "state": "x",
    }
    with pytest.raises(ValueError):
        c.find_one_and_replace({"_id": 3}, {"$set": {"a": 1}})
    gone = c.find_one_and_delete({"state": "run"}, sort="pri")
    assert gone == {"_id": 1, "state": "run", "pri": 2}
    assert c.count_documents() == 2


def test_rename(db):
    c = db.collection("a")
    c.insert_one({"_id": 1})
    db.collection("b").insert_one({"_id": 2})
    with pytest.raises(cairndb.DocumentError):
        c.rename("b")
    c.rename("c")
    assert db.collection("c").find_one({}) == {"_id": 1}
    assert c.count_documents() == 0
    db.collection("c").rename("b", drop_target=True)
    assert db.collection("b").find_one({}) == {"_id": 1}
