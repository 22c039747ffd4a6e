import pytest

import cairndb


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "test.cairn")


@pytest.fixture
def db(path):
    d = cairndb.open(path)
    yield d
    d.close()


@pytest.fixture
def filled(db):
    """A function that inserts `docs` into the collection `name` of `db`
    and returns the collection."""

    def fill(name, docs):
        c = db.collection(name)
        c.insert_many(docs)
        return c

    return fill
