"""pytest-streamguard: deadlines for LLM token streams under injected network faults.

The pytest plugin lives in :mod:`pytest_streamguard.plugin` (entry point ``streamguard``);
the embedded Toxiproxy-API server in :mod:`pytest_streamguard.toxiproxy_server`.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
