"""The Gearman session loop under generated scripts (tests/fuzz/harness.py check_gearman_session).

The coverage-guided run (atheris) and the corpus replay live in tests/fuzz/test_fuzz.py, as
the `gearman_session` target; this runs hypothesis's scripts through the same checks, so a
plain pytest run explores beyond the corpus too.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.harness import check_gearman_session


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400))
def test_no_script_breaks_the_gearman_front_end(data):
    check_gearman_session(data)
