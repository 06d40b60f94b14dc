"""Hypothesis profiles for the fuzz suites (docs/security.md, "Fuzzing").

* ``ci`` (default): derandomized (a fixed seed: the same examples on every run), a bounded
  number of examples per property, no example database, no deadline (the machine is shared;
  timing is never a test here). The whole fuzz set takes a few minutes on 2 cores.
* ``long``: for maintainers hunting bugs: random seeds, 12x the examples, the database kept
  in ``.hypothesis/`` so a failure found is replayed first next time::

      S2_FUZZ_PROFILE=long python -m pytest -q tests/fuzz

Any failing input Hypothesis finds is added to its test as an ``@example`` (a regression case).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                      HealthCheck.function_scoped_fixture])
settings.register_profile("ci", max_examples=100, derandomize=True, database=None, print_blob=True, **_COMMON)
settings.register_profile("long", max_examples=1200, derandomize=False, print_blob=True, **_COMMON)
settings.load_profile(os.environ.get("S2_FUZZ_PROFILE", "ci"))
