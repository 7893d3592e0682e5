"""Regenerate the recordings in this directory by running the scripts in tests/logsources.

Each recording runs one command in a clean environment (PATH, HOME, LANG=C.UTF-8 and what its command line
shows), from the repository root, and keeps the bytes the process wrote: through one pipe (stdout and stderr
merged, as the console's local backend captures a job), through two pipes (`split`), or under a
pseudo-terminal of 100x30 (`pty`, as a terminal user sees it). The file name starts with the distribution
and version that printed it, read from the interpreter that ran it. Timings and the exact commands go to
`manifest.json` and to the table in README.md.

    PY311=/path/to/py3.11-env/bin/python PY310=/path/to/py3.10-env/bin/python \\
        python3 tests/data/logs/record.py [--only SUBSTRING ...] [--list]

(`scripts/env.sh` prints the pinned environment for `PYTHON=python3.11` / `python3.10`.)
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pty
import resource
import shlex
import shutil
import struct
import subprocess
import sys
import termios
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
OUT = HERE.relative_to(REPO)
SCRATCH = Path("/tmp/trnconsole-logsources")
COLUMNS, LINES = 100, 30
TIMEOUT_S = 600
TORCHRUN2 = ("-m", "torch.distributed.run", "--nproc_per_node", "2")
TABLE_START = "<!-- recordings table: written by record.py -->"
TABLE_END = "<!-- end of recordings table -->"


@dataclass(frozen=True)
class Recording:
    dist: str  # the distribution whose version names the file: the library that printed the figures
    slug: str
    python: str  # "3.11" or "3.10"
    argv: tuple[str, ...]  # after the interpreter; {out} is tests/data/logs/<name>, {work} a scratch dir
    capture: str = "pipe"  # pipe | split | pty
    env: dict[str, str] = field(default_factory=dict)
    truth: str = ""  # what <name>.truth.json is filled from; "" when the run leaves none
    extra: tuple[str, ...] = ()  # other files or directories the run leaves next to the recording
    fails: bool = False  # the recorded run is meant to fail


def hf(slug: str, python: str, *flags: str, capture: str = "pipe", torchrun: bool = False, **kw) -> Recording:
    """The Trainer script; it leaves the Trainer's own trainer_state.json beside the recording."""
    argv = (
        "tests/logsources/hf_trainer.py",
        "--truth",
        "{out}.truth.json",
        "--state-json",
        "{out}.trainer_state.json",
    )
    fails = kw.pop("fails", False)
    files = () if fails else (".trainer_state.json",)
    return Recording(
        "transformers",
        slug,
        python,
        (*(TORCHRUN2 if torchrun else ()), *argv, *flags),
        capture,
        truth="" if fails else "trainer_state.json log_history",
        extra=files + kw.pop("extra", ()),
        fails=fails,
        **kw,
    )


def acc(slug: str, *launcher: str, capture: str = "pipe") -> Recording:
    argv = (*launcher, "tests/logsources/accelerate_loop.py", "--truth", "{out}.truth.json")
    return Recording(
        "accelerate", slug, "3.11", argv, capture, truth="accelerator.log calls (a GeneralTracker)"
    )


def pl(slug: str, *flags: str, capture: str = "pipe", torchrun: bool = False) -> Recording:
    argv = (
        "tests/logsources/lightning_fit.py",
        "--truth",
        "{out}.truth.json",
        "--metrics-csv",
        "{out}.metrics.csv",
        "--work-dir",
        "{work}",
        *flags,
    )
    return Recording(
        "pytorch-lightning",
        slug,
        "3.11",
        (*(TORCHRUN2 if torchrun else ()), *argv),
        capture,
        truth="metrics.csv from CSVLogger",
        extra=(".metrics.csv",),
    )


def bar(slug: str, *flags: str, capture: str = "pipe") -> Recording:
    argv = ("tests/logsources/tqdm_loop.py", *flags, "--truth", "{out}.truth.json")
    return Recording(
        "tqdm", slug, "3.11", argv, capture, truth="values passed to set_postfix (kept by the script)"
    )


def ddp(slug: str, *torchrun_flags: str, **kw) -> Recording:
    argv = (*TORCHRUN2, *torchrun_flags, "tests/logsources/torch_ddp.py", "--truth", "{out}.truth.json")
    return Recording(
        "torch", slug, "3.11", argv, truth="values the script printed (kept by the script)", **kw
    )


NESTED = ("--mode", "nested", "--epochs", "3", "--steps", "15")
LOGDIR = ("--log-dir", "{out}.logdir")

