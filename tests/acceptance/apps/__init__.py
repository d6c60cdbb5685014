"""Apps the acceptance tests run workers for (imported as ``apps.<module>:app``)."""
