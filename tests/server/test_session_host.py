"""Each front end uses its server only through an interface of its own, and QueueServer is each.

A beanstalkd Session sees host.SessionHost, the Gearman service
gearman.service.GearmanHost, the id service ids.udp.IdHost. The interfaces are
what keep those modules from depending on app.py (which imports them): these
tests fail when a module reaches for a server attribute its interface does not
list, when an interface lists what the module never uses, or when QueueServer
stops providing one.
"""

from __future__ import annotations

import ast
import inspect
from typing import Protocol

import pytest

from haqueue.server import connection as connection_module
from haqueue.server.gearman import service as gearman_service, session as gearman_session
from haqueue.server.ids import udp as ids_udp
from haqueue.server.beanstalk import session as session_module
from haqueue.config.replication import ReplicationSettings
from haqueue.server.app import NodeOptions, QueueServer
from haqueue.server.listeners import Listen
from haqueue.server.gearman.service import GearmanHost
from haqueue.server.host import ConnectionHost, SessionHost
from haqueue.server.ids.udp import IdHost

# (the modules that use the interface, each with the name it calls the server by), interface.
# A Gearman connection's host is the service's server (connection.py calls it `host`).
FRONT_ENDS = [([(session_module, "server")], SessionHost),
              ([(gearman_service, "server"), (gearman_session, "host")], GearmanHost),
              ([(ids_udp, "server")], IdHost)]
IDS = ["session", "gearman_service", "ids_udp"]


def _members(interface) -> set[str]:
    names = set()
    for part in interface.__mro__:  # an interface may extend another (host.ConnectionHost)
        if part in (object, Protocol) or part.__module__ == "typing":
            continue
        names |= set(vars(part).get("__annotations__", {}))
        names |= {name for name, value in vars(part).items()
                  if not name.startswith("_") and (callable(value) or isinstance(value, property))}
    return names


def _server_attributes_used_by(module, owner_name: str = "server") -> set[str]:
    """Every `server.X` and `self.server.X` in the module (or another name for the server)."""
    tree = ast.parse(inspect.getsource(module))
    used = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id == owner_name:
            used.add(node.attr)
        elif (isinstance(owner, ast.Attribute) and owner.attr == owner_name
              and isinstance(owner.value, ast.Name) and owner.value.id == "self"):
            used.add(node.attr)
    return used


def _used_by(modules) -> set[str]:
    used = set()
    for module, owner in modules:
        found = _server_attributes_used_by(module, owner)
        assert found, f"the scan found no use at all: it no longer reads {module.__name__}"
        used |= found
    return used


@pytest.mark.parametrize(("modules", "interface"), FRONT_ENDS, ids=IDS)
def test_a_front_end_uses_nothing_of_its_server_beyond_its_interface(modules, interface):
    used = _used_by(modules)
    assert used <= _members(interface), f"not in {interface.__name__}: {sorted(used - _members(interface))}"


@pytest.mark.parametrize(("modules", "interface"), FRONT_ENDS, ids=IDS)
def test_an_interface_lists_nothing_its_front_end_does_not_use(modules, interface):
    # connection.py, shared by every session, uses its host too.
    used = _used_by(modules) | _server_attributes_used_by(connection_module, "host")
    assert _members(interface) <= used, sorted(_members(interface) - used)


@pytest.mark.parametrize("interface", [SessionHost, GearmanHost, IdHost], ids=IDS)
def test_queue_server_provides_every_member_of_each_interface(interface):
    server = QueueServer(NodeOptions(Listen(port=0), ReplicationSettings("127.0.0.1:0", [])))
    provided = set(vars(server)) | {name for name in dir(QueueServer)}
    assert _members(interface) <= provided, sorted(_members(interface) - provided)


def test_the_shared_connection_code_uses_nothing_of_its_host_beyond_connection_host():
    """connection.py serves both Session and GearmanSession through `self.host`."""
    used = _server_attributes_used_by(connection_module, "host")
    assert used, "the scan found no use at all: it no longer reads connection.py"
    assert used <= _members(ConnectionHost), sorted(used - _members(ConnectionHost))


def test_queue_server_reads_of_a_session_only_its_narrow_interface():
    """The way back is narrow too: app.py reads a Session only through host.HostedSession, and
    the waiting reserves (waiters.py) only through waiters.Waiter; a Session is each."""
    from haqueue.server import app as app_module, waiters as waiters_module
    from haqueue.server.beanstalk.session import Session
    from haqueue.server.host import HostedSession
    from haqueue.server.waiters import Waiter

    for module, name, interface in [(app_module, "session", HostedSession), (waiters_module, "waiter", Waiter)]:
        used = _server_attributes_used_by(module, name)
        assert used, f"the scan found no use at all: it no longer reads {module.__name__}"
        assert used <= _members(interface), sorted(used - _members(interface))
        session_members = set(dir(Session)) | {"conn_id", "watch"}  # the two set in __init__
        assert _members(interface) <= session_members, sorted(_members(interface) - session_members)
