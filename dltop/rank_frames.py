"""Where a rank's main thread is, from its Python stack: the evidence for a stopped run.

Collectives have no progress signal of their own: a rank that never arrives leaves the others
blocked until the process group's timeout. From outside, each rank's stack says where it is: in a
collective (with gloo the call blocks: ``distributed_c10d`` frames, or ``backward()`` where DDP
all-reduces gradient buckets in native code), at a sync point where an asynchronous collective
completes (NCCL: ``.item()``, ``synchronize``, ``Work.wait``), waiting for its own input (the
DataLoader), blocked elsewhere (a lock, I/O, a sleep), or running. Pure functions over frames,
innermost last; no torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, Optional

from dltop.frames import is_dataloader_machinery, user_frame, waits_on_lock
from dltop.model import Frame
from dltop.pipelines import short_name

Where = Literal["collective", "sync", "data", "blocked", "running"]
# where a rank waits for the others: a rank still in one of these is waiting, not the cause
WAITING_FOR_RANKS: frozenset[Where] = frozenset({"collective", "sync"})

# the public API of each library's collectives: the outermost frame in these files is the call the
# user's code made (inner frames are wrappers: c10d_logger, _coalescing_manager, ...)
_COLLECTIVE_FILES = (
    "torch/distributed/distributed_c10d.py",
    "torch/distributed/fsdp/",
    "torch/distributed/_composable/fsdp/",
    "torch/distributed/tensor/",
    "deepspeed/comm/",
    "deepspeed/runtime/zero/",
    "torch/nn/parallel/distributed.py",
)
# call names as people say them: FSDP's and DeepSpeed's internals by what they do
_CALL_NAMES = (
    (re.compile(r"all_?reduce", re.IGNORECASE), "all_reduce"),
    (re.compile(r"reduce_?scatter", re.IGNORECASE), "reduce_scatter"),
    (re.compile(r"all_?gather", re.IGNORECASE), "all_gather"),
    (re.compile(r"all_?to_?all", re.IGNORECASE), "all_to_all"),
    (re.compile(r"broadcast|_sync_buffers|_sync_params", re.IGNORECASE), "broadcast"),
    (re.compile(r"barrier", re.IGNORECASE), "barrier"),
    (re.compile(r"^(send|isend|recv|irecv)$"), "send/recv"),
)
_BACKWARD_FUNCTIONS = ("backward", "run_backward", "_engine_run_backward")
_BACKWARD_FILES = ("torch/autograd/", "torch/_tensor.py")
# where an asynchronous collective (NCCL) completes on the host
_SYNC_FUNCTIONS = {"synchronize": "synchronize", "item": ".item()", "cpu": ".cpu()", "wait": "wait()"}
_SYNC_FILES = ("torch/cuda/", "torch/_tensor.py", "torch/distributed/")
# ... and as the user's line shows them where the call is native (no Python frame of its own)
_SYNC_CODE = (
    (re.compile(r"\.item\(\)"), ".item()"),
    (re.compile(r"\.(cpu|tolist)\(\)"), ".cpu()"),
    (re.compile(r"synchronize\("), "synchronize"),
    (re.compile(r"\b\w*(work|handle|fut|req)\w*\.wait\(", re.IGNORECASE), "wait()"),
)
_IO = re.compile(r"\bopen\(|\.read\w*\(|\.recv\w*\(|\.readline|\bselect\(|\.poll\(|\.accept\(|\.connect\(|input\(")
_SLEEP = re.compile(r"\bsleep\(")


@dataclass(frozen=True)
class RankPosition:
    """Where one rank's main thread is. ``call``: the collective or sync (all_reduce, barrier, …,
    .item()); ``frame``: the frame that says it; ``site``: the user's line that led there."""

    where: Where
    call: Optional[str] = None
    frame: Optional[Frame] = None
    site: Optional[Frame] = None
    blocked_on: Optional[str] = None  # a lock | I/O | a sleep, where the stack tells

    @property
    def waits_for_ranks(self) -> bool:
        return self.where in WAITING_FOR_RANKS

    def waiting_place(self) -> Optional[str]:
        """Where it waits for other ranks, with the line: "in all_reduce in backward() at train.py:58";
        None where it does not (its input, blocked elsewhere, running)."""
        frame = self.site or self.frame
        at = f" at {_line(frame)}" if frame else ""
        if self.where == "collective":
            return f"in {self.call}{at}"
        if self.where == "sync":
            return f"at {self.call}{at} (a collective completing)"
        return None

    def describe(self, ranks: int = 1) -> str:
        """In words, with the line, for ``ranks`` ranks: "wait in all_reduce in backward() at train.py:58"."""
        waits, blocked = ("waits", "is") if ranks == 1 else ("wait", "are")
        frame = self.site or self.frame
        at = f" at {_line(frame)}" if frame else ""
        place = self.waiting_place()
        if place is not None:
            return f"{waits} {place}"
        if self.where == "data":
            return f"{waits} for its own input{at} (its DataLoader)"
        if self.where == "blocked":
            inside = f" in {frame.function}" if frame else ""
            return f"{blocked} blocked on {self.blocked_on or 'a call that does not return'}{at}{inside}"
        return f"{blocked} running{at} without reaching the collective"


