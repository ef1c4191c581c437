"""The test suite's training job: the bundled demo job (dltop/demo/job.py) with all its knobs.

Run as a script so tests start it like a user starts a training script; the functions live in
``dltop.demo.job`` so spawn and forkserver workers can unpickle them.
"""

from dltop.demo.job import main

if __name__ == "__main__":
    main()
