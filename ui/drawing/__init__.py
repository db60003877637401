"""Report -> figures, tables, panels and text; none computes a byte."""
