"""The wait for a CPU that a faster job brings its own processes: what S(N) loses to it.

A process that sleeps between short bursts of CPU (a worker reading a file, a trainer waiting on
its GPU or its next batch) asks for a CPU each time it wakes. While the CPUs are mostly idle it
gets one at once; as the job runs faster, it more often finds them all taken and waits its turn
(the kernel lets a waking process go before one that has run beyond its fair share, so CPU hogs,
whose share ``A / J`` already counts, hardly delay it: ``capacity.py`` counts each process's CPU up
to that share). That wait lengthens every batch a sleeper takes part in, so the job runs slower
than the CPUs alone allow well before they fill.

The wait is Erlang's C formula for ``servers`` CPUs (M/M/c): the mean wait for a CPU per unit of
CPU time used, at the share ``load`` of the CPUs that can delay a waking process.
"""

from __future__ import annotations

# the load the formula is read at most: at 1 the queue never drains and the wait is infinite, and a
# job's processes fill its CPUs only where the CPUs bind anyway
MAX_LOAD = 0.99


def wait_per_cpu_second(servers: int, load: float, processes: int) -> float:
    """Mean seconds a waking process waits for one of ``servers`` CPUs per second of CPU it then
    uses, the CPUs kept busy the share ``load`` of the time (Erlang C; 0 for an idle machine). At
    most what ``processes`` taking turns allow: each of the others ahead of it once, (processes -
    servers) / servers (the formula's queue is endless; a job's processes are not)."""
    load = min(max(load, 0.0), MAX_LOAD)
    turns = max(0.0, (processes - servers) / servers)
    if load == 0.0 or turns == 0.0:
        return 0.0
    offered = servers * load
    # the Erlang B recursion, then C from B: stable for any number of CPUs
    blocked = 1.0
    for k in range(1, servers + 1):
        blocked = offered * blocked / (k + offered * blocked)
    waits = blocked / (1 - load * (1 - blocked))
    return min(waits / (servers * (1 - load)), turns)


def sleeping_share(cpu: float, busy: float) -> float:
    """The share of a process's busy time it is off a CPU (asleep on I/O, its GPU, a peer): the
    share that waits for a CPU each time it wakes. A process on a CPU all its busy time is a hog."""
    return max(0.0, 1.0 - cpu / busy) if busy > 0 else 0.0


def servers_of(cpus: float) -> int:
    """Whole CPUs for the formula, the nearest to those free for the job (a quota of 2.4 CPUs serves
    as 2; the load is read per CPU free)."""
    return max(1, round(cpus))
