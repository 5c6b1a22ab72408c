"""How the plugin finds the port of an app it starts without ``{port}``, as a user's app words it.

A Node.js gateway that prints its own listening line, a Python app that reads ``PORT`` and logs
nothing, a silent app found by its socket on the address it bound (127.0.0.2), an app that never
listens (a clear error within seconds naming ``{port}``), and a leading ``python`` that must be
pytest's own interpreter, not whatever PATH finds.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time

import pytest
from plugin_helpers import NODE_GATEWAY, NODE_STREAM_TEST

from pytest_streamguard.services.app import PORT_DISCOVERY_S

# Reads PORT, as most frameworks do, and prints nothing at all.
SILENT_PORT_APP = """
import json
import os
from http.server import BaseHTTPRequestHandler, HTTPServer

class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

HTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
"""

# The same app, told its port by a flag: python app.py --port N.
PORT_FLAG_APP = SILENT_PORT_APP.replace('int(os.environ["PORT"])', "int(sys.argv[2])").replace(
    "import os", "import sys"
)

# Binds a port of its own choosing on another loopback address and prints nothing: only its
# socket tells where it listens.
SILENT_OWN_ADDRESS_APP = SILENT_PORT_APP.replace(
    '("127.0.0.1", int(os.environ["PORT"]))', '("127.0.0.2", 0)'
)

READY_ONLY_TEST = """
import pytest

def test_target_found(streamguard):
    assert streamguard.target.url.startswith("http://127.0.0.1:")
