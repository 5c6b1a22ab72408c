"""What the plugin concludes from the streams of a test.

- :mod:`.deadlines`: deadlines, their verdicts and the messages a failing test shows;
- :mod:`.findings`: named incidents (buffered, blocked loop, ...) with their evidence;
- :mod:`.stats`: the percentiles and summaries over raw samples.
"""
