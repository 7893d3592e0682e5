"""Process-tree sampling on real process trees: found from the root, CPU from cpu_times deltas, children
that come later found at the next rediscovery, and processes that vanish dropped without an error."""

from __future__ import annotations

import contextlib
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import psutil
import pytest

from trnconsole.monitors.proctree import ProcessTreeSampler

BUSY = "import time\nend = time.time() + 30\nwhile time.time() < end: pass"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the process tree"
        time.sleep(0.02)


def children(root: subprocess.Popen) -> list[psutil.Process]:
    return psutil.Process(root.pid).children(recursive=True)


@pytest.fixture
def start_tree() -> Iterator[Callable[..., subprocess.Popen]]:
    """Start `sh -c script` and wait until it has `expect` descendants; every tree is killed afterwards."""
    started: list[tuple[subprocess.Popen, list[psutil.Process]]] = []

    def start(script: str, expect: int, **popen: object) -> subprocess.Popen:
        root = subprocess.Popen(["sh", "-c", script], **popen)
        started.append((root, []))
        wait_for(lambda: len(children(root)) == expect)
        started[-1][1].extend(children(root))  # the ones a test orphans by killing the root
        return root

    yield start
    for root, first_seen in started:
        with contextlib.suppress(psutil.NoSuchProcess):
            first_seen = first_seen + children(root)
        for process in first_seen:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        # A shell in `wait` reaps its killed children and exits; killing it first would leave them to init,
        # which reaps orphans only about once a second here.
        try:
            root.wait(timeout=1)
        except subprocess.TimeoutExpired:
            root.kill()
            root.wait(timeout=10)
        if root.stdin is not None:
            root.stdin.close()


def sleeper_tree_script(sleepers: int, busy: bool = False) -> str:
    script = "sleep 60 & " * sleepers
    if busy:
        script += f"{shlex.quote(sys.executable)} -c {shlex.quote(BUSY)} & "
    return script + "wait"


def test_the_tree_is_found_and_a_busy_child_shows_its_cpu_and_every_process_its_rss(start_tree) -> None:
    root = start_tree(sleeper_tree_script(3, busy=True), expect=4)
    busy_pid = next(p.pid for p in children(root) if p.name().startswith("python"))
    sampler = ProcessTreeSampler()

    first = sampler.sample({"run-a": root.pid})["run-a"]
    assert first.run_id == "run-a" and first.root_pid == root.pid
    assert first.n_processes == 5 and first.pids[0] == root.pid
    assert set(first.pids) == {root.pid} | {p.pid for p in children(root)}
    assert first.cpu_percent == 0.0  # nothing to compare with yet

    time.sleep(1.0)
    second = sampler.sample({"run-a": root.pid})["run-a"]
    busiest = second.top[0]
    assert busiest.pid == busy_pid and busiest.name.startswith("python")
    assert busiest.cpu_percent > 50
    assert second.cpu_percent >= busiest.cpu_percent
    assert second.cpu_percent < 100 * psutil.cpu_count() + 10
    assert all(p.rss_bytes > 0 for p in second.top)
    assert second.rss_bytes >= sum(p.rss_bytes for p in second.top) > 0
    assert len(second.top) == 5


def test_a_child_started_after_discovery_is_found_at_the_next_rediscovery(start_tree) -> None:
    # The shell starts a second sleep once a line arrives on its stdin.
    root = start_tree("sleep 60 & read line; sleep 60 & wait", expect=1, stdin=subprocess.PIPE)
    clock = FakeClock()
    sampler = ProcessTreeSampler(rediscover_s=5.0, clock=clock)
    assert sampler.sample({"run": root.pid})["run"].n_processes == 2

    root.stdin.write(b"go\n")
    root.stdin.flush()
    wait_for(lambda: len(children(root)) == 2)
    clock.now += 4.0
    assert sampler.sample({"run": root.pid})["run"].n_processes == 2  # the cached tree, not yet rescanned
    clock.now += 1.0
    later = sampler.sample({"run": root.pid})["run"]
    assert later.n_processes == 3
    assert set(later.pids) == {root.pid} | {p.pid for p in children(root)}


def test_a_killed_child_disappears_without_an_error(start_tree) -> None:
    root = start_tree(sleeper_tree_script(3), expect=3)
    clock = FakeClock()
    sampler = ProcessTreeSampler(clock=clock)
    before = sampler.sample({"run": root.pid})["run"]
    assert before.n_processes == 4

    victim = children(root)[1]
    victim.kill()
    victim.wait(timeout=10)
    clock.now += 1.0
    after = sampler.sample({"run": root.pid})["run"]
    assert victim.pid not in after.pids and after.n_processes == 3
    clock.now += 1.0
    again = sampler.sample({"run": root.pid})["run"]  # rediscovered at once, since one had died
    assert set(again.pids) == set(after.pids)


def test_a_root_that_is_gone_gives_no_entry_and_the_other_runs_are_unaffected(start_tree) -> None:
    alive = start_tree(sleeper_tree_script(1), expect=1)
    doomed = start_tree(sleeper_tree_script(1), expect=1)
    sampler = ProcessTreeSampler()
    assert sampler.sample({"alive": alive.pid, "doomed": doomed.pid}).keys() == {"alive", "doomed"}

    doomed.kill()
    doomed.wait(timeout=10)
    samples = sampler.sample({"alive": alive.pid, "doomed": doomed.pid})
    assert samples.keys() == {"alive"} and samples["alive"].n_processes == 2


def test_a_root_that_exited_unreaped_counts_as_gone() -> None:
    zombie = subprocess.Popen(["true"])
    wait_for(lambda: psutil.Process(zombie.pid).status() == psutil.STATUS_ZOMBIE)
    try:
        assert ProcessTreeSampler().sample({"run": zombie.pid}) == {}
    finally:
        zombie.wait(timeout=10)
    assert ProcessTreeSampler().sample({"run": zombie.pid}) == {}


def test_a_run_whose_root_pid_changes_gets_the_new_tree(start_tree) -> None:
    first = start_tree(sleeper_tree_script(1), expect=1)
    second = start_tree(sleeper_tree_script(2), expect=2)
    sampler = ProcessTreeSampler(clock=FakeClock())
    assert sampler.sample({"run": first.pid})["run"].n_processes == 2
    moved = sampler.sample({"run": second.pid})["run"]
    assert moved.root_pid == second.pid and moved.n_processes == 3
    assert sampler.sample({}) == {}
