"""The bottom layer: helpers every family may import, and that import no family of the plugin.

- :mod:`.display`: how commands, paths and counts are shown to the user;
- :mod:`.names`: the marker's and fixtures' names, and the findings' names (``fail_on``);
- :mod:`.defaults`: the defaults of the options;
- :mod:`.codings`: a response body's content codings, decoded piece by piece;
- :mod:`.numbers`: whether an option's value is a number (a bool is not).

Standard library only (:mod:`.codings` loads a br or zstd decoder where one is installed), so
the light entry module (:mod:`pytest_streamguard.plugin`) can import
them on every ``pytest`` start. The exceptions live beside this, in
:mod:`pytest_streamguard.errors`.
"""
