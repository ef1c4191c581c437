"""The Textual app: ``dltop --pid P``, ``dltop`` (a job picker) and ``dltop demo``.

``view`` turns Snapshots into what the screen shows (pure, no Textual); ``source`` produces
Snapshots off the UI thread; ``widgets`` and ``screens`` draw them; ``app`` ties them together.
"""
