"""The wheel ships the runners inside the package (trnconsole/runners), never as a top-level module."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import HAVE_C_COMPILER, REPO

pytestmark = pytest.mark.slow


def source_tree(into: Path) -> Path:
    """The project's files as a fresh clone has them, with no build output (no compiled extension)."""
    files = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, files.split("\0")):
        if (REPO / name).is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, into / name)
    return into


def build_wheel(out: Path, **env: str) -> Path:
    source = source_tree(out / "source")
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(out)]
    proc = subprocess.run(
        [*pip_wheel, str(source)], capture_output=True, text=True, timeout=300, env={**os.environ, **env}
    )
    assert proc.returncode == 0, proc.stderr
    (wheel,) = out.glob("trnconsole-*.whl")
    return wheel


def compiled(names: list[str]) -> list[str]:
    return [n for n in names if n.startswith("trnconsole/core/_") and n.endswith((".so", ".pyd"))]


def test_wheel_ships_runners_under_the_package(tmp_path):
    wheel = build_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    if HAVE_C_COMPILER:
        assert len(compiled(names)) == 2, compiled(names)  # _linescan and _buckets
    for runner in ("bert", "gpt2", "vit"):
        assert f"trnconsole/runners/{runner}.py" in names
    assert "trnconsole/runners/trn_harness/loop.py" in names
    assert not [n for n in names if n.startswith(("runners/", "trn_harness/"))]
    metadata = next(n for n in names if n.endswith("METADATA"))
    requires = [
        line
        for line in zipfile.ZipFile(wheel).read(metadata).decode().splitlines()
        if line.startswith("Requires-Dist:")
    ]
    base = [line for line in requires if "extra ==" not in line]
    heavy = ("torch", "transformers", "tensorboard", "boto3", "kubernetes")
    assert not [line for line in base if any(h in line.lower() for h in heavy)], base  # never pulls torch
    assert "trnconsole/themes/trn-dark.toml" in names and "trnconsole/themes/trn-light.toml" in names


def test_console_finds_the_installed_runner_scripts():
    proc = subprocess.run(
        [sys.executable, "-m", "trnconsole.cli", "runners", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    import json

    scripts = {row["runner"]: row["script"] for row in json.loads(proc.stdout)}
    assert set(scripts) == {"bert", "gpt2", "vit"}
    for name, script in scripts.items():
        path = Path(script)
        assert path.name == f"{name}.py" and path.is_file()
        assert (path.parent / "trn_harness" / "loop.py").is_file()


def test_without_a_c_compiler_the_install_goes_on_and_reads_the_same_events(tmp_path):
    wheel = build_wheel(tmp_path / "wheel", CC="false")  # every compile fails, as with no compiler
    assert compiled(zipfile.ZipFile(wheel).namelist()) == []
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    script = (
        "import json\n"
        "from trnconsole.core import parsers, series\n"
        "from trnconsole.core.metrics import RunMetrics\n"
        "assert parsers._linescan is None and series._buckets is None, parsers.__file__\n"
        "m = RunMetrics()\n"
        "m.feed_log_lines([f'LOG t - (0, {s}) step_loss : {1 / s}' for s in range(1, 2001)])\n"
        "print(json.dumps([m.last_step, m.series['loss'].min, m.series['loss'].count]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(target)},
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [2000, 1 / 2000, 2000]
