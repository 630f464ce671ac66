"""docs/design.md is the invariants' authority: every citation of it resolves, every test it names exists.

Code, tests and docs cite it as `design.md I3`, `design.md I4-I7`, `design.md I1/I7` or by
section (`design.md "Throughput"`). A citation of an invariant or a section the page does
not define, or a guarding test that was renamed or deleted, fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DESIGN = REPO / "docs" / "design.md"
SCANNED = ("haqueue", "tests", "docs", "scripts")
SUFFIXES = {".py", ".md", ".toml", ".sh", ".rb", ".txt", ""}

INVARIANT_HEADING = re.compile(r"^### I(\d) ", re.M)
SECTION_HEADING = re.compile(r"^## (.+?)\s*$", re.M)
# `design.md` then an optional , or : and either invariants (I3, I4-I7, I1/I7, I2, I6, I7)
# or a quoted section name.
CITATION = re.compile(
    r"design\.md[,:]?\s+(?:(?P<ids>I\d(?:\s*(?:[-–/,]|and)\s*I?\d)*)|\"(?P<section>[^\"]+)\")"
)
TEST_REFERENCE = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")


def design_text() -> str:
    return DESIGN.read_text(encoding="utf-8")


def citing_files():
    for top in SCANNED:
        for path in sorted((REPO / top).rglob("*")):
            if path.is_file() and path.suffix in SUFFIXES and path != Path(__file__).resolve():
                yield path


def cited_invariants(ids: str) -> set[int]:
    numbers: set[int] = set()
    for first, dash, last in re.findall(r"I?(\d)(?:\s*([-–])\s*I?(\d))?", ids):
        numbers.update(range(int(first), int(last) + 1) if dash else {int(first)})
    return numbers


def test_design_defines_the_eight_invariants_in_order():
    assert [int(n) for n in INVARIANT_HEADING.findall(design_text())] == list(range(1, 9))


def test_every_citation_names_an_invariant_or_section_the_design_defines():
    text = design_text()
    invariants = {int(n) for n in INVARIANT_HEADING.findall(text)}
    sections = set(SECTION_HEADING.findall(text))
    unresolved, citations = [], 0
    for path in citing_files():
        try:
            content = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for match in CITATION.finditer(content):
            citations += 1
            where = f"{path.relative_to(REPO)}: {match.group(0)!r}"
            if match["ids"] is not None:
                missing = cited_invariants(match["ids"]) - invariants
                if missing:
                    unresolved.append(f"{where} (no I{', I'.join(map(str, sorted(missing)))})")
            elif match["section"] not in sections:
                unresolved.append(f"{where} (no section {match['section']!r})")
    assert citations > 20, "the citation pattern no longer finds the citations"
    assert not unresolved, "\n".join(unresolved)


def test_every_guarding_test_the_design_names_exists():
    references = TEST_REFERENCE.findall(design_text())
    assert len(references) > 40
    missing = []
    for file, name in references:
        path = REPO / file
        if not path.is_file() or not re.search(rf"^(?:async )?def {name}\(", path.read_text(), re.M):
            missing.append(f"{file}::{name}")
    assert not missing, "docs/design.md names tests that do not exist:\n" + "\n".join(missing)


def test_cited_invariant_ranges_are_expanded():
    assert cited_invariants("I4-I7") == {4, 5, 6, 7}
    assert cited_invariants("I1/I7") == {1, 7}
    assert cited_invariants("I2, I6, I7") == {2, 6, 7}
