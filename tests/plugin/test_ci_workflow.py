"""``.github/workflows/ci.yml``: it parses, and its jobs do what the README says they do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

WORKFLOW = Path(__file__).resolve().parents[2] / ".github" / "workflows" / "ci.yml"
README = Path(__file__).resolve().parents[2] / "README.md"
CI_PAGE = Path(__file__).resolve().parents[2] / "docs" / "ci.md"


def _workflow() -> dict[Any, Any]:
    raw = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    assert isinstance(raw, dict)
    return raw


def _runs(job: dict[str, Any]) -> str:
    return "\n".join(step.get("run", "") for step in job["steps"])


def test_workflow_parses_with_a_make_test_job_and_a_real_toxiproxy_job() -> None:
    workflow = _workflow()
    # YAML 1.1 reads the bare key `on` as True.
    assert set(workflow.get("on", workflow.get(True))) == {"push", "pull_request"}
    jobs = workflow["jobs"]
    assert set(jobs) == {"test", "examples-real-toxiproxy"}
    assert "make test" in _runs(jobs["test"])
    examples = jobs["examples-real-toxiproxy"]
    runs = _runs(examples)
    assert "ghcr.io/shopify/toxiproxy:" in runs
    assert "python -m pytest examples" in runs
    assert "--streamguard-toxiproxy http://127.0.0.1:8474" in runs
    assert "--junitxml reports/examples-junit.xml" in runs
    assert "--streamguard-html reports/examples.html" in runs
    uploads = [s for s in examples["steps"] if str(s.get("uses", "")).startswith("actions/upload")]
    assert len(uploads) == 1
    assert uploads[0]["if"] == "always()"
    paths = uploads[0]["with"]["path"].split()
    assert {"reports/examples.html", "reports/examples-junit.xml"} <= set(paths)


@pytest.mark.parametrize(
    ("page", "heading"),
    [(README, "## Running in CI"), (CI_PAGE, "## A workflow with the real Toxiproxy")],
    ids=["README", "docs-ci"],
)
def test_docs_show_the_snippet_of_the_real_toxiproxy_job(page: Path, heading: str) -> None:
    text = page.read_text(encoding="utf-8")
    workflow = WORKFLOW.read_text(encoding="utf-8")
    start = text.index("```yaml\n", text.index(heading)) + len("```yaml\n")
    snippet = text[start : text.index("```", start)]
    # The documented steps are the workflow's own, line for line.
    for line in snippet.strip().splitlines():
        assert line.strip() in workflow, line
    assert "ghcr.io/shopify/toxiproxy" in snippet
