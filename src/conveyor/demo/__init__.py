"""The tasks behind ``conveyor demo`` (see :mod:`conveyor.demo.tasks`)."""
