"""The wheel ships the runners inside the package (trnconsole/runners), never as a top-level module."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import REPO

pytestmark = pytest.mark.slow


def test_wheel_ships_runners_under_the_package(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(REPO),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    (wheel,) = tmp_path.glob("trnconsole-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
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
