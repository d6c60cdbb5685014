"""Testing tools for conveyor users and backend authors."""
