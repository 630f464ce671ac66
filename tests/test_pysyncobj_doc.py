"""docs/pysyncobj.md is the one numbered list of haqueue's changes to pysyncobj (D1, D2, ...).

Code, tests and the other docs cite the changes by number, so a number is defined once, and
every number cited is defined: two branches each adding "the next" number, or a citation left
behind by a renumbering, fails here.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "pysyncobj.md"
DEFINED = re.compile(r"^- \*\*D(\d+)\.\*\*", re.M)
CITED = re.compile(r"\bD(\d{1,2})\b")


def defined() -> Counter:
    return Counter(int(n) for n in DEFINED.findall(DOC.read_text()))


def test_each_change_to_pysyncobj_has_a_number_of_its_own():
    numbers = defined()
    assert numbers, "no D-numbers found in docs/pysyncobj.md"
    assert [n for n, count in numbers.items() if count > 1] == []


def test_every_change_cited_by_number_is_in_the_list():
    numbers = defined()
    files = [*REPO.glob("haqueue/**/*.py"), *REPO.glob("tests/**/*.py"), *REPO.glob("docs/*.md"), REPO / "README.md"]
    unknown = sorted(
        f"{path.relative_to(REPO)}: D{n}"
        for path in files
        for n in {int(n) for n in CITED.findall(path.read_text(errors="replace"))}
        if n not in numbers
    )
    assert unknown == []
