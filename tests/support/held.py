"""Stand-ins for the commit, for tests of the id front end (server/ids/udp.py) with the real
state machine: commands wait until the test commits them (subclasses say how they are applied)
or loses them (outcome unknown), and a read lease the test can take away."""

from __future__ import annotations


class HeldCommands:
    """The batcher's interface: submit(command, continuation); commit() is the subclass's."""

    def __init__(self) -> None:
        self.waiting: list[tuple] = []
        self.closed = False  # the batcher after leadership was lost

    def submit(self, command, continuation) -> None:
        self.waiting.append((command, continuation))

    def fail(self) -> None:
        """Leadership lost with the entry in flight: every waiting command's outcome is unknown."""
        waiting, self.waiting = self.waiting, []
        for _, continuation in waiting:
            continuation(None)


class Lease:
    valid = True

    def read_lease_valid(self) -> bool:
        return self.valid


class SoonLoop:
    """The loop's call_soon, for a front end tested without a loop: callbacks wait until
    run_soon() (or run at once with immediate=True, as if the loop got to them first)."""

    def __init__(self, immediate: bool = True) -> None:
        self.immediate = immediate
        self.ready: list = []

    def call_soon(self, callback, *args) -> None:
        if self.immediate:
            callback(*args)
        else:
            self.ready.append((callback, args))

    def run_soon(self) -> None:
        ready, self.ready = self.ready, []
        for callback, args in ready:
            callback(*args)


class Disk:
    """The disk reserve (server/disk_reserve.py), as a front end asks it: admits while `room`."""

    def __init__(self) -> None:
        self.room = True

    def admits(self, size: int) -> bool:
        return self.room
