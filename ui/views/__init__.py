"""The views the page's switcher opens: details, compare, calibrate, RL."""
