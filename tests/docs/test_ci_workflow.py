"""``.github/workflows/ci.yml`` and docs/ci.md's job for a user's repository: they parse, the
workflow installs only what each job needs, and the documented job is the one CI runs."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from plugin_helpers import NODE_GATEWAY, NODE_STREAM_TEST
from toxiproxy_fronts import toxiproxy_2x

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"
README = ROOT / "README.md"
CI_PAGE = ROOT / "docs" / "ci.md"
PYPROJECT = ROOT / "pyproject.toml"

USER_JOB = "stream-deadlines"
TORCH_CPU_INDEX = "--index-url https://download.pytorch.org/whl/cpu"


def _load(text: str) -> dict[Any, Any]:
    raw = yaml.safe_load(text)
    assert isinstance(raw, dict)
    # YAML 1.1 reads the bare key `on` as True.
    if True in raw:
        raw["on"] = raw.pop(True)
    return raw


def _workflow() -> dict[Any, Any]:
    return _load(WORKFLOW.read_text(encoding="utf-8"))


def _documented_workflow() -> dict[Any, Any]:
    text = CI_PAGE.read_text(encoding="utf-8")
    section = text.index("## A job for your repository")
    start = text.index("```yaml\n", section) + len("```yaml\n")
    return _load(text[start : text.index("```", start)])


def _steps(job: dict[str, Any]) -> dict[str, str]:
    """Each named step's shell script."""
    return {step["name"]: step["run"] for step in job["steps"] if "run" in step}


def _runs(job: dict[str, Any]) -> str:
    return "\n".join(step.get("run", "") for step in job["steps"])


def _uses(job: dict[str, Any], action: str) -> list[dict[str, Any]]:
    return [s for s in job["steps"] if str(s.get("uses", "")).startswith(action + "@")]


def test_workflow_has_the_make_test_job_and_the_documented_user_job() -> None:
    workflow = _workflow()
    assert set(workflow["on"]) == {"push", "pull_request"}
    assert set(workflow["jobs"]) == {"test", USER_JOB}
    assert "make test" in _runs(workflow["jobs"]["test"])


def test_the_test_job_installs_torchs_cpu_build_at_the_target_extras_pin() -> None:
    target = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]["target"]
    (pin,) = [r for r in target if r.startswith("torch")]
    job = _workflow()["jobs"]["test"]
    runs = _runs(job).splitlines()
    torch_lines = [line for line in runs if TORCH_CPU_INDEX in line]
    assert len(torch_lines) == 1
    assert torch_lines[0].split() == [
        ".venv/bin/python",
        "-m",
        "pip",
        "install",
        pin,
        *TORCH_CPU_INDEX.split(),
    ]
    # Into make's .venv, before make runs (which would otherwise take the CUDA build).
    steps = [s.get("run", "") for s in job["steps"]]
    torch_step = next(i for i, run in enumerate(steps) if TORCH_CPU_INDEX in run)
    make_step = next(i for i, run in enumerate(steps) if "make test" in run)
    assert "python -m venv .venv" in steps[torch_step]
    assert torch_step < make_step


def test_the_test_job_gets_a_real_chromium_not_ubuntus_snap_stub() -> None:
    job = _workflow()["jobs"]["test"]
    runs = _runs(job)
    assert not re.search(r"apt-get install[^\n]*\bchromium\b", runs)
    (chrome,) = _uses(job, "browser-actions/setup-chrome")
    assert chrome["id"] == "chrome"
    # tests/report drives /usr/bin/chromium.
    assert '"${{ steps.chrome.outputs.chrome-path }}" /usr/bin/chromium' in runs


def test_the_user_job_installs_the_plugin_plain() -> None:
    job = _workflow()["jobs"][USER_JOB]
    assert job["env"]["STREAMGUARD"] == "."
    assert job["env"]["APP_SETUP"] == ""
    # No extra: the example app needs no torch, and no test-only plugin in the user's run.
    assert "[" not in _runs(job).replace("[ -z", "")
    install = _steps(job)["Install the plugin"]
    assert install.splitlines()[-1] == 'python -m pip install "$STREAMGUARD"'


