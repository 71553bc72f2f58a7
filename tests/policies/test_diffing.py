"""policies.diffing: a pure structural diff of two policy bodies."""

from policies.diffing import diff


def test_it_reports_changed_added_and_removed_paths_in_order():
    a = {"budget": {"partitions": {"state": {"minimum": 1500}}}, "gates": ["a", "b"], "old": 1}
    b = {"budget": {"partitions": {"state": {"minimum": 2000}}}, "gates": ["a", "c", "d"], "new": True}
    assert diff(a, b) == [
        {"path": "budget.partitions.state.minimum", "change": "changed", "from": 1500, "to": 2000},
        {"path": "gates[1]", "change": "changed", "from": "b", "to": "c"},
        {"path": "gates[2]", "change": "added", "from": None, "to": "d"},
        {"path": "new", "change": "added", "from": None, "to": True},
        {"path": "old", "change": "removed", "from": 1, "to": None},
    ]


def test_identical_bodies_have_no_changes():
    body = {"policy": {"id": "p", "revision": 1}, "list": [1, {"x": 2}]}
    assert diff(body, body) == []


def test_a_type_change_is_a_change_even_when_values_compare_equal():
    assert diff({"x": 1}, {"x": True}) == [{"path": "x", "change": "changed", "from": 1, "to": True}]
