"""A Session uses its server only through host.SessionHost, and QueueServer is one.

The interface is what keeps session.py from depending on app.py; these tests
fail when session.py reaches for a server attribute the interface does not
list, or when QueueServer stops providing one it does.
"""

from __future__ import annotations

import ast
import inspect

from haqueue.server import session as session_module
from haqueue.server.app import Listen, NodeOptions, QueueServer
from haqueue.server.host import SessionHost


def _host_members() -> set[str]:
    names = set(SessionHost.__annotations__)
    names |= {name for name, value in vars(SessionHost).items()
              if not name.startswith("_") and (callable(value) or isinstance(value, property))}
    return names


def _server_attributes_used_by_session() -> set[str]:
    """Every `server.X` and `self.server.X` in session.py."""
    tree = ast.parse(inspect.getsource(session_module))
    used = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id == "server":
            used.add(node.attr)
        elif (isinstance(owner, ast.Attribute) and owner.attr == "server"
              and isinstance(owner.value, ast.Name) and owner.value.id == "self"):
            used.add(node.attr)
    return used


def test_session_uses_nothing_of_its_server_beyond_the_host_interface():
    used = _server_attributes_used_by_session()
    assert used, "the scan found no use at all: it no longer reads session.py"
    assert used <= _host_members(), f"not in SessionHost: {sorted(used - _host_members())}"


def test_the_host_interface_lists_nothing_session_does_not_use():
    assert _host_members() <= _server_attributes_used_by_session()


def test_queue_server_provides_every_member_of_the_host_interface():
    server = QueueServer(NodeOptions(Listen(port=0), raft_address="127.0.0.1:0"))
    provided = set(vars(server)) | {name for name in dir(QueueServer)}
    assert _host_members() <= provided, sorted(_host_members() - provided)
