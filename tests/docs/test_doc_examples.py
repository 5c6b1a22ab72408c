"""Every fenced ``python`` block of README.md and docs/ runs, so a changed API breaks this test.

A block that is a pytest test module (it defines ``test_*`` functions, usually with the
``streamguard`` fixture) runs in a real ``pytest --streamguard`` process against the bundled
target; the test blocks of every page go into ONE such run, so the target's start (seconds of
CPU: torch and transformers) is paid once, not once per page. A block that appears on several
pages runs once, on the first. Any other block is a script and runs with this interpreter. A
failure names the page and the line of the block's opening fence.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from doc_blocks import Block, blocks, pages, where
from plugin_helpers import INI

# Blocks that cannot run, each keyed by its page and its first line of code, with the reason.
# Reviewed: keep it empty unless a block truly cannot run here, and say why.
EXCLUDED: dict[tuple[str, str], str] = {
    (
        "docs/stacks.md",
        '"""A gateway in front of a model server (docs/stacks.md): faults on the inner hop."""',
    ): "it needs a stack, not the bundled target: it is examples/stack/test_stack.py, which "
    "tests/services/test_stacks.py runs against examples/stack/pytest.ini and checks the page "
    "shows unchanged",
}

SCRIPT_TIMEOUT_S = 120
PAGE_TIMEOUT_S = 600


def _key(block: Block) -> tuple[str, str]:
    first = next((line.strip() for line in block.code.splitlines() if line.strip()), "")
    return (where(block.path), first)


def python_blocks() -> list[Block]:
    """Every ``python`` block of every page, in page order."""
    return [b for page in pages() for b in blocks(page) if b.language in ("python", "py")]


def blocks_to_run() -> dict[Path, list[Block]]:
    """Page -> the blocks that run on it: not excluded, and not already run on an earlier page."""
    seen: set[str] = set()
    by_page: dict[Path, list[Block]] = {}
    for block in python_blocks():
        code = block.code.strip()
        if _key(block) in EXCLUDED or code in seen:
            continue
        seen.add(code)
        by_page.setdefault(block.path, []).append(block)
    return by_page


def _module_name(block: Block) -> str:
    page = re.sub(r"\W", "_", where(block.path).removesuffix(".md")).lower()
    return f"test_{page}_line{block.line}"


@dataclass(frozen=True)
class BlockRun:
    """What one ``pytest --streamguard`` run of test blocks gave: per module, the tests that
    passed and those that failed (from its JUnit XML); its exit status and output."""

    passed: Counter[str]
    failed: dict[str, list[str]]
    ret: int
    output: str

    def problems(self, test_blocks: list[Block]) -> list[str]:
        """The problems of ``test_blocks`` in this run (with the run's output when there are
        any, or when it failed with no block to blame)."""
        problems = []
        for block in test_blocks:
            name = _module_name(block)
            if name in self.failed:
                problems.append(f"{block.where}: {', '.join(self.failed[name])}")
            elif self.passed[name] == 0:
                problems.append(f"{block.where}: no test of this block passed")
        if problems or (self.ret != 0 and not self.failed):
            problems.append(f"pytest exited {self.ret}; its output:\n{self.output[-6000:]}")
        return problems


def run_test_blocks(directory: Path, test_blocks: list[Block]) -> BlockRun:
    """Run the blocks as test modules in one ``pytest --streamguard`` process in ``directory``,
    with its own ini and home, as pytester's runs have them."""
    modules = {_module_name(b): b for b in test_blocks}
    for name, block in modules.items():
        (directory / f"{name}.py").write_text(block.code)
    (directory / "pytest.ini").write_text(INI)
    junit = directory / "junit.xml"
    args = ["--streamguard", "-p", "no:cacheprovider", f"--junitxml={junit}"]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", *args, *(f"{name}.py" for name in modules)],
        cwd=directory,
        env={**os.environ, "HOME": str(directory), "PY_COLORS": "0"},
        capture_output=True,
        text=True,
        timeout=PAGE_TIMEOUT_S,
        check=False,
    )
    passed: Counter[str] = Counter()
    failed: dict[str, list[str]] = {}
    if junit.exists():
        for case in ET.parse(junit).getroot().iter("testcase"):
            module = case.get("classname", "").split(".")[0]
            bad = [c.tag for c in case if c.tag in ("failure", "error")]
            if bad:
                failed.setdefault(module, []).append(f"{case.get('name')} ({bad[0]})")
            elif case.find("skipped") is None:
                passed[module] += 1
    return BlockRun(passed, failed, result.returncode, result.stdout + result.stderr)


