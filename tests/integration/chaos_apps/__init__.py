"""Apps and helper processes for the chaos suite (``tests/integration/test_chaos_*.py``).

They run inside real worker and producer subprocesses; every run of a job is
recorded in a side table (:mod:`.recorder`) so runs and duplicates can be
counted independently of conveyor's own bookkeeping.
"""
