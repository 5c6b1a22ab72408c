"""``python -m target_app``."""

import logging
import os
import sys

from .cli import main

status = main()
# Everything the target owns is closed by now (sockets, engine thread, lifespan). Finalizing an
# interpreter with torch and transformers loaded takes another second or more, which would
# break the "exit within --shutdown-grace + 1 s" promise for no benefit: the OS frees memory.
logging.shutdown()
sys.stdout.flush()
sys.stderr.flush()
os._exit(status)
