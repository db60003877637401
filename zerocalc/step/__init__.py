"""The step: the workload one worker runs, what it saves for backward (activations of dense, MoE and fine-tuned
blocks, with their formulas), one rank's step shape and the peak working set per phase."""
