"""Options of the project's own test suite (not of the plugin), and the servers that the tests
of several families share: the example app and one embedded Toxiproxy, both reached by URL.

Being the rootdir's conftest, this file puts ``tests/`` on ``sys.path`` (pytest's prepend
import mode), so ``served.py`` and ``polling.py`` import by name from every folder."""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio._backends._asyncio
import anyio.abc
import anyio.streams.tls  # noqa: F401 -- see below
import httpcore
import httpcore._backends.anyio  # noqa: F401 -- see below
import pytest
from plugin_helpers import HEAVY, IMPORTED_AT_COLLECTION, INI, streamguard_runner
from served import (
    STREAM_APP,
    embedded_toxiproxy,
    load_stream_app,
    loopback_socket,
    serve_in_thread,
)

import pytest_streamguard.common.tls  # noqa: F401 -- see below

# httpx imports httpcore lazily and caches its exception classes on first use. pytester's
# in-process runs drop modules first imported inside them, so a later run would get new
# httpcore classes that httpx no longer maps; importing httpcore here keeps one copy. The same
# for anyio, which imports its submodules on first use: its asyncio backend, kept by anyio after
# pytester dropped it, keyed a socket's attributes by the first copy's markers while httpcore
# asked with a second copy's, so an https stream found no local address (in one run of many).
# The plugin's one TLS context (common.tls) too: imported here, its cache outlives every test
# (pytester drops a module first imported in its test), so a worker loads the CA bundle once.


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[object]:
    """Between tests, collect the garbage a test left and freeze what survives: a worker's heap
    grows with its in-process runs, and a full collection of it (100 to 445 ms, 89 in 125 s
    on 2 workers) stalled the app thread and the client of an in-process run mid-stream. A
    collection now scans only what the test before made."""
    try:
        return (yield)
    finally:
        gc.collect()
        gc.freeze()


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--fuzz-scale``: how many times the CI default of requests the fuzz and storm tests send."""
    parser.addoption(
        "--fuzz-scale",
        type=float,
        default=1.0,
        help="Multiply the number of requests each fuzz and storm test sends "
        "(default 1: a few thousand in all, as CI runs them)",
    )


@pytest.fixture
def fuzz_scale(request: pytest.FixtureRequest) -> float:
    """How many times the CI default of requests a fuzz or storm test sends (--fuzz-scale)."""
    return float(request.config.getoption("--fuzz-scale"))


@pytest.fixture(scope="session")
def app_url() -> Iterator[str]:
    """The example streaming app, served in a thread by real uvicorn on a port-0 socket."""
    with loopback_socket() as sock, serve_in_thread(load_stream_app().app, [sock]):
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture(scope="session")
def toxiproxy_url() -> Iterator[str]:
    """One embedded Toxiproxy server for the whole run; pytester runs reach it by URL."""
    with embedded_toxiproxy() as url:
        yield url


@pytest.fixture(scope="session")
def app_cmd() -> str:
    """A --streamguard-target-cmd that starts the example app on the plugin's chosen port."""
    return f"{sys.executable} {STREAM_APP} --port {{port}}"


@pytest.fixture(autouse=True)
def _quiet_inner_asyncio(request: pytest.FixtureRequest) -> None:
    """Give pytester runs an ini that pytest-asyncio does not warn about."""
    if "pytester" in request.fixturenames:
        request.getfixturevalue("pytester").makeini(INI)


@pytest.fixture
def run(
    pytester: pytest.Pytester, app_url: str, toxiproxy_url: str
) -> Callable[..., pytest.RunResult]:
    """Run pytest in-process with the plugin on, against the shared app and server."""
    return streamguard_runner(pytester, toxiproxy_url, app_url, subprocess=False)


@pytest.fixture(autouse=True)
def _no_inherited_terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inner pytest runs write their streamguard summary as to a log, one row per test.

    The plugin fits that summary to the terminal when it knows the width (a terminal, or
    ``COLUMNS``); pytest-xdist sets ``COLUMNS`` in its workers, so without this an inner run's
    layout would depend on whether the suite runs in parallel. A test about the width sets
    ``COLUMNS`` itself.
    """
    monkeypatch.delenv("COLUMNS", raising=False)


# What the inner runs leave out of the installed pytest plugins: pytest-randomly (see below),
# and three that come with libraries the suite installs (faker, anyio, platformdirs) and that no
# inner run uses: loading them took a sixth of a pytest subprocess's start (0.15 s of CPU).
INNER_ADDOPTS = "-p no:randomly -p no:faker -p no:anyio -p no:platformdirs"
# pytester's runs (over 200 in the suite) leave out those of tests/plugin/test_other_plugins.py
# too, which names each (``-p html``) where it runs beside it: they took a quarter of such a
# run's 0.35 s of CPU to start. (Not this process's xdist workers: pytest-metadata's controller
# expects theirs.)
PYTESTER_ADDOPTS = (
    f"{INNER_ADDOPTS} -p no:html -p no:html_fixtures -p no:metadata -p no:pytest_cov "
    "-p no:rerunfailures -p no:timeout"
)


def pytest_configure(config: pytest.Config) -> None:
    """The pytest runs the suite starts itself (``python -m pytest`` in a subprocess: the report
    run, the cleanup and lifecycle tests) leave out the same plugins as pytester's (see below):
    they inherit this process's ``PYTEST_ADDOPTS``."""
    del config
    os.environ["PYTEST_ADDOPTS"] = f"{os.environ.get('PYTEST_ADDOPTS', '')} {INNER_ADDOPTS}".strip()


