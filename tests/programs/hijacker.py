"""Run as another account by tests/workflow/test_security.py (python -I -c, stdlib only): holds a
listener at every *.sock path in FOLDER that is not its own, plus one at EXPECTED_NAME, and
records every connection, byte and passed descriptor in RECORD_PATH (JSON).
Arguments: FOLDER EXPECTED_NAME RECORD_PATH"""

import json
import os
import socket
import sys
import time

folder, expected_name, record_path = sys.argv[1:4]
os.makedirs(folder, exist_ok=True)
os.chmod(folder, 0o777)
record = {"connections": 0, "bytes": 0, "fds": 0, "data": ""}
listeners, connections = {}, []


def save():
    with open(record_path + ".tmp", "w") as handle:
        json.dump(record, handle)
    os.replace(record_path + ".tmp", record_path)


def listen(path):
    if os.path.lexists(path):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    os.chmod(path, 0o777)
    listener.listen(64)
    listener.setblocking(False)
    listeners[path] = listener


listen(os.path.join(folder, expected_name))
save()
while True:
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if name.endswith(".sock") and path not in listeners:
            try:
                listen(path)
            except OSError:
                pass
    for listener in listeners.values():
        try:
            connection, _ = listener.accept()
        except BlockingIOError:
            continue
        connection.setblocking(False)
        connections.append(connection)
        record["connections"] += 1
        save()
    for connection in connections:
        try:
            data, ancillary, _, _ = connection.recvmsg(65536, socket.CMSG_SPACE(16 * 4))
        except (BlockingIOError, OSError):
            continue
        for _, _, fd_bytes in ancillary:
            record["fds"] += len(fd_bytes) // 4
        record["bytes"] += len(data)
        record["data"] = (record["data"] + data.decode("utf-8", "replace"))[:100000]
        save()
    time.sleep(0.005)
