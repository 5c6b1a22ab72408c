"""The public surface: every name a test types is importable from :mod:`pytest_streamguard` and
listed in its ``__all__`` (pinned here), and what README.md, docs/ and examples/ show a user
imports from there and nowhere deeper (httpx's ``tests/test_exported_members.py``).

``python -m pytest_streamguard.report`` and ``python -m pytest_streamguard.toxiproxy_server``
are programs, not imports: the page checks below leave them alone.
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import pytest_streamguard

ROOT = Path(__file__).resolve().parent.parent

# Written as words (the list of __all__ line for line would be a mirror of it, not a pin).
EXPORTED = """
    AnthropicFormat Assembly Chunk ClientJudge Conclusion Deadline DeadlineViolation
    FaultRecord Faults FaultsNotFired Finding FindingsFailed FindingsUnchecked Frame GeminiFormat
    Headroom HeadroomLevel Hop Ingress IngressError LoadPlan LoadResult NDJSONFormat
    NeedsEmbeddedToxiproxy OllamaFormat OpenAIChatFormat OpenAIResponsesFormat Output Piece
    ProfileError ProtocolError RawFormat Reading ReadyPathError Recorded Replay SSEFormat
    ServerError SetupError ShardStartError StackStamps StartupError StreamError StreamFormat
    StreamGuard StreamTrace StreamguardError
    StreamguardFailure TGIFormat Target TestRecord ToxiproxyError ToxiproxyServer Violation
    __version__ chosen findings_of group_findings not_cancelled percentile read_chunks
    register_judge target_gauges trace_findings
