"""Coverage-guided fuzzing with atheris (libFuzzer): the codec or the session loop.

Run: .venv/bin/python tests/fuzz/fuzz.py TARGET NEW_DIR tests/fuzz/corpus/TARGET -max_total_time=60
TARGET is codec, gearman, gearman_session or session; libFuzzer writes new inputs to the first directory and takes
its usual options after it. tests/fuzz/test_fuzz.py runs both in CI. What each checks:
tests/fuzz/harness.py, check_codec and check_session.
"""

import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

with atheris.instrument_imports(include=["haqueue", "tests"]):
    from tests.fuzz.harness import check_codec, check_gearman_codec, check_gearman_session, check_session

TARGETS = {"codec": check_codec, "gearman": check_gearman_codec, "gearman_session": check_gearman_session,
           "session": check_session}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        sys.exit(f"usage: fuzz.py {{{','.join(TARGETS)}}} [libFuzzer arguments]")
    target = TARGETS[sys.argv.pop(1)]
    atheris.Setup(sys.argv, target)
    atheris.Fuzz()
