"""Sends the warm server at ADDRESS a job request with three descriptors, as a client would, and
prints the reply (or "closed"); the job would copy /etc/passwd to MARKER. For
tests/workflow/test_security.py. Arguments: ADDRESS MARKER"""

import json
import os
import socket
import struct
import sys

address, marker = sys.argv[1:3]
request = {
    "target": "shutil:copyfile",
    "kwargs": {"src": "/etc/passwd", "dst": marker},
    "cwd": "/",
    "env": {},
    "sys_path": sys.path,
}
data = json.dumps(request).encode()
connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
connection.connect(address)
descriptors = [os.open(os.devnull, os.O_WRONLY) for _ in range(3)]
try:
    socket.send_fds(connection, [struct.pack("!I", len(data)) + data], descriptors)
    connection.settimeout(60)
    print(connection.recv(4096).decode() or "closed")
except (BrokenPipeError, ConnectionResetError):
    print("closed")