""".split()  # noqa: SIM905
# Every name but the version string is a class or a function defined in one of the modules.
DEFINED = [name for name in EXPORTED if name != "__version__"]

# What loading the plugin's runtime would pull in; `import pytest_streamguard` runs on every
# pytest start through the entry point, plugin on or off.
HEAVY = ("httpx", "httpcore", "toxiproxy", "prometheus_client", "starlette", "uvicorn")


def test_all_is_the_pinned_sorted_list() -> None:
    assert sorted(EXPORTED) == EXPORTED
    assert pytest_streamguard.__all__ == EXPORTED


@pytest.mark.parametrize("name", DEFINED)
def test_each_name_is_the_object_its_defining_module_holds(name: str) -> None:
    # filterwarnings = error: a name looked up through a moved module path would fail here.
    value = getattr(pytest_streamguard, name)
    assert value.__name__ == name
    home = value.__module__
    assert home.startswith("pytest_streamguard."), home
    assert getattr(importlib.import_module(home), name) is value


def test_dir_shows_every_public_name() -> None:
    assert set(EXPORTED) <= set(dir(pytest_streamguard))


def test_star_import_gives_every_public_name() -> None:
    namespace: dict[str, object] = {}
    exec("from pytest_streamguard import *", namespace)
    assert set(EXPORTED) <= namespace.keys()


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchName'"):
        _ = pytest_streamguard.NoSuchName


def test_every_exception_a_user_may_catch_is_public() -> None:
    from pytest_streamguard import errors

    # ClientErrorAnswer never leaves the plugin: the process starter turns it into a
    # ReadyPathError.
    catchable = {
        name
        for name in errors.__all__
        if issubclass(getattr(errors, name), errors.StreamguardError)
    } - {"ClientErrorAnswer"}
    assert catchable <= set(EXPORTED)
    assert "ClientErrorAnswer" not in EXPORTED


def test_importing_the_package_loads_none_of_the_runtime() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, sys, pytest_streamguard; print(json.dumps(sorted(sys.modules)))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=ROOT,
    )
    loaded = set(json.loads(done.stdout))
    assert sorted(m for m in loaded if m.split(".")[0] in HEAVY) == []
    ours = sorted(m for m in loaded if m.split(".")[0] == "pytest_streamguard")
    assert ours == ["pytest_streamguard"]


# --- what README.md, docs/ and examples/ show a user ------------------------------------------

# `from pytest_streamguard.stream.trace import StreamTrace`, `import pytest_streamguard.guard`
DEEP_IMPORT = re.compile(
    r"^\s*(?:from\s+pytest_streamguard\.[\w.]+\s+import\b|import\s+pytest_streamguard\.)", re.M
)
# `::: pytest_streamguard.verdict.findings.Finding` (mkdocstrings); `::: pytest_streamguard.X`
# is the public name.
DIRECTIVE = re.compile(r"^:::\s*(pytest_streamguard(?:\.\w+)+)", re.M)
# The fixtures are asked for by name, never imported: the reference documents them from the
# module that defines them, and the page shows no path.
FIXTURES_DIRECTIVE = "pytest_streamguard.plugin.fixtures"
# A public name shown by a deep path in the text, as `pytest_streamguard.faults.inject.chosen`.
DEEP_NAME = re.compile(r"pytest_streamguard(?:\.\w+)+\.(\w+)")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_INLINE_CODE = re.compile(r"`([^`]+)`")


def user_pages() -> list[Path]:
    """README.md, every page of docs/ and every file of examples/ (not the bytecode Python
    leaves there once the examples have run)."""
    examples = sorted(
        p for p in (ROOT / "examples").rglob("*") if p.is_file() and "__pycache__" not in p.parts
    )
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *examples]


def inline_code(text: str) -> list[tuple[int, str]]:
    """The inline code spans of a Markdown page outside its fenced blocks (a fenced block may
    be output, which shows an exception by its module path), each with the line it starts on;
    a span may run over a line end, as Markdown allows."""
    kept: list[str] = []
    fence: str | None = None
    for line in text.splitlines():
        opening = _FENCE.match(line)
        if opening and (fence is None or opening[1].startswith(fence)):
            fence = opening[1][0] * 3 if fence is None else None
            kept.append("")
        else:
            kept.append(line if fence is None else "")
    prose = "\n".join(kept)
    return [
        (prose.count("\n", 0, m.start()) + 1, re.sub(r"\.\s+", ".", " ".join(m[1].split())))
        for m in _INLINE_CODE.finditer(prose)
    ]


def deep_paths(path: Path, text: str) -> list[str]:
    """Each place ``text`` imports, documents or shows a name by a path below the package."""
    name = path.relative_to(ROOT).as_posix()

    def line_of(offset: int) -> int:
        return text.count("\n", 0, offset) + 1

    found = [f"{name}:{line_of(m.start())}: {m[0].strip()}" for m in DEEP_IMPORT.finditer(text)]
    found += [
        f"{name}:{line_of(m.start())}: ::: {m[1]}"
        for m in DIRECTIVE.finditer(text)
        if m[1].count(".") > 1 and m[1] != FIXTURES_DIRECTIVE
    ]
    if path.suffix == ".md":
        found += [
            f"{name}:{number}: `{span}`"
            for number, span in inline_code(text)
            for m in DEEP_NAME.finditer(span)
            if m[1] in EXPORTED
        ]
    return found


def test_the_page_check_finds_each_kind_of_deep_path() -> None:
    page = ROOT / "docs" / "example.md"
    text = (
        "Call `pytest_streamguard.faults.inject.chosen(1, 2, 0.5)`, or `chosen` itself.\n"
        "A span over a line end: `not_cancelled` and `pytest_streamguard.verdict.findings.\n"
        "not_cancelled`.\n"
        "\n"
        "```python\n"
        "from pytest_streamguard.services.ingress import Ingress\n"
        "import pytest_streamguard.guard\n"
        "from pytest_streamguard import SSEFormat\n"
        "```\n"
        "\n"
        "```text\n"
        "E   pytest_streamguard.errors.FindingsFailed: streamguard finding(s)\n"
        "```\n"
        "\n"
        "::: pytest_streamguard.load.LoadResult\n"
        "\n"
        "::: pytest_streamguard.LoadResult\n"
        "\n"
        "::: pytest_streamguard.plugin.fixtures\n"
        "\n"
        "`python -m pytest_streamguard.report a.json b.json`\n"
    )
    assert deep_paths(page, text) == [
        "docs/example.md:6: from pytest_streamguard.services.ingress import",
        "docs/example.md:7: import pytest_streamguard.",
        "docs/example.md:15: ::: pytest_streamguard.load.LoadResult",
        "docs/example.md:1: `pytest_streamguard.faults.inject.chosen(1, 2, 0.5)`",
        "docs/example.md:2: `pytest_streamguard.verdict.findings.not_cancelled`",
    ]


def test_pages_and_examples_import_only_from_the_package() -> None:
    found = [line for path in user_pages() for line in deep_paths(path, path.read_text())]
    if found:
        pytest.fail(
            "import these from pytest_streamguard itself (and list a missing one in its "
            "__all__):\n" + "\n".join(f"  {line}" for line in found),
            pytrace=False,
        )


def test_the_reference_documents_every_public_name() -> None:
    text = (ROOT / "docs" / "reference.md").read_text()
    documented = [m[1] for m in DIRECTIVE.finditer(text) if m[1] != FIXTURES_DIRECTIVE]
    assert sorted(documented) == sorted(f"pytest_streamguard.{name}" for name in DEFINED)
