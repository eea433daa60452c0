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
