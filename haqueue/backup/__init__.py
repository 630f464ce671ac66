"""Backup and restore: a copy of the committed state taken on the serving leader, and new
data directories made from it (docs/backup.md, docs/operations.md "Backup and restore")."""
