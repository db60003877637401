"""Answers to planning questions over the per-rank report: solvers, the fits-on and scaling views, what would make
it fit, the assumption ranges, and calibration against a measured run."""
