"""How long a thread waited for a CPU (``schedstat``'s run-queue time): a busy machine's share
of a wait, which the findings take off rather than blame on the app."""


def waited_ns(path: str) -> int | None:
    """The run-queue wait so far (ns) of the thread whose ``schedstat`` is at ``path``; None
    where there is none (another system, a thread gone)."""
    try:
        with open(path, "rb") as stats:
            return int(stats.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None


def main_thread_waited_ns(pid: int | None) -> int | None:
    """:func:`waited_ns` of process ``pid``'s main thread; None without a pid."""
    return None if pid is None else waited_ns(f"/proc/{pid}/task/{pid}/schedstat")
