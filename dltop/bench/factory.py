"""The user's own factory named on the command line (``--dataset`` or ``--pipeline pkg.module:name``):
imported from the working directory and called, every failure one line that names the option.

A library the factory needs and this Python lacks (torchdata, SPDL) is named with its pip line,
not as an import error deep in the user's module.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any, Callable, Optional

from dltop.errors import DltopError

# the top-level module a factory may import -> the distribution that brings it
LIBRARIES: dict[str, str] = {"torchdata": "torchdata", "spdl": "spdl-core", "torch": "torch"}


def import_factory(option: str, target: str, makes: str) -> Callable[..., Any]:
    """``pkg.module:name`` -> the callable it names; ``makes`` says what it should make, for the error."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise DltopError(f"{option} {target!r}: expected pkg.module:factory")
    sys.path.insert(0, os.getcwd())
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except ModuleNotFoundError as err:
        raise DltopError(_missing(option, err) or f"{option} {target}: cannot import {module_name}: {err}") from None
    except ImportError as err:
        raise DltopError(f"{option} {target}: cannot import {module_name}: {err}") from None
    except AttributeError:
        raise DltopError(f"{option} {target}: {module_name} has no {attr}") from None
    except Exception as err:  # the module itself raised while importing
        raise DltopError(f"{option} {target}: importing {module_name} failed: {type(err).__name__}: {err}") from None
    if not callable(factory):
        raise DltopError(
            f"{option} {target}: {module_name}.{attr} is a {type(factory).__name__}, not a function or class that"
            f" makes {makes}"
        )
    return factory


def call_factory(option: str, target: str, factory: Callable[..., Any], *args: Any) -> Any:
    """What the factory makes; its own exception becomes one line (a missing library, its pip line)."""
    try:
        return factory(*args)
    except ModuleNotFoundError as err:
        raise DltopError(_missing(option, err) or f"{option} {target}: the factory raised {err}") from None
    except Exception as err:
        raise DltopError(f"{option} {target}: the factory raised {type(err).__name__}: {err}") from None


def _missing(option: str, err: ModuleNotFoundError) -> Optional[str]:
    """'--pipeline needs torchdata, which is not installed here: pip install torchdata', or None."""
    top = (err.name or "").partition(".")[0]
    if top not in LIBRARIES:
        return None
    return f"{option} needs {top}, which is not installed here: pip install {LIBRARIES[top]}"
