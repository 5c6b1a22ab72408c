"""What the plugin concludes from the streams of a test.

- :mod:`.deadlines`: deadlines, their verdicts and the messages a failing test shows;
- :mod:`.findings`: named incidents (buffered, blocked loop, ...) with their evidence;
- :mod:`.stats`: the percentiles and summaries over raw samples;
- :mod:`.judge`: the verdict after a test's body: the one failure it raises (a broken deadline,
  then gated findings, then faults that never fired), or the note its own failure gets.
"""
