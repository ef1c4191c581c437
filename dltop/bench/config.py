"""A DataLoader configuration as the bench sweeps it, parsed from ``num_workers=4,pin_memory=True``."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import ClassVar, Optional, Union

from dltop.errors import DltopError

START_METHODS = ("fork", "spawn", "forkserver")


@dataclass(frozen=True)
class LoaderConfig:
    knob: ClassVar[str] = "num_workers"  # what the worker count is called where the user sets it
    unit: ClassVar[str] = "samples/s"  # what its trials' rate counts

    num_workers: int = 0
    prefetch_factor: Optional[int] = None  # None: torch's default (2 with workers)
    pin_memory: bool = False
    persistent_workers: bool = False
    start_method: Optional[str] = None  # None: the platform default

    def label(self) -> str:
        """Only what differs from the defaults: 'num_workers=4,persistent_workers=True'."""
        default = LoaderConfig()
        parts = [f"num_workers={self.num_workers}"]
        for f in fields(self)[1:]:
            value = getattr(self, f.name)
            if value != getattr(default, f.name) and (self.num_workers or f.name == "pin_memory"):
                parts.append(f"{f.name}={value}")
        return ",".join(parts)

    def loader_kwargs(self) -> dict:
        """Keyword arguments for torch's DataLoader (settings torch rejects without workers left out)."""
        kwargs: dict = {"num_workers": self.num_workers, "pin_memory": self.pin_memory}
        if self.num_workers > 0:
            kwargs["persistent_workers"] = self.persistent_workers
            if self.prefetch_factor is not None:
                kwargs["prefetch_factor"] = self.prefetch_factor
            if self.start_method is not None:
                kwargs["multiprocessing_context"] = self.start_method
        return kwargs

    def code(self, dataset: str = "dataset", batch_size: Optional[int] = None) -> str:
        """A paste-ready ``DataLoader(...)`` line."""
        args = [dataset] + ([f"batch_size={batch_size}"] if batch_size else [])
        for key, value in self.loader_kwargs().items():
            args.append(f"{key}={value!r}")
        return f"DataLoader({', '.join(args)})"


@dataclass(frozen=True)
class PipelineConfig:
    """A worker count of the user's own pipeline (its factory builds the rest), named as its library
    names it: ParallelMapper's num_workers, SPDL's concurrency, or the factory's own parameter.
    Counted in batches/s: a pipeline's batches need not say how many samples they hold."""

    unit: ClassVar[str] = "batches/s"

    num_workers: int = 1
    knob: str = "workers"

    def label(self) -> str:
        return f"{self.knob}={self.num_workers}"


Config = Union[LoaderConfig, PipelineConfig]


def parse_config(text: str, base: LoaderConfig = LoaderConfig()) -> LoaderConfig:
    """'num_workers=4,prefetch_factor=4' -> LoaderConfig; a bad key or value is a DltopError."""
    changes: dict = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in {f.name for f in fields(LoaderConfig)}:
            names = ", ".join(f.name for f in fields(LoaderConfig))
            raise DltopError(f"bad config {text!r}: expected key=value with keys {names}")
        changes[key] = _value(key, value.strip(), text)
    config = replace(base, **changes)
    if config.num_workers < 0 or (config.prefetch_factor is not None and config.prefetch_factor < 1):
        raise DltopError(f"bad config {text!r}: num_workers must be >= 0 and prefetch_factor >= 1")
    return config


def _value(key: str, value: str, text: str):
    if key in ("num_workers", "prefetch_factor"):
        if not value.isdigit():
            raise DltopError(f"bad config {text!r}: {key} must be a whole number")
        return int(value)
    if key == "start_method":
        if value not in START_METHODS:
            raise DltopError(f"bad config {text!r}: start_method must be one of {', '.join(START_METHODS)}")
        return value
    if value.lower() not in ("true", "false", "1", "0"):
        raise DltopError(f"bad config {text!r}: {key} must be True or False")
    return value.lower() in ("true", "1")
