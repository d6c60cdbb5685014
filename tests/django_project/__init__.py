"""A minimal Django project whose tasks run on conveyor (tests/integration/test_django_tasks.py)."""
