"""axolotl training YAMLs (`axolotl train FILE.yaml`) as zerocalc plans: reader.py."""
