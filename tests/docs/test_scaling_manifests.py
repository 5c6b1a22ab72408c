"""docs/scaling.md's Kubernetes manifests and commands: they parse, and what the pods publish
is what the test runs are told (image, API port, proxy ports, where Toxiproxy dials the app).

Nothing here is applied to a cluster; the page says so."""

from __future__ import annotations

import re
import shlex
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from doc_blocks import DOCS, ROOT, blocks

PAGE = DOCS / "scaling.md"
WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"
API_PORT = 8474


def _documents() -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for block in blocks(PAGE):
        if block.language != "yaml":
            continue
        for doc in yaml.safe_load_all(block.code):
            assert isinstance(doc, dict), f"{block.where}: a YAML document that is not a mapping"
            assert {"apiVersion", "kind", "metadata"} <= set(doc), block.where
            found.append(doc)
    return found


def _of_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for doc in _documents() if doc["kind"] == kind]


def _pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = doc["spec"]["template"]["spec"]
    return spec


def _is_toxiproxy(container: dict[str, Any]) -> bool:
    return str(container["image"]).startswith("ghcr.io/shopify/toxiproxy:")


def _workflow_toxiproxy_image() -> str:
    workflow = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    (service,) = workflow["jobs"]["stream-deadlines"]["services"].values()
    image: str = service["image"]
    return image


def _service_for(deployment: dict[str, Any]) -> dict[str, Any]:
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"] == labels
    (service,) = [s for s in _of_kind("Service") if s["spec"]["selector"].items() <= labels.items()]
    return service


def _toxiproxy_deployments() -> list[dict[str, Any]]:
    return [
        d
        for d in _of_kind("Deployment")
        if any(_is_toxiproxy(c) for c in _pod_spec(d)["containers"])
    ]


def _options(words: list[str]) -> dict[str, str]:
    """``--streamguard-*`` options with their values, as ``--opt=value`` or ``--opt value``."""
    options: dict[str, str] = {}
    for i, word in enumerate(words):
        if not word.startswith("--streamguard-"):
            continue
        name, eq, value = word.partition("=")
        if not eq and i + 1 < len(words) and not words[i + 1].startswith("-"):
            value = words[i + 1]
        options[name] = value
    return options


def _runs() -> list[tuple[str, dict[str, str]]]:
    """Every test run on the page that names a Toxiproxy: a Job's command, or a shell block's
    pytest command."""
    runs: list[tuple[str, dict[str, str]]] = []
    for job in _of_kind("Job"):
        for container in _pod_spec(job)["containers"]:
            words = [*container.get("command", []), *container.get("args", [])]
            runs.append((f"Job {job['metadata']['name']}", _options(words)))
    for block in blocks(PAGE):
        if block.language != "bash":
            continue
        for command in block.code.replace("\\\n", " ").splitlines():
            if "pytest" in command and "--streamguard-toxiproxy" in command:
                runs.append((block.where, _options(shlex.split(command))))
    return [(where, options) for where, options in runs if "--streamguard-toxiproxy" in options]


def test_every_yaml_block_parses_into_kubernetes_objects() -> None:
    kinds = {doc["kind"] for doc in _documents()}
    assert {"Deployment", "Service", "Job", "RayCluster"} <= kinds


def test_toxiproxy_containers_run_ci_s_image_with_the_api_on_every_interface() -> None:
    deployments = _toxiproxy_deployments()
    # The sidecar and the Service of its own.
    assert len(deployments) == 2
    for deployment in deployments:
        (toxiproxy,) = [c for c in _pod_spec(deployment)["containers"] if _is_toxiproxy(c)]
        assert toxiproxy["image"] == _workflow_toxiproxy_image()
        assert toxiproxy["args"] == ["-host=0.0.0.0", f"-port={API_PORT}"]
        assert API_PORT in [p["containerPort"] for p in toxiproxy["ports"]]


def test_each_run_dials_a_published_api_and_proxy_ports() -> None:
    runs = _runs()
    # The sidecar's Job, the Service's command and the KubeRay head command.
    assert len(runs) == 3, runs
    deployments = {_service_for(d)["metadata"]["name"]: d for d in _toxiproxy_deployments()}
    for where, options in runs:
        api = urlsplit(options["--streamguard-toxiproxy"])
        assert api.port == API_PORT, where
        deployment = deployments[str(api.hostname)]
        containers = _pod_spec(deployment)["containers"]
        (toxiproxy,) = [c for c in containers if _is_toxiproxy(c)]
        published = {
            p["port"]
            for p in _service_for(deployment)["spec"]["ports"]
            if p["port"] == p["targetPort"]
        }
        assert API_PORT in published, where
        # Listen everywhere in the pod; the clients dial the API's host (the Service).
        assert options["--streamguard-proxy-host"] == "0.0.0.0", where
        low, high = (int(p) for p in options["--streamguard-proxy-ports"].split("-"))
        ports = set(range(low, high + 1))
        assert API_PORT not in ports, where
        assert ports <= published, where
        assert ports <= {p["containerPort"] for p in toxiproxy["ports"]}, where
        target = urlsplit(options["--streamguard-target-url"])
        app = [c for c in containers if not _is_toxiproxy(c)]
        if app:
            # A sidecar dials the app in its own pod, on the port the app listens on.
            assert options["--streamguard-upstream-host"] == "127.0.0.1", where
            (server,) = app
            assert target.port in [p["containerPort"] for p in server["ports"]], where
            assert target.hostname == api.hostname, where
        else:
            # A Toxiproxy of its own dials the app's Service, the target URL's host.
            assert options["--streamguard-upstream-host"] == target.hostname, where
            assert target.hostname != api.hostname, where


def test_the_kuberay_run_joins_the_cluster_it_runs_in() -> None:
    (cluster,) = _of_kind("RayCluster")
    head = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"]
    images = {c["image"] for c in head}
    for group in cluster["spec"]["workerGroupSpecs"]:
        images |= {c["image"] for c in group["template"]["spec"]["containers"]}
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
    # Every node imports the plugin: one image for all.
    assert len(images) == 1
    head_ports = {p["containerPort"] for c in head for p in c.get("ports", [])}
    text = PAGE.read_text(encoding="utf-8")
    for port in re.findall(r"ray://[\w.-]+:(\d+)", text):
        assert int(port) in head_ports
    ray_runs = [options for _, options in _runs() if "--streamguard-ray" in options]
    assert [options["--streamguard-ray"] for options in ray_runs] == ["auto"]


@pytest.mark.parametrize(
    "option",
    [
        "--streamguard-toxiproxy",
        "--streamguard-proxy-host",
        "--streamguard-proxy-ports",
        "--streamguard-upstream-host",
        "--streamguard-ray auto",
        "python -m pytest_streamguard.report A.json B.json -o merged.html --json merged.json",
    ],
)
def test_the_page_names_what_the_manifests_use(option: str) -> None:
    assert option in PAGE.read_text(encoding="utf-8")