def test_the_documented_job_is_the_workflows_job_but_for_its_env_values() -> None:
    documented = _documented_workflow()
    assert set(documented["on"]) == {"push", "pull_request"}
    assert documented["permissions"] == {"contents": "read"}
    assert set(documented["jobs"]) == {USER_JOB}
    user_job = documented["jobs"][USER_JOB]
    ours = _workflow()["jobs"][USER_JOB]
    assert set(user_job["env"]) == set(ours["env"])
    assert {k: v for k, v in user_job.items() if k != "env"} == {
        k: v for k, v in ours.items() if k != "env"
    }
    # The one value a user must set is empty, first in env and marked; every other value works
    # as it stands for a Python app with a requirements.txt, app.py and tests/streams.
    assert user_job["env"]["STREAMGUARD"] == ""
    assert next(iter(user_job["env"])) == "STREAMGUARD"
    text = CI_PAGE.read_text(encoding="utf-8")
    assert re.search(
        r"# SET THIS: where pip gets pytest-streamguard[^\n]*\n(      #[^\n]*\n)*"
        r'      STREAMGUARD: ""\n',
        text,
    )
    assert "OWNER" not in text
    assert "{port}" in user_job["env"]["APP_CMD"]


def test_the_user_job_runs_both_toxiproxies_and_keeps_every_report() -> None:
    job = _documented_workflow()["jobs"][USER_JOB]
    runs = [s.get("run", "") for s in job["steps"]]
    pytest_runs = [r for r in runs if "python -m pytest" in r]
    assert len(pytest_runs) == 2
    embedded, official = pytest_runs
    assert "--streamguard-toxiproxy" not in embedded
    assert "--streamguard-toxiproxy http://127.0.0.1:8474" in official
    for run in pytest_runs:
        assert '--streamguard-target-cmd "$APP_CMD"' in run
        # Paths joined by "=": a path given apart is taken for a path to collect once it
        # exists (issue 45: the same job run again in one folder failed).
        for flag in ("--streamguard-json=reports/", "--streamguard-html=reports/", "--junitxml="):
            assert flag in run
    (upload,) = _uses(job, "actions/upload-artifact")
    assert upload["if"] == "${{ !cancelled() }}"
    assert upload["with"]["path"] == "reports/"
    # The second run and the upload happen also when the first run fails.
    official_step = next(s for s in job["steps"] if s.get("run") == official)
    assert official_step["if"] == "${{ !cancelled() }}"


def test_the_readme_points_to_the_documented_job() -> None:
    assert "(docs/ci.md#a-job-for-your-repository)" in README.read_text(encoding="utf-8")


def _flag(run: str, flag: str) -> str:
    """The value given to ``flag`` in a (backslash-continued) shell command."""
    words = shlex.split(run.replace("\\\n", " "))
    assert words.count(flag) == 1, (flag, run)
    return words[words.index(flag) + 1]


def test_the_official_toxiproxy_is_a_service_container_reached_through_published_ports() -> None:
    job = _documented_workflow()["jobs"][USER_JOB]
    runs = [s.get("run", "") for s in job["steps"]]
    # No container started by hand on the runner's network any more.
    assert not any("docker" in r for r in runs)
    (service,) = job["services"].values()
    assert re.fullmatch(r"ghcr\.io/shopify/toxiproxy:\d+\.\d+\.\d+", service["image"])
    # The image's default command is its only command: no options that would replace it.
    assert set(service) == {"image", "ports"}
    ports = service["ports"]
    assert "8474:8474" in ports
    official = next(r for r in runs if "--streamguard-toxiproxy" in r)
    assert _flag(official, "--streamguard-toxiproxy") == "http://127.0.0.1:8474"
    # Proxies listen on every interface of the container, on ports published one to one; the
    # tests dial the API's host (a wildcard proxy host means that).
    assert _flag(official, "--streamguard-proxy-host") == "0.0.0.0"
    proxy_ports = _flag(official, "--streamguard-proxy-ports")
    assert f"{proxy_ports}:{proxy_ports}" in ports
    low, high = (int(p) for p in proxy_ports.split("-"))
    assert 8474 not in range(low, high + 1)
    assert high - low + 1 >= 2
    # The container reaches the app on the runner at the default bridge's gateway, and the app
    # listens there because this run appends the flags that make it listen everywhere.
    assert _flag(official, "--streamguard-upstream-host") == "172.17.0.1"
    assert _flag(official, "--streamguard-target-args") == "$APP_ALL_INTERFACES"
    assert job["env"]["APP_ALL_INTERFACES"] == "--host 0.0.0.0"
    # The API is waited for before the run, on the address the run gives.
    wait = next(i for i, r in enumerate(runs) if "curl" in r)
    assert "http://127.0.0.1:8474/version" in runs[wait]
    assert wait < runs.index(official)
    embedded = next(r for r in runs if "python -m pytest" in r)
    assert "--streamguard-proxy-host" not in embedded
    assert "--streamguard-target-args" not in embedded


