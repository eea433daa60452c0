"""Settings of the whole suite."""

from __future__ import annotations

import os

from hypothesis import settings

# The property tests draw the same examples on every run of `make test` (and CI): a failure
# there is the change's, and it reproduces. HYPOTHESIS_PROFILE=explore draws new examples
# each run, to look for new failures (the fuzz of tests/analysis/test_fuzz.py found a
# span-id rule that validate and ingest applied differently that way).
settings.register_profile("suite", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "suite"))


def pytest_configure(config: object) -> None:
    """The kinds a developer picks by (`pytest -m "not spark and not browser and not slow"` is
    `make check`'s set): `slow` and `browser` are in pyproject.toml, `spark` is registered here."""
    config.addinivalue_line(  # type: ignore[attr-defined]
        "markers", "spark: starts a Spark session or cluster (a JVM; minutes of CPU)"
    )
