"""The differential model zoo (docs/ZOO.md): scripts run as files, see run.py."""
