"""How the integration tests are spread over xdist workers (--dist loadgroup).

The Coordinator tests share the engine groups their directory's session fixture `engines` starts:
they run on one worker, which starts those engines once instead of once per worker.
"""

from __future__ import annotations

from pathlib import Path

import pytest

COORDINATOR_TESTS = Path(__file__).parent / "coordinator"


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups off the markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if COORDINATOR_TESTS in item.path.parents and "engines" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("coordinator_engines"))
