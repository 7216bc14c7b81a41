"""Helpers of the web tests: a free port and a real server process on 127.0.0.1."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(args: list[str], port: int, log: Path, ready_path: str = "/", timeout: float = 120.0):
    """Start ``python -m catcap <args>`` (which must listen on 127.0.0.1:port) and wait until
    ``ready_path`` answers; returns the Popen. The caller stops it with :func:`stop_server`."""
    out = open(log, "w")
    proc = subprocess.Popen([sys.executable, "-m", "catcap", *args], stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}{ready_path}", timeout=2)
            return proc
        except OSError:
            time.sleep(0.3)
    stop_server(proc)
    raise RuntimeError(f"the server did not answer within {timeout} s: {log.read_text()[-2000:]}")


def stop_server(proc) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
