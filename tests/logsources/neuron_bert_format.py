"""Console lines of AWS's data-parallel BERT pretraining sample, printed with synthetic values.

The sample (`aws-neuron/aws-neuron-samples`, `torch-neuronx/training/dp_bert_hf_pretrain/
dp_bert_large_hf_pretrain_hdf5.py` at commit 2015d650cd89e4c671ae5bd1b5f1d4499d94d4dd) needs Trainium to run.
Its per-step `LOG ...` line is on record in AWS's documentation, but its end-of-shard
`Epoch N step S file index F end ... loss L perf P seq/sec ...` line was found in no public recording, so
this script prints both through the sample's own format strings (copied verbatim below) with made-up,
plausible numbers, in the order the sample prints them: FORMAT FROM SOURCE, VALUES SYNTHETIC. `--truth`
receives the values given to the format strings.
"""

from __future__ import annotations

import argparse
import calendar
import json
import random
import time
from pathlib import Path

SAMPLE = "aws-neuron/aws-neuron-samples"
SAMPLE_PATH = "torch-neuronx/training/dp_bert_hf_pretrain/dp_bert_large_hf_pretrain_hdf5.py"
SAMPLE_COMMIT = "2015d650cd89e4c671ae5bd1b5f1d4499d94d4dd"

# Line 556: xm.master_print(...), rank 0 only.
SHARD_BEGIN = "Epoch {} file index {} begin {}"
# Line 564.
SHARD_END = (
    "Epoch {} step {} file index {} end {} loss {} perf {} seq/sec "
    "(at train microstep {} time {} from beginning time {})"
)


def log_line(time_now: str, epoch: int, step: int, step_loss: float, lr: float, tput: float, gn) -> str:
    """Lines 151-155 (`Logger.log`): the f-strings as the sample writes them, trailing space included."""
    grad_norm_msg = f"grad-norm : {gn}" if gn else ""
    return (
        f"LOG {time_now} - ({epoch}, {step}) step_loss : {step_loss:.4f} "
        f"learning_rate : {lr:.2e} throughput : {tput:.2f} "
        f"{grad_norm_msg}"
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--steps-per-shard", type=int, default=12)
    parser.add_argument("--world-size", type=int, default=32, help="ranks of the imagined trn1.32xlarge run")
    parser.add_argument("--print-grad-norm", action="store_true", help="as the sample's --print_grad_norm")
    parser.add_argument("--truth", type=Path, default=None, help="write the values used here")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    rng = random.Random(12349)  # the sample's default --seed
    # A fixed clock, so the output does not depend on when it is made.
    clock = float(calendar.timegm((2022, 9, 29, 22, 30, 4, 0, 0, 0)))
    train_start = clock
    batch, grad_accum, lr_peak, warmup = 16, 32, 4e-4, 2000
    global_step = ustep = 0
    loss = 11.2
    throughputs: list[float] = []
    steps, shards = [], []
    for f in range(1, args.shards + 1):
        print(SHARD_BEGIN.format(0, f, time.asctime(time.gmtime(clock))), flush=True)
        for _ in range(args.steps_per_shard):
            global_step += 1
            ustep += grad_accum
            clock += 5.7 + rng.random() * 0.2
            loss = max(1.4, loss - 0.03 + rng.gauss(0, 0.15))
            # bf16 all-reduced losses land on a coarse grid (0.0625 near 10), as in AWS's recorded runs.
            step_loss = round(loss * 16) / 16
            lr = lr_peak * global_step / warmup
            throughput = batch * grad_accum * args.world_size / 5.8 * (1 + rng.gauss(0, 0.002))
            throughputs.append(throughput)
            grad_norm = round(abs(rng.gauss(2.5, 0.6)), 4) if args.print_grad_norm else None
            print(
                log_line(
                    time.asctime(time.gmtime(clock)), 0, global_step, step_loss, lr, throughput, grad_norm
                ),
                flush=True,
            )
            record = {"step": global_step, "epoch": 0, "loss": step_loss, "learning_rate": lr}
            record["throughput"] = throughput
            if grad_norm is not None:
                record["grad_norm"] = grad_norm
            steps.append(record)
        clock += 1.0
        end = {"epoch": 0, "step": global_step, "file_index": f, "loss": step_loss, "perf": throughputs[-1]}
        end.update(microstep=ustep, time=clock, beginning_time=train_start)
        print(
            SHARD_END.format(
                0,
                global_step,
                f,
                time.asctime(time.gmtime(clock)),
                step_loss,
                throughputs[-1],
                ustep,
                clock,
                train_start,
            ),
            flush=True,
        )
        shards.append(end)

    if args.truth:
        truth = {
            "library": "aws-neuron-samples dp_bert_large_hf_pretrain_hdf5.py (format only)",
            "version": SAMPLE_COMMIT,
            "source": f"synthetic values given to the print statements of {SAMPLE}:{SAMPLE_PATH}",
            "total_steps": global_step,
            "final_step": global_step,
            "steps": steps,
            "shard_ends": shards,
        }
        args.truth.parent.mkdir(parents=True, exist_ok=True)
        args.truth.write_text(json.dumps(truth, indent=1) + "\n")


if __name__ == "__main__":
    main()
