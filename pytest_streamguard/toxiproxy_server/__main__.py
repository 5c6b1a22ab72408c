"""``python -m pytest_streamguard.toxiproxy_server``."""

import sys

from .cli import main

sys.exit(main())
