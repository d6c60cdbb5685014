"""The ``conveyor`` command line (click + rich). One module per command group."""
