"""Start-up stays fast: the console's modules import nothing heavy until a feature is used."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY_AWS = ("boto3", "botocore")
HEAVY_K8S = ("kubernetes", "urllib3", "yaml", "aiohttp")
CASES = [
    ("trnconsole.backends.aws", HEAVY_AWS),
    ("trnconsole.backends.cloudwatch", HEAVY_AWS),
    ("trnconsole.backends.sagemaker", HEAVY_AWS),
    ("trnconsole.backends.batch", HEAVY_AWS),
    ("trnconsole.backends.kubernetes", HEAVY_K8S),
    ("trnconsole.cli", (*HEAVY_AWS, *HEAVY_K8S, "torch", "tensorboard", "textual", "textual_serve")),
    ("trnconsole.service", (*HEAVY_AWS, *HEAVY_K8S, "torch", "tensorboard", "textual")),
    ("trnconsole.core.pricing", HEAVY_AWS),
]


@pytest.mark.parametrize(("module", "heavy"), CASES, ids=[m for m, _ in CASES])
def test_importing_a_module_leaves_the_heavy_libraries_unloaded(module: str, heavy: tuple[str, ...]) -> None:
    code = f"import sys, {module}; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
