"""The node-wide budget for big requests on their way (server/input_budget.py): whole
reservations, first come first served, so every admitted request can complete."""

from __future__ import annotations

from haqueue.server.input_budget import InputBudget


class Holder:
    def __init__(self, budget: InputBudget, name: str, log: list) -> None:
        self.budget, self.name, self.log = budget, name, log

    def input_granted(self, size: int) -> None:
        self.log.append((self.name, size))

    def __repr__(self) -> str:
        return self.name


def holders(budget: InputBudget, *names: str) -> tuple[list, list[Holder]]:
    log: list = []
    return log, [Holder(budget, name, log) for name in names]


def test_requests_within_the_budget_are_granted_at_once_and_counted():
    budget = InputBudget(100)
    _, (a, b) = holders(budget, "a", "b")
    assert budget.reserve(a, 60) and budget.reserve(b, 40)
    assert budget.held == 100 and budget.waits == 0


def test_a_request_that_does_not_fit_waits_and_is_granted_when_bytes_come_back():
    budget = InputBudget(100)
    log, (a, b, c) = holders(budget, "a", "b", "c")
    assert budget.reserve(a, 60)
    assert not budget.reserve(b, 50)
    assert not budget.reserve(c, 10)  # it would fit, but b came first: no overtaking
    assert (budget.held, budget.waiting, budget.waits, log) == (60, 2, 2, [])
    budget.release(60)
    assert log == [("b", 50), ("c", 10)]
    assert budget.held == 60 and budget.waiting == 0


def test_the_line_stops_at_the_first_request_that_does_not_fit():
    budget = InputBudget(100)
    log, (a, b, c) = holders(budget, "a", "b", "c")
    budget.reserve(a, 90)
    budget.reserve(b, 80)
    budget.reserve(c, 5)
    budget.release(90)
    assert log == [("b", 80), ("c", 5)]
    log.clear()
    budget.release(80)
    assert log == []


def test_a_request_bigger_than_the_whole_budget_goes_alone():
    budget = InputBudget(100)
    log, (a, b, c) = holders(budget, "a", "b", "c")
    assert budget.reserve(a, 500)  # nothing else held: admitted, or it could never be
    assert not budget.reserve(b, 1)
    budget.release(500)
    assert log == [("b", 1)]
    assert not budget.reserve(c, 500)
    budget.release(1)
    assert log == [("b", 1), ("c", 500)]


def test_a_waiter_that_leaves_lets_the_next_in_line_go():
    budget = InputBudget(100)
    log, (a, b, c) = holders(budget, "a", "b", "c")
    budget.reserve(a, 50)
    budget.reserve(b, 80)
    budget.reserve(c, 30)
    budget.cancel(b)  # b's connection closed while it waited
    assert log == [("c", 30)]
    assert budget.held == 80
    budget.cancel(b)  # twice: nothing happens
    assert budget.held == 80 and budget.waiting == 0
