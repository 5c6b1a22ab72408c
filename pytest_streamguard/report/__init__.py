"""Reports: the per-test records and what is built from them.

- :mod:`.records`: :class:`TestRecord` and the terminal summary, JSON and HTML reports;
- :mod:`.compact`: the JSON report's compact form (chunks as rows, texts only where kept);
- :mod:`.recording`: a test's record built from its guards once its body has ended;
- :mod:`.timing`: the summary's notes on how far its figures' timing can be trusted;
- :mod:`.html` and :mod:`.plots`: the self-contained HTML page and its inline SVG plots;
- :mod:`.merge`: records from several parts (xdist workers, saved reports) merged into one;
- :mod:`.baseline` and :mod:`.bounds`: comparing a run with a saved one, and the gate on it;
- :mod:`.cli`: ``python -m pytest_streamguard.report``, rebuild or merge saved reports.
"""
