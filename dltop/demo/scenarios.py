"""The problems ``dltop demo --scenario`` can give the bundled job (plain data: the CLI reads it
to parse arguments without importing the collector)."""

# what each scenario runs (dltop/demo/job.py knobs), and what dltop should catch
SCENARIOS = {
    # 2 workers busy ~60% keep a 20 ms step fed: nothing to fix
    "healthy": ("--workers", "2", "--persistent", "--sample-ms", "6", "--step-ms", "20"),
    # samples wait 20 ms on storage; one worker cannot keep a 10 ms step fed -> more workers
    "input-bound": (
        "--workers",
        "1",
        "--persistent",
        "--sample-ms",
        "0",
        "--slow-every",
        "1",
        "--slow-ms",
        "20",
        "--step-ms",
        "10",
    ),  # fmt: skip
    # worker 0 deadlocks on a lock the trainer held while it forked -> worker-hung with the frame
    "hung-worker": (
        "--workers",
        "2",
        "--persistent",
        "--sample-ms",
        "6",
        "--step-ms",
        "20",
        "--hang",
        "lock",
        "--hang-at",
        "40",
    ),  # fmt: skip
    # the dataset is 400 MB of Python objects read under fork: copy-on-read grows every worker
    "memory-growth": (
        "--workers",
        "2",
        "--persistent",
        "--objects-mb",
        "400",
        "--sample-ms",
        "0",
        "--step-ms",
        "30",
        "--batches",
        "4000",
    ),  # fmt: skip
    # short epochs without persistent_workers under spawn: every epoch starts its workers again,
    # each importing torch, and the trainer waits for them most of its time
    "respawning": (
        "--workers",
        "2",
        "--start-method",
        "spawn",
        "--sample-ms",
        "4",
        "--step-ms",
        "10",
        "--batches",
        "15",
    ),
}
DEFAULT_SCENARIO = "input-bound"
