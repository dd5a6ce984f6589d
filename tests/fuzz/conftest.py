"""Hypothesis profiles for the property tests.

``ci`` (the default): derandomized, so every run tries the same examples and a failure
reproduces; no example database is written. ``dev`` (``HYPOTHESIS_PROFILE=dev``): random
examples, ten times as many, remembered in ``.hypothesis/`` so a failure found once is tried
first next time. Examples may take long (a 10,000-deep value, a slow core), so no deadline.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", max_examples=60, derandomize=True, database=None, deadline=None)
settings.register_profile("dev", max_examples=600, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
