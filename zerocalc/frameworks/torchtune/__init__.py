"""torchtune recipe YAMLs (`tune run RECIPE --config FILE.yaml`) as zerocalc plans: reader.py, its tables in
tables.py."""
