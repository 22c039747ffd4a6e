"""``ChangeStream.close()`` while another thread waits in ``next()``.

Property: close() waits for the waiting thread to let go of the stream (up
to one 100 ms wait slice) without holding the GIL, so a third thread keeps
running Python code meanwhile; the waiter's iteration then ends. (Holding
the GIL, close() would stop every other Python thread for that time.)
"""

import bisect
import threading
import time


def spin(stop, ticks):
    """Runs Python code until `stop`, noting the time about every ms."""
    last = 0.0
    while not stop.is_set():
        now = time.monotonic()
        if now - last >= 0.001:
            ticks.append(now)
            last = now


def test_change_stream_close_lets_other_threads_run(db):
    c = db.collection("c")
    c.enable_change_stream()
    stop = threading.Event()
    ticks = []
    spinner = threading.Thread(target=spin, args=(stop, ticks))
    spinner.start()
    # For each close() that took 50 ms or more: the longest time in it
    # during which the spinner noted nothing, against the close's duration.
    gaps = []
    try:
        for _ in range(80):
            s = c.watch()
            ended = []
            waiter = threading.Thread(target=lambda: ended.append(list(s)))
            waiter.start()
            time.sleep(0.03)  # the waiter is inside next()'s wait
            t0 = time.monotonic()
            s.close()
            t1 = time.monotonic()
            waiter.join(5)
            assert not waiter.is_alive(), "close() did not end the iteration"
            assert ended == [[]]
            if t1 - t0 >= 0.05:
                i, j = bisect.bisect_left(ticks, t0), bisect.bisect_right(ticks, t1)
                marks = [t0] + ticks[i:j] + [t1]
                gaps.append((max(b - a for a, b in zip(marks, marks[1:])), t1 - t0))
            if len(gaps) >= 5:
                break
    finally:
        stop.set()
        spinner.join()
    assert gaps, "close() never had to wait for the waiting thread"
    # Holding the GIL, close() stops the spinner for nearly all its time.
    assert any(gap < took / 3 for gap, took in gaps), gaps
