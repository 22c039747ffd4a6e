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
