"""The bytes of a recording on disk (``dltop.recording/1``): records, their index, the frame codec.

A recording file is a preamble (magic, format version) and then records, appended and never
rewritten. Each record is a fixed header, an optional small *meta* block and a payload, with a
CRC-32 over all three: a record is complete or it is not there (a cut-off or damaged tail is
detected and replay stops before it). Record kinds: one HEADER (what was recorded, how), FRAMEs
(one per tick), INCIDENTs (a fault's first appearance) and an END on a clean close.

Frames are the tick's ``dltop.snapshot/1`` document in msgpack, compressed by one zstd stream per
*segment* (``SEGMENT_FRAMES`` frames), flushed block by block: a frame is its own record yet is
compressed against the frames before it in its segment (ticks repeat their stacks and most
figures), ~0.7 KB for a 16-worker job where one frame alone takes ~3 KB. A segment's first frame
(KEY) starts a fresh zstd stream, so any frame decodes from its segment's start: seeking costs
at most one segment. A frame carries meta (job state and finding keys) when they changed, so a
timeline is read without decompressing frames.

The index (``NAME.idx``: one fixed entry per record) is a cache: a reader checks it against the
data and rebuilds it in memory by scanning the records when it is missing or stale.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import msgpack
import zstandard

MAGIC = b"DLTOPREC"
INDEX_MAGIC = b"DLTOPIDX"
FORMAT = 1
SCHEMA = "dltop.recording/1"
PREAMBLE = struct.Struct("<8sH")  # magic, format version
# kind, flags, meta length, payload length, raw (decompressed) length, time (unix s), crc32
RECORD = struct.Struct("<BBHIIdI")
INDEX = struct.Struct("<dQIBB")  # time, offset, size, kind, flags

HEADER, KEY, DELTA, INCIDENT, END = 1, 2, 3, 4, 5
FRAMES = (KEY, DELTA)
KINDS = (HEADER, KEY, DELTA, INCIDENT, END)
FLAG_META = 1

SEGMENT_FRAMES = 60  # frames per zstd stream: a jump decodes at most this many
LEVEL = 3  # zstd level: level 6 saves ~12% more at 3x the CPU


class BadRecord(Exception):
    """A record that cannot be read; the message says why (cut off, damaged, not a record)."""


@dataclass(frozen=True)
class Record:
    kind: int
    flags: int
    time: float
    offset: int
    size: int  # header + meta + payload
    meta: bytes
    payload: bytes
    raw_len: int


def pack(value: object) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False)


def record_bytes(kind: int, time: float, payload: bytes, meta: bytes = b"", raw_len: int = 0) -> bytes:
    flags = FLAG_META if meta else 0
    head = RECORD.pack(kind, flags, len(meta), len(payload), raw_len, time, 0)[:-4]
    crc = zlib.crc32(payload, zlib.crc32(meta, zlib.crc32(head)))
    return head + struct.pack("<I", crc) + meta + payload


def read_record(read, offset: int, file_size: int) -> Record:
    """The record at ``offset``; ``read(n, offset)`` is os.pread bound to the file."""
    head = read(RECORD.size, offset)
    if len(head) < RECORD.size:
        raise BadRecord("an incomplete record (the recording was cut off)")
    kind, flags, meta_len, payload_len, raw_len, time, crc = RECORD.unpack(head)
    if kind not in KINDS:
        raise BadRecord("bytes that are not a record")
    size = RECORD.size + meta_len + payload_len
    if offset + size > file_size:
        raise BadRecord("an incomplete record (the recording was cut off)")
    body = read(meta_len + payload_len, offset + RECORD.size)
    if zlib.crc32(body, zlib.crc32(head[:-4])) != crc:
        raise BadRecord("a damaged record (checksum mismatch)")
    return Record(kind, flags, time, offset, size, body[:meta_len], body[meta_len:], raw_len)


def frame_meta(state: str, findings: list) -> tuple:
    """What a timeline needs of a frame: the job's state and its findings as (id, severity, pids,
    title). Compared without titles (they carry running figures: "hung for 25s")."""
    return state, tuple((f.id, f.severity, tuple(f.pids), f.title) for f in findings)


def meta_key(meta: tuple) -> tuple:
    return meta[0], tuple(f[:3] for f in meta[1])


def meta_bytes(meta: tuple) -> bytes:
    return pack({"state": meta[0], "findings": [list(f) for f in meta[1]]})


class SegmentEncoder:
    """Compresses frames as one zstd stream per segment, each frame flushed as its own blocks."""

    def __init__(self) -> None:
        self._compressor = zstandard.ZstdCompressor(level=LEVEL)
        self._stream: Optional[zstandard.ZstdCompressionObj] = None
        self.frames = 0  # frames in the current segment

    def encode(self, raw: bytes, new_segment: bool = False) -> tuple:
        """(kind, payload) of the next frame; ``new_segment`` starts a fresh stream (a new part)."""
        if new_segment or self._stream is None or self.frames >= SEGMENT_FRAMES:
            self._stream, self.frames = self._compressor.compressobj(), 0
        self.frames += 1
        payload = self._stream.compress(raw) + self._stream.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
        return (KEY if self.frames == 1 else DELTA), payload


class SegmentDecoder:
    """Decodes one segment's frames in order (the stream a SegmentEncoder wrote)."""

    def __init__(self) -> None:
        self._stream = zstandard.ZstdDecompressor().decompressobj()
        self.raws: list = []

    def feed(self, record: Record) -> bytes:
        try:
            raw = self._stream.decompress(record.payload)
        except zstandard.ZstdError as err:
            raise BadRecord(f"a frame that does not decode ({err})") from err
        if len(raw) != record.raw_len:
            raise BadRecord("a frame that does not decode to its length")
        self.raws.append(raw)
        return raw


def part_path(path: Path, part: int) -> Path:
    """Part 0 is the file itself; rotated parts are NAME.1 (the newest of them), NAME.2, …"""
    return path if part == 0 else path.with_name(f"{path.name}.{part}")


def index_path(path: Path) -> Path:
    return path.with_name(f"{path.name}.idx")


def read_preamble(head: bytes, name: str) -> None:
    """DltopError unless ``head`` starts a recording this dltop can read."""
    from dltop import __version__
    from dltop.errors import DltopError

    if len(head) < PREAMBLE.size or head[: len(MAGIC)] != MAGIC:
        raise DltopError(f"{name} is not a dltop recording")
    version = PREAMBLE.unpack(head[: PREAMBLE.size])[1]
    if version > FORMAT:
        raise DltopError(
            f"{name} is a dltop recording of format {version}; dltop {__version__} reads format {FORMAT}:"
            " replay it with a newer dltop"
        )


def check_header(header: object, name: str) -> dict:
    """The header document, or DltopError when it is of a newer schema than this dltop reads."""
    from dltop.errors import DltopError
    from dltop.model import SCHEMA as SNAPSHOT_SCHEMA

    if not isinstance(header, dict) or not str(header.get("schema", "")).startswith("dltop.recording/"):
        raise DltopError(f"{name} is not a dltop recording (no recording header)")
    for key, ours in (("schema", SCHEMA), ("frame_schema", SNAPSHOT_SCHEMA)):
        theirs = str(header.get(key, ours))
        if _schema_version(theirs) > _schema_version(ours):
            raise DltopError(f"{name} holds {theirs}; this dltop reads {ours}: replay it with a newer dltop")
    return header


def _schema_version(schema: str) -> int:
    try:
        return int(schema.rpartition("/")[2])
    except ValueError:
        return 0
