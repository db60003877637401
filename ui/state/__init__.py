"""The page's state: every input as a named field (data), its text form, its link, and the core's inputs it gives."""
