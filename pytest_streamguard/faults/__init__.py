"""Faults: what a test injects, how each is applied and whether it took effect.

- :mod:`.inject`: the fault vocabulary of a test (``streamguard.faults``: latency, stalls,
  slow readers, cuts, chunk faults, freeze, restart), a thin facade over the mechanisms;
- :mod:`.mechanism`: the interface each fault mechanism implements (apply, remove, the
  triggers on a chunk and a stream's end, how it is judged fired);
- :mod:`.toxics`: toxics on the Toxiproxy proxy through its API, and the proxy's state (down);
- :mod:`.chunks`: the embedded server's chunk toxics, acting right after chunk N, and their
  aiming at some of the test's streams;
- :mod:`.signals`: freeze and restart, signals to the target's process group;
- :mod:`.fired`: whether a fault acted on the streams it was active on;
- :mod:`.profiles`: named fault profiles, the incidents a ``streamguard_matrix`` test runs under;
- :mod:`.toxiproxy_client`: driving a Toxiproxy server's API (embedded or real) safely.
"""
