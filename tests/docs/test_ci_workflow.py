"""``.github/workflows/ci.yml`` and docs/ci.md's job for a user's repository: they parse, the
workflow installs only what each job needs, the documented job (and its stack form) is the one
CI runs, and its steps run as written."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from plugin_helpers import NODE_GATEWAY, NODE_STREAM_TEST
from served import EXAMPLES, STREAM_APP
from toxiproxy_fronts import toxiproxy_2x

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"
README = ROOT / "README.md"
CI_PAGE = ROOT / "docs" / "ci.md"
PYPROJECT = ROOT / "pyproject.toml"

USER_JOB = "stream-deadlines"
STACK_JOB = "stream-deadlines-stack"
STACK_FORM = "### A stack (several services) in this job"
NODE_FORM = "### A Node.js (or any other) app"
# What a stack's test steps drop from the job's (a stack refuses them), with their values.
TARGET_FLAGS = ("--streamguard-target-cmd", "--streamguard-ready-path", "--streamguard-target-args")
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
    assert set(workflow["jobs"]) == {"test", USER_JOB, STACK_JOB}
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


def _words(run: str) -> list[str]:
    """A (backslash-continued) shell command's words."""
    return shlex.split(run.replace("\\\n", " "))


def _flag(run: str, flag: str) -> str:
    """The value given to ``flag`` in a (backslash-continued) shell command."""
    words = _words(run)
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


def _variant(heading: str) -> dict[Any, Any]:
    """The YAML block of docs/ci.md's section ``heading``: a form of the job above it."""
    text = CI_PAGE.read_text(encoding="utf-8")
    section = text.index(heading)
    start = text.index("```yaml\n", section) + len("```yaml\n")
    raw = yaml.safe_load(text[start : text.index("```", start)])
    assert isinstance(raw, dict)
    return raw


def _node_job() -> dict[Any, Any]:
    """The documented job with the Node variant's env and steps before "Set up the app"."""
    job = _documented_workflow()["jobs"][USER_JOB]
    variant = _variant(NODE_FORM)
    setup = next(i for i, step in enumerate(job["steps"]) if step.get("name") == "Set up the app")
    return {**job, "env": variant["env"], "steps": variant["steps"] + job["steps"][setup:]}


def test_the_node_variant_changes_only_env_and_adds_node() -> None:
    job = _documented_workflow()["jobs"][USER_JOB]
    variant = _variant(NODE_FORM)
    assert set(variant["env"]) == set(job["env"])
    assert variant["env"]["APP_SETUP"] == "npm ci"
    assert "{port}" not in variant["env"]["APP_CMD"]
    setup = next(i for i, step in enumerate(job["steps"]) if step.get("name") == "Set up the app")
    # Its steps are the job's own up to the app's setup, plus actions/setup-node.
    assert [s for s in variant["steps"] if not s["uses"].startswith("actions/setup-node@")] == (
        job["steps"][:setup]
    )
    assert _uses({"steps": variant["steps"]}, "actions/setup-node")


def _stack_job() -> dict[Any, Any]:
    """The documented job in its stack form: the stack section's env, and its steps in place of
    the job's steps of the same name."""
    job = _documented_workflow()["jobs"][USER_JOB]
    variant = _variant(STACK_FORM)
    replaced = {step["name"]: step for step in variant["steps"]}
    steps = [replaced.get(step.get("name", ""), step) for step in job["steps"]]
    return {**job, "env": variant["env"], "steps": steps}


def test_the_stack_form_drops_only_the_targets_flags_from_the_test_steps() -> None:
    """docs/ci.md's stack form: no target in its env (the ini names the services), and its two
    test steps are the job's, flag for flag, without the ones a stack refuses."""
    job = _documented_workflow()["jobs"][USER_JOB]
    variant = _variant(STACK_FORM)
    assert variant["env"] == {
        "STREAMGUARD": "",
        "APP_SETUP": job["env"]["APP_SETUP"],
        "STREAM_TESTS": "stack",
    }
    names = [step["name"] for step in variant["steps"]]
    assert names == ["Stream tests, embedded Toxiproxy", "Stream tests, official toxiproxy-server"]
    for step in variant["steps"]:
        (original,) = [s for s in job["steps"] if s.get("name") == step["name"]]
        assert {k: v for k, v in step.items() if k != "run"} == {
            k: v for k, v in original.items() if k != "run"
        }
        words = _words(original["run"])
        for flag in TARGET_FLAGS:
            if flag in words:
                at = words.index(flag)
                del words[at : at + 2]
        # The same run, flag for flag (proxy host, ports, bridge, report paths), but the target's.
        assert _words(step["run"]) == words
        assert not set(TARGET_FLAGS) & set(_words(step["run"]))


