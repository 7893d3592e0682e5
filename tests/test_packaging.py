"""The package's metadata: the wheel ships the runners inside the package (trnconsole/runners), never as a
top-level module, and every package the code imports is declared, in the extra that needs it."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import HAVE_C_COMPILER, REPO
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib


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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


# Imported only where they are present, and never installed from PyPI.
NOT_FROM_PYPI = {"torch_neuronx": "the Neuron SDK's, from its own package repository"}
# The standard library's names; tomllib joined it in 3.11 and is imported only there (tomli before).
STDLIB = sys.stdlib_module_names | {"tomllib"}
# The runners run in any virtualenv with these extras installed, never with the console's other extras.
RUNNER_EXTRAS = ("", "runners", "xla")


def declared() -> dict[str, list[Requirement]]:
    """The package's requirements by extra, the base install under ''."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    groups = {"": project["dependencies"], **project["optional-dependencies"]}
    return {extra: [Requirement(line) for line in lines] for extra, lines in groups.items()}


def third_party_imports(path: Path) -> list[tuple[str, bool]]:
    """Each absolute import of a package from outside the project and the standard library, and whether it
    runs when the module is imported (at module level, not inside a function)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    nested = {
        id(node)
        for function in ast.walk(tree)
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
        for node in ast.walk(function)
    }
    first_party = {"trnconsole", "trn_harness", *(p.stem for p in (REPO / "runners").glob("*.py"))}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top not in STDLIB and top not in first_party:
                found.append((top, id(node) not in nested))
    return found


def distributions_of(module: str, provided: dict[str, list[str]]) -> set[str]:
    """The distributions installing `module`; one not installed here (tomli on 3.11) is named like it."""
    return {canonicalize_name(d) for d in provided.get(module, [module])}


@pytest.mark.smoke
def test_every_imported_package_is_declared_in_an_extra_that_carries_it():
    groups = {extra: {canonicalize_name(r.name) for r in reqs} for extra, reqs in declared().items()}
    provided = importlib.metadata.packages_distributions()
    problems = []
    for path in sorted([*(REPO / "trnconsole").rglob("*.py"), *(REPO / "runners").rglob("*.py")]):
        where = path.relative_to(REPO)
        in_runners = where.parts[0] == "runners"
        for module, at_import in third_party_imports(path):
            if module in NOT_FROM_PYPI:
                continue
            dists = distributions_of(module, provided)
            extras = [extra for extra, names in groups.items() if names & dists]
            if not extras:
                problems.append(f"{where}: {module} ({', '.join(sorted(dists))}) is declared nowhere")
            elif in_runners and not set(extras) & set(RUNNER_EXTRAS):
                problems.append(f"{where}: {module} is declared only in {extras}, not for the runners")
            elif not in_runners and at_import and "" not in extras:
                # The console starts on the base install: an extra's package is imported where it is used.
                problems.append(f"{where}: {module} is imported at module level but only in extras {extras}")
    assert not problems, "\n".join(problems)


def test_textual_is_a_range_that_holds_the_snapshots_exact_pin():
    (textual,) = [r for r in declared()[""] if r.name == "textual"]
    assert not any(spec.operator in ("==", "===") for spec in textual.specifier), textual
    pinned = re.search(r"^textual==(\S+)$", (REPO / "requirements" / "test.txt").read_text(), re.M)
    assert pinned and textual.specifier.contains(pinned.group(1)), (textual, pinned)
    assert not textual.specifier.contains("9.0.0"), f"{textual}: a new major may break the API"


def test_the_xla_extra_keeps_torch_on_torch_xlas_minor():
    xla = {canonicalize_name(r.name): r for r in declared()["xla"]}
    assert {"torch", "torch-xla"} <= set(xla), xla

    def minor(req: Requirement) -> str:
        (spec,) = req.specifier
        match = re.fullmatch(r"(\d+\.\d+)\.\*", spec.version)
        assert spec.operator == "==" and match, f"{req}: pin it to one minor, as ==X.Y.*"
        return match.group(1)

    assert minor(xla["torch"]) == minor(xla["torch-xla"])


@pytest.mark.smoke
def test_the_test_environment_is_an_install_of_the_declared_extras():
    """Every declared requirement, for this Python, is met by what the pinned environment installed (directly
    or through another package), so the suite tests a combination that users can install."""
    problems = []
    for extra, reqs in declared().items():
        for req in reqs:
            if req.marker is not None and not req.marker.evaluate({"extra": extra}):
                continue
            try:
                version = importlib.metadata.version(req.name)
            except importlib.metadata.PackageNotFoundError:
                problems.append(f"{req} ({extra or 'base'}) is not installed")
                continue
            if not req.specifier.contains(version, prereleases=True):
                problems.append(f"{req.name} {version} does not meet {req} ({extra or 'base'})")
    assert not problems, "\n".join(problems)
