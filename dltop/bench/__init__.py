"""``dltop bench``: measure DataLoader configurations on a workload, with a training-step stand-in
running alongside, so results show how loading overlaps compute as in training.

Only this package (and the demo job) imports torch; the monitor never does.
"""
