"""Test support shared by every suite (on ``sys.path`` via pytest's ``pythonpath``)."""
