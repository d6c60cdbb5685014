"""The apps the benchmark workers load: one per system, the same three tasks each."""
