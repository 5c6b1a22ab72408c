"""Byte-compile, once, what the suite's processes import (``make install`` runs it).

pip installs with ``--no-compile`` (compiling all of torch, transformers and ray is about a
minute of CPU), so Python compiles a module when a run first imports it. In a fresh clone the
suite's first processes (four xdist workers, the targets they start) then compile the same
modules at once, each its own copy: the main pytest of ``make test`` in a fresh clone took
396 s, the same clone's next run 358 s, and a fresh clone's with this step 379 s. Importing
them here first, in two processes, took 11 s on a 2-core machine (``time python
tests/precompile.py`` with the venv's ``__pycache__`` removed). A module that fails to import
is named and left to the run that needs it.
"""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from types import ModuleType

GROUPS = {
    # The bundled target: torch, and the parts of transformers its from_pretrained loads.
    "model": (
        "target_app",
        "torch",
        "transformers.models.auto.modeling_auto",
        "transformers.models.auto.tokenization_auto",
        "transformers.models.llama.modeling_llama",
        "transformers.core_model_loading",
        "transformers.generation",
    ),
    # The plugin, the embedded Toxiproxy, and the official clients the judges and oracles use.
    "plugin": (
        "pytest_streamguard",
        "openai",
        "anthropic",
        "ollama",
        "google.genai",
        "huggingface_hub",
        "groq",
        "mistralai",
    ),
}
#: Packages whose every module is imported (the project's own).
WALKED = ("target_app", "pytest_streamguard")


def _imported(name: str, failed: list[str]) -> ModuleType | None:
    """Module ``name``, imported; None, and its name and error added to ``failed``, if not."""
    try:
        return importlib.import_module(name)
    except Exception as exc:
        failed.append(f"{name} ({type(exc).__name__})")
        return None


def warm(group: str) -> list[str]:
    """Import ``group``'s modules (the project's packages whole); the names that failed."""
    failed: list[str] = []
    for name in GROUPS[group]:
        module = _imported(name, failed)
        if module is not None and name in WALKED:
            for info in pkgutil.walk_packages(module.__path__, f"{name}."):
                if not info.name.endswith("__main__"):
                    _imported(info.name, failed)
    return failed


def main(argv: list[str]) -> int:
    """``precompile.py``: both groups, one in a child process; ``precompile.py GROUP``: one."""
    if argv:
        failed = warm(argv[0])
    else:
        child = subprocess.Popen([sys.executable, __file__, "plugin"])
        failed = warm("model")
        child.wait()
    if failed:
        print(f"precompile: not imported: {', '.join(failed)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
