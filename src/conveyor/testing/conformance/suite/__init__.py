"""The conformance tests, one module per area of the backend contract.

Not collected from here: ``conveyor.testing.conformance`` gathers them for a
backend's own test module (see docs/how-to/writing-a-backend.md).
"""
