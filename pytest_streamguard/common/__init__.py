"""The bottom layer: helpers every family may import, and that import no family of the plugin.

Standard library only (:mod:`.codings` loads a br or zstd decoder where one is installed), so
the light entry module (:mod:`pytest_streamguard.plugin`) can import them on every ``pytest``
start. The exceptions live beside this, in :mod:`pytest_streamguard.errors`.
"""
