"""The training loop every bundled runner shares: XLA habits, evaluation, checkpoints and metrics.

XLA habits (from the Neuron training samples): the data goes through MpDeviceLoader, which cuts one
graph per batch; metrics are read in step closures, so logging never forces an extra device sync;
every shape is static, so no graph is compiled after the first few steps.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from typing import Any

from . import checkpoint, device
from .config import UsageError, flags_as_json, resolve_steps, validate
from .data import num_samples
from .ranks import world_size_from_env
from .task import PreparedData, Task

WARMUP_TRAIN_STEPS = 3  # step 1 creates gradients and optimizer state, step 2 runs the steady graph


def main(task: Task, parser: argparse.ArgumentParser, argv: list[str] | None = None) -> int:
    args = parser.parse_args(argv)
    if args.flags_json:
        print(flags_as_json(parser))
        return 0
    try:
        validate(args)
        data = task.prepare_data(args)
        check_data_sizes(args, data)
        runtime = device.setup(args)
        try:
            return Trainer(task, args, data, runtime).run()
        finally:
            device.shutdown(runtime)
    except UsageError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2


def check_data_sizes(args: argparse.Namespace, data: PreparedData) -> None:
    world = world_size_from_env()
    n = num_samples(data.train)
    if n // world < args.batch_size:
        raise UsageError(
            f"the training set has {n} samples, fewer than one batch "
            f"({args.batch_size} per process x {world} processes); add data or lower --batch-size"
        )


class CompileTracker:
    """Counts XLA graph compilations (torch_xla's CompileTime metric) and reports each new one."""

    def __init__(self, runtime: device.Runtime, outputs: Any) -> None:
        self.enabled = runtime.is_xla
        self.outputs = outputs
        self.after_warmup = 0
        self.count, self.seconds = self._read()

    def _read(self) -> tuple[int, float]:
        if not self.enabled:
            return 0, 0.0
        import torch_xla.debug.metrics as met

        data = met.metric_data("CompileTime")
        return (int(data[0]), data[1] / 1e9) if data else (0, 0.0)

    def observe(self, phase: str, step: int, warm: bool) -> None:
        count, seconds = self._read()
        if count == self.count:
            return
        new = count - self.count
        self.count, self.seconds = count, seconds
        if warm:
            self.after_warmup += new
        self.outputs.event(
            "compile", step, phase=phase, count=count, seconds=round(seconds, 3), new=new, after_warmup=warm
        )


class Trainer:
    def __init__(
        self, task: Task, args: argparse.Namespace, data: PreparedData, runtime: device.Runtime
    ) -> None:
        self.task = task
        self.args = args
        self.data = data
        self.rt = runtime
        self.output_dir = Path(args.output_dir)
        self.stop_requested = False
        self.windows: list[tuple[float, float, int]] = []  # (seconds, samples, steps) between log lines
        self.last_report: tuple[float, int] | None = None
        self.last_loss: float | None = None
        self.last_eval: dict[str, float] = {}
        self.evals_done = 0
        self.saves_done = 0

    # ---- set-up ----

    def run(self) -> int:
        from .outputs import RunOutputs

        rt = self.rt
        self.started = time.time()
        resume_path = self._resume_path()
        state = checkpoint.load(resume_path) if resume_path else None
        self.outputs = RunOutputs(
            self.output_dir, rt.is_main, purge_step=state["step"] + 1 if state else None
        )
        # Put back when the run ends: a handler bound to this trainer would keep its model (and through
        # DDP, the process group) alive until interpreter exit, where gloo's teardown can abort the process.
        previous_handler = signal.signal(signal.SIGTERM, self._on_sigterm)
        status, exit_code = "failed", 1
        try:
            self._build(state)
            self.tracker = CompileTracker(rt, self.outputs)
            self._announce(resume_path)
            status = self._train()
            exit_code = 0 if status == "completed" else 128 + signal.SIGTERM
        except KeyboardInterrupt:
            status, exit_code = "stopped", 130
        except UsageError:
            self.outputs.close()  # a mistake found while building: the earlier run's result.json stays
            raise
        except BaseException as exc:
            self.outputs.event(
                "status", getattr(self, "step", 0), state="failed", error=f"{type(exc).__name__}: {exc}"
            )
            self.outputs.write_result(self._result("failed", error=f"{type(exc).__name__}: {exc}"))
            self.outputs.close()
            raise
        finally:
            signal.signal(signal.SIGTERM, previous_handler)
        self._finish(status)
        return exit_code

    def _resume_path(self) -> Path | None:
        if not self.args.resume:
            return None
        if self.args.resume == "auto":
            return checkpoint.newest(self.output_dir)  # nothing saved yet: start from scratch
        return Path(self.args.resume)

    def _build(self, state: dict[str, Any] | None) -> None:
        import torch
        from torch.utils.data import DataLoader

        from .sampler import ShardedEpochSampler
        from .schedule import lr_factor

        args, rt = self.args, self.rt
        torch.manual_seed(args.seed)
        model = self.task.build_model(args, self.data)
        if state is not None:
            if state.get("runner") != self.task.name:
                raise UsageError(
                    f"--resume: the checkpoint is from the {state.get('runner')} runner, not {self.task.name}"
                )
            model.load_state_dict(state["model"])
        if args.precision == "bf16":
            model.to(torch.bfloat16)
        model.to(rt.device)
        self.task.after_move(model)
        self.model = model
        self.optimizer = torch.optim.AdamW(_param_groups(model, args.weight_decay), lr=args.lr)

        self.sampler = ShardedEpochSampler(num_samples(self.data.train), rt.rank, rt.world_size, args.seed)
        loader = DataLoader(
            _ArrayDataset(self.data.train),
            batch_size=args.batch_size,
            sampler=self.sampler,
            drop_last=True,
            num_workers=args.num_workers,
        )
        self.batches_per_epoch = self.sampler.shard_size // args.batch_size
        self.total_steps, self.steps_per_epoch = resolve_steps(args, self.batches_per_epoch)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_factor(args.lr_schedule, args.warmup_steps, self.total_steps)
        )
        self.step = 0
        if state is not None:
            self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])
            torch.set_rng_state(state["torch_rng"])
            self.step = int(state["step"])
            if self.step >= self.total_steps:
                raise UsageError(
                    f"--resume: the checkpoint is at step {self.step}, already at the {self.total_steps} "
                    "steps asked for; raise --steps (or --epochs) to train further"
                )
        self.start_step = self.step
        self.train_model = model
        if rt.distributed and not rt.is_xla:
            from torch.nn.parallel import DistributedDataParallel

            self.train_model = DistributedDataParallel(
                model, device_ids=[rt.local_rank] if rt.kind == "cuda" else None
            )
        self.loader = self._device_loader(loader)
        self.eval_loader = self._eval_loader()
        self.global_batch = args.batch_size * args.grad_accum * rt.world_size
        self.flops_per_sample = self.task.flops_per_sample(model, args)
        low_precision = args.precision != "fp32" or args.neuron_auto_cast != "none"
        self.peak_per_device, self.peak_source = device.peak_flops_per_device(rt, low_precision)
        self.params = sum(p.numel() for p in model.parameters())

    def _device_loader(self, loader: Any) -> Any:
        if not self.rt.is_xla:
            return loader
        import torch_xla.distributed.parallel_loader as pl

        return pl.MpDeviceLoader(
            loader,
            self.rt.device,
            batches_per_execution=self.args.batches_per_execution,
            device_prefetch_size=self.args.device_prefetch_size,
        )

    def _eval_loader(self) -> Any:
        from torch.utils.data import DataLoader

        from .data import take
        from .sampler import ShardedEpochSampler

        eval_data, args, rt = self.data.eval, self.args, self.rt
        if eval_data is None:
            return None
        per_rank_batches = num_samples(eval_data) // rt.world_size // args.batch_size
        if args.eval_batches:
            per_rank_batches = min(per_rank_batches, args.eval_batches)
        if per_rank_batches == 0:
            if rt.is_main:
                print(
                    f"warning: the evaluation set has fewer than {args.batch_size * rt.world_size} samples "
                    "(one batch per process); evaluation is off",
                    file=sys.stderr,
                )
            return None
        import numpy as np

        subset = take(eval_data, np.arange(per_rank_batches * args.batch_size * rt.world_size))
        sampler = ShardedEpochSampler(num_samples(subset), rt.rank, rt.world_size, args.seed, shuffle=False)
        loader = DataLoader(
            _ArrayDataset(subset), batch_size=args.batch_size, sampler=sampler, drop_last=True
        )
        return self._device_loader(loader)

    def _announce(self, resume_path: Path | None) -> None:
        if not self.rt.is_main:
            return
        args, rt = self.args, self.rt
        info = dict(
            runner=self.task.name,
            device=rt.kind,
            platform=rt.platform,
            world_size=rt.world_size,
            precision=args.precision,
            model_size=args.model_size,
            model_path=args.model_path,
            params=self.params,
            global_batch=self.global_batch,
            total_steps=self.total_steps,
            steps_per_epoch=self.steps_per_epoch,
            flops_per_sample=self.flops_per_sample,
            peak_flops_per_device=self.peak_per_device,
            peak_flops_source=self.peak_source,
            tokens_per_sample=self.task.tokens_per_sample(args),
            resumed_from=str(resume_path) if resume_path else None,
            eval_metric=self.task.eval_metric,
        )
        self.outputs.event("status", self.step, state="started", **info)
        resumed = f", resuming at step {self.step} from {resume_path}" if resume_path else ""
        print(
            f"{self.task.name}: {rt.kind} ({rt.platform}) x{rt.world_size}, {args.precision}, "
            f"{self.params / 1e6:.2f}M parameters, global batch {self.global_batch}, "
            f"{self.total_steps} steps{resumed}",
            flush=True,
        )

    # ---- the loop ----

    def _train(self) -> str:
        args, rt = self.args, self.rt
        self.loop_started = time.perf_counter()
        autocast = device.autocast(rt, args.precision)
        self.train_model.train()
        loss_sum = None
        while self.step < self.total_steps and not self.stop_requested:
            epoch = self.step // self.steps_per_epoch
            done_in_epoch = (self.step - epoch * self.steps_per_epoch) * args.grad_accum * args.batch_size
            self.sampler.set_epoch(epoch, skip_samples=done_in_epoch)
            micro = 0
            for batch in self.loader:
                self.tracker.observe(
                    "train", self.step, warm=self.step - self.start_step >= WARMUP_TRAIN_STEPS
                )
                batch = self._to_device(batch)
                micro += 1
                boundary = micro % args.grad_accum == 0
                with self._no_sync(boundary), autocast:
                    loss = self.task.loss(self.train_model, batch)
                (loss / args.grad_accum).backward()
                loss_sum = (
                    loss.detach()
                    if micro % args.grad_accum == 1 or args.grad_accum == 1
                    else loss_sum + loss.detach()
                )
                if not boundary:
                    continue
                grad_norm = self._optimizer_step()
                self.step += 1
                if self.step % args.log_every == 0 or self.step == self.total_steps:
                    self._report(epoch, loss_sum, grad_norm)
                rt.end_step()
                if args.eval_every and self.step % args.eval_every == 0:
                    self._evaluate()
                if args.save_every and self.step % args.save_every == 0:
                    self._save()
                if self.step >= self.total_steps or self.stop_requested:
                    break
        rt.sync()  # runs the last step's closures
        self.tracker.observe("train", self.step, warm=self.step - self.start_step > WARMUP_TRAIN_STEPS)
        return "stopped" if self.stop_requested and self.step < self.total_steps else "completed"

    def _to_device(self, batch: dict[str, Any]) -> dict[str, Any]:
        if self.rt.is_xla:
            return batch  # MpDeviceLoader already put it there
        return {k: v.to(self.rt.device, non_blocking=True) for k, v in batch.items()}

    def _no_sync(self, boundary: bool):
        import contextlib

        if boundary or not hasattr(self.train_model, "no_sync"):
            return contextlib.nullcontext()
        return self.train_model.no_sync()

    def _optimizer_step(self) -> Any:
        import torch

        clip = self.args.max_grad_norm
        grad_norm = None
        if self.rt.is_xla:
            import torch_xla.core.xla_model as xm

            if clip > 0:
                xm.reduce_gradients(self.optimizer)  # all-reduce first, so every rank clips the same norm
                grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
                self.optimizer.step()
            else:
                xm.optimizer_step(self.optimizer)
        else:
            if clip > 0:
                grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
            self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return grad_norm

    # ---- metrics ----

    def _report(self, epoch: int, loss: Any, grad_norm: Any) -> None:
        lr = self.scheduler.get_last_lr()[0]
        if self.rt.is_xla:
            import torch_xla.core.xla_model as xm

            xm.add_step_closure(self._report_now, args=(self.step, epoch, loss, grad_norm, lr))
        else:
            self._report_now(self.step, epoch, loss, grad_norm, lr)

    def _report_now(self, step: int, epoch: int, loss: Any, grad_norm: Any, lr: float) -> None:
        now = time.perf_counter()
        # Dividing on the host: a device-side division only on log steps would be a second graph.
        loss_value = float(loss) / self.args.grad_accum
        grad_value = float(grad_norm) if grad_norm is not None else None
        self.last_loss = loss_value
        if self.last_report is None:
            self.last_report = (self.loop_started, self.start_step)
        then, then_step = self.last_report
        steps = step - then_step
        seconds = max(now - then, 1e-9)
        self.last_report = (now, step)
        samples = steps * self.global_batch
        self.windows.append((seconds, samples, steps))
        sps = samples / seconds
        tokens = self.task.tokens_per_sample(self.args)
        fields = {
            "loss": loss_value,
            "lr": lr,
            "samples_per_s": sps,
            "step_time_s": seconds / steps,
            "tokens_per_s": sps * tokens if tokens else None,
            "mfu": self._mfu(sps),
            "grad_norm": grad_value,
        }
        if self.rt.is_main:
            self.outputs.event("step", step, epoch=epoch, **fields)
            self.outputs.log_line(epoch, step, fields)
            self.outputs.scalars(step, "train", fields)

    def _mfu(self, samples_per_s: float) -> float | None:
        if not self.peak_per_device:
            return None
        return self.flops_per_sample * samples_per_s / (self.peak_per_device * self.rt.world_size)

    def _evaluate(self) -> None:
        import torch

        if self.eval_loader is None:
            return
        rt = self.rt
        rt.sync()
        self.tracker.observe("train", self.step, warm=self.step - self.start_step > WARMUP_TRAIN_STEPS)
        self.train_model.eval()
        sums = None
        with torch.no_grad(), device.autocast(rt, self.args.precision):
            for batch in self.eval_loader:
                batch_sums = self.task.eval_sums(self.model, self._to_device(batch))
                sums = batch_sums if sums is None else sums + batch_sums
        sums = self._all_reduce(sums)
        values = sums.double().cpu().tolist()
        self.tracker.observe("eval", self.step, warm=self.evals_done > 0)
        self.evals_done += 1
        self.train_model.train()
        metrics = self.task.eval_metrics(values)
        self.last_eval = metrics
        if rt.is_main:
            epoch = self.step // self.steps_per_epoch
            self.outputs.event("eval", self.step, epoch=epoch, **metrics)
            self.outputs.log_line(epoch, self.step, {f"eval_{k}": v for k, v in metrics.items()})
            self.outputs.scalars(self.step, "eval", metrics)
        self._reset_window()

    def _all_reduce(self, sums: Any) -> Any:
        if not self.rt.distributed:
            return sums
        if self.rt.is_xla:
            import torch_xla.core.xla_model as xm

            return xm.all_reduce(xm.REDUCE_SUM, sums)
        import torch.distributed as dist

        dist.all_reduce(sums)
        return sums

    def _save(self) -> None:
        import torch

        self.rt.sync()
        self.tracker.observe("train", self.step, warm=self.step - self.start_step > WARMUP_TRAIN_STEPS)
        state = {
            "format": checkpoint.FORMAT_VERSION,
            "runner": self.task.name,
            "step": self.step,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "args": {
                k: v for k, v in vars(self.args).items() if isinstance(v, (str, int, float, bool, type(None)))
            },
        }
        path = checkpoint.path_for(self.output_dir, self.step)
        checkpoint.save(self.rt, path, state, self.args.keep_checkpoints)
        self.tracker.observe("save", self.step, warm=self.saves_done > 0)
        self.saves_done += 1
        self.outputs.event("checkpoint", self.step, path=str(path))
        self._reset_window()

    def _reset_window(self) -> None:
        """Evaluation and saving are not training time: start the next throughput window afresh."""
        if self.last_report is not None:
            self.last_report = (time.perf_counter(), self.last_report[1])
        else:
            self.loop_started = time.perf_counter()

    # ---- the end ----

    def _finish(self, status: str) -> None:
        if (
            self.eval_loader is not None
            and status == "completed"
            and (not self.args.eval_every or self.step % self.args.eval_every)
        ):
            self._evaluate()
        checksums = self._param_checksums()
        result = self._result(
            status, param_checksums=checksums, ranks_in_sync=all(c == checksums[0] for c in checksums)
        )
        self.outputs.event("status", self.step, state=status, wall_time_s=result["wall_time_s"])
        self.outputs.write_result(result)
        self.outputs.close()
        if self.rt.distributed and not self.rt.is_xla:
            import torch.distributed as dist

            # No rank tears its process group down while another still talks to it: a gloo peer gone
            # mid-exchange can abort the one still at it.
            dist.barrier()

    def _param_checksums(self) -> list[list[float]]:
        """Per rank (sum, sum of squares) of all parameters: equal on every rank when data parallel holds."""
        import torch

        total = torch.zeros(2, dtype=torch.float64)
        for p in self.model.parameters():
            values = p.detach().cpu().double()
            total += torch.stack([values.sum(), (values * values).sum()])
        mine = total.tolist()
        if not self.rt.distributed:
            return [mine]
        if self.rt.is_xla:
            import torch_xla.core.xla_model as xm

            return xm.mesh_reduce("trn_harness_param_checksum", mine, list)
        import torch.distributed as dist

        gathered: list[Any] = [None] * self.rt.world_size
        dist.all_gather_object(gathered, mine)
        return gathered

    def _result(self, status: str, **extra: Any) -> dict[str, Any]:
        steady = self.windows[1:] or self.windows
        seconds = sum(w[0] for w in steady)
        samples = sum(w[1] for w in steady)
        avg = samples / seconds if seconds else None
        peak = max((w[1] / w[0] for w in steady), default=None)
        tokens = self.task.tokens_per_sample(self.args)
        tracker = getattr(self, "tracker", None)
        result = {
            "status": status,
            "runner": self.task.name,
            "step": getattr(self, "step", 0),
            "total_steps": getattr(self, "total_steps", None),
            "final_loss": self.last_loss,
            **{f"eval_{k}": v for k, v in self.last_eval.items()},
            "avg_samples_per_s": avg,
            "peak_samples_per_s": peak,
            "avg_tokens_per_s": avg * tokens if avg and tokens else None,
            "avg_step_time_s": seconds / sum(w[2] for w in steady) if steady else None,
            "mfu": self._mfu(avg) if avg and hasattr(self, "peak_per_device") else None,
            "compile_count": tracker.count if tracker else 0,
            "compile_seconds": round(tracker.seconds, 3) if tracker else 0.0,
            "compiles_after_warmup": tracker.after_warmup if tracker else 0,
            "wall_time_s": round(time.time() - self.started, 3),
            "device": self.rt.kind,
            "platform": self.rt.platform,
            "world_size": self.rt.world_size,
            "precision": self.args.precision,
            "global_batch": getattr(self, "global_batch", None),
        }
        result.update(extra)
        return result

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self.stop_requested = True


class _ArrayDataset:
    """Index rows of the prepared numpy arrays as a dict of tensors."""

    def __init__(self, arrays: dict[str, Any]) -> None:
        import torch

        self.tensors = {name: torch.from_numpy(values) for name, values in arrays.items()}
        self.size = num_samples(arrays)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {name: values[index] for name, values in self.tensors.items()}


def _param_groups(model: Any, weight_decay: float) -> list[dict[str, Any]]:
    """No weight decay on biases and norm weights, as the Hugging Face and Neuron samples do."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim < 2 or "norm" in name.lower() else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