def run_script_block(tmp: Path, block: Block) -> list[str]:
    """Run one script block with this interpreter; the problems."""
    script = tmp / f"{_module_name(block)}.py"
    script.write_text(block.code)
    try:
        done = subprocess.run(
            [sys.executable, script.name],
            cwd=tmp,
            capture_output=True,
            text=True,
            timeout=SCRIPT_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return [f"{block.where}: the script ran over {SCRIPT_TIMEOUT_S} s"]
    if done.returncode != 0:
        return [f"{block.where}: the script exited {done.returncode}:\n{done.stderr[-3000:]}"]
    return []


def run_scripts(directory: Path, page_blocks: list[Block]) -> list[str]:
    """Run a page's script blocks one by one; the problems."""
    return [p for b in page_blocks if not b.is_test_module for p in run_script_block(directory, b)]


def run_page(directory: Path, page_blocks: list[Block]) -> list[str]:
    """Run one page's blocks: its test modules in one pytest process, its scripts one by one."""
    test_blocks = [b for b in page_blocks if b.is_test_module]
    problems = run_test_blocks(directory, test_blocks).problems(test_blocks) if test_blocks else []
    return problems + run_scripts(directory, page_blocks)


TO_RUN = blocks_to_run()


@pytest.fixture(scope="module")
def every_page_run(tmp_path_factory: pytest.TempPathFactory) -> BlockRun:
    """The test blocks of every page, run in one ``pytest --streamguard`` process."""
    test_blocks = [b for page_blocks in TO_RUN.values() for b in page_blocks if b.is_test_module]
    return run_test_blocks(tmp_path_factory.mktemp("doc-examples"), test_blocks)


@pytest.mark.parametrize("page", list(TO_RUN), ids=[where(p) for p in TO_RUN])
def test_page_examples_run(every_page_run: BlockRun, tmp_path: Path, page: Path) -> None:
    test_blocks = [b for b in TO_RUN[page] if b.is_test_module]
    problems = every_page_run.problems(test_blocks) + run_scripts(tmp_path, TO_RUN[page])
    if problems:
        pytest.fail("documentation examples broke:\n" + "\n".join(problems), pytrace=False)


def test_every_python_block_runs_or_is_excluded_with_a_reason() -> None:
    all_blocks = python_blocks()
    ran = {b.code.strip() for page_blocks in TO_RUN.values() for b in page_blocks}
    for block in all_blocks:
        assert _key(block) in EXCLUDED or block.code.strip() in ran, block.where
    keys = {_key(b) for b in all_blocks}
    for key, reason in EXCLUDED.items():
        assert key in keys, f"stale exclusion {key}: no such block any more"
        assert reason.strip(), f"exclusion {key} gives no reason"
    # The README's example is a test module; the collector sees pages under docs/ too.
    readme_blocks = [b for b in all_blocks if b.path.name == "README.md"]
    assert readme_blocks
    assert readme_blocks[0].is_test_module
    assert any("docs" in b.path.parts for b in all_blocks)


def test_a_broken_block_is_named_by_page_and_line(pytester: pytest.Pytester) -> None:
    page = pytester.path / "page.md"
    page.write_text(
        "# A page\n\n"
        "```python\n"
        "def test_fine():\n    assert True\n"
        "```\n\n"
        "```python\n"
        "def test_broken():\n    assert 1 == 2\n"
        "```\n\n"
        "```python\n"
        "raise SystemExit('script broke')\n"
        "```\n"
        "```text\nnot run\n```\n"
    )
    page_blocks = [b for b in blocks(page) if b.language == "python"]
    assert [b.line for b in page_blocks] == [3, 8, 13]
    problems = run_page(pytester.path, page_blocks)
    text = "\n".join(problems)
    assert f"{page}:8: test_broken (failure)" in text
    assert f"{page}:13: the script exited 1" in text
    assert "script broke" in text
    assert f"{page}:3" not in text
