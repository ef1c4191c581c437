"""Opens a recording for replay without decoding it: the index of every part (checked against the
data, rebuilt by scanning records when missing or stale), then any frame on demand from its
segment's start. A cut-off or damaged tail ends the recording there, and ``stopped`` says where."""

from __future__ import annotations

import glob
import math
import os
from array import array
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Iterator, Optional

from dltop.errors import DltopError
from dltop.model import Snapshot, snapshot_from_dict
from dltop.record import format as fmt
from dltop.record.times import local

SEGMENTS_CACHED = 4  # decoded segments kept: stepping back and forth decodes nothing twice


@dataclass(frozen=True)
class Part:
    path: Path
    fd: int
    size: int
    header: dict


class Recording:
    """A recording's frames by number (0 = the oldest kept), their times, incidents and end."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.stopped: Optional[str] = None  # where reading stopped before the end of the data
        self.times = array("d")
        self.keys = array("L")  # frame numbers that start a segment
        self._part_of = array("H")
        self._offsets = array("Q")
        self._sizes = array("L")
        self._meta_frames: list = []
        self.incidents: list = []  # {"frame", "at", "number", "finding", "bundle"}
        self.end: Optional[dict] = None  # {"reason", "frames"} when the recording was closed cleanly
        self._segments: OrderedDict = OrderedDict()
        self.parts: list = []
        try:
            self.parts = self._open_parts()
            for number, part in enumerate(self.parts):
                self._load(number, part)
        except BaseException:
            self.close()
            raise
        if not self.times:
            self.close()
            raise DltopError(f"{self.path} holds no frames" + (f" ({self.stopped})" if self.stopped else ""))

    @property
    def header(self) -> dict:
        return self.parts[-1].header

    @property
    def dropped(self) -> bool:
        """Older parts were rotated away (--max-size)."""
        return self.parts[0].header.get("part", 0) > 0

    def __len__(self) -> int:
        return len(self.times)

    def __enter__(self) -> Recording:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for part in self.parts:
            os.close(part.fd)
        self.parts = []

    # -- opening ------------------------------------------------------------------------------

    def _open_parts(self) -> list:
        if not self.path.is_file():
            raise DltopError(f"no recording at {self.path}")
        newest = _open_part(self.path, strict=True)
        assert newest is not None  # strict: a bad file raised
        parts = [newest]
        for sibling in sorted(self.path.parent.glob(f"{glob.escape(self.path.name)}.*")):
            if sibling.suffix[1:].isdigit():
                part = _open_part(sibling, strict=False)
                if part is None:
                    continue
                if part.header.get("recording_id") == newest.header.get("recording_id"):
                    parts.append(part)
                else:
                    os.close(part.fd)
        return sorted(parts, key=lambda p: p.header.get("part", 0))

    def _load(self, number: int, part: Part) -> None:
        started = False  # a part's frames start with a segment's first frame
        incidents = []
        for at, offset, size, kind, flags in self._entries(part):
            if kind in fmt.FRAMES:
                started = started or kind == fmt.KEY
                if not started:
                    continue
                if kind == fmt.KEY:
                    self.keys.append(len(self.times))
                if flags & fmt.FLAG_META:
                    self._meta_frames.append(len(self.times))
                self.times.append(at)
                self._part_of.append(number)
                self._offsets.append(offset)
                self._sizes.append(size)
            elif kind == fmt.INCIDENT:
                incidents.append((len(self.times) - 1, offset))
            elif kind == fmt.END:
                self.end = fmt.unpack(self._record(part, offset).payload)
        for frame, offset in incidents:
            record = self._record(part, offset)
            self.incidents.append({"frame": max(0, frame), "at": record.time, **fmt.unpack(record.payload)})

    def _entries(self, part: Part) -> list:
        """(time, offset, size, kind, flags) of every record: the index where it holds, then a scan."""
        read = partial(os.pread, part.fd)
        known = _indexed(part)
        probes = known[:: max(1, len(known) // INDEX_PROBES)] + known[-1:]  # first, last, spread between
        if known and not all(_matches(read, entry, part.size) for entry in probes):
            known = []  # the index does not match the data (another file's): rebuild it from the records
        offset = known[-1][1] + known[-1][2] if known else fmt.PREAMBLE.size
        while offset < part.size:
            try:
                record = fmt.read_record(read, offset, part.size)
            except fmt.BadRecord as err:
                self.stopped = f"{part.path} stopped at byte {offset:,} of {part.size:,}: {err}"
                break
            known.append((record.time, offset, record.size, record.kind, record.flags))
            offset += record.size
        return known

    @staticmethod
    def _record(part: Part, offset: int) -> fmt.Record:
        return fmt.read_record(partial(os.pread, part.fd), offset, part.size)

    # -- reading --------------------------------------------------------------------------------

    def index_at(self, when: float) -> int:
        """The newest frame taken in or before the second ``when`` falls in (the first if none)."""
        return max(0, bisect_left(self.times, math.floor(when) + 1) - 1)

    def raw(self, index: int) -> bytes:
        """Frame ``index``'s packed snapshot document, decoded from its segment's first frame."""
        key = self.keys[bisect_right(self.keys, index) - 1]
        segment = self._segments.pop(key, None) or fmt.SegmentDecoder()
        done = len(segment.raws)
        if index - key >= done:
            part = self.parts[self._part_of[key]]
            start = self._offsets[key + done]
            stop = self._offsets[index] + self._sizes[index]
            data = memoryview(os.pread(part.fd, stop - start, start))

            def read(size: int, offset: int) -> memoryview:  # no copy: slices of one read
                return data[offset - start : offset - start + size]

            try:
                for frame in range(key + done, index + 1):
                    segment.feed(fmt.read_record(read, self._offsets[frame], stop))
            except fmt.BadRecord as err:
                raise DltopError(
                    f"{part.path}: frame {frame} ({local(self.times[frame])}) is unreadable: {err}"
                ) from err
        self._segments[key] = segment
        while len(self._segments) > SEGMENTS_CACHED:
            self._segments.popitem(last=False)
        return segment.raws[index - key]

    def document(self, index: int) -> dict:
        """The ``dltop.snapshot/1`` document of frame ``index``, as ``dltop snapshot --json`` prints it."""
        return fmt.unpack(self.raw(index))

    def snapshot(self, index: int) -> Snapshot:
        return snapshot_from_dict(self.document(index))

    def metas(self) -> Iterator[tuple]:
        """(frame, state, findings) wherever they changed; findings as [id, severity, pids, title]."""
        for frame in self._meta_frames:
            record = self._record(self.parts[self._part_of[frame]], self._offsets[frame])
            meta = fmt.unpack(record.meta)
            yield frame, meta["state"], meta["findings"]


def _open_part(path: Path, strict: bool) -> Optional[Part]:
    """A part with its header; a bad file is a DltopError when ``strict``, else skipped (None)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as err:
        if strict:
            raise DltopError(f"cannot read {path}: {err.strerror}") from err
        return None
    try:
        size = os.fstat(fd).st_size
        fmt.read_preamble(os.pread(fd, fmt.PREAMBLE.size, 0), str(path))
        try:
            record = fmt.read_record(partial(os.pread, fd), fmt.PREAMBLE.size, size)
            header = fmt.unpack(record.payload) if record.kind == fmt.HEADER else None
        except (fmt.BadRecord, ValueError) as err:
            raise DltopError(f"{path} is not a dltop recording (its header is unreadable: {err})") from err
        return Part(path, fd, size, fmt.check_header(header, str(path)))
    except DltopError:
        os.close(fd)
        if strict:
            raise
        return None


# index entries checked against the data before the index is trusted: another file's index can chain
# record to record by itself and still point between this file's records
INDEX_PROBES = 16


def _matches(read, entry: tuple, size: int) -> bool:
    """The record the index entry points at is there, of the size and kind it says."""
    try:
        record = fmt.read_record(read, entry[1], size)
    except fmt.BadRecord:
        return False
    return (record.size, record.kind) == (entry[2], entry[3])


def _indexed(part: Part) -> list:
    """The index's entries that chain record to record from the header on and end within the data."""
    try:
        data = fmt.index_path(part.path).read_bytes()
    except OSError:
        return []
    if data[: fmt.PREAMBLE.size] != fmt.PREAMBLE.pack(fmt.INDEX_MAGIC, fmt.FORMAT):
        return []
    body = memoryview(data)[fmt.PREAMBLE.size :]
    entries, expected = [], fmt.PREAMBLE.size
    for entry in fmt.INDEX.iter_unpack(body[: len(body) - len(body) % fmt.INDEX.size]):
        if entry[1] != expected or expected + entry[2] > part.size:
            break
        entries.append(entry)
        expected += entry[2]
    return entries
