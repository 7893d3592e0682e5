"""The run store: schema migrations, prefix lookup, guarded updates, and two writers at once."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path

import pytest

from trnconsole.core.errors import UsageError
from trnconsole.core.spec import RunSpec
from trnconsole.core.store import MIGRATIONS, SCHEMA_VERSION, Store


def make_store(tmp_path: Path) -> Store:
    return Store(tmp_path / "runs.db")


def new_run(store: Store, name: str = "r", parent: str | None = None):
    spec = RunSpec(runner="bert", flags={"synthetic": True, "steps": "10"}, name=name)
    return store.create(spec, lambda run_id: store.path.parent / "runs" / run_id, parent_id=parent)


def test_a_new_store_is_in_wal_mode_at_the_latest_schema(tmp_path):
    store = make_store(tmp_path)
    assert store.schema_version == SCHEMA_VERSION
    mode = sqlite3.connect(tmp_path / "runs.db").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_an_old_database_is_migrated_and_keeps_its_runs(tmp_path):
    db = sqlite3.connect(tmp_path / "runs.db")
    db.executescript(MIGRATIONS[0])
    db.execute("PRAGMA user_version = 1")
    spec = RunSpec(runner="gpt2", flags={"synthetic": True})
    db.execute(
        "INSERT INTO runs (id, runner, backend, spec, status, created_at, run_dir) VALUES (?,?,?,?,?,?,?)",
        ("abcd1234", "gpt2", "local", spec.dumps(), "completed", 1.0, str(tmp_path / "runs" / "abcd1234")),
    )
    db.commit()
    db.close()
    store = make_store(tmp_path)
    assert store.schema_version == SCHEMA_VERSION
    indexes = {row[0] for row in store._db.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    assert {"runs_created", "runs_status", "runs_parent"} <= indexes
    assert store.get("abcd1234").spec == spec


def test_a_database_from_a_newer_version_is_refused_with_a_clear_error(tmp_path):
    db = sqlite3.connect(tmp_path / "runs.db")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(UsageError, match="newer than this trnconsole"):
        make_store(tmp_path)


def test_resolve_by_unique_prefix_and_errors_for_unknown_or_ambiguous(tmp_path):
    store = make_store(tmp_path)
    runs = [new_run(store, f"r{i}") for i in range(40)]
    target = runs[7]
    assert store.resolve(target.id).id == target.id
    unique = next(n for n in range(1, 9) if sum(r.id.startswith(target.id[:n]) for r in runs) == 1)
    assert store.resolve(target.id[:unique]).id == target.id
    with pytest.raises(UsageError, match="no run id starts with"):
        store.resolve("zzzz")
    first_chars = [r.id[0] for r in runs]
    shared = next(c for c in first_chars if first_chars.count(c) > 1)
    with pytest.raises(UsageError, match="ambiguous"):
        store.resolve(shared)
    with pytest.raises(UsageError, match="no run id"):
        store.resolve("%")  # LIKE wildcards are literal


def test_a_finished_run_is_never_set_back_to_running(tmp_path):
    store = make_store(tmp_path)
    run = new_run(store)
    store.update(run.id, status="completed", exit_code=0)
    assert not store.update(run.id, status="running", only_if_active=True)
    assert store.get(run.id).status == "completed"


def test_json_columns_round_trip(tmp_path):
    store = make_store(tmp_path)
    parent = new_run(store, "parent")
    child = store.create(
        parent.spec, lambda i: tmp_path / i, parent_id=parent.id, diff={"batch_size": ["8", "16"]}
    )
    store.update(child.id, handle={"pid": 5}, summary={"final_loss": 0.5}, log_cursor={"offset": 10})
    got = store.get(child.id)
    assert (got.parent_id, got.diff) == (parent.id, {"batch_size": ["8", "16"]})
    assert (got.handle, got.summary, got.log_cursor) == ({"pid": 5}, {"final_loss": 0.5}, {"offset": 10})


def _writer(db_path: str, worker: int, count: int) -> None:
    store = Store(Path(db_path))
    for i in range(count):
        run = new_run(store, f"w{worker}-{i}")
        store.update(run.id, status="running", pid=worker * 100000 + i)
        store.update(run.id, status="completed", exit_code=0, summary={"worker": worker, "i": i})
    store.close()


def test_two_processes_writing_at_once_lose_nothing(tmp_path):
    db_path = str(tmp_path / "runs.db")
    make_store(tmp_path).close()
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_writer, args=(db_path, w, 150)) for w in range(2)]
    for p in workers:
        p.start()
    for p in workers:
        p.join(120)
        assert p.exitcode == 0
    store = Store(Path(db_path))
    runs = store.list()
    assert len(runs) == 300
    assert {r.name for r in runs} == {f"w{w}-{i}" for w in range(2) for i in range(150)}
    assert all(r.status == "completed" and r.summary["i"] == int(r.name.split("-")[1]) for r in runs)
    assert store._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
