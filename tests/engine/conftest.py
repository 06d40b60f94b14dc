"""Fixtures shared by the engine's kernel tests."""

from __future__ import annotations

import pytest

from s2studio.engine.kernels import intdot


@pytest.fixture(params=intdot.levels())
def level(request):
    """Each instruction-set level this CPU offers to the C kernels, forced for the test (the
    level chosen before is given back after it)."""
    before = intdot.level()
    intdot.set_level(request.param)
    yield request.param
    intdot.set_level(before)
