"""Run as another account against the spawn path's server (tests/workflow/test_security.py):
try to read the user's key, to connect and submit a job (that would copy /etc/passwd to
MARKER) with a guessed key, and to read the server's and its worker's environment; print
what each attempt got, as JSON. Arguments: ADDRESS KEY_PATH MARKER PID..."""

import json
import sys
from multiprocessing.connection import Client

address, key_path, marker, *pids = sys.argv[1:]
result = {}
try:
    with open(key_path, "rb") as key_file:
        result["key"] = key_file.read().hex()
except OSError as error:
    result["key"] = type(error).__name__
try:
    connection = Client(address, family="AF_UNIX", authkey=b"a guess of 32 bytes, not the key")
    request = {"target": "shutil:copyfile", "kwargs": {"src": "/etc/passwd", "dst": marker}, "cwd": "/"}
    connection.send_bytes(json.dumps({**request, "env": {}, "sys_path": sys.path, "log_path": marker}).encode())
    result["connect"] = "accepted: " + connection.recv_bytes().decode()
except Exception as error:
    result["connect"] = type(error).__name__
for pid in pids:
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            result[f"environ {pid}"] = environ.read().decode(errors="replace")
    except OSError as error:
        result[f"environ {pid}"] = type(error).__name__
print(json.dumps(result))