def _node_variant() -> dict[Any, Any]:
    text = CI_PAGE.read_text(encoding="utf-8")
    section = text.index("### A Node.js (or any other) app")
    start = text.index("```yaml\n", section) + len("```yaml\n")
    raw = yaml.safe_load(text[start : text.index("```", start)])
    assert isinstance(raw, dict)
    return raw


def _node_job() -> dict[Any, Any]:
    """The documented job with the Node variant's env and steps before "Set up the app"."""
    job = _documented_workflow()["jobs"][USER_JOB]
    variant = _node_variant()
    setup = next(i for i, step in enumerate(job["steps"]) if step.get("name") == "Set up the app")
    return {**job, "env": variant["env"], "steps": variant["steps"] + job["steps"][setup:]}


def test_the_node_variant_changes_only_env_and_adds_node() -> None:
    job = _documented_workflow()["jobs"][USER_JOB]
    variant = _node_variant()
    assert set(variant["env"]) == set(job["env"])
    assert variant["env"]["APP_SETUP"] == "npm ci"
    assert "{port}" not in variant["env"]["APP_CMD"]
    setup = next(i for i, step in enumerate(job["steps"]) if step.get("name") == "Set up the app")
    # Its steps are the job's own up to the app's setup, plus actions/setup-node.
    assert [s for s in variant["steps"] if not s["uses"].startswith("actions/setup-node@")] == (
        job["steps"][:setup]
    )
    assert _uses({"steps": variant["steps"]}, "actions/setup-node")


