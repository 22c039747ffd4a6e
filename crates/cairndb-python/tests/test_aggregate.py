import pytest

import cairndb


@pytest.fixture
def orders(db):
    c = db.collection("orders")
    c.insert_many(
        [
            {"_id": 1, "cust": "ann", "total": 10, "tags": ["a", "b"]},
            {"_id": 2, "cust": "bob", "total": 5.5, "tags": ["a"]},
            {"_id": 3, "cust": "ann", "total": 7},
            {"_id": 4, "cust": "cid", "total": 1, "tags": []},
        ]
    )
    db.collection("customers").insert_many(
        [{"_id": "ann", "city": "Lisbon"}, {"_id": "bob", "city": "Porto"}]
    )
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
