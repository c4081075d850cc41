"""On PYTHONPATH, makes every Python process of a run look like one on a platform without the
Unix facilities the fork path of warm workers needs (as on Windows): no fork(), no passing of
descriptors over Unix sockets, no peer credentials. OS file locks stay, as Windows has them
(LockFileEx, which filelock uses there; here flock through fcntl), unless RNNFLEET_NO_OS_LOCKS
is set: then the fcntl module is hidden too, as on a platform with no such lock. AF_UNIX and
os.uname stay: psutil and numpy need them on Linux (rnnfleet itself uses platform.node()).
tests/workflow/test_portability.py runs the real workflow this way."""

import os
import socket
import sys

HIDDEN_MODULES = ("fcntl",) if os.environ.get("RNNFLEET_NO_OS_LOCKS") else ()


class _HideModules:
    def find_spec(self, name, path=None, target=None):
        if name in HIDDEN_MODULES:
            raise ModuleNotFoundError(f"No module named {name!r} (hidden by {__file__})", name=name)
        return None


sys.meta_path.insert(0, _HideModules())
for module_name in HIDDEN_MODULES:
    sys.modules.pop(module_name, None)
for module, names in ((os, ("fork", "forkpty")), (socket, ("send_fds", "recv_fds", "SO_PEERCRED"))):
    for name in names:
        if hasattr(module, name):
            delattr(module, name)