def test_ci_runs_the_stack_form_on_examples_stack() -> None:
    """ci.yml's stack job is docs/ci.md's stack form, on examples/stack."""
    ours = _workflow()["jobs"][STACK_JOB]
    documented = _stack_job()
    assert set(ours["env"]) == set(documented["env"])
    assert ours["env"] == {"STREAMGUARD": ".", "APP_SETUP": "", "STREAM_TESTS": "examples/stack"}
    (upload,) = _uses(ours, "actions/upload-artifact")
    (documented_upload,) = _uses(documented, "actions/upload-artifact")
    # One workflow run's jobs cannot upload under one name: the only other difference.
    assert upload["with"]["name"] != documented_upload["with"]["name"]
    upload["with"]["name"] = documented_upload["with"]["name"]
    assert {k: v for k, v in ours.items() if k != "env"} == {
        k: v for k, v in documented.items() if k != "env"
    }


# What a GitHub runner and the job's service container give the steps, and the loopback stand-ins
# the job's script runs with here: the service's API is a Toxiproxy 2.x on a free port (the real
# server STREAMGUARD_TOXIPROXY_SERVER names, or the 2.12.0 front of toxiproxy_fronts.py), its
# proxies listen on 127.0.0.1 and reach the app there (not on the container's every interface
# and the Docker bridge's gateway, which tests/faults/test_toxiproxy_elsewhere.py emulates).
RUNNER_API = "http://127.0.0.1:8474"
RUNNER_PROXY_HOST = "--streamguard-proxy-host 0.0.0.0"
RUNNER_BRIDGE = "172.17.0.1"
# The app's or the services' flag that binds every interface; tests bind loopback only.
ALL_INTERFACES = "--host 0.0.0.0"
NOT_IN_A_CHECKOUT = shutil.ignore_patterns(
    ".git", ".venv", "__pycache__", "*.pyc", ".*_cache", "reports", "site", "build", "dist"
)
# The steps of ci.yml's user job that set the runner up, run once for every test of the job.
SETUP_STEPS = ("Set up the app", "Install the plugin")
# What the job's two test runs leave in reports/, which its upload step keeps.
REPORTS = [
    "embedded-junit.xml",
    "embedded.html",
    "embedded.json",
    "toxiproxy-junit.xml",
    "toxiproxy.html",
    "toxiproxy.json",
]


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


def _installed_closure(requirements: list[str]) -> list[importlib.metadata.Distribution]:
    """This suite's installed distributions that ``requirements`` need, their own requirements
    and the extras asked for included."""
    found: dict[str, importlib.metadata.Distribution] = {}
    seen: set[tuple[str, str]] = set()
    todo = [Requirement(raw) for raw in requirements]
    while todo:
        requirement = todo.pop()
        dist = importlib.metadata.distribution(requirement.name)
        found[canonicalize_name(requirement.name)] = dist
        for extra in ("", *requirement.extras):
            if (requirement.name, extra) in seen:
                continue
            seen.add((requirement.name, extra))
            for raw in dist.requires or []:
                needed = Requirement(raw)
                if needed.marker is None or needed.marker.evaluate({"extra": extra}):
                    todo.append(needed)
    return list(found.values())


def _runner_python(home: Path) -> Path:
    """A fresh venv, the runner's ``python`` after actions/setup-python, that already has the
    plugin's dependencies and pip (this suite's installed copies, linked into one folder that a
    ``.pth`` line names, so the install step needs no package index for them) but not the
    plugin, which the job's install step puts there, nor any test tool this suite has."""
    venv = home / "runner-venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    dependencies = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    installed = home / "runner-dependencies"
    installed.mkdir()
    for dist in _installed_closure([*dependencies, "pip"]):
        for top in {PurePath(str(f)).parts[0] for f in dist.files or []}:
            if top not in ("..", "__pycache__") and not (installed / top).exists():
                (installed / top).symlink_to(Path(str(dist.locate_file(top))))
    (site,) = (venv / "lib").glob("python3*/site-packages")
    (site / "runner_dependencies.pth").write_text(f"{installed}\n")
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


