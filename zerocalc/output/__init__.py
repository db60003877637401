"""Output: the report as plain data (the JSON the CLI prints and the app downloads) and as text."""
