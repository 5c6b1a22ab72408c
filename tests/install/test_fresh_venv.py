"""A new user's first hour, driven exactly as README.md says, in a fresh virtual environment.

The repository is copied as a clone would have it, a new venv is made with ``python -m venv``,
and the README's commands run in it word for word: the plain install from the clone (pip takes
the dependencies from the package index; no extra, so no torch), then the README's first test
against a small streaming app of the user's own, then the README's example from the clone. Each
run must pass and print no warnings summary: a warning in a user's plain run that only the
plugin's installation causes (such as pytest-asyncio's ``asyncio_default_fixture_loop_scope``
notice, which a test-only dependency once brought in) is a defect.

This needs the package index (or the pip configuration's mirror) and takes a minute or two; it
is never skipped, so a CI without it fails here and says why.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

# The README's commands, as a user copies them (compared after shell-like splitting, so line
# continuations and trailing comments do not matter).
INSTALL_FROM_CLONE = "pip install ./pytest-streamguard"
RUN_AGAINST_YOUR_APP = 'pytest --streamguard --streamguard-target-cmd "python app.py --port {port}"'
RUN_THE_EXAMPLE = (
    'pytest --streamguard --streamguard-target-cmd "python examples/stream_app.py --port {port}"'
    " examples/test_example_stream.py"
)

# What a clone has that a working tree may also hold: virtual environments, caches, builds.
NOT_IN_A_CLONE = shutil.ignore_patterns(
    ".git",
    ".venv",
    "__pycache__",
    "*.pyc",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    "reports",
    "site",
    "build",
    "dist",
    "*.egg-info",
    ".cache",
)

INSTALL_TIMEOUT_S = 900
RUN_TIMEOUT_S = 300

# A user's own small streaming app: OpenAI-style completions and a ready path that answers 200,
# started on the port the plugin picks, as the README's "Your app" paragraph asks.
USER_APP = """\
import argparse
import asyncio
import json

import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route


async def readyz(request):
    return JSONResponse({"ready": True})


