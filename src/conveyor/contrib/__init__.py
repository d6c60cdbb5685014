"""Integrations with frameworks (optional extras): ``conveyor.contrib.django``."""
