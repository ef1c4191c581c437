"""dltop: htop for PyTorch DataLoaders.

The command is ``dltop``; the distribution on the package index is ``torch-dltop`` (the name
``dltop`` there belongs to an unrelated GPU monitor), so every install hint names DISTRIBUTION.
"""

__version__ = "0.1.0"
DISTRIBUTION = "torch-dltop"


def install_hint(extra: str = "") -> str:
    """The pip command that installs this dltop (with ``extra``), never the other project of that name."""
    return f"pip install '{DISTRIBUTION}[{extra}]'" if extra else f"pip install {DISTRIBUTION}"
