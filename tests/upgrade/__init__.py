"""Upgrading: a database of the first release, migrated and finished by this one."""
