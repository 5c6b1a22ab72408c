"""An nginx ingress in front of ``--upstream HOST:PORT``, configured as nginx's documentation
and the usual guides for server-sent events say: HTTP/1.1 to the upstream with keep-alive,
``proxy_buffering off``, ``proxy_read_timeout`` ``--read-timeout`` seconds, its error log on
stderr (as in a container). ``--buffer-gzip`` is the misconfiguration of the incident table:
``proxy_buffering on`` and ``gzip on`` for event streams. nginx listens on ``--port``; this
script writes the config into a temporary prefix, runs nginx in the foreground and removes the
prefix when it is stopped (SIGTERM, SIGINT).
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

CONFIG = """\
daemon off;
master_process off;
error_log stderr warn;
pid {prefix}/nginx.pid;

events {{
    worker_connections 256;
}}

http {{
    access_log off;
    client_body_temp_path {prefix}/client_body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;

    upstream gateway {{
        server {upstream};
        keepalive 16;
    }}

    server {{
        listen 127.0.0.1:{port};

        location / {{
            proxy_pass http://gateway;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_read_timeout {read_timeout_ms}ms;
            {buffering}
        }}
    }}
}}
"""

STREAMING = "proxy_buffering off;\n            proxy_cache off;"
BUFFERED_GZIP = (
    "proxy_buffering on;\n            gzip on;\n            gzip_proxied any;\n"
    "            gzip_min_length 1;\n            gzip_types text/event-stream application/json;"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--read-timeout", type=float, default=60.0)
    parser.add_argument("--buffer-gzip", action="store_true")
    args = parser.parse_args()
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    prefix = Path(tempfile.mkdtemp(prefix="stack-nginx-"))
    try:
        conf = prefix / "nginx.conf"
        conf.write_text(
            CONFIG.format(
                prefix=prefix,
                upstream=args.upstream,
                port=args.port,
                read_timeout_ms=round(args.read_timeout * 1000),
                buffering=BUFFERED_GZIP if args.buffer_gzip else STREAMING,
            )
        )
        with subprocess.Popen(
            [nginx, "-p", f"{prefix}/", "-e", "stderr", "-c", str(conf)]
        ) as server:
            for number in (signal.SIGTERM, signal.SIGINT):
                signal.signal(number, lambda *_: server.terminate())
            print(f"nginx listening on http://127.0.0.1:{args.port}", flush=True)
            sys.exit(server.wait())
    finally:
        shutil.rmtree(prefix, ignore_errors=True)


if __name__ == "__main__":
    main()
