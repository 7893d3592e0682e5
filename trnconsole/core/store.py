"""The run store: one SQLite database in WAL mode holding every run's record.

Several consoles may write at once: every write is one short `BEGIN IMMEDIATE` transaction that touches
only the columns it means to change, and a finished run's status is never overwritten by a stale one.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import UsageError
from .spec import RunSpec

TERMINAL = ("completed", "failed", "stopped", "lost")
ACTIVE = ("starting", "running", "stopping")

# Each entry moves the schema one version up; PRAGMA user_version records where a database stands.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        name TEXT,
        runner TEXT NOT NULL,
        backend TEXT NOT NULL,
        spec TEXT NOT NULL,
        status TEXT NOT NULL,
        created_at REAL NOT NULL,
        started_at REAL,
        ended_at REAL,
        pid INTEGER,
        pgid INTEGER,
        exit_code INTEGER,
        parent_id TEXT REFERENCES runs(id),
        diff TEXT,
        handle TEXT,
        log_cursor TEXT,
        summary TEXT,
        run_dir TEXT NOT NULL,
        error TEXT
    );
    """,
    """
    CREATE INDEX runs_created ON runs(created_at);
    CREATE INDEX runs_status ON runs(status);
    CREATE INDEX runs_parent ON runs(parent_id);
    """,
    # A remote job's latest facts from its backend (phase, instances, billable seconds).
    "ALTER TABLE runs ADD COLUMN detail TEXT;",
)
SCHEMA_VERSION = len(MIGRATIONS)
JSON_COLUMNS = ("diff", "handle", "log_cursor", "summary", "detail")
UPDATABLE = {
    "name",
    "status",
    "started_at",
    "ended_at",
    "pid",
    "pgid",
    "exit_code",
    "handle",
    "log_cursor",
    "summary",
    "error",
    "detail",
}


@dataclass(frozen=True)
class RunRecord:
    id: str
    name: str | None
    runner: str
    backend: str
    spec: RunSpec
    status: str
    created_at: float
    run_dir: Path
    started_at: float | None = None
    ended_at: float | None = None
    pid: int | None = None
    pgid: int | None = None
    exit_code: int | None = None
    parent_id: str | None = None
    diff: dict[str, Any] | None = None
    handle: dict[str, Any] | None = None
    log_cursor: dict[str, Any] | None = None
    summary: dict[str, Any] | None = None
    error: str | None = None
    detail: dict[str, Any] | None = None

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL

    def elapsed(self, now: float | None = None) -> float | None:
        if self.started_at is None:
            return None
        end = self.ended_at if self.ended_at is not None else (now or time.time())
        return max(0.0, end - self.started_at)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "runner": self.runner,
            "backend": self.backend,
            "status": self.status,
            "created_at": self.created_at,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "elapsed_s": self.elapsed(),
            "pid": self.pid,
            "pgid": self.pgid,
            "exit_code": self.exit_code,
            "parent_id": self.parent_id,
            "diff": self.diff,
            "run_dir": str(self.run_dir),
            "error": self.error,
            "spec": self.spec.to_json(),
            "summary": self.summary,
            "detail": self.detail,
        }