RECORDINGS: tuple[Recording, ...] = (
    # Hugging Face Trainer, transformers 5 (Python 3.11) and 4.57 (Python 3.10, as the Neuron DLAMI ships it).
    hf("trainer_tqdm", "3.11"),
    hf("trainer_tqdm_pty", "3.11", capture="pty"),
    hf("trainer_tqdm_split", "3.11", capture="split"),
    hf("trainer_notqdm", "3.11", "--no-tqdm"),
    hf("trainer_torchrun2", "3.11", torchrun=True),
    hf("trainer_tensorboard", "3.11", "--tensorboard-dir", "{out}.tensorboard", extra=(".tensorboard",)),
    hf("trainer_xla_fused_adamw_fails", "3.11", "--xla", env={"PJRT_DEVICE": "CPU"}, fails=True),
    hf("trainer_xla_adamw_torch", "3.11", "--xla", "--optim", "adamw_torch", env={"PJRT_DEVICE": "CPU"}),
    hf("trainer_tqdm", "3.10"),
    hf("trainer_tqdm_pty", "3.10", capture="pty"),
    hf("trainer_notqdm", "3.10", "--no-tqdm"),
    hf("trainer_torchrun2", "3.10", torchrun=True),
    # Hugging Face accelerate: alone, under torchrun, and under its own launcher.
    acc("loop"),
    acc("loop_pty", capture="pty"),
    acc("loop_torchrun2", *TORCHRUN2),
    acc("loop_launch2", "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"),
    # PyTorch Lightning: its default bar (Rich, since rich is installed) and the TQDM one.
    pl("fit_default_rich"),
    pl("fit_default_rich_pty", capture="pty"),
    pl("fit_tqdm", "--progress-bar", "tqdm"),
    pl("fit_tqdm_pty", "--progress-bar", "tqdm", capture="pty"),
    pl("fit_tqdm_ddp_torchrun2", "--progress-bar", "tqdm", "--devices", "2", torchrun=True),
    # A plain loop with tqdm.
    bar("loop_postfix"),
    bar("loop_postfix_pty", capture="pty"),
    bar("loop_write", "--mode", "write"),
    bar("loop_nested_leave_false", *NESTED),
    bar("loop_nested_leave_false_pty", *NESTED, capture="pty"),
    # torchrun's own handling of its workers' output.
    ddp("torchrun_plain"),
    ddp("torchrun_tee3", "--tee", "3"),
    ddp("torchrun_tee3_filter0", "--tee", "3", "--local-ranks-filter", "0"),
    ddp(
        "torchrun_tee3_prefix_template",
        "--tee",
        "3",
        env={"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[rank${rank}]: "},
    ),
    ddp("torchrun_logdir_redirects3", *LOGDIR, "--redirects", "3", extra=(".logdir",)),
    ddp(
        "torchrun_logdir_tee3_filter0", *LOGDIR, "--tee", "3", "--local-ranks-filter", "0", extra=(".logdir",)
    ),
)

# Not a library run: the print statements of an AWS sample fed synthetic values (see the script).
NEURON_FORMAT = (
    ("aws-neuron-samples-2015d650_dp-bert_format-from-source_values-synthetic", ()),
    (
        "aws-neuron-samples-2015d650_dp-bert_grad-norm_format-from-source_values-synthetic",
        ("--print-grad-norm",),
    ),
)


def interpreters() -> dict[str, str]:
    found = {}
    for version, var in (("3.11", "PY311"), ("3.10", "PY310")):
        if os.environ.get(var):
            found[version] = os.environ[var]
    return found


def dist_version(python: str, dist: str) -> str:
    code = f"import importlib.metadata as m; print(m.version({dist!r}))"
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def clean_env(extra: dict[str, str]) -> dict[str, str]:
    env = {"PATH": os.environ["PATH"], "HOME": os.environ["HOME"], "LANG": "C.UTF-8"}
    env.update(extra)
    return env


def run_pipe(argv: list[str], env: dict[str, str], out: Path) -> int:
    with out.open("wb") as f:
        return subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=f,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO,
            timeout=TIMEOUT_S,
        ).returncode


def run_split(argv: list[str], env: dict[str, str], stdout: Path, stderr: Path) -> int:
    with stdout.open("wb") as out, stderr.open("wb") as err:
        return subprocess.run(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env, cwd=REPO, timeout=TIMEOUT_S
        ).returncode


