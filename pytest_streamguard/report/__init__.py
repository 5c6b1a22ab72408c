"""Reports: the per-test records and what is built from them (the terminal summary, the JSON
and HTML reports, baselines, ``python -m pytest_streamguard.report``); docs/index.md says which
module owns what."""
