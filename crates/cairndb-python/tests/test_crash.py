"""A child Python process commits in a loop and is killed with SIGKILL
mid-loop; every commit it acknowledged must be in the reopened file."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import cairndb

CHILD = textwrap.dedent(
    """
    import sys, cairndb
    db = cairndb.open(sys.argv[1])
    t = db.table("acks", key_type=int, value_type=str)
    c = db.collection("docs")
    i = 0
    while True:
        if i % 2:
            t[i] = "v%d" % i
        else:
            with db.transaction() as tx:
                tx.table("acks", int, str)[i] = "v%d" % i
                tx.collection("docs").insert_one({"_id": i, "pad": "x" * (i % 500)})
                tx.append("log", [("Tick", str(i))])
        print(i, flush=True)
        i += 1
    """
)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
@pytest.mark.parametrize("round_", range(3))
def test_sigkill_mid_commit_loop_keeps_acknowledged_commits(tmp_path, round_):
    path = str(tmp_path / "crash.cairn")
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, path],
        stdout=subprocess.PIPE,
        text=True,
    )
    acked = -1
    deadline = time.monotonic() + 60
    target = 40 + 30 * round_
    try:
        while acked < target and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            acked = int(line)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        # The child went on committing while this process read: every
        # commit it printed before the kill is acknowledged too.
        for line in proc.stdout:
            if line.endswith("\n"):
                acked = max(acked, int(line))
        proc.stdout.close()
    assert acked >= target, "the child did not get far enough"
    with cairndb.open(path) as db:
        assert db.check()["ok"]
        t = db.table("acks")
        have = dict(t.items())
        for i in range(acked + 1):
            assert have.get(i) == "v%d" % i, i
        # Nothing beyond the one commit that may have been in flight.
        assert max(have) <= acked + 1
        docs = db.collection("docs")
        even = [i for i in range(acked + 1) if i % 2 == 0]
        assert [d["_id"] for d in docs.find({"_id": {"$lte": acked}})] == even
        ticks = [int(e.data) for e in db.read("log")]
        assert ticks[: len(even)] == even
