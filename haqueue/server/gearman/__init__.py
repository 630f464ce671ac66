"""The Gearman front end: its listener and connections (service.py, session.py) and text admin protocol (admin.py)."""
