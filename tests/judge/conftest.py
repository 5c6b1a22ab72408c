"""The judge tests read the differential harness's generated transcripts and oracles."""

from __future__ import annotations

import sys
from pathlib import Path

# tests/formats holds the generator (streamgen), the harness (differential) and the oracles.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "formats"))