@dataclass(frozen=True)
class Runner:
    """A GitHub runner as the user job leaves it after its setup steps: a copy of this
    repository (the job's checkout) and a fresh venv (``bin``) with the plugin that the job's
    own install step put there; ``outputs`` are those steps' output by name."""

    home: Path
    checkout: Path
    bin: Path
    outputs: dict[str, str]

    def env(self, job_env: dict[str, Any]) -> dict[str, str]:
        """A step's environment: the runner's, with ``job_env`` and this venv first on PATH."""
        inherited = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("PYTEST_", "PYTHON", "STREAMGUARD_")) and k != "VIRTUAL_ENV"
        }
        return {
            **inherited,
            **{k: str(v) for k, v in job_env.items()},
            "PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}",
        }


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Runner:
    """ci.yml's user job up to its tests, once for the module: its checkout copied, a fresh
    venv, and its setup steps (the plugin's install among them) run as written."""
    job = _workflow()["jobs"][USER_JOB]
    home = tmp_path_factory.mktemp("runner")
    checkout = home / "checkout"
    shutil.copytree(ROOT, checkout, ignore=NOT_IN_A_CHECKOUT)
    setup = Runner(home, checkout, _runner_python(home), {})
    for name in SETUP_STEPS:
        result = _run_step(_steps(job)[name], checkout, setup.env(job["env"]))
        setup.outputs[name] = result.stdout + result.stderr
        assert result.returncode == 0, (name, setup.outputs[name])
    return setup


def _reports(repo: Path) -> list[str]:
    return sorted(p.name for p in (repo / "reports").iterdir())


def _on_loopback(script: str, api: str, ports: tuple[int, int], published: str, bridge: str) -> str:
    """A step's script with the runner's and the container's addresses replaced by the loopback
    stand-ins: the API, the proxies' host, the bridge's gateway and the published port range."""
    return (
        script.replace(RUNNER_API, api)
        .replace(RUNNER_PROXY_HOST, "--streamguard-proxy-host 127.0.0.1")
        .replace(RUNNER_BRIDGE, bridge)
        .replace(published, f"{ports[0]}-{ports[1]}")
    )


def _run_tests(
    job: dict[str, Any], cwd: Path, env: dict[str, str], api: str, bridge: str = "127.0.0.1"
) -> dict[str, str]:
    """Every ``run:`` step of ``job`` after its setup steps, in order, on loopback (``bridge``
    standing in for the Docker bridge's gateway): each step's output by name; a step that
    fails fails the test."""
    published = _flag(
        _steps(job)["Stream tests, official toxiproxy-server"], "--streamguard-proxy-ports"
    )
    ports = _free_port_range(20)
    outputs: dict[str, str] = {}
    for name, script in _steps(job).items():
        if name in SETUP_STEPS:
            continue
        result = _run_step(_on_loopback(script, api, ports, published, bridge), cwd, env)
        outputs[name] = result.stdout + result.stderr
        assert result.returncode == 0, (name, outputs[name])
    return outputs


