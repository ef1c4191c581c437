"""The test suite's training job: the bundled demo job (dltop/demo/job.py) with all its knobs.

Run as a script so tests start it like a user starts a training script; the functions live in
``dltop.demo.job`` so spawn and forkserver workers can unpickle them. ``TRAIN_IMPORT_DELAY_S``
holds it that long before it imports torch: a rank a watcher sees while it is still starting.
"""

import os
import time

if __name__ == "__main__":
    time.sleep(float(os.environ.get("TRAIN_IMPORT_DELAY_S", "0")))
    from dltop.demo.job import main

    main()
