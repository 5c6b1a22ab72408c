"""Where a pytest run of this suite spends its CPU, by the kind of process that spent it (issue
46 asks for ``make test`` within 8 minutes on a 2-core machine: on such a machine the suite is
bound by its CPU, so this is where its time goes). One command, one table::

    .venv/bin/python benchmarks/suite_cpu.py -- -n 4 --dist loadfile --no-loadscope-reorder \\
        --ignore tests/resilience
    # as on a machine with 1.2 cores' worth of CPU (a cgroup quota; root and cgroups needed):
    .venv/bin/python benchmarks/suite_cpu.py --cpus 1.2 -- -n 4 ...

The arguments after ``--`` go to pytest. Every process of the machine is read from /proc every
0.2 s (command line and CPU time; one that lives under a sample is missed, so the short pytest
runs are undercounted); its kind comes from its command line. Kernel threads and the machine's
own agents are counted too: they are what the suite's traffic costs besides its processes.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from common import cmdline, command_line, load_line, machine


def kind_of(argv: list[str]) -> str:
    """A process's kind, by the program its command line runs (``-m`` module or script)."""
    if not argv:
        return "kernel thread, or gone before read"
    command = " ".join(argv)
    if "exec(eval(sys.stdin" in command:
        return "xdist worker (its in-process tests)"
    if "multiprocessing.forkserver" in command:
        return "confusion case (a forked pytest)"
    module = argv[argv.index("-m") + 1] if "-m" in argv[:-1] else ""
    program = Path(argv[0]).name
    if module == "target_app":
        return "bundled target"
    if module == "pytest_streamguard.toxiproxy_server":
        return "embedded Toxiproxy"
    if module == "pytest" or "-mpytest" in argv or program == "pytest":
        return "pytest run started by a test"
    script = next((Path(arg).name for arg in argv[1:] if arg.endswith(".py")), None)
    if program.startswith("python") and script is not None:
        return "python script (apps, servers)"
    return f"other: {program}"


def read_all(kinds: dict[tuple[str, str], str], cpu: dict[tuple[str, str], float]) -> None:
    """One sample: each process's (pid and start time) kind, and the most CPU seconds read."""
    tick = os.sysconf("SC_CLK_TCK")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if pid == str(os.getpid()):
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            key = (pid, fields[19])
            if key not in kinds:
                kinds[key] = kind_of(cmdline(int(pid)).split())
            cpu[key] = max(cpu.get(key, 0.0), (int(fields[11]) + int(fields[12])) / tick)
        except (OSError, ValueError, IndexError):
            continue


def quota(cpus: float) -> Path:
    """A cgroup whose processes get ``cpus`` cores' worth of CPU in all (10 ms periods)."""
    v1 = Path("/sys/fs/cgroup/cpu")
    group = (v1 if v1.is_dir() else Path("/sys/fs/cgroup")) / "suite-cpu-quota"
    group.mkdir(exist_ok=True)
    if v1.is_dir():
        (group / "cpu.cfs_period_us").write_text("10000")
        (group / "cpu.cfs_quota_us").write_text(str(int(cpus * 10000)))
    else:
        (group / "cpu.max").write_text(f"{int(cpus * 10000)} 10000")
    return group


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpus", type=float, help="pytest under a CPU quota of this many cores")
    parser.add_argument("pytest_args", nargs="*", help="pytest's arguments (after --)")
    args = parser.parse_args()
    command = [sys.executable, "-m", "pytest", *args.pytest_args]
    if args.cpus is not None:
        procs = quota(args.cpus) / "cgroup.procs"
        command = ["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh", *command]
    kinds: dict[tuple[str, str], str] = {}
    cpu: dict[tuple[str, str], float] = {}
    read_all(kinds, cpu)
    before = dict(cpu)  # what the processes already running had spent
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.2):
            read_all(kinds, cpu)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    when, load_before = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), os.getloadavg()[0]
    started = time.monotonic()
    with subprocess.Popen(command) as run:
        code = run.wait()
    wall = time.monotonic() - started
    stop.set()
    sampler.join()
    for key in kinds:
        if key[0] == str(run.pid):
            kinds[key] = "the pytest run itself"
    totals: dict[str, tuple[int, float]] = {}
    for key, kind in kinds.items():
        count, spent_by_kind = totals.get(kind, (0, 0.0))
        totals[kind] = (count + (key not in before), spent_by_kind + cpu[key] - before.get(key, 0))
    spent = sum(spent_by_kind for _, spent_by_kind in totals.values())
    print(f"\n# {when}; {load_line(load_before)}")
    print(command_line("suite_cpu.py"))
    print(f"# machine: {machine()}")
    print(f"pytest exit code {code}, {wall:.0f} s; CPU {spent:.0f} s ({spent / wall:.2f} cores)")
    print(f"{'kind':40s} {'processes':>9s} {'CPU s':>7s} {'share':>6s}")
    for kind, (count, used) in sorted(totals.items(), key=lambda item: -item[1][1])[:14]:
        print(f"{kind[:40]:40s} {count:9d} {used:7.1f} {used / spent:6.0%}")
    return code


if __name__ == "__main__":
    sys.exit(main())
