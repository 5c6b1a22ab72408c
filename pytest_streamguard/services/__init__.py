"""The app under test and the processes the plugin starts.

- :mod:`.app`: :class:`Target`: a running URL, a user command, or the bundled target;
- :mod:`.processes`: child processes, and the mechanism that makes sure none outlives pytest;
- :mod:`._reaper`: the watchdog process behind it (run by path, never imported);
- :mod:`.ingress`: a real nginx ingress hop for the idle-timeout and buffering faults;
- :mod:`.stack`: a stack of services started in order, each inner one behind a proxy of its
  own (:mod:`.stack_spec`: their options, parsed).
"""
