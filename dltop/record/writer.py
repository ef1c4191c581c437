"""Appends a recording: each record in one write (complete or absent), its index entry after it,
and, under ``--max-size``, parts rotated so the oldest quarter is dropped (logrotate-style)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Optional

from dltop.errors import DltopError
from dltop.record import format as fmt
from dltop.record.access import PRIVATE, Access

PARTS = 4  # --max-size keeps this many parts: NAME and NAME.1 … NAME.3 (the oldest)
SYNC_EVERY_S = 5.0  # fdatasync at most this often: power loss costs at most these seconds
CREATE = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC


class RecordingWriter:
    """Writes frames, incidents and the end of a recording to ``path`` (never over an existing file)."""

    def __init__(self, path: Path, header: dict, max_size: Optional[int] = None, access: Access = PRIVATE) -> None:
        self.path = path
        self.access = access
        self.header = header
        self.part_limit = max_size // PARTS if max_size else None
        self.part = 0  # the part number in the header: it only grows, as parts rotate
        self.frames = 0
        self.frame_bytes = 0  # bytes of frame records written, all parts
        self._encoder = fmt.SegmentEncoder()
        self._last_time = float("-inf")
        self._last_meta: Optional[tuple] = None
        self._synced_at = time.monotonic()
        self._open_part(os.O_EXCL)

    def _open_part(self, exclusive: int = 0) -> None:
        try:
            self._fd = self.access.open(self.path, CREATE | exclusive)
        except FileExistsError:
            raise DltopError(
                f"{self.path} exists: dltop never writes over a recording (choose a name with -o)"
            ) from None
        except OSError as err:
            raise DltopError(f"cannot write {self.path}: {err.strerror}") from err
        self._index = self.access.open(fmt.index_path(self.path), CREATE | os.O_TRUNC)
        self._part_frames = 0
        self._write(self._index, fmt.PREAMBLE.pack(fmt.INDEX_MAGIC, fmt.FORMAT))
        self._index_size = fmt.PREAMBLE.size
        self._write(self._fd, fmt.PREAMBLE.pack(fmt.MAGIC, fmt.FORMAT))
        self._size = fmt.PREAMBLE.size
        self._append(fmt.HEADER, time.time(), fmt.pack({**self.header, "part": self.part}))

    def frame(self, at: float, raw: bytes, meta: tuple) -> None:
        """One tick: ``raw`` is the packed snapshot document, ``meta`` its ``format.frame_meta``."""
        kind, payload = self._encoder.encode(raw, new_segment=self._part_frames == 0)
        record = self._frame_record(at, kind, payload, raw, meta)
        if self.part_limit and self._part_frames and self._size + self._index_size + len(record) > self.part_limit:
            self._rotate()
            kind, payload = self._encoder.encode(raw, new_segment=True)
            record = self._frame_record(at, kind, payload, raw, meta)
        self._append_bytes(record, at, kind)
        self._last_meta = fmt.meta_key(meta)
        self._part_frames += 1
        self.frames += 1
        self.frame_bytes += len(record)
        if time.monotonic() - self._synced_at >= SYNC_EVERY_S:
            os.fdatasync(self._fd)
            self._synced_at = time.monotonic()

    def _frame_record(self, at: float, kind: int, payload: bytes, raw: bytes, meta: tuple) -> bytes:
        changed = self._part_frames == 0 or fmt.meta_key(meta) != self._last_meta  # each part stands alone
        self._last_time = max(at, self._last_time)  # the index is searched by time: never backwards
        return fmt.record_bytes(kind, self._last_time, payload, fmt.meta_bytes(meta) if changed else b"", len(raw))

    def incident(self, at: float, info: dict) -> None:
        self._append(fmt.INCIDENT, max(at, self._last_time), fmt.pack(info))

    def close(self, reason: str) -> None:
        """The END record (why the recording stopped), synced to disk."""
        self._append(fmt.END, max(time.time(), self._last_time), fmt.pack({"reason": reason, "frames": self.frames}))
        self._close_files()

    def _close_files(self) -> None:
        for fd in (self._fd, self._index):
            os.fsync(fd)
            os.close(fd)

    def _append(self, kind: int, at: float, payload: bytes) -> None:
        self._append_bytes(fmt.record_bytes(kind, at, payload), at, kind)

    def _append_bytes(self, record: bytes, at: float, kind: int) -> None:
        self._write(self._fd, record)
        flags = record[1]
        self._write(self._index, fmt.INDEX.pack(at, self._size, len(record), kind, flags))
        self._size += len(record)
        self._index_size += fmt.INDEX.size

    @staticmethod
    def _write(fd: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]

    def _rotate(self) -> None:
        """NAME → NAME.1 → … → NAME.3; the oldest part is replaced (dropped)."""
        self._close_files()
        for older in range(PARTS - 1, 0, -1):
            source, target = fmt.part_path(self.path, older - 1), fmt.part_path(self.path, older)
            for src, dst in ((source, target), (fmt.index_path(source), fmt.index_path(target))):
                try:
                    os.replace(src, dst)
                except FileNotFoundError:
                    continue
        self.part += 1
        self._open_part()