async def completions(request):
    body = await request.json()

    async def events():
        for index in range(int(body.get("max_tokens", 16))):
            chunk = {"choices": [{"index": 0, "text": f"tok{index} ", "finish_reason": None}]}
            yield f"data: {json.dumps(chunk)}\\n\\n"
            await asyncio.sleep(0.01)
        last = {"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}
        yield f"data: {json.dumps(last)}\\n\\ndata: [DONE]\\n\\n"

    return StreamingResponse(events(), media_type="text/event-stream")


app = Starlette(
    routes=[
        Route("/readyz", readyz),
        Route("/v1/completions", completions, methods=["POST"]),
    ]
)

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    uvicorn.run(app, host="127.0.0.1", port=parser.parse_args().port, log_level="warning")
"""


@dataclass(frozen=True)
class FreshInstall:
    """A copy of the repository as cloned, and a venv with the plugin installed from it."""

    clone: Path
    venv: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def env(self) -> dict[str, str]:
        """The user's shell: the venv first on PATH, nothing of this suite's own run."""
        env = {
            key: value
            for key, value in os.environ.items()
            if key not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH", "VIRTUAL_ENV")
            and not key.startswith("PYTEST_")
        }
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["VIRTUAL_ENV"] = str(self.venv)
        return env

    def run(self, command: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
        """Run a README command as the user would type it into this venv's shell."""
        argv = shlex.split(command)
        program = {
            "pip": [str(self.python), "-m", "pip"],
            "pytest": [str(self.venv / "bin" / "pytest")],
        }
        return subprocess.run(
            [*program[argv[0]], *argv[1:]],
            cwd=cwd,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def readme_commands() -> list[list[str]]:
    """Every command in the README's console blocks, split as a shell would, comments dropped."""
    text = README.read_text(encoding="utf-8")
    commands: list[list[str]] = []
    for block in re.findall(r"^```console\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            if argv := shlex.split(line, comments=True):
                commands.append(argv)
    return commands


def first_python_block() -> str:
    """The README's first test, as a user copies it into their project."""
    text = README.read_text(encoding="utf-8")
    return text.split("```python\n", 1)[1].split("```", 1)[0]


def assert_clean_pass(result: subprocess.CompletedProcess[str], passed: int) -> None:
    """Exit 0, the expected number passed, and no warning of any kind in the run's output."""
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    summary = output.strip().splitlines()[-1]
    assert re.fullmatch(rf"=+ {passed} passed in [\d.]+s( \([\d:]+\))? =+", summary), output
    assert "warnings summary" not in output, output
    assert "Warning" not in output, output


@pytest.mark.parametrize("command", [INSTALL_FROM_CLONE, RUN_AGAINST_YOUR_APP, RUN_THE_EXAMPLE])
def test_the_commands_run_here_are_the_readmes(command: str) -> None:
    assert shlex.split(command) in readme_commands(), f"README.md no longer shows: {command}"


@pytest.fixture(scope="module")
def fresh_install(tmp_path_factory: pytest.TempPathFactory) -> FreshInstall:
    """The README's install from a clone, in a new venv."""
    home = tmp_path_factory.mktemp("new-user")
    clone = home / "pytest-streamguard"
    shutil.copytree(ROOT, clone, ignore=NOT_IN_A_CLONE)
    venv = home / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    install = FreshInstall(clone, venv)
    result = install.run(INSTALL_FROM_CLONE, cwd=home, timeout=INSTALL_TIMEOUT_S)
    assert result.returncode == 0, (
        "the README's install failed (it needs the package index for the dependencies):\n"
        + result.stdout
        + result.stderr
    )
    return install


def test_the_plain_install_brings_no_target_app_and_no_pytest_asyncio(
    fresh_install: FreshInstall,
) -> None:
    probe = """
import importlib.metadata as md, importlib.util as u, json, pathlib
import pytest_streamguard
package = pathlib.Path(pytest_streamguard.__file__).parent
print(json.dumps({
    "target_app": u.find_spec("target_app") is not None,
    "pytest_asyncio": u.find_spec("pytest_asyncio") is not None,
    "bundled": (package / "_bundled" / "target_app" / "__main__.py").is_file(),
    "entry_points": [ep.value for ep in md.entry_points(group="pytest11")],
    "distributions": sorted(d.metadata["Name"].lower() for d in md.distributions()),
}))
"""
    result = subprocess.run(
        [str(fresh_install.python), "-c", probe],
        cwd=fresh_install.venv,
        env=fresh_install.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    found = json.loads(result.stdout)
    # The bundled target ships inside the plugin, not as a top-level module of its own.
    assert found["target_app"] is False
    assert found["bundled"] is True
    # A test-only plugin in a user's environment changes their runs (and warns in them).
    assert found["pytest_asyncio"] is False
    assert "pytest-asyncio" not in found["distributions"]
    assert "torch" not in found["distributions"]
    assert "pytest_streamguard.plugin" in found["entry_points"]


def test_streamguard_target_without_the_target_extra_says_what_to_install(
    fresh_install: FreshInstall,
) -> None:
    result = subprocess.run(
        [str(fresh_install.venv / "bin" / "streamguard-target"), "--port", "0"],
        cwd=fresh_install.venv,
        env=fresh_install.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("streamguard-target: torch, transformers")
    assert "the bundled target needs the 'target' extra" in result.stderr


def test_the_bundled_target_without_its_extra_is_a_hint_not_a_traceback(
    fresh_install: FreshInstall, tmp_path: Path
) -> None:
    project = tmp_path / "no-target-extra"
    project.mkdir()
    (project / "test_stream.py").write_text(first_python_block())
    result = fresh_install.run("pytest --streamguard", cwd=project, timeout=RUN_TIMEOUT_S)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "error: the bundled target needs torch, transformers" in output, output
    assert "the bundled target needs the 'target' extra" in output, output
    # The target says what is missing in a line; no library's traceback comes before the hint.
    assert "Traceback" not in output, output


def test_a_users_first_test_passes_against_their_own_app(
    fresh_install: FreshInstall, tmp_path: Path
) -> None:
    project = tmp_path / "my-project"
    project.mkdir()
    (project / "app.py").write_text(USER_APP)
    (project / "test_stream.py").write_text(first_python_block())
    result = fresh_install.run(RUN_AGAINST_YOUR_APP, cwd=project, timeout=RUN_TIMEOUT_S)
    assert_clean_pass(result, passed=1)
    # The deadlines were checked on a stream that ran under the test's latency fault.
    assert re.search(r"test_stream_survives_latency .* pass +latency\(ms=100", result.stdout), (
        result.stdout
    )


def test_the_readme_example_runs_from_the_clone(fresh_install: FreshInstall) -> None:
    # From the clone's root, where the repository's own pyproject.toml names options of the
    # project's test-only plugins: examples/pytest.ini keeps it out of the example's run.
    result = fresh_install.run(RUN_THE_EXAMPLE, cwd=fresh_install.clone, timeout=RUN_TIMEOUT_S)
    assert_clean_pass(result, passed=7)
    assert re.search(r"^rootdir: .*examples\nconfigfile: pytest\.ini$", result.stdout, re.M), (
        result.stdout
    )
