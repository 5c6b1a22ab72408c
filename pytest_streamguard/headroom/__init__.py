"""Headroom: how far a stream is from breaking, found by search.

:mod:`~.search` is the pure search over levels (exponential growth within a bound, bisection,
a re-run of the level reported as held); :mod:`~.levels` says what each ``vary`` means as a
load and a fault, and judges a level's load by the test's deadline; :mod:`~.measure` drives
a search to its end with the loads the guard runs; :mod:`~.result` holds what it found
(:class:`~.result.Headroom`, :class:`~.result.HeadroomLevel`). The guard calls this family
(``streamguard.headroom()``) and the reports show it.
"""
