"""What each real Toxiproxy 2.x release answers to ``GET /version``: the data that the wrapper's
unit tests (tests/faults/test_toxiproxy_client.py) read and the plugin's runs against each
answer (tests/faults/test_toxiproxy_client_runs.py) use; ``tests/`` is on ``sys.path`` through
``tests/conftest.py``."""

from __future__ import annotations

GO_JSON = "application/json;charset=utf-8"
GO_TEXT = "text/plain;charset=utf-8"

# What each real server answers to GET /version, byte for byte, with its content type. From
# ApiServer.Version in api.go at each tag, with Version set as goreleaser sets it for a release
# (-X ...Version=<tag without v>) and left at version.go's "git" in a build from source; each
# was also read from a server built from that tag (docs/toxiproxy.md, "Real servers checked").
RELEASE_ANSWERS: dict[str, tuple[bytes, str, str]] = {
    # 2.0 to 2.5: response.Write([]byte(Version)), no newline.
    "2.5.0": (b"2.5.0", GO_TEXT, "2.5.0"),
    "2.5.0 source build": (b"git", GO_TEXT, "git"),
    # 2.6.0: fmt.Sprintf(`{"version": "%s"}\n`, ...) -- a raw string, so backslash and n.
    "2.6.0": (b'{"version": "2.6.0"}\\n', GO_JSON, "2.6.0"),
    "2.6.0 source build": (b'{"version": "git"}\\n', GO_JSON, "git"),
    # 2.7.0 and later (Shopify/toxiproxy#538): a real newline.
    "2.12.0": (b'{"version": "2.12.0"}\n', GO_JSON, "2.12.0"),
    "2.12.0 source build": (b'{"version": "git"}\n', GO_JSON, "git"),
}