"""


def node_or_fail() -> str:
    """The node binary; absent, the test skips, except on CI, where it must run."""
    node = shutil.which("node")
    if node is None:
        if os.environ.get("CI"):
            pytest.fail("node is not on PATH; CI must run the Node.js gateway tests")
        pytest.skip("node is not on PATH (the Node.js gateway tests need it)")
    return node


def test_node_gateway_found_by_its_listening_line(
    pytester: pytest.Pytester, toxiproxy_url: str
) -> None:
    node = node_or_fail()
    shutil.copy(NODE_GATEWAY, pytester.path / "server.js")
    pytester.makepyfile(NODE_STREAM_TEST)
    started = time.monotonic()
    result = pytester.runpytest_subprocess(
        "--streamguard",
        "--streamguard-toxiproxy",
        toxiproxy_url,
        "--streamguard-target-cmd",
        f"{node} server.js --port-zero",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=1)
    # Found by its line, not by waiting out a timeout.
    assert time.monotonic() - started < PORT_DISCOVERY_S + 30


def run_app(
    pytester: pytest.Pytester,
    toxiproxy_url: str,
    app: str,
    cmd: str,
    *args: str,
    host: str = "127.0.0.1",
) -> pytest.RunResult:
    """Run READY_ONLY_TEST against ``app`` (saved as app.py) started as ``cmd``, ready at /,
    expecting it found on ``host``."""
    pytester.path.joinpath("app.py").write_text(app)
    pytester.makepyfile(READY_ONLY_TEST.replace("127.0.0.1", host))
    return pytester.runpytest_subprocess(
        "--streamguard",
        "--streamguard-toxiproxy",
        toxiproxy_url,
        "--streamguard-target-cmd",
        cmd,
        "--streamguard-ready-path",
        "/",
        "-p",
        "no:cacheprovider",
        *args,
    )


def test_app_that_reads_port_and_logs_nothing(
    pytester: pytest.Pytester, toxiproxy_url: str
) -> None:
    result = run_app(pytester, toxiproxy_url, SILENT_PORT_APP, f"{sys.executable} app.py")
    result.assert_outcomes(passed=1)


def test_app_found_by_its_socket_on_the_address_it_bound(
    pytester: pytest.Pytester, toxiproxy_url: str
) -> None:
    result = run_app(
        pytester,
        toxiproxy_url,
        SILENT_OWN_ADDRESS_APP,
        f"{sys.executable} app.py",
        host="127.0.0.2",
    )
    result.assert_outcomes(passed=1)


# Fails its first start as uvicorn does when another process took its port first.
PORT_TAKEN_ONCE_APP = (
    "import pathlib, sys\n"
    "tried = pathlib.Path('tried')\n"
    "if not tried.exists():\n"
    "    tried.write_text(sys.argv[2])\n"
    "    print(f'ERROR: [Errno 98] error while attempting to bind on address "
    "(127.0.0.1, {sys.argv[2]}): address already in use', flush=True)\n"
    "    sys.exit(1)\n" + PORT_FLAG_APP
)


def test_app_whose_port_was_taken_is_started_again_on_another(
    pytester: pytest.Pytester, toxiproxy_url: str
) -> None:
    result = run_app(
        pytester, toxiproxy_url, PORT_TAKEN_ONCE_APP, f"{sys.executable} app.py --port {{port}}"
    )
    result.assert_outcomes(passed=1)
    # The first start failed (the file it left says on which port); the next one served.
    assert (pytester.path / "tried").read_text().isdigit()


def test_app_without_a_port_fails_within_seconds_naming_the_placeholder(
    pytester: pytest.Pytester, toxiproxy_url: str
) -> None:
    pytester.makepyfile(READY_ONLY_TEST)
    started = time.monotonic()
    result = pytester.runpytest_subprocess(
        "--streamguard",
        "--streamguard-toxiproxy",
        toxiproxy_url,
        "--streamguard-target-cmd",
        f'{sys.executable} -c "import time; time.sleep(120)"',
        "-p",
        "no:cacheprovider",
    )
    elapsed = time.monotonic() - started
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*printed no listening line and opened no listening socket within 15 s*",
            "*hint: the plugin finds your app's port from '{port}' in --streamguard-target-cmd*",
        ]
    )
    assert "PORT=" in result.stdout.str()
    # The bound: within 20 s of the start, not the 120 s startup timeout (the rest is
    # pytest's own start and the embedded proxy's, under a generous allowance for a busy machine).
    assert elapsed < 60, elapsed


def test_leading_python_is_pytests_own_interpreter(
    pytester: pytest.Pytester, toxiproxy_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A `python` first on PATH that is not the one running pytest, as a venv's pytest run
    # without activating the venv finds.
    fake_bin = pytester.path / "fake-bin"
    fake_bin.mkdir()
    for name in ("python", "python3"):
        fake = fake_bin / name
        fake.write_text("#!/bin/sh\necho 'the wrong python' >&2\nexit 7\n")
        fake.chmod(0o755)
    pytester.path.joinpath("app.py").write_text(SILENT_PORT_APP)
    pytester.makepyfile(READY_ONLY_TEST)
    monkeypatch.setenv("PATH", f"{fake_bin}{os.pathsep}{os.environ.get('PATH', '')}")
    result = pytester.runpytest_subprocess(
        "--streamguard",
        "--streamguard-toxiproxy",
        toxiproxy_url,
        "--streamguard-target-cmd",
        "python app.py --port {port}",
        "--streamguard-ready-path",
        "/",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=1)
    assert "the wrong python" not in result.stdout.str()


def test_target_cwd_from_the_ini_file_is_relative_to_it(
    pytester: pytest.Pytester, toxiproxy_url: str
) -> None:
    # A monorepo: the app lives in services/gateway, pytest runs from the root.
    app_dir = pytester.path / "services" / "gateway"
    app_dir.mkdir(parents=True)
    app_dir.joinpath("app.py").write_text(SILENT_PORT_APP)
    pytester.makeini(
        "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
        "streamguard_target_cwd = services/gateway\n"
        "streamguard_target_cmd = python app.py\n"
        "streamguard_ready_path = /\n"
    )
    pytester.makepyfile(READY_ONLY_TEST)
    result = pytester.runpytest_subprocess(
        "--streamguard", "--streamguard-toxiproxy", toxiproxy_url, "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1)


def test_target_cwd_that_is_not_a_directory(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(READY_ONLY_TEST)
    result = pytester.runpytest_subprocess(
        "--streamguard",
        "--streamguard-target-cmd",
        "python app.py",
        "-o",
        "streamguard_target_cwd=no/such/dir",
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*'no/such/dir' from ini key streamguard_target_cwd is not a valid "
            "streamguard_target_cwd:*"
        ]
    )


def test_the_summary_names_the_command_that_ran(
    pytester: pytest.Pytester, toxiproxy_url: str
) -> None:
    # The header at the start shows the template ({port}); the summary, what ran on which port.
    cmd = f"{sys.executable} app.py --port {{port}}"
    result = run_app(
        pytester, toxiproxy_url, PORT_FLAG_APP, cmd, "--streamguard-json", "report.json"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["streamguard: target=command python app.py --port {port}, *"])
    (line,) = [line for line in result.outlines if line.startswith("target: http://")]
    port = line.split("127.0.0.1:", 1)[1].split(" ", 1)[0]
    assert line.startswith(
        f"target: http://127.0.0.1:{port} (started as python app.py --port {port}); "
    )
    report = json.loads(pytester.path.joinpath("report.json").read_text())
    assert report["target_command"] == f"python app.py --port {port}"
