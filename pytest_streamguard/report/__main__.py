"""``python -m pytest_streamguard.report``: see :mod:`pytest_streamguard.report.cli`."""

from pytest_streamguard.report.cli import main

raise SystemExit(main())
