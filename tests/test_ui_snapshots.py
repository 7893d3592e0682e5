"""SVG snapshots of the dashboard on a recorded run, at the smallest and a large terminal size.

Regenerate after an intended change or a Textual bump: `pytest tests/test_ui_snapshots.py --snapshot-update`.
"""

from __future__ import annotations

import pytest
from test_ui_app import make_app


async def _settled(pilot) -> None:
    """Until the refresh -> select -> read -> alert chain has run out: each step may start the next worker."""
    app = pilot.app
    for _ in range(4):
        await pilot.pause(0.2)
        await app.workers.wait_for_complete()
    app.redraw()
    await pilot.pause(0.2)


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
def test_dashboard_snapshot(recorded_home, snap_compare, size):
    home, _ = recorded_home
    assert snap_compare(make_app(home), terminal_size=size, run_before=_settled)


def test_compare_snapshot(tmp_path, monkeypatch, snap_compare):
    from conftest import make_recorded_home

    home = tmp_path / "home"
    monkeypatch.setenv("TRNCONSOLE_HOME", str(home))
    make_recorded_home(home, copies=2)

    async def compare(pilot) -> None:
        await _settled(pilot)
        await pilot.press("space", "down", "space", "c")
        await _settled(pilot)

    assert snap_compare(make_app(home), terminal_size=(160, 24), run_before=compare)
