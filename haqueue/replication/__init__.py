"""The bridge to pysyncobj: the only package that imports it.

pysyncobj 0.3.17 replaces `socket.inet_ntop` with a Windows-only function on
every platform when it is imported (pysyncobj/win_inet_pton.py, imported by
its tcp_connection module). Anything in the same process that calls it
afterwards — pyroute2 decoding an address, for one — then fails. Import it
here, once, and put the real function back.
"""

import socket as _socket

_real_inet_ntop = _socket.inet_ntop
import pysyncobj  # noqa: E402,F401  (the import that patches socket)
import pysyncobj.tcp_connection  # noqa: E402,F401

_socket.inet_ntop = _real_inet_ntop
