"""Coverage-guided fuzzing of the session loop (parser, pipeline, flow control, the core) with atheris (libFuzzer).

Run: .venv/bin/python tests/fuzz/fuzz_session.py NEW_DIR tests/fuzz/corpus/session -max_total_time=60
(libFuzzer writes new inputs to the first directory; tests/fuzz/test_fuzz.py runs it in CI).
What is checked: tests/fuzz/harness.py, check_session.
"""

import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

with atheris.instrument_imports(include=["haqueue", "tests"]):
    from tests.fuzz.harness import check_session

if __name__ == "__main__":
    atheris.Setup(sys.argv, check_session)
    atheris.Fuzz()
