"""The model: an architecture's shape and parameter inventory, read from Hugging Face configs (and the Hub) or a
preset, what trains under fine-tuning, and who holds which part of each tensor on a layout."""