class Store:
    """The runs table of `$TRNCONSOLE_HOME/runs.db`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # One connection shared by the console's threads, each call under self._lock.
            self._db = sqlite3.connect(str(path), timeout=30.0, isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            raise UsageError(
                f"run store {path}: cannot open ({exc}); point TRNCONSOLE_HOME at a writable directory"
            ) from None
        self._lock = threading.RLock()
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA busy_timeout = 30000")
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute("PRAGMA synchronous = NORMAL")
        self._db.execute("PRAGMA foreign_keys = ON")
        self._migrate()

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _query(self, sql: str, params: Any = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, params).fetchall()

    def _migrate(self) -> None:
        with self._write() as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise UsageError(
                    f"run store {self.path}: schema version {version} is newer than this trnconsole "
                    f"understands ({SCHEMA_VERSION}); upgrade trnconsole"
                )
            for number in range(version, SCHEMA_VERSION):
                for statement in MIGRATIONS[number].split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(f"PRAGMA user_version = {number + 1}")

    @property
    def schema_version(self) -> int:
        return self._query("PRAGMA user_version")[0][0]

    # ---- writes ----

    def create(
        self,
        spec: RunSpec,
        run_dir_for: Any,
        parent_id: str | None = None,
        diff: Mapping[str, Any] | None = None,
        run_id: str | None = None,
    ) -> RunRecord:
        """Insert a new run in status "starting" with a fresh id (or the given one); run_dir_for(id) names
        its directory."""
        now = time.time()
        for _ in range(20):
            wanted, run_id = run_id, run_id or secrets.token_hex(4)
            try:
                with self._write() as db:
                    db.execute(
                        "INSERT INTO runs (id, name, runner, backend, spec, status, created_at, parent_id,"
                        " diff, run_dir) VALUES (?, ?, ?, ?, ?, 'starting', ?, ?, ?, ?)",
                        (
                            run_id,
                            spec.name,
                            spec.runner_label,
                            spec.backend,
                            spec.dumps(),
                            now,
                            parent_id,
                            json.dumps(diff) if diff is not None else None,
                            str(run_dir_for(run_id)),
                        ),
                    )
            except sqlite3.IntegrityError:
                if wanted:
                    raise UsageError(f"run {wanted}: that id is taken") from None
                run_id = None
                continue  # the random id was taken: draw another
            return self.get(run_id)
        raise RuntimeError("could not draw a free run id")

    def update(self, run_id: str, *, only_if_active: bool = False, **fields: Any) -> bool:
        """Set the given columns. With only_if_active, a run already finished is left as it is."""
        unknown = set(fields) - UPDATABLE
        if unknown:
            raise ValueError(f"not updatable: {sorted(unknown)}")
        if not fields:
            return False
        values = [json.dumps(v) if k in JSON_COLUMNS and v is not None else v for k, v in fields.items()]
        sql = f"UPDATE runs SET {', '.join(f'{k} = ?' for k in fields)} WHERE id = ?"
        if only_if_active:
            sql += f" AND status NOT IN ({', '.join('?' * len(TERMINAL))})"
        with self._write() as db:
            cursor = db.execute(sql, [*values, run_id, *(TERMINAL if only_if_active else ())])
        return cursor.rowcount > 0

    def delete(self, run_id: str) -> None:
        with self._write() as db:
            db.execute("UPDATE runs SET parent_id = NULL WHERE parent_id = ?", (run_id,))
            db.execute("DELETE FROM runs WHERE id = ?", (run_id,))

    # ---- reads ----

    def get(self, run_id: str) -> RunRecord:
        rows = self._query("SELECT * FROM runs WHERE id = ?", (run_id,))
        row = rows[0] if rows else None
        if row is None:
            raise UsageError(f"run {run_id}: no such run; `trnconsole runs` lists them")
        return _record(row)

    def resolve(self, prefix: str) -> RunRecord:
        """A run by id or unique id prefix; UsageError when none or several match."""
        prefix = prefix.strip()
        if not prefix:
            raise UsageError("RUN: empty run id; `trnconsole runs` lists them")
        pattern = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        rows = self._query(
            "SELECT * FROM runs WHERE id LIKE ? ESCAPE '\\' ORDER BY created_at LIMIT 6", (pattern,)
        )
        if not rows:
            raise UsageError(f"run {prefix}: no run id starts with that; `trnconsole runs` lists them")
        exact = [row for row in rows if row["id"] == prefix]
        if exact:
            return _record(exact[0])
        if len(rows) > 1:
            shown = ", ".join(row["id"] for row in rows[:5])
            raise UsageError(f"run {prefix}: ambiguous, matches {shown}; type more of the id")
        return _record(rows[0])

    def list(self, limit: int | None = None, statuses: tuple[str, ...] | None = None) -> list[RunRecord]:
        sql, params = "SELECT * FROM runs", []
        if statuses:
            sql += f" WHERE status IN ({', '.join('?' * len(statuses))})"
            params += list(statuses)
        sql += " ORDER BY created_at DESC"
        if limit:
            sql += " LIMIT ?"
            params.append(limit)
        return [_record(row) for row in self._query(sql, params)]

    def count(self) -> int:
        return self._query("SELECT COUNT(*) FROM runs")[0][0]


def _record(row: sqlite3.Row) -> RunRecord:
    def loads(name: str) -> Any:
        text = row[name]
        return json.loads(text) if text else None

    return RunRecord(
        id=row["id"],
        name=row["name"],
        runner=row["runner"],
        backend=row["backend"],
        spec=RunSpec.from_json(json.loads(row["spec"])),
        status=row["status"],
        created_at=row["created_at"],
        run_dir=Path(row["run_dir"]),
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        pid=row["pid"],
        pgid=row["pgid"],
        exit_code=row["exit_code"],
        parent_id=row["parent_id"],
        diff=loads("diff"),
        handle=loads("handle"),
        log_cursor=loads("log_cursor"),
        summary=loads("summary"),
        error=row["error"],
        detail=loads("detail"),
    )


def open_store(home: Path) -> Store:
    return Store(home / "runs.db")
