"""No front end compares a result as a string literal: Gearman's and the id service's results are
compared by their names (core/results.py Tag, protocol/idjson.py Outcome), as the beanstalkd path's are.

A literal that drifts from the core's word ("ASIGN") would compare false forever, silently; a name
that drifts fails at import. The scan reads each module's syntax tree: every comparison (==, !=,
in, not in) and every dict key that is a string constant naming a result tag or an id outcome
fails, with its line.
"""

from __future__ import annotations

import ast
import inspect

import pytest

from haqueue.core import gearman as core_gearman
from haqueue.core import ids as core_ids
from haqueue.core.results import Tag
from haqueue.protocol import idjson
from haqueue.protocol.idjson import Outcome
from haqueue.server import admin, app
from haqueue.server.gearman import service as gearman_service, session as gearman_session
from haqueue.server.ids import http as ids_http, rules as ids_rules, udp as ids_udp

RESULT_WORDS = {value for name, value in vars(Tag).items() if not name.startswith("_")} | {o.value for o in Outcome}
MODULES = [core_gearman, core_ids, idjson, app, admin, gearman_service, gearman_session, ids_udp, ids_http, ids_rules]


def _literal_results(source: str, name: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            candidates = [node.left, *node.comparators]
        elif isinstance(node, ast.Dict):
            candidates = [k for k in node.keys if k is not None]
        elif isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple) and node.value.elts:
            candidates = [node.value.elts[0]]  # a result built with a literal tag
        else:
            continue
        for part in candidates:
            elements = part.elts if isinstance(part, (ast.Tuple, ast.List, ast.Set)) else [part]
            for element in elements:
                if isinstance(element, ast.Constant) and element.value in RESULT_WORDS:
                    found.append(f"{name}:{element.lineno}: {element.value!r}")
    return found


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_no_result_is_compared_as_a_string_literal(module):
    assert _literal_results(inspect.getsource(module), module.__name__) == []


def test_the_scan_finds_a_literal_result():
    source = ('def f(result, name):\n'
              '    if result[0] == "ASSIGN" or name == "GRAB_JOB":\n'  # a packet's name is no result
              '        return ("CREATED", 1)\n'
              '    return {"ok": 200}.get(result[0] in ("exhausted", "x"))\n')
    assert sorted(_literal_results(source, "f")) == ["f:2: 'ASSIGN'", "f:3: 'CREATED'", "f:4: 'exhausted'", "f:4: 'ok'"]