def test_the_workflows_user_job_runs_as_a_script_on_both_toxiproxies(
    runner: Runner, toxiproxy_url: str
) -> None:
    """Issue 38: every ``run:`` step of ci.yml's stream-deadlines job (docs/ci.md's job but for
    its env values), in order and as written, in a checkout of this repository: the plugin
    installed by the job's own step, the examples through the embedded Toxiproxy and through a
    Toxiproxy 2.x (the chunk-fault example skipped there with its reason), and every report the
    upload step keeps. Only the runner's and the service container's addresses are replaced by
    loopback ones (RUNNER_API, RUNNER_PROXY_HOST, RUNNER_BRIDGE, the published port range)."""
    job = _workflow()["jobs"][USER_JOB]
    assert job["env"]["APP_ALL_INTERFACES"] == ALL_INTERFACES
    env = {**runner.env(job["env"]), "APP_ALL_INTERFACES": "--host 127.0.0.1"}
    with toxiproxy_2x(toxiproxy_url) as api:
        outputs = _run_tests(job, runner.checkout, env, api)
    assert [*runner.outputs, *outputs] == [
        "Set up the app",
        "Install the plugin",
        "Stream tests, embedded Toxiproxy",
        "Wait for toxiproxy-server (ghcr.io/shopify/toxiproxy)",
        "Stream tests, official toxiproxy-server",
    ]
    # The plugin the runs used is the one the install step put into the runner's venv.
    location = subprocess.run(
        [
            str(runner.bin / "python"),
            "-c",
            "import pytest_streamguard; print(pytest_streamguard.__file__)",
        ],
        cwd=runner.home,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert location.startswith(str(runner.home / "runner-venv")), location
    embedded = outputs["Stream tests, embedded Toxiproxy"]
    assert re.search(r"=+ 8 passed in ", embedded), embedded
    real = outputs["Stream tests, official toxiproxy-server"]
    assert re.search(r"=+ 7 passed, 1 skipped in ", real), real
    assert "toxiproxy=external" in real
    assert _reports(runner.checkout) == REPORTS
    # The skipped example says why in the JUnit report the upload step keeps.
    junit = (runner.checkout / "reports" / "toxiproxy-junit.xml").read_text(encoding="utf-8")
    assert "test_a_mid_stream_stall_is_caught" in junit
    assert "needs the embedded Toxiproxy server" in junit


def test_the_documented_stack_job_runs_in_a_new_repository_on_both_toxiproxies(
    tmp_path: Path, runner: Runner, toxiproxy_url: str
) -> None:
    """Issue 45: docs/ci.md's job in its stack form, its test steps as written, in a new
    repository of examples/stack's files (``STREAM_TESTS``, whose pytest.ini starts the model
    server ``../stream_app.py`` and the gateway), with the plugin the user job installed. The
    runner's and the container's addresses are the loopback ones of the job above, but the
    bridge's gateway is 127.0.0.3: each service binds ``{host}``, the address its proxy dials
    (the upstream host), so the second run fails unless the services listen exactly there."""
    job = _stack_job()
    repo = tmp_path / "stack-repo"
    stack = repo / job["env"]["STREAM_TESTS"]
    shutil.copytree(EXAMPLES / "stack", stack, ignore=NOT_IN_A_CHECKOUT)
    shutil.copy(STREAM_APP, repo / "stream_app.py")
    services = (stack / "pytest.ini").read_text(encoding="utf-8")
    assert services.count(" --host {host}\n") == 2, services
    with toxiproxy_2x(toxiproxy_url) as api:
        outputs = _run_tests(job, repo, runner.env(job["env"]), api, bridge="127.0.0.3")
    embedded = outputs["Stream tests, embedded Toxiproxy"]
    assert re.search(r"=+ 3 passed in ", embedded), embedded
    assert re.search(r"stack: model \(\S+ \S+ --port \d+ --host 127\.0\.0\.1\)", embedded), embedded
    real = outputs["Stream tests, official toxiproxy-server"]
    assert re.search(r"=+ 2 passed, 1 skipped in ", real), real
    assert "toxiproxy=external" in real
    assert re.search(r"stack: model \(\S+ \S+ --port \d+ --host 127\.0\.0\.3\)", real), real
    assert _reports(repo) == REPORTS
    # The inner hop's cut landed on the embedded server, and is gone by the next test.
    report = json.loads((repo / "reports" / "embedded.json").read_text(encoding="utf-8"))
    tests = {t["nodeid"].rsplit("::", 1)[1]: t for t in report["tests"]}
    [cut] = tests["test_model_cut_reaches_the_client"]["faults"]
    assert (cut["kind"], cut["hop"], cut["fired"]) == ("cut", "model", True)
    assert tests["test_next_test_streams_whole"]["faults"] == []
    junit = (repo / "reports" / "toxiproxy-junit.xml").read_text(encoding="utf-8")
    assert "test_model_cut_reaches_the_client" in junit
    assert "needs the embedded Toxiproxy server" in junit


def test_the_node_variants_steps_run_against_a_node_app(tmp_path: Path, runner: Runner) -> None:
    """docs/ci.md's Node.js form: its app setup (npm ci) and its embedded run, as written, on a
    small Node app, with the plugin the user job installed."""
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
    env = runner.env(job["env"])
    for name in ("Set up the app", "Stream tests, embedded Toxiproxy"):
        result = _run_step(_steps(job)[name], repo, env)
        assert result.returncode == 0, (name, result.stdout + result.stderr)
    assert re.search(r"=+ 1 passed in ", result.stdout), result.stdout
    assert (repo / "reports" / "embedded.json").is_file()


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
