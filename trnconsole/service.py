"""The operations the CLI and the console share: launch, refresh, stop, rerun, and a run's summary.

They wire the core (spec, store, metrics) to the backends; neither the CLI nor the UI holds this logic.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .backends import get_backend
from .backends.base import Backend, RunStatus
from .backends.options import check_options, config_defaults
from .core import paths
from .core.cores import ENV_VAR as CORES_ENV
from .core.cores import (
    Holder,
    allocate,
    check_core_count,
    describe,
    format_cores,
    held,
    parse_cores,
    ranges_that_fit,
)
from .core.errors import UsageError
from .core.hf_state import TrainerState, newest_trainer_state, steps_per_epoch_from_summary
from .core.metrics import headline_eval_metric
from .core.parsers import MetricRegex
from .core.pricing import Cost, PriceBook, instance_type_from_dmi, run_cost
from .core.series import SeriesSet
from .core.spec import (
    BACKENDS,
    FlagInfo,
    RunSpec,
    check_flags,
    check_resources,
    flag_diff,
    flag_text,
    parse_assignments,
    parse_env,
    script_dirs,
)
from .core.store import ACTIVE, RunRecord, Store, open_store
from .core.tail import FileTail
from .core.watch import LOG_FILE, RunWatcher
from .logmirror import mirror_logs, run_lock

if TYPE_CHECKING:
    from .monitors.neuron import NeuronInventory

RESULT_FILE = "result.json"
# A remote job's status and log are fetched at most this often per run (the UI refreshes every 2 s; the
# services' APIs are rate-limited and each poll is a few requests).
REMOTE_POLL_S = 5.0
# Remote logs arrive late (CloudWatch delivers seconds after the job wrote them): keep mirroring this long
# after a remote run ended.
LATE_LOG_S = 120.0
# A launch that has not finished submitting its run after this long never will (a remote submit uploads the
# source first, so minutes are normal).
SUBMIT_GRACE_S = 1800.0
PRICE_CACHE = "prices.json"
# Held across choosing a local run's NeuronCores and recording the run, so two launches at once (two consoles,
# a sweep beside a `trnconsole launch`) never pick the same free range.
CORES_LOCK = "neuroncores.lock"
SAGEMAKER_DEFAULT_INSTANCE = "ml.trn1.2xlarge"
DMI_PRODUCT = "/sys/devices/virtual/dmi/id/product_name"
# Figures a bundled runner's result.json states authoritatively; they win over what the log implies.
RESULT_FIELDS = (
    "step",
    "total_steps",
    "final_loss",
    "avg_samples_per_s",
    "peak_samples_per_s",
    "avg_tokens_per_s",
    "avg_step_time_s",
    "mfu",
    "compile_count",
    "compile_seconds",
    "compiles_after_warmup",
    "wall_time_s",
)


class Console:
    """The run store and the backends of one $TRNCONSOLE_HOME."""

    def __init__(self, home: Path | None = None) -> None:
        self.home = home or paths.writable_home()
        self.store: Store = open_store(self.home)
        self._backends: dict[str, Backend] = {}
        self._remote_polled: dict[str, float] = {}
        self._prices: PriceBook | None = None
        self._host_type: str | None = None

    def close(self) -> None:
        for backend in self._backends.values():
            backend.close()
        self.store.close()

    def backend(self, name: str) -> Backend:
        if name not in self._backends:
            self._backends[name] = get_backend(name)
        return self._backends[name]

    # ---- prices ----

    @property
    def price_cache(self) -> Path:
        """Where `prices --refresh` keeps the Price List API's figures."""
        return self.home / "cache" / PRICE_CACHE

    @property
    def prices(self) -> PriceBook:
        if self._prices is None:
            self._prices = PriceBook(paths.load_config(), cache=self.price_cache)
        return self._prices

    def instances_of(self, record: RunRecord) -> tuple[str | None, int]:
        """The instance type a run ran on and how many, for its cost."""
        options = record.spec.backend_options
        if record.backend == "sagemaker":
            count = options.get("instance_count") or record.spec.nnodes
            return options.get("instance_type") or SAGEMAKER_DEFAULT_INSTANCE, int(count)
        if record.backend != "local":
            return options.get("instance_type"), record.spec.nnodes
        return self.host_instance_type(), 1

    def host_instance_type(self) -> str | None:
        """This host's instance type: config.toml's `instance_type`, else what EC2 names it in DMI."""
        if self._host_type is None:
            configured = paths.load_config().get("instance_type")
            if isinstance(configured, str) and configured:
                self._host_type = configured
            else:
                try:
                    self._host_type = instance_type_from_dmi(Path(DMI_PRODUCT).read_text()) or ""
                except OSError:
                    self._host_type = ""
        return self._host_type or None

    def cost(
        self,
        record: RunRecord,
        step: int | None = None,
        total_steps: int | None = None,
        samples_per_s: float | None = None,
    ) -> Cost:
        """What the run has cost so far, will cost at its last step, and costs per 1,000 samples."""
        instance_type, count = self.instances_of(record)
        detail = record.detail or {}
        return run_cost(
            self.prices.get(instance_type),
            count,
            record.elapsed(),
            billable_s=_number(detail.get("billable_seconds")),
            training_s=_number(detail.get("training_seconds")),
            step=step,
            total_steps=total_steps,
            samples_per_s=samples_per_s,
            instance_type=instance_type,
        )

    def run_dir(self, run_id: str) -> Path:
        return self.home / "runs" / run_id

    # ---- specs ----

    def build_spec(
        self,
        runner: str,
        sets: Sequence[str] = (),
        envs: Sequence[str] = (),
        *,
        backend: str = "local",
        nproc: int = 1,
        nnodes: int = 1,
        node_rank: int = 0,
        rdzv_endpoint: str | None = None,
        name: str | None = None,
        python: str | None = None,
        metrics: Sequence[str] = (),
        extra_args: Sequence[str] = (),
        backend_options: dict[str, str] | None = None,
        cwd: str | None = None,
        cores: str | None = None,
        tb_dir: str | None = None,
    ) -> RunSpec:
        """A checked spec: every mistake is a UsageError before anything is written or started."""
        if backend not in BACKENDS:
            raise UsageError(f"--backend {backend}: choose one of {', '.join(BACKENDS)}")
        if tb_dir is not None and backend != "local":
            raise UsageError(
                f"--tb {tb_dir}: names a directory on this host; a {backend} job's TensorBoard files stay in "
                "its container, so leave --tb out (what the job logs still reaches the console)"
            )
        check_resources(nproc, nnodes, node_rank, rdzv_endpoint, backend)
        env = parse_env(envs)
        requested = requested_cores(cores, env, nproc, backend)
        backend_options = {**config_defaults(backend, paths.load_config()), **(backend_options or {})}
        check_options(backend, backend_options)
        for item in metrics:
            MetricRegex.from_spec(item)
        bundled = runner in ("bert", "gpt2", "vit")
        if not bundled:
            script = Path(runner).expanduser()
            if not script.is_file():
                raise UsageError(
                    f"RUNNER {runner}: no such script; "
                    "pass bert, gpt2, vit or a path to a Python training script"
                )
            runner = str(script.resolve())
        raw = parse_assignments(sets, "--set")
        spec = RunSpec(
            runner=runner,
            flags=dict(raw),
            extra_args=tuple(extra_args),
            env=env,
            backend=backend,
            nproc=nproc,
            nnodes=nnodes,
            node_rank=node_rank,
            rdzv_endpoint=rdzv_endpoint,
            name=name,
            python=python,
            cwd=cwd or os.getcwd(),
            metrics=tuple(metrics),
            backend_options=dict(backend_options or {}),
            cores=requested,
            tb_dir=tb_dir or None,
        )
        if bundled:
            # The interpreter and torchrun first: a flag table read with a broken interpreter says less.
            self.backend(backend).check(replace(spec, flags={}))
            flags = check_flags(raw, self.flag_table(runner, python), runner)
            if not flags.get("synthetic") and not flags.get("data") and not backend_options.get("data_s3"):
                raise UsageError(f"{runner}: no training data; add --set synthetic=true or --set data=PATH")
            spec = replace(spec, flags=flags)
        self.backend(backend).check(spec)
        return spec

    def flag_table(self, runner: str, python: str | None = None) -> list[FlagInfo]:
        from .backends.local import runner_python
        from .resources import runner_flags

        return [FlagInfo.from_json(row) for row in runner_flags(runner, runner_python(python))]

    # ---- lifecycle ----

    def launch(self, spec: RunSpec, parent: RunRecord | None = None) -> RunRecord:
        diff = flag_diff(parent.spec, spec) if parent else None
        local = spec.backend == "local"
        with self.cores_lock() if local else contextlib.nullcontext():
            if local:
                spec = self.place_on_cores(spec)
            record = self.store.create(spec, self.run_dir, parent_id=parent.id if parent else None, diff=diff)
        record.run_dir.mkdir(parents=True, exist_ok=True)
        (record.run_dir / "spec.json").write_text(
            json.dumps(
                {"id": record.id, "parent": record.parent_id, "diff": diff, **spec.to_json()}, indent=1
            )
            + "\n"
        )
        try:
            sub = self.backend(spec.backend).submit(record)
        except Exception as exc:
            self.store.update(record.id, status="failed", ended_at=time.time(), error=f"submit failed: {exc}")
            raise
        self.store.update(
            record.id,
            status="running",
            started_at=sub.started_at,
            pid=sub.pid,
            pgid=sub.pgid,
            handle=sub.handle,
            only_if_active=True,
        )
        return self.store.get(record.id)

    # ---- NeuronCores of local runs ----

    @contextlib.contextmanager
    def cores_lock(self) -> Iterator[None]:
        """An exclusive lock under $TRNCONSOLE_HOME, held by one launch at a time while it picks cores."""
        import fcntl

        self.home.mkdir(parents=True, exist_ok=True)
        with open(self.home / CORES_LOCK, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def core_holders(self, inventory: NeuronInventory) -> list[Holder]:
        """Who holds NeuronCores now: our active local runs (by their recorded range; a run that has ended is
        found ended here and holds nothing) and every other process neuron-ls lists."""
        holders: list[Holder] = []
        ours: dict[int, str] = {}
        for record in self.store.list(statuses=ACTIVE):
            if record.backend != "local":
                continue
            record = self.refresh(record)
            if record.finished:
                continue
            if record.pgid:
                ours[record.pgid] = record.id
            if record.spec.visible_cores:
                cores = parse_cores(record.spec.visible_cores, "visible_cores")
                holders.append(Holder(f"run {record.id} ({record.status})", cores))
        for pid, proc in sorted(inventory.holders().items()):
            try:
                if os.getpgid(pid) in ours:
                    continue  # a worker of one of our runs: its run's range says which cores
            except OSError:
                pass  # not visible from here (another container, or it just ended): neuron-ls is the word
            command = proc.command if len(proc.command) <= 60 else proc.command[:57] + "..."
            holders.append(Holder(f"pid {pid} ({command or 'command not shown'})", proc.core_ids))
        return holders

    def place_on_cores(self, spec: RunSpec) -> RunSpec:
        """The spec with the NeuronCores this local run gets (its user's own, checked, else the lowest free
        range) and the host's NeuronCore version; unchanged on a host without Neuron devices."""
        from .monitors.neuron import neuron_ls

        field, text = cores_request(spec)
        inventory = neuron_ls()
        host = inventory.core_ids
        if not host:
            if spec.cores is not None and CORES_ENV not in spec.env:
                why = inventory.problem or "neuron-ls lists no devices"
                raise UsageError(
                    f"--cores {spec.cores}: this host has no NeuronCores ({why}); leave --cores out"
                )
            return spec
        requested = parse_cores(text, field) if text is not None else None
        cores = allocate(requested, field, spec.nproc, host, self.core_holders(inventory))
        version = inventory.core_version(self.host_instance_type())
        return replace(spec, visible_cores=format_cores(cores), core_version=version)

    def core_room(self, nproc: int) -> tuple[int, str] | None:
        """How many runs of `nproc` processes fit on the free NeuronCores now, and who holds the others;
        None on a host without Neuron devices."""
        from .monitors.neuron import neuron_ls

        inventory = neuron_ls()
        if not inventory.core_ids:
            return None
        holders = self.core_holders(inventory)
        return ranges_that_fit(inventory.core_ids, held(holders), nproc), describe(holders)

    def refresh(self, record: RunRecord, force: bool = False) -> RunRecord:
        """Ask the backend how an active run stands; record an ending (with its summary) once.

        A remote run's new log lines are mirrored into its run directory first, at most every
        REMOTE_POLL_S unless `force`, by one console at a time (a second one skips the pass, so a Batch
        resubmission is never made twice); a remote service's error becomes the run's note, never an
        exception that would hide the other runs.
        """
        if record.status == "starting":
            return self._starting(record)
        backend = self.backend(record.backend)
        if not backend.remote:
            return self._apply(record, backend, backend.status(record)) if record.status in ACTIVE else record
        if not force and not self._remote_due(record):
            return record
        with run_lock(record.run_dir) as mine:
            if not mine:
                return record
            record = self.store.get(record.id)  # the handle and cursor another console may have moved on
            if record.finished:
                return self._late_logs(record, backend)
            if record.status not in ACTIVE:
                return record
            try:
                mirror_logs(self.store, backend, record, locked=True)
                status = backend.status(record)
            except UsageError as exc:
                self.store.update(record.id, error=str(exc), only_if_active=True)
                return self.store.get(record.id)
            return self._apply(record, backend, status)

    def _starting(self, record: RunRecord) -> RunRecord:
        """A run being submitted has nothing for its backend to look at yet (no pid, no job name): asking
        would call it lost while `launch` is still starting it. Only a launch that never finished (its console
        killed mid-submit) leaves a run "starting"; after SUBMIT_GRACE_S it is called lost."""
        if time.time() - record.created_at < SUBMIT_GRACE_S:
            return record
        self.store.update(
            record.id,
            status="lost",
            ended_at=time.time(),
            error="the launch never finished submitting this run (its console ended during the launch)",
            only_if_active=True,
        )
        return self.store.get(record.id)

    def _apply(self, record: RunRecord, backend: Backend, status: RunStatus) -> RunRecord:
        """Keep what the backend said: a changed handle or detail, the state, and an ending once."""
        changes: dict[str, Any] = {}
        if status.handle is not None and status.handle != record.handle:
            changes["handle"] = status.handle
        if status.detail is not None and status.detail != record.detail:
            changes["detail"] = status.detail
        if backend.remote and record.error and status.state in ("running", "stopping"):
            changes["error"] = None  # the service answers again
        if status.state in ("running", "stopping"):
            wanted = "stopping" if status.state == "stopping" or record.status == "stopping" else "running"
            if record.status != wanted:
                changes["status"] = wanted
            if not changes:
                return record
            self.store.update(record.id, only_if_active=True, **changes)
            return self.store.get(record.id)
        if changes:
            self.store.update(record.id, **changes)
        if backend.remote:
            self._mirror_quietly(record, backend)  # the lines written just before the end
        ended = self.store.get(record.id)
        summary = self.summary(replace(ended, status=status.state, exit_code=status.exit_code))
        self.store.update(
            record.id,
            status=status.state,
            exit_code=status.exit_code,
            ended_at=status.ended_at or time.time(),
            error=status.message if status.state != "completed" else None,
            summary=summary,
            only_if_active=True,
        )
        return self.store.get(record.id)

    def _remote_due(self, record: RunRecord) -> bool:
        now = time.monotonic()
        if now - self._remote_polled.get(record.id, float("-inf")) < REMOTE_POLL_S:
            return False
        self._remote_polled[record.id] = now
        return True

    def _late_logs(self, record: RunRecord, backend: Backend) -> RunRecord:
        """A remote run that ended lately: lines still arriving are mirrored and its summary redone."""
        if record.ended_at is None or time.time() - record.ended_at > LATE_LOG_S:
            return record
        if self._mirror_quietly(record, backend):
            self.store.update(record.id, summary=self.summary(record))
            return self.store.get(record.id)
        return record

    def _mirror_quietly(self, record: RunRecord, backend: Backend) -> int:
        try:
            return mirror_logs(self.store, backend, record, locked=True)
        except UsageError:
            return 0  # the status is what matters here; the next pass tries the log again

    def read_log(self, record: RunRecord, cursor: dict[str, Any] | None) -> tuple[list[str], dict[str, Any]]:
        """Lines of the run's stdout.log after the cursor (local output, or a remote log's mirror)."""
        tail = FileTail(record.run_dir / LOG_FILE, int((cursor or {}).get("offset", 0)))
        return tail.read_lines(), {"offset": tail.offset}

    def refresh_all(self, limit: int | None = None) -> list[RunRecord]:
        return [self.refresh(r) for r in self.store.list(limit=limit)]

    def stop(self, record: RunRecord, grace_s: float = 15.0) -> RunRecord:
        record = self.refresh(record, force=True)
        if record.finished:
            return record
        self.store.update(record.id, status="stopping", only_if_active=True)
        backend = self.backend(record.backend)
        status = backend.stop(self.store.get(record.id), grace_s=grace_s)
        if backend.remote and status.state in ("running", "stopping"):
            # The service ends the job in its own time; a later refresh records how it ended.
            pairs = (("handle", status.handle), ("detail", status.detail))
            changes = {k: v for k, v in pairs if v is not None}
            if changes:
                self.store.update(record.id, only_if_active=True, **changes)
            return self.store.get(record.id)
        stopped = self.store.get(record.id)
        state = status.state if status.state != "running" else "stopped"
        summary = self.summary(replace(stopped, status=state, exit_code=status.exit_code))
        self.store.update(
            record.id,
            status=state,
            exit_code=status.exit_code,
            ended_at=status.ended_at or time.time(),
            summary=summary,
            only_if_active=True,
        )
        return self.store.get(record.id)

    def rerun(
        self,
        parent: RunRecord,
        sets: Sequence[str] = (),
        envs: Sequence[str] = (),
        unset: Sequence[str] = (),
        name: str | None = None,
        nproc: int | None = None,
        cores: str | None = None,
        tb_dir: str | None = None,
    ) -> RunRecord:
        """A new run from the parent's spec with some flags changed; the diff is kept with it. The cores the
        user chose for the parent are asked for again (unless `cores` says otherwise); a range the console
        picked is picked afresh. The parent's TensorBoard directory is kept unless `tb_dir` names another."""
        spec = parent.spec
        base_sets = [f"{k}={flag_text(v)}" for k, v in spec.flags.items() if k not in set(unset)]
        env = dict(spec.env)
        env.update(parse_env(envs))
        child = self.build_spec(
            spec.runner,
            [*base_sets, *sets],
            [f"{k}={v}" for k, v in env.items()],
            backend=spec.backend,
            nproc=nproc or spec.nproc,
            nnodes=spec.nnodes,
            node_rank=spec.node_rank,
            rdzv_endpoint=spec.rdzv_endpoint,
            name=name or spec.name,
            python=spec.python,
            metrics=spec.metrics,
            extra_args=spec.extra_args,
            backend_options=spec.backend_options,
            cwd=spec.cwd,
            cores=cores or (spec.cores if CORES_ENV not in env else None),
            tb_dir=tb_dir or spec.tb_dir,
        )
        return self.launch(child, parent=parent)

    # ---- what a run reported ----

    def watcher(self, record: RunRecord) -> RunWatcher:
        regexes = [MetricRegex.from_spec(m) for m in record.spec.metrics]
        # A remote job's metrics.jsonl stays with the job; its mirrored log carries the same figures.
        from_jsonl = record.spec.bundled and not self.backend(record.backend).remote
        return RunWatcher(record.run_dir, metrics_from_jsonl=from_jsonl, metric_regexes=regexes)

    def _read_with_trainer_steps(
        self, record: RunRecord, watcher: RunWatcher
    ) -> tuple[RunWatcher, TrainerState | None]:
        """A Hugging Face Trainer's log dicts printed with no bar carry no step: read the log again with the
        steps per epoch that its trainer_state.json (the newest under its --output_dir since the run began)
        or its closing dict gives, so each figure sits at its own step; also the state, when found."""
        if watcher.metrics.step_source not in ("count", "epoch"):
            return watcher, None
        state = newest_trainer_state(script_dirs(record.spec), since=record.created_at)
        per_epoch = state.steps_per_epoch if state is not None else None
        if per_epoch is None:
            per_epoch = steps_per_epoch_from_summary(watcher.metrics.reported_summary)
        if per_epoch is None or watcher.metrics.step_source == "epoch":
            return watcher, state
        again = self.watcher(record)
        again.metrics.steps_per_epoch = per_epoch
        again.drain()
        return again, state

    def quick_summary(self, record: RunRecord, window_bytes: int = 256 << 10) -> dict[str, Any]:
        """Figures for a listing: a finished run's stored summary, else those of its recent output only."""
        if record.finished and record.summary:
            return record.summary
        watcher = self.watcher(record)
        watcher.start_near_end(window_bytes)
        watcher.drain()
        summary = watcher.metrics.summary()
        speed = watcher.metrics.series.get("samples_per_s")
        summary["last_samples_per_s"] = speed.last if speed is not None else None
        summary["avg_samples_per_s"] = None  # a window's mean is not the run's
        if summary.get("total_steps") is None:
            steps = record.spec.flags.get("steps")
            summary["total_steps"] = int(steps) if isinstance(steps, str) and steps.isdigit() else None
        return summary

    def summary(self, record: RunRecord, watcher: RunWatcher | None = None) -> dict[str, Any]:
        """The run's figures: the runner's own result.json where it wrote one, else what its output says."""
        if watcher is None:
            watcher = self.watcher(record)
            watcher.drain()
        watcher, trainer_state = self._read_with_trainer_steps(record, watcher)
        summary = watcher.metrics.summary()
        if trainer_state is not None and trainer_state.global_step >= (summary["step"] or 0):
            summary["step"] = trainer_state.global_step
            summary["total_steps"] = trainer_state.max_steps or summary["total_steps"]
            summary["step_source"] = "trainer_state"
        loss = watcher.metrics.series.get("loss")
        summary["step_events"] = loss.count if loss is not None else 0
        summary["series"] = series_stats(watcher.metrics.series)
        summary["alerts"] = [
            {"kind": a.kind, "severity": a.severity, "step": a.step, "message": a.message}
            for a in watcher.alerts.raised
        ]
        result = read_result(record.run_dir)
        if result:
            summary.update({k: result[k] for k in RESULT_FIELDS if result.get(k) is not None})
            evals = {k[5:]: v for k, v in result.items() if k.startswith("eval_") and v is not None}
            if evals:
                summary["eval"] = evals
        evals = summary.get("eval") or {}
        metric = headline_eval_metric(summary.get("eval_metric"), evals)
        summary["eval_metric"] = metric
        summary["eval_value"] = evals.get(metric) if metric else None
        if summary.get("wall_time_s") is None:
            summary["wall_time_s"] = record.elapsed()
        summary["status"] = record.status
        summary["exit_code"] = record.exit_code
        if record.detail:
            summary["remote"] = record.detail
        cost = self.cost(
            record, summary.get("step"), summary.get("total_steps"), summary.get("avg_samples_per_s")
        )
        summary.update(
            instance_type=cost.instance_type,
            instances=cost.instances,
            usd_per_hour=cost.usd_per_hour,
            price_source=cost.price_source,
            billed_seconds=cost.billed_seconds,
            cost_usd=cost.so_far,
            usd_per_1k_samples=cost.per_1k_samples,
            spot_savings=cost.spot_savings,
        )
        return summary


def requested_cores(cores: str | None, env: dict[str, str], nproc: int, backend: str) -> str | None:
    """The NeuronCores the user asked for (`--cores` or `--env NEURON_RT_VISIBLE_CORES`), normalized; the
    checks that need no host (syntax, one core per process, one answer) are made here, the rest at launch."""
    env_text = env.get(CORES_ENV)
    if backend != "local":
        if cores is not None:
            raise UsageError(
                f"--cores {cores}: NeuronCores are shared out between local runs only; for --backend "
                f"{backend} leave it out (each job has its instances to itself)"
            )
        return None
    found = parse_cores(cores, "--cores") if cores is not None else None
    from_env = parse_cores(env_text, f"--env {CORES_ENV}") if env_text is not None else None
    if found is not None and from_env is not None and found != from_env:
        raise UsageError(
            f"--cores {cores} and --env {CORES_ENV}={env_text} disagree; give the cores once, with --cores"
        )
    chosen, field = (found, "--cores") if found is not None else (from_env, f"--env {CORES_ENV}")
    if chosen is None:
        return None
    check_core_count(chosen, field, nproc)
    return format_cores(chosen)


def cores_request(spec: RunSpec) -> tuple[str, str | None]:
    """(where the user's cores came from, their text): --env, then --cores, then this environment's own
    NEURON_RT_VISIBLE_CORES (which a local job would inherit); (field, None) when none was given."""
    if CORES_ENV in spec.env:
        return f"--env {CORES_ENV}", spec.env[CORES_ENV]
    if spec.cores is not None:
        return "--cores", spec.cores
    inherited = os.environ.get(CORES_ENV)
    if inherited:
        return CORES_ENV, inherited  # as exported in the shell that started trnconsole
    return "--cores", None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def series_stats(series: SeriesSet) -> dict[str, dict[str, float | None]]:
    """Whole-run figures of every metric series: count, last, min, max, mean."""
    stats = {}
    for name in series.names():
        s = series[name]
        stats[name] = {"count": s.count, "last": s.last, "min": s.min, "max": s.max, "mean": s.mean}
    return stats


def read_result(run_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((run_dir / RESULT_FILE).read_text())
    except (OSError, ValueError):
        return None
