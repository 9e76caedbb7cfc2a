"""The store checkpoints its WAL on a background thread, never inside a commit, and loses nothing by it."""

from __future__ import annotations

import shutil
import sqlite3
import time
from pathlib import Path

from refplatform.store import Store


def rows_in_main_file(store_path: Path, scratch: Path) -> int:
    """Objects in the database file alone (a copy without its WAL): what checkpoints have moved there."""
    shutil.copyfile(store_path, scratch)
    db = sqlite3.connect(scratch)
    try:
        return int(db.execute("SELECT count(*) FROM objects").fetchone()[0])
    except sqlite3.OperationalError:  # not even the schema has been checkpointed yet
        return 0
    finally:
        db.close()


def test_commits_never_checkpoint_and_the_background_thread_does(tmp_path: Path) -> None:
    store = Store(tmp_path / "s", checkpoint_interval=0.05)
    try:
        assert store._db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        for i in range(300):
            store.create("pods", {"metadata": {"name": f"p{i}", "namespace": "default"}}, now="2026-12-01T00:00:00Z")
        deadline = time.monotonic() + 10
        while rows_in_main_file(store.path, tmp_path / "copy.sqlite3") < 300:
            assert time.monotonic() < deadline, "the checkpointer did not move the WAL into the database file"
            time.sleep(0.05)
        assert store.checkpoints >= 1
    finally:
        store.close()
    assert not store._checkpointer.is_alive()


def test_what_was_committed_but_not_checkpointed_survives_a_crash(tmp_path: Path) -> None:
    store = Store(tmp_path / "s", checkpoint_interval=3600)  # no checkpoint: every commit only in the WAL
    for i in range(50):
        store.create("pods", {"metadata": {"name": f"p{i}", "namespace": "default"}}, now="2026-12-01T00:00:00Z")
    # A second store opened on the same files without closing the first (as after kill -9) replays the WAL.
    again = Store(tmp_path / "s", checkpoint_interval=3600)
    try:
        assert again.count("pods") == 50
        assert again.resource_version == store.resource_version
    finally:
        again.close()
        store.close()


def test_a_store_dropped_without_close_stops_its_checkpointer(tmp_path: Path) -> None:
    import gc

    store = Store(tmp_path / "s", checkpoint_interval=0.01)
    thread = store._checkpointer
    del store
    gc.collect()
    thread.join(timeout=10)
    assert not thread.is_alive()
