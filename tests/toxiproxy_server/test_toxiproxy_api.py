"""Raw-HTTP conformance of the embedded server with Toxiproxy 2.12's API."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable

import httpx
import pytest
from toxiproxy_helpers import Upstream

ERROR_TYPE = "text/plain; charset=utf-8"


def error_of(response: httpx.Response) -> tuple[int, str]:
    """Status and error text of a Go ``http.Error`` JSON body (with its trailing newline)."""
    assert response.headers["content-type"] == ERROR_TYPE
    assert response.text.endswith("\n")
    body = json.loads(response.text)
    assert body["status"] == response.status_code
    return response.status_code, body["error"]


def test_version_body_is_exact(api: httpx.Client) -> None:
    response = api.get("/version")
    assert response.status_code == 200
    assert response.text == '{"version": "2.12.0"}\n'
    assert response.headers["content-type"] == "application/json;charset=utf-8"
    assert len(response.headers["x-toxiproxy-request-id"]) == 20


def test_unknown_path_wrong_method_and_browser(api: httpx.Client) -> None:
    missing = api.get("/nope")
    assert (missing.status_code, missing.text) == (404, "404 page not found\n")
    assert "x-toxiproxy-request-id" not in missing.headers
    wrong = api.put("/proxies")
    assert (wrong.status_code, wrong.text) == (405, "")
    browser = api.get("/proxies", headers={"User-Agent": "Mozilla/5.0 (X11)"})
    assert (browser.status_code, browser.text) == (403, "User agent not allowed\n")
    assert api.get("/proxies", headers={"User-Agent": "Wget/1.0"}).status_code == 200


def test_proxy_lifecycle_shapes(api: httpx.Client, upstream: Callable[..., Upstream]) -> None:
    target = upstream()
    created = api.post(
        "/proxies", json={"name": "one", "listen": "localhost:0", "upstream": target.address}
    )
    assert created.status_code == 201
    body = created.json()
    host, port = body["listen"].rsplit(":", 1)
    assert host == "127.0.0.1"
    assert int(port) > 0
    assert body == {
        "name": "one",
        "listen": body["listen"],
        "upstream": target.address,
        "enabled": True,
        "Logger": {},
        "toxics": [],
    }
    assert api.get("/proxies").json() == {"one": body}
    assert api.get("/proxies/one").json() == body
    disabled = api.patch("/proxies/one", json={"enabled": False})
    assert disabled.status_code == 200
    assert disabled.json()["enabled"] is False
    assert disabled.json()["listen"] == body["listen"]
    enabled = api.post("/proxies/one", json={"enabled": True})
    assert enabled.json()["enabled"] is True
    assert api.delete("/proxies/one").status_code == 204
    assert error_of(api.delete("/proxies/one")) == (404, "proxy not found")


def test_disabled_create_keeps_unresolved_listen(
    api: httpx.Client, upstream: Callable[..., Upstream]
) -> None:
    body = {"name": "off", "listen": "localhost:0", "upstream": upstream().address}
    created = api.post("/proxies", json={**body, "enabled": False})
    assert created.status_code == 201
    assert created.json()["listen"] == "localhost:0"
    assert created.json()["enabled"] is False


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        (b"", 400, "bad request body: EOF"),
        (b"{nope", 400, "bad request body: "),
        (b'{"upstream": "127.0.0.1:1"}', 400, "missing required field: name"),
        (b'{"name": "x"}', 400, "missing required field: upstream"),
        (b'{"name": 5, "upstream": "127.0.0.1:1"}', 400, "bad request body: json: cannot"),
        (b'{"name": "a b", "upstream": "127.0.0.1:1"}', 400, "invalid proxy name 'a b'"),
        (b'{"name": "x", "upstream": "nowhere"}', 400, "invalid upstream 'nowhere'"),
    ],
)
def test_create_proxy_errors(api: httpx.Client, body: bytes, status: int, error: str) -> None:
    code, text = error_of(api.post("/proxies", content=body))
    assert code == status
    assert text.startswith(error)


def test_conflicts_and_bind_failure(api: httpx.Client, upstream: Callable[..., Upstream]) -> None:
    target = upstream()
    first = api.post("/proxies", json={"name": "a", "listen": "127.0.0.1:0", "upstream": "h:1"})
    listen = first.json()["listen"]
    again = api.post("/proxies", json={"name": "a", "upstream": target.address})
    assert error_of(again) == (409, "proxy already exists")
    clash = api.post("/proxies", json={"name": "b", "listen": listen, "upstream": "h:1"})
    assert error_of(clash) == (500, f"listen tcp {listen}: bind: address already in use")
    assert "b" not in api.get("/proxies").json()
    assert api.get("/proxies/a").status_code == 200


def test_toxic_crud_shapes(api: httpx.Client, proxy: Callable[..., str]) -> None:
    proxy("p")
    created = api.post(
        "/proxies/p/toxics", json={"type": "latency", "attributes": {"latency": 10, "jitter": 5}}
    )
    assert created.status_code == 200
    assert created.json() == {
        "attributes": {"latency": 10, "jitter": 5},
        "name": "latency_downstream",
        "type": "latency",
        "stream": "downstream",
        "toxicity": 1,
    }
    upper = api.post(
        "/proxies/p/toxics", json={"type": "noop", "stream": "UPSTREAM", "toxicity": 0.2}
    )
    assert upper.json()["name"] == "noop_UPSTREAM"
    assert upper.json()["toxicity"] == 0.2
    listed = api.get("/proxies/p/toxics").json()
    assert [t["name"] for t in listed] == ["noop_UPSTREAM", "latency_downstream"]
    assert api.get("/proxies/p").json()["toxics"] == listed
    patched = api.patch(
        "/proxies/p/toxics/latency_downstream", json={"attributes": {"latency": 20}}
    )
    assert patched.json()["attributes"] == {"latency": 20, "jitter": 5}
    assert patched.json()["toxicity"] == 1
    assert api.get("/proxies/p/toxics/latency_downstream").json() == patched.json()
    assert api.delete("/proxies/p/toxics/latency_downstream").status_code == 204
    assert error_of(api.get("/proxies/p/toxics/latency_downstream")) == (404, "toxic not found")
    assert error_of(api.delete("/proxies/p/toxics/nope")) == (404, "toxic not found")
    assert error_of(api.get("/proxies/zz/toxics")) == (404, "proxy not found")


@pytest.mark.parametrize(
    ("toxic", "status", "error"),
    [
        ({"type": "latency", "stream": "sideways"}, 400, "stream was invalid"),
        ({"type": "explode"}, 400, "invalid toxic type"),
        ({"type": "latency", "name": "dup"}, 409, "toxic already exists"),
        ({"type": "latency", "name": "dup", "stream": "upstream"}, 409, "toxic already exists"),
        ({"type": "latency", "attributes": {"latency": "x"}}, 400, "bad request body: json:"),
        ({"type": "latency", "attributes": {"latency": -1}}, 400, "invalid latency attribute"),
        ({"type": "bandwidth", "attributes": {"rate": -5}}, 400, "invalid bandwidth attribute"),
        ({"type": "slicer", "attributes": {"average_size": 0}}, 400, "invalid slicer attribute"),
        ({"type": "limit_data", "attributes": {"bytes": -1}}, 400, "invalid limit_data"),
        ({"type": "timeout", "attributes": {"timeout": 10**12}}, 400, "invalid timeout attribute"),
        ({"type": "latency", "name": "bad/name?"}, 400, "invalid toxic name"),
        ({"type": "latency", "toxicity": "1"}, 400, "bad request body: json:"),
    ],
)
def test_toxic_errors(
    api: httpx.Client, proxy: Callable[..., str], toxic: dict[str, object], status: int, error: str
) -> None:
    proxy("p")
    assert api.post("/proxies/p/toxics", json={"type": "noop", "name": "dup"}).status_code == 200
    code, text = error_of(api.post("/proxies/p/toxics", json=toxic))
    assert code == status
    assert text.startswith(error), text
    assert [t["name"] for t in api.get("/proxies/p/toxics").json()] == ["dup"]


def test_nan_toxicity_and_huge_body_are_rejected(
    api: httpx.Client, proxy: Callable[..., str]
) -> None:
    proxy("p")
    nan = api.post("/proxies/p/toxics", content=b'{"type": "noop", "toxicity": NaN}')
    assert error_of(nan)[0] == 400
    huge = api.post("/proxies", content=b" " * (2 * 1024 * 1024))
    code, text = error_of(huge)
    assert code == 400
    assert "at most 1 MiB" in text


def test_populate_and_reset(api: httpx.Client, upstream: Callable[..., Upstream]) -> None:
    target = upstream()
    first = [
        {"name": "pa", "listen": "127.0.0.1:0", "upstream": target.address},
        {"name": "pb", "listen": "127.0.0.1:0", "upstream": target.address, "enabled": False},
    ]
    response = api.post("/populate", json=first)
    assert response.status_code == 201
    assert response.headers["content-type"] == "application/json"
    proxies = response.json()["proxies"]
    assert [(p["name"], p["enabled"]) for p in proxies] == [("pa", True), ("pb", False)]
    listen = proxies[0]["listen"]
    api.post("/proxies/pa/toxics", json={"type": "noop"})
    kept = api.post(
        "/populate", json=[{"name": "pa", "listen": listen, "upstream": target.address}]
    )
    assert kept.json()["proxies"][0]["toxics"] != []
    bad = api.post("/populate", json=[{"name": "pc", "upstream": "h:1"}, {"upstream": "h:1"}])
    assert bad.status_code == 400
    assert bad.json() == {
        "error": "missing required field: name at proxy 2",
        "status": 400,
        "proxies": None,
    }
    assert "pc" not in api.get("/proxies").json()
    not_a_list = api.post("/populate", json={"name": "x"})
    assert not_a_list.status_code == 400
    assert not_a_list.json()["error"].startswith("bad request body: json: cannot unmarshal")
    reset = api.post("/reset")
    assert reset.status_code == 204
    after = api.get("/proxies").json()
    assert after["pa"]["toxics"] == []
    assert after["pb"]["enabled"] is True


def test_metrics_are_prometheus_text(api: httpx.Client, proxy: Callable[..., str]) -> None:
    listen = proxy("m")
    host, port = listen.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(b"ping")
        assert sock.recv(4) == b"ping"
    from prometheus_client.parser import text_string_to_metric_families

    def sent() -> float:
        text = api.get("/metrics").text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "toxiproxy_proxy_sent_bytes_total" and sample.labels == {
                    "direction": "downstream",
                    "proxy": "m",
                    "listener": listen,
                    "upstream": sample.labels["upstream"],
                }:
                    return sample.value
        return 0.0

    from toxiproxy_helpers import wait_for

    wait_for(lambda: sent() == 4.0, 5, "the downstream byte counter to reach 4")
