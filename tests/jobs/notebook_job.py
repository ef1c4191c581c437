"""A training loop inside a real Jupyter kernel (ipykernel), for the truth harness
(bench_truth.py --subset libs):

    python tests/jobs/notebook_job.py --report DIR --workers 2

This process plays the notebook front end: it starts a kernel with jupyter_client's
KernelManager (``python -m ipykernel_launcher -f kernel-....json``, a child of this process),
sends it cells as a notebook would (the Dataset class is defined in a cell, in the kernel's
``__main__``, so the workers must fork), the last of which runs a DataLoader loop with workers
for ever, and then waits. The kernel is the trainer: its truth (clock.py) carries the kernel's
pid (trainer-<pid>.json, kind "ipykernel"); dltop is pointed at that pid. The kernel's own output
goes to kernel-output.txt. Killing this process's tree ends the kernel and its workers.
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
from pathlib import Path

from jupyter_client import KernelManager

JOBS = Path(__file__).resolve().parent

CELLS = [
    # cell 1: imports, as a notebook starts
    """
import os, sys, functools, time
import torch
from torch.utils.data import DataLoader, Dataset
sys.path.insert(0, {jobs!r})
from clock import Clock, busy, worker_init
torch.set_num_threads(1)
""",
    # cell 2: the dataset, defined in the notebook
    """
class Features(Dataset):
    def __init__(self, length, sample_ms):
        self.length, self.sample_ms = length, sample_ms
    def __len__(self):
        return self.length
    def __getitem__(self, index):
        busy(self.sample_ms)
        return torch.randn(256, generator=torch.Generator().manual_seed(index)), index % 10
""",
    # cell 3: the loader and the model
    """
init = functools.partial(worker_init, {report!r}, "train", os.getpid()) if {workers} else None
loader = DataLoader(Features(1_000_000, {sample_ms}), batch_size={batch_size}, shuffle=True,
                    num_workers={workers}, worker_init_fn=init)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = torch.nn.CrossEntropyLoss()
""",
    # cell 4: the training loop (runs until the kernel is killed)
    """
clock = Clock({report!r}, kind="ipykernel")
while True:
    batches = clock.start(loader)
    while (batch := clock.next(batches)) is not None:
        features, labels = batch
        loss = loss_fn(model(features), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        busy({step_ms})
""",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--report", required=True)
    parser.add_argument("-j", "--workers", type=int, default=2)
    parser.add_argument("--sample-ms", type=float, default=3.0)
    parser.add_argument("--step-ms", type=float, default=5.0)
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()

    output = open(Path(args.report) / "kernel-output.txt", "w")  # noqa: SIM115 (for the job's life)
    manager = KernelManager(kernel_name="python3")
    manager.start_kernel(stdout=output, stderr=output)
    client = manager.client()
    client.start_channels()
    client.wait_for_ready(timeout=60)
    fields = dict(jobs=str(JOBS), report=args.report, workers=args.workers, sample_ms=args.sample_ms,
                  step_ms=args.step_ms, batch_size=args.batch_size)  # fmt: skip
    for index, cell in enumerate(CELLS):
        reply_id = client.execute(cell.format(**fields))
        # the last cell runs until the kernel dies: its reply comes only if it fails
        while index < len(CELLS) - 1 or manager.is_alive():
            try:
                reply = client.get_shell_msg(timeout=1 if index == len(CELLS) - 1 else 120)
            except queue.Empty:
                continue
            if reply["parent_header"].get("msg_id") != reply_id:
                continue
            if reply["content"]["status"] != "ok":
                Path(args.report, "error-notebook.json").write_text(json.dumps(reply["content"], default=str))
                sys.exit(f"cell {index + 1} failed: {reply['content'].get('evalue')}")
            break


if __name__ == "__main__":
    main()
