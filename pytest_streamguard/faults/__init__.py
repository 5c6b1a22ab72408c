"""Faults: what a test injects, how each is applied and whether it took effect.

- :mod:`.inject`: the fault vocabulary of a test (``streamguard.faults``: latency, stalls,
  slow readers, cuts, chunk faults, freeze), each mapped to Toxiproxy toxics or proxy state;
- :mod:`.fired`: whether a fault acted on the streams it was active on;
- :mod:`.profiles`: named fault profiles, the incidents a ``streamguard_matrix`` test runs under;
- :mod:`.toxiproxy_client`: driving a Toxiproxy server's API (embedded or real) safely.
"""
