"""asyncio listeners, sessions, timers and leader-only serving."""