def run_pty(argv: list[str], env: dict[str, str], out: Path) -> int:
    """stdin, stdout and stderr on one pseudo-terminal; the bytes a terminal receives (\\n as \\r\\n)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", LINES, COLUMNS, 0, 0))
    proc = subprocess.Popen(
        argv, stdin=slave, stdout=slave, stderr=slave, env={**env, "TERM": "xterm-256color"}, cwd=REPO
    )
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: every process holding the terminal has closed it
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    out.write_bytes(b"".join(chunks))
    return proc.wait(timeout=60)


def shown_command(env: dict[str, str], python_var: str, argv: list[str]) -> str:
    assignments = [f"{k}={shlex.quote(v)}" for k, v in env.items()]
    return " ".join([*assignments, f"${python_var}", *(shlex.quote(a) for a in argv)])


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def record(
    name: str, python: str, python_version: str, argv_template: tuple[str, ...], capture: str, extra_env: dict
) -> dict:
    out = OUT / name
    work = SCRATCH / name
    shutil.rmtree(work, ignore_errors=True)
    for stale in HERE.glob(f"{name}.*"):
        shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
    argv = [a.replace("{out}", str(out)).replace("{work}", str(work)) for a in argv_template]
    shown_env = dict(extra_env)
    if capture in ("pipe", "split"):
        shown_env = {"PYTHONUNBUFFERED": "1", **shown_env}
    env = clean_env(shown_env)
    cpu0, t0 = children_cpu(), time.monotonic()
    if capture == "pty":
        rc = run_pty([python, *argv], env, REPO / f"{out}.txt")
    elif capture == "split":
        rc = run_split([python, *argv], env, REPO / f"{out}.stdout.txt", REPO / f"{out}.stderr.txt")
    else:
        rc = run_pipe([python, *argv], env, REPO / f"{out}.txt")
    wall, cpu = time.monotonic() - t0, children_cpu() - cpu0
    shutil.rmtree(work, ignore_errors=True)
    var = "PY311" if python_version == "3.11" else "PY310"
    return {
        "name": name,
        "python": python_version,
        "capture": capture,
        "command": shown_command(shown_env, var, argv),
        "exit_code": rc,
        "wall_seconds": round(wall, 1),
        "cpu_seconds": round(cpu, 1),
    }


def table(manifest: list[dict]) -> str:
    rows = [
        "| recording | library, version | Python | capture | exit | wall / CPU s | ground truth | command |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in manifest:
        files = ", ".join(f"`{m['name']}{suffix}`" for suffix in m["files"])
        truth = f"`.truth.json` from {m['truth']}" if m["truth"] else "none"
        rows.append(
            f"| {files} | {m['library']} {m['version']} | {m['python']} | {m['capture']} | {m['exit_code']} "
            f"| {m['wall_seconds']} / {m['cpu_seconds']} | {truth} | `{m['command']}` |"
        )
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", nargs="*", default=None, help="record only names containing one of these")
    parser.add_argument("--list", action="store_true", help="print the names and commands, run nothing")
    args = parser.parse_args()
    pythons = interpreters()
    if not pythons:
        print("set PY311 and/or PY310 to the pinned environments' interpreters", file=sys.stderr)
        return 2
    manifest_path = HERE / "manifest.json"
    manifest = {m["name"]: m for m in json.loads(manifest_path.read_text())} if manifest_path.exists() else {}
    versions: dict[tuple[str, str], str] = {}
    jobs = []
    for rec in RECORDINGS:
        if rec.python not in pythons:
            continue
        key = (rec.python, rec.dist)
        if key not in versions:
            versions[key] = dist_version(pythons[rec.python], rec.dist)
        name = f"{rec.dist}-{versions[key]}_{rec.slug}"
        files = (".stdout.txt", ".stderr.txt") if rec.capture == "split" else (".txt",)
        files += ((".truth.json",) if rec.truth else ()) + rec.extra
        meta = {"library": rec.dist, "version": versions[key], "truth": rec.truth, "files": list(files)}
        jobs.append((name, rec.python, rec.argv, rec.capture, rec.env, meta, rec.fails))
    if "3.11" in pythons:
        for name, flags in NEURON_FORMAT:
            argv = ("tests/logsources/neuron_bert_format.py", "--truth", "{out}.truth.json", *flags)
            meta = {
                "library": "aws-neuron-samples print statements (format only)",
                "version": "2015d650",
                "truth": "synthetic values given to the sample's format strings",
                "files": [".txt", ".truth.json"],
            }
            jobs.append((name, "3.11", argv, "pipe", {}, meta, False))
    failed = []
    for name, version, argv, capture, env, meta, fails in jobs:
        if args.only is not None and not any(s in name for s in args.only):
            continue
        if args.list:
            print(name, shown_command(env, "PY" + version.replace(".", ""), list(argv)))
            continue
        print(f"recording {name} ...", file=sys.stderr, flush=True)
        entry = {**record(name, pythons[version], version, argv, capture, env), **meta}
        if (entry["exit_code"] != 0) != fails:
            failed.append(name)
        print(f"  exit {entry['exit_code']}, {entry['wall_seconds']} s", file=sys.stderr, flush=True)
        manifest[name] = entry
    if args.list:
        return 0
    ordered = [manifest[n] for n, *_ in jobs if n in manifest]
    manifest_path.write_text(json.dumps(ordered, indent=1) + "\n")
    readme = HERE / "README.md"
    text = readme.read_text()
    start, end = text.index(TABLE_START) + len(TABLE_START), text.index(TABLE_END)
    readme.write_text(text[:start] + "\n" + table(ordered) + "\n" + text[end:])
    if failed:
        print("unexpected exit status: " + ", ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
