"""The parallel layout answered per rank: each rank class's model states, step and peak, the communication per
step, and the search over every layout of the same GPUs."""
