"""python -m zerocalc: flags in, the same report as text or JSON out (cli/main.py), with the model and workload
flags, framework configs in and out, and the sources of imported values each in their own module."""
