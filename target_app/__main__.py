"""``python -m target_app``."""

import importlib.util
import logging
import os
import sys

# The packages of the target extra, checked before any of them is imported: a missing one is
# a line that says what to install, not a traceback from deep inside the imports.
_MISSING = [m for m in ("torch", "transformers", "uvicorn") if importlib.util.find_spec(m) is None]
if _MISSING:
    print(
        f"error: the bundled target needs {', '.join(_MISSING)}, not installed: "
        "pip install 'pytest-streamguard[target]'",
        file=sys.stderr,
        flush=True,
    )
    os._exit(2)

from .cli import main  # noqa: E402 -- after the check above, on purpose

status = main()
# Everything the target owns is closed by now (sockets, engine thread, lifespan). Finalizing an
# interpreter with torch and transformers loaded takes another second or more, which would
# break the "exit within --shutdown-grace + 1 s" promise for no benefit: the OS frees memory.
logging.shutdown()
sys.stdout.flush()
sys.stderr.flush()
os._exit(status)
