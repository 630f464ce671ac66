"""Renderers of what operators deploy (keepalived, LVS, sysctl, bonding, systemd) and host checks."""
