"""Coverage-guided fuzzing of the beanstalk codec with atheris (libFuzzer).

Run: .venv/bin/python tests/fuzz/fuzz_codec.py NEW_DIR tests/fuzz/corpus/codec -max_total_time=60
(libFuzzer writes new inputs to the first directory; tests/fuzz/test_fuzz.py runs it in CI).
What is checked: tests/fuzz/harness.py, check_codec.
"""

import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

with atheris.instrument_imports(include=["haqueue", "tests"]):
    from tests.fuzz.harness import check_codec

if __name__ == "__main__":
    atheris.Setup(sys.argv, check_codec)
    atheris.Fuzz()