@pytest.fixture(autouse=True)
def _no_randomly_in_inner_runs(request: pytest.FixtureRequest) -> None:
    """pytester's runs, in-process or in a subprocess, do not load pytest-randomly (nor the
    other plugins of :data:`PYTESTER_ADDOPTS`).

    It is installed for tests/plugin/test_other_plugins.py, and an installed pytest plugin loads
    in every run: it would shuffle an inner run's tests and reseed ``random`` before each, while
    the inner runs here assert on their tests' order. pytester empties ``PYTEST_ADDOPTS`` when it
    starts, so this sets it afterwards; a test that wants pytest-randomly passes ``-p randomly``.
    """
    if "pytester" in request.fixturenames:
        request.getfixturevalue("pytester")
        request.getfixturevalue("monkeypatch").setenv("PYTEST_ADDOPTS", PYTESTER_ADDOPTS)


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This worker's model cache (a ``STREAMGUARD_CACHE``): where the bundled targets its tests
    start (pytester's runs, tests/target_app's, the served copy of tests/serve) keep the tiny
    model, built by the first that needs it (2.7 s of CPU) and loaded by the others."""
    return tmp_path_factory.mktemp("model-cache")


@pytest.fixture(autouse=True)
def _one_model_cache_for_inner_runs(request: pytest.FixtureRequest) -> None:
    """pytester's runs use the worker's :func:`model_cache`.

    pytester gives each run a fresh home, and with it an empty ``~/.cache``: every bundled target
    an inner run started built the tiny model again before loading it.
    """
    if "pytester" in request.fixturenames:
        cache = request.getfixturevalue("model_cache")
        request.getfixturevalue("monkeypatch").setenv("STREAMGUARD_CACHE", str(cache))


# The files that take longest, run first. `make test` hands whole files to its pytest-xdist
# workers (--dist loadfile) in collection order (--no-loadscope-reorder; xdist's own order is by
# test count), so a long file that came last would leave one worker running it alone at the end
# (with the times below, verdict/test_findings.py, last but a few in collection order, left one
# worker alone for about 50 s). Ranked by each file's seconds alone on a 2-core machine
# (`pytest FILE`, 2026-12-06) plus half its CPU seconds (what a neighbour on the other worker
# slows it by); most of the longest wait on streams, faults and timeouts rather than on the CPU.
# Only an order: a file missing here runs in its usual place.
SLOW_FIRST = (
    "headroom/test_headroom_runs.py",  # 118 s, 23 s of CPU
    "confusion/test_stack_confusion.py",  # about 70 s
    "confusion/test_confusion_blame.py",
    "confusion/test_confusion.py",
    "verdict/test_findings.py",
    "formats/test_format_replays.py",
    "formats/test_differential.py",
    "lifecycle/test_kill_lifecycle.py",
    "services/test_stacks.py",
    "report/test_baseline.py",
    "judge/test_client_judges.py",
    "target_app/test_hostile_clients.py",
    "plugin/test_error_messages.py",
    "target_app/test_http_engines.py",
    "install/test_fresh_venv.py",
    "docs/test_ci_workflow.py",
    "target_app/test_shutdown.py",
    "plugin/test_plugin_runs.py",
    "plugin/test_target_port.py",
    "load/test_load_ray.py",
    "target_app/test_storm.py",  # 18 s, 18 s of CPU
)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Note which of :data:`HEAVY` collection imported (tests/test_suite_runs_plain.py)."""
    session.config.stash[IMPORTED_AT_COLLECTION] = [m for m in HEAVY if m in sys.modules]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Move the files of :data:`SLOW_FIRST` to the front, in that order (a stable sort)."""
    tests_dir = config.rootpath / "tests"
    rank = {tests_dir / name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path, len(SLOW_FIRST)))