def _line(frame: Optional[Frame]) -> str:
    return f"{frame.file.rsplit('/', 1)[-1]}:{frame.line}" if frame else "?"


def call_name(function: str) -> str:
    """all_reduce, barrier, … for a collective's function, else its own short name."""
    short = short_name(function)
    return next((name for pattern, name in _CALL_NAMES if pattern.search(short)), short)


def _collective(frames: list[Frame]) -> Optional[RankPosition]:
    """The outermost collective's frame (the call the user's code made) and the user's line above it."""
    for index, frame in enumerate(frames):
        if any(part in frame.file for part in _COLLECTIVE_FILES):
            return RankPosition("collective", call_name(frame.function), frame, user_frame(frames[:index]))
    for index, frame in enumerate(frames):
        if short_name(frame.function) in _BACKWARD_FUNCTIONS and any(part in frame.file for part in _BACKWARD_FILES):
            # DDP all-reduces gradient buckets inside backward(), in native code py-spy does not show
            return RankPosition("collective", "all_reduce in backward()", frame, user_frame(frames[:index]))
    return None


def _sync(frames: list[Frame]) -> Optional[RankPosition]:
    for index in range(len(frames) - 1, -1, -1):
        frame = frames[index]
        short = short_name(frame.function)
        if short in _SYNC_FUNCTIONS and any(part in frame.file for part in _SYNC_FILES):
            return RankPosition("sync", _SYNC_FUNCTIONS[short], frame, user_frame(frames[:index]))
    leaf = frames[-1]
    found = next((name for pattern, name in _SYNC_CODE if leaf.code and pattern.search(leaf.code)), None)
    return RankPosition("sync", found, leaf, leaf) if found else None


def _blocked_on(leaf: Frame) -> Optional[str]:
    if waits_on_lock([leaf], leaf.code):
        return "a lock"
    code = (leaf.code or "").split("#", 1)[0]
    if _SLEEP.search(code) or short_name(leaf.function) == "sleep":
        return "a sleep"
    if _IO.search(code) or leaf.file.endswith(("socket.py", "selectors.py", "subprocess.py", "ssl.py")):
        return "I/O"
    return None


def rank_position(frames: list[Frame], still: bool) -> Optional[RankPosition]:
    """Where a rank's main thread is; ``still``: it has kept this stack without CPU (blocked, not
    busy). None without a stack."""
    if not frames:
        return None
    if is_dataloader_machinery(frames):
        return RankPosition("data", "next(loader)", frames[-1], user_frame(frames))
    found = _collective(frames) or _sync(frames)
    if found is not None:
        return found
    leaf = frames[-1]
    if still:
        return RankPosition("blocked", None, leaf, user_frame(frames), _blocked_on(leaf))
    return RankPosition("running", None, leaf, user_frame(frames))
