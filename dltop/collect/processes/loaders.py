"""Which of a trainer's workers serve which DataLoader (a train and a val loader alive at once).

Each worker's first stack dump reads ``_worker_loop``'s arguments. Under fork every worker of
a loader sees its Dataset object at the same address (inherited memory), epoch after epoch, so
the split is exact (the ``data_queue`` would be too, but it is new with every non-persistent
epoch); under spawn/forkserver each worker unpickled its own copy, so loaders are told apart by
dataset class, num_workers and persistent_workers. Workers not dumped yet join the only loader
when there is one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class LoaderGroup:
    worker_pids: list
    config: dict  # from one of its workers: num_workers, persistent_workers, dataset...


def loader_key(config: Optional[dict], start_method: Optional[str]) -> Optional[tuple]:
    if not config:
        return None
    dataset = str(config.get("dataset", ""))
    if start_method != "fork":
        dataset = dataset.split(" at ")[0]  # '<Images at 0x7f..>': the address is per worker here
    return dataset, config.get("num_workers"), config.get("persistent_workers")


def split_loaders(worker_pids: list, configs: dict, methods: dict, known: dict) -> list:
    """[(key, LoaderGroup)], largest first, for the live workers and every loader seen before.

    ``configs``/``methods``: {pid: config or None}/{pid: start method}; ``known``: {key: config}
    of the loaders seen so far, updated here. A loader keeps its entry while it has no workers
    (a val loader between passes, non-persistent workers between epochs).
    """
    live: dict = {}
    for pid in worker_pids:
        key = loader_key(configs.get(pid), methods.get(pid))
        live.setdefault(key, []).append(pid)
        if key is not None:
            known.setdefault(key, configs[pid])
    unknown = live.pop(None, [])
    if unknown and len(known) == 1:
        (only,) = known
        live[only] = live.get(only, []) + unknown
        unknown = []
    groups = [(key, LoaderGroup(sorted(live.get(key, [])), config)) for key, config in known.items()]
    if unknown or not groups:
        groups.append((None, LoaderGroup(sorted(unknown), {})))
    return sorted(groups, key=lambda item: (-len(item[1].worker_pids), item[1].worker_pids))