def test_the_node_variants_steps_run_against_a_node_app(tmp_path: Path) -> None:
    node = shutil.which("node")
    npm = shutil.which("npm")
    if node is None or npm is None:
        if os.environ.get("CI"):
            pytest.fail("node and npm must be on PATH in CI: the Node.js job variant is tested")
        pytest.skip("node and npm are not on PATH (the Node.js job variant needs them)")
    job = _node_job()
    repo = tmp_path / "gateway-repo"
    tests = repo / "tests" / "streams"
    tests.mkdir(parents=True)
    shutil.copy(NODE_GATEWAY, repo / "server.js")
    (tests / "test_gateway.py").write_text(NODE_STREAM_TEST)
    package = '{"name": "gateway", "version": "1.0.0", "private": true}\n'
    (repo / "package.json").write_text(package)
    lock = (
        '{"name": "gateway", "version": "1.0.0", "lockfileVersion": 3, "requires": true, '
        '"packages": {"": {"name": "gateway", "version": "1.0.0"}}}\n'
    )
    (repo / "package-lock.json").write_text(lock)
    # The runner's python is this suite's, which has the plugin installed: the "Install the
    # plugin" step is what tests/install checks; here the job's own commands run as written.
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")},
        **{k: str(v) for k, v in job["env"].items()},
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    steps = {step.get("name"): step.get("run") for step in job["steps"]}
    for name in ("Set up the app", "Stream tests, embedded Toxiproxy"):
        result = subprocess.run(
            ["bash", "-e", "-c", steps[name]],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert result.returncode == 0, (name, result.stdout + result.stderr)
    assert re.search(r"=+ 1 passed in ", result.stdout), result.stdout
    assert (repo / "reports" / "embedded.json").is_file()


# What a GitHub runner and the job's service container give the steps, and the loopback stand-ins
# the job's script runs with here: the service's API is a Toxiproxy 2.x on a free port (the real
# server STREAMGUARD_TOXIPROXY_SERVER names, or the 2.12.0 front of toxiproxy_fronts.py), its
# proxies listen on 127.0.0.1 and reach the app there (not on the container's every interface
# and the Docker bridge's gateway, which tests/faults/test_toxiproxy_elsewhere.py emulates).
RUNNER_API = "http://127.0.0.1:8474"
RUNNER_PROXY_HOST = "--streamguard-proxy-host 0.0.0.0"
RUNNER_BRIDGE = "172.17.0.1"
NOT_IN_A_CHECKOUT = shutil.ignore_patterns(
    ".git", ".venv", "__pycache__", "*.pyc", ".*_cache", "reports", "site", "build", "dist"
)


def _free_port_range(size: int) -> tuple[int, int]:
    """``size`` consecutive loopback ports that were free a moment ago, below Linux's
    ephemeral range."""
    for low in range(21000, 32000 - size, size):
        socks: list[socket.socket] = []
        try:
            for port in range(low, low + size):
                sock = socket.socket()
                socks.append(sock)
                sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
        return low, low + size - 1
    raise AssertionError(f"no {size} consecutive free ports between 21000 and 32000")


def _runner_python(home: Path) -> Path:
    """A fresh venv, the runner's ``python`` after actions/setup-python, that already has the
    plugin's dependencies (this suite's, through a ``.pth`` line, so the install step needs no
    package index for them) but not the plugin: the job's install step puts it there."""
    venv = home / "runner-venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    purelib = sysconfig.get_paths()["purelib"]
    (site,) = (venv / "lib").glob("python3*/site-packages")
    (site / "suite_dependencies.pth").write_text(purelib + "\n")
    return venv / "bin"


def _run_step(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A ``run:`` step as GitHub runs it on Linux (bash -e)."""
    return subprocess.run(
        ["bash", "-e", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_workflows_user_job_runs_as_a_script_on_both_toxiproxies(
    tmp_path: Path, toxiproxy_url: str
) -> None:
    """Issue 38: every ``run:`` step of ci.yml's stream-deadlines job (docs/ci.md's job but for
    its env values), in order and as written, in a checkout of this repository: the plugin
    installed by the job's own step, the examples through the embedded Toxiproxy and through a
    Toxiproxy 2.x (the chunk-fault example skipped there with its reason), and every report the
    upload step keeps. Only the runner's and the service container's addresses are replaced by
    loopback ones (RUNNER_API, RUNNER_PROXY_HOST, RUNNER_BRIDGE, the published port range)."""
    job = _workflow()["jobs"][USER_JOB]
    checkout = tmp_path / "checkout"
    shutil.copytree(ROOT, checkout, ignore=NOT_IN_A_CHECKOUT)
    runner_bin = _runner_python(tmp_path)
    low, high = _free_port_range(20)
    env = {
        **{
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("PYTEST_", "PYTHON", "STREAMGUARD_")) and k != "VIRTUAL_ENV"
        },
        **{k: str(v) for k, v in job["env"].items()},
        "APP_ALL_INTERFACES": "--host 127.0.0.1",
        "PATH": f"{runner_bin}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    official = _flag(
        _steps(job)["Stream tests, official toxiproxy-server"], "--streamguard-proxy-ports"
    )
    outputs: dict[str, str] = {}
    with toxiproxy_2x(toxiproxy_url) as api:
        for name, script in _steps(job).items():
            script = (
                script.replace(RUNNER_API, api)
                .replace(RUNNER_PROXY_HOST, "--streamguard-proxy-host 127.0.0.1")
                .replace(RUNNER_BRIDGE, "127.0.0.1")
                .replace(official, f"{low}-{high}")
            )
            result = _run_step(script, checkout, env)
            outputs[name] = result.stdout + result.stderr
            assert result.returncode == 0, (name, outputs[name])
    assert set(outputs) == {
        "Set up the app",
        "Install the plugin",
        "Stream tests, embedded Toxiproxy",
        "Wait for toxiproxy-server (ghcr.io/shopify/toxiproxy)",
        "Stream tests, official toxiproxy-server",
    }
    # The plugin the runs used is the one the install step put into the runner's venv.
    location = subprocess.run(
        [
            str(runner_bin / "python"),
            "-c",
            "import pytest_streamguard; print(pytest_streamguard.__file__)",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert location.startswith(str(tmp_path / "runner-venv")), location
    embedded = outputs["Stream tests, embedded Toxiproxy"]
    assert re.search(r"=+ 8 passed in ", embedded), embedded
    real = outputs["Stream tests, official toxiproxy-server"]
    assert re.search(r"=+ 7 passed, 1 skipped in ", real), real
    assert "toxiproxy=external" in real
    reports = sorted(p.name for p in (checkout / "reports").iterdir())
    assert reports == [
        "embedded-junit.xml",
        "embedded.html",
        "embedded.json",
        "toxiproxy-junit.xml",
        "toxiproxy.html",
        "toxiproxy.json",
    ]
    # The skipped example says why in the JUnit report the upload step keeps.
    junit = (checkout / "reports" / "toxiproxy-junit.xml").read_text(encoding="utf-8")
    assert "test_a_mid_stream_stall_is_caught" in junit
    assert "needs the embedded Toxiproxy server" in junit


def test_the_documented_job_stops_at_its_install_step_until_streamguard_is_set(
    tmp_path: Path,
) -> None:
    """docs/ci.md's job copied as it is: its install step fails at once, saying which value to
    set, instead of a pip error about a URL that is not one."""
    job = _documented_workflow()["jobs"][USER_JOB]
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")},
        **{k: str(v) for k, v in job["env"].items()},
    }
    result = _run_step(_steps(job)["Install the plugin"], tmp_path, env)
    assert result.returncode == 1
    assert result.stdout.startswith("::error::STREAMGUARD is empty: set it in the job's env"), (
        result.stdout + result.stderr
    )
    assert "pip" not in result.stderr
