"""Where the dashboard draws a workflow's jobs: layers, the order in each, coordinates."""

from __future__ import annotations

from conveyor.core.graph_layout import (
    LAYER_GAP,
    MARGIN,
    NODE_HEIGHT,
    NODE_WIDTH,
    ROW_GAP,
    layers,
    order,
    place,
)
from hypothesis import given, settings
from hypothesis import strategies as st


@st.composite
def acyclic_graphs(draw: st.DrawFn) -> tuple[list[str], list[tuple[str, str]]]:
    """Nodes and edges where each edge points from an earlier node to a later one,
    the nodes then shuffled so that the given order says nothing about the layers."""
    n = draw(st.integers(min_value=0, max_value=12))
    names = [f"n{i}" for i in range(n)]
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n)]
    chosen = draw(st.lists(st.sampled_from(pairs), unique=True)) if pairs else []
    return draw(st.permutations(names)), [(names[a], names[b]) for a, b in chosen]


def test_a_root_is_in_the_first_layer_and_a_dependent_after_its_longest_path() -> None:
    edges = [("fetch", "render"), ("render", "merge"), ("fetch", "merge")]
    assert layers(["merge", "render", "fetch"], edges) == {"fetch": 0, "render": 1, "merge": 2}


@settings(deadline=None)  # one example stalled by a busy machine is not a failure
@given(acyclic_graphs())
def test_every_arrow_runs_from_a_lower_layer_to_a_higher_one(
    graph: tuple[list[str], list[tuple[str, str]]],
) -> None:
    nodes, edges = graph
    layer = layers(nodes, edges)
    assert set(layer) == set(nodes)
    for before, after in edges:
        assert layer[before] < layer[after]


@settings(deadline=None)  # one example stalled by a busy machine is not a failure
@given(acyclic_graphs())
def test_each_layer_is_as_early_as_its_dependencies_allow(
    graph: tuple[list[str], list[tuple[str, str]]],
) -> None:
    nodes, edges = graph
    layer = layers(nodes, edges)
    for node in nodes:
        before = [layer[a] for a, b in edges if b == node]
        assert layer[node] == 1 + max(before, default=-1)


@settings(deadline=None)  # one example stalled by a busy machine is not a failure
@given(acyclic_graphs())
def test_rows_in_each_layer_are_numbered_from_zero_without_a_gap(
    graph: tuple[list[str], list[tuple[str, str]]],
) -> None:
    nodes, edges = graph
    slots = order(nodes, edges, layers(nodes, edges))
    assert [s.key for s in slots] == nodes
    by_layer: dict[int, list[int]] = {}
    for s in slots:
        by_layer.setdefault(s.layer, []).append(s.row)
    for rows in by_layer.values():
        assert sorted(rows) == list(range(len(rows)))


@settings(deadline=None)  # one example stalled by a busy machine is not a failure
@given(acyclic_graphs())
def test_the_same_graph_is_always_drawn_the_same_way(
    graph: tuple[list[str], list[tuple[str, str]]],
) -> None:
    nodes, edges = graph
    assert place(nodes, edges) == place(list(nodes), list(edges))


def test_a_layer_is_ordered_by_the_rows_of_what_it_waits_for() -> None:
    # a is above b; x waits for b and y for a, so y is drawn above x though added after.
    nodes = ["a", "b", "x", "y"]
    edges = [("b", "x"), ("a", "y")]
    slots = {s.key: s for s in order(nodes, edges, layers(nodes, edges))}
    assert (slots["a"].row, slots["b"].row) == (0, 1)
    assert (slots["y"].row, slots["x"].row) == (0, 1)


def test_ties_keep_the_order_the_nodes_were_added_in() -> None:
    nodes = ["root", "p2", "p0", "p1"]
    edges = [("root", p) for p in ("p0", "p1", "p2")]
    slots = order(nodes, edges, layers(nodes, edges))
    assert [(s.key, s.row) for s in slots if s.layer == 1] == [("p2", 0), ("p0", 1), ("p1", 2)]


def test_a_cycle_does_not_stop_the_layout() -> None:
    layer = layers(["a", "b", "c", "d"], [("a", "b"), ("b", "c"), ("c", "b"), ("c", "d")])
    assert layer == {"a": 0, "b": 1, "c": 1, "d": 1}


def test_edges_naming_unknown_nodes_or_a_node_itself_are_left_out() -> None:
    drawing = place(["a", "b"], [("a", "b"), ("ghost", "b"), ("a", "a")])
    assert [(x.source, x.target) for x in drawing.arrows] == [("a", "b")]


def test_boxes_and_arrows_are_placed_by_layer_and_row() -> None:
    drawing = place(["root", "left", "right"], [("root", "left"), ("root", "right")])
    boxes = {b.slot.key: b for b in drawing.boxes}
    assert (boxes["root"].x, boxes["root"].y) == (MARGIN, MARGIN)
    column = MARGIN + NODE_WIDTH + LAYER_GAP
    assert (boxes["left"].x, boxes["left"].y) == (column, MARGIN)
    assert (boxes["right"].x, boxes["right"].y) == (column, MARGIN + NODE_HEIGHT + ROW_GAP)
    first = drawing.arrows[0]
    assert (first.x1, first.y1) == (MARGIN + NODE_WIDTH, MARGIN + NODE_HEIGHT // 2)
    assert (first.x2, first.y2) == (column, MARGIN + NODE_HEIGHT // 2)
    assert drawing.width == 2 * MARGIN + 2 * NODE_WIDTH + LAYER_GAP
    assert drawing.height == 2 * MARGIN + 2 * NODE_HEIGHT + ROW_GAP


def test_an_empty_graph_is_an_empty_picture() -> None:
    drawing = place([], [])
    assert drawing.boxes == () and drawing.arrows == ()
    assert (drawing.width, drawing.height) == (2 * MARGIN, 2 * MARGIN)


def test_an_arrow_past_a_box_in_its_way_goes_round_below_it() -> None:
    # fetch -> transform -> load -> notify, and notify also waits for fetch: that arrow
    # ran straight through transform and load, and the picture showed a plain chain.
    nodes = ["fetch", "transform", "load", "notify"]
    edges = [("fetch", "transform"), ("transform", "load"), ("load", "notify")]
    drawing = place(nodes, [*edges, ("fetch", "notify")])
    lanes = {(a.source, a.target): a.lane for a in drawing.arrows}
    assert all(lanes[edge] is None for edge in edges), "arrows to the next layer go straight"
    lane = lanes[("fetch", "notify")]
    boxes = {b.slot.key: b for b in drawing.boxes}
    assert lane is not None and lane > boxes["load"].y + NODE_HEIGHT
    assert lane < drawing.height, "the picture holds the way round"
    [round_arrow] = [a for a in drawing.arrows if a.lane is not None]
    assert round_arrow.bends[0] > boxes["fetch"].x + NODE_WIDTH
    assert round_arrow.bends[1] < boxes["notify"].x
