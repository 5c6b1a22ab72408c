"""``python -m target_app``."""

import sys

from .cli import main

sys.exit(main())
