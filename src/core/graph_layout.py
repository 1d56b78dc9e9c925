"""Where each job of a workflow is drawn: layers from left to right, an order in each.

The dashboard draws a workflow as boxes joined by arrows. Deciding where the boxes go
is the only part worth testing, so it lives here, pure, apart from the SVG markup:

* **Layers.** A node's layer is the length of the longest path of edges leading to it:
  a root is in layer 0, and every edge points from a lower layer to a higher one, so
  every arrow runs left to right. A workflow is acyclic (`dependencies.check_graph`
  refuses cycles), but the layout must not depend on that to end: nodes left on a
  cycle are put in one more layer after the rest, in their given order.
* **Order in a layer.** Boxes are sorted by the mean row of the nodes they wait for
  (the barycenter heuristic), which keeps arrows short and their crossings few; a
  tie keeps the order the nodes were given (the order they were added to the
  workflow), so the same workflow is always drawn the same way.
* **Coordinates** follow from layer and row alone (`place`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import attrs

#: A box's size and the gaps between boxes, in SVG user units (pixels at scale 1).
NODE_WIDTH = 200
NODE_HEIGHT = 46
LAYER_GAP = 70
ROW_GAP = 18
MARGIN = 10


@attrs.frozen(slots=True)
class Slot:
    """A node's place: its layer (column) and its row in that layer, both from 0."""

    key: str
    layer: int
    row: int


@attrs.frozen(slots=True)
class Box:
    """A node drawn: its slot and its top-left corner."""

    slot: Slot
    x: int
    y: int


@attrs.frozen(slots=True)
class Arrow:
    """An edge drawn, from the right side of `source`'s box to the left of `target`'s:
    straight across, or, when a box of a layer between stands in its way, round below
    the boxes of those layers, along `lane`, turning down and up at `bends`."""

    source: str
    target: str
    x1: int
    y1: int
    x2: int
    y2: int
    lane: int | None = None

    @property
    def bends(self) -> tuple[int, int]:
        """Where the way round turns: in the gap after the source's layer and in the
        gap before the target's."""
        return self.x1 + LAYER_GAP // 2, self.x2 - LAYER_GAP // 2


@attrs.frozen(slots=True)
class Drawing:
    """Every box and arrow of a graph, and the size of the picture."""

    boxes: tuple[Box, ...]
    arrows: tuple[Arrow, ...]
    width: int
    height: int


def layers(nodes: Sequence[str], edges: Iterable[tuple[str, str]]) -> dict[str, int]:
    """Each node's layer: 0 for a node that waits for nothing, else one more than the
    highest layer of the nodes it waits for. `edges` are (dependency, dependent) pairs;
    an edge naming a node not in `nodes` is ignored. Nodes on a cycle go in one layer
    after the others."""
    known = set(nodes)
    waits: dict[str, list[str]] = {n: [] for n in nodes}
    for before, after in edges:
        if before in known and after in known and before != after:
            waits[after].append(before)
    placed: dict[str, int] = {}
    # Passes over the nodes in order until none can be placed: a node is placed once
    # everything it waits for is. At most one pass per layer, and no recursion to
    # run out of on a long chain.
    pending = list(nodes)
    while pending:
        left = []
        for node in pending:
            if all(d in placed for d in waits[node]):
                placed[node] = 1 + max((placed[d] for d in waits[node]), default=-1)
            else:
                left.append(node)
        if len(left) == len(pending):
            last = 1 + max(placed.values(), default=-1)
            placed.update((node, last) for node in left)
            break
        pending = left
    return placed


def order(
    nodes: Sequence[str], edges: Iterable[tuple[str, str]], layer_of: Mapping[str, int]
) -> tuple[Slot, ...]:
    """Each node's slot, in the order of `nodes`: the layers of `layer_of`, and in each
    layer the rows sorted by the mean row of the nodes waited for in earlier layers
    (ties, and nodes that wait for none of them, keep their order in `nodes`)."""
    waits: dict[str, list[str]] = {n: [] for n in nodes}
    for before, after in edges:
        if before in layer_of and after in waits and layer_of[before] < layer_of[after]:
            waits[after].append(before)
    given = {node: n for n, node in enumerate(nodes)}
    by_layer: dict[int, list[str]] = {}
    for node in nodes:
        by_layer.setdefault(layer_of[node], []).append(node)
    row: dict[str, int] = {}
    for layer in sorted(by_layer):

        def weight(node: str) -> tuple[float, int]:
            rows = [row[d] for d in waits[node] if d in row]
            centre = sum(rows) / len(rows) if rows else float(given[node])
            return (centre, given[node])

        for n, node in enumerate(sorted(by_layer[layer], key=weight)):
            row[node] = n
    return tuple(Slot(node, layer_of[node], row[node]) for node in nodes)


def place(nodes: Sequence[str], edges: Sequence[tuple[str, str]]) -> Drawing:
    """The drawing of a graph: `nodes` in the order given, `edges` as (dependency,
    dependent) pairs. Every arrow whose ends are both nodes is drawn."""
    slots = order(nodes, edges, layers(nodes, edges))
    boxes = {
        s.key: Box(
            s,
            MARGIN + s.layer * (NODE_WIDTH + LAYER_GAP),
            MARGIN + s.row * (NODE_HEIGHT + ROW_GAP),
        )
        for s in slots
    }
    arrows = tuple(
        Arrow(
            before,
            after,
            boxes[before].x + NODE_WIDTH,
            boxes[before].y + NODE_HEIGHT // 2,
            boxes[after].x,
            boxes[after].y + NODE_HEIGHT // 2,
            _lane(boxes[before], boxes[after], boxes.values()),
        )
        for before, after in edges
        if before in boxes and after in boxes and before != after
    )
    columns = 1 + max((s.layer for s in slots), default=-1)
    rows = 1 + max((s.row for s in slots), default=-1)
    width = 2 * MARGIN + columns * NODE_WIDTH + max(columns - 1, 0) * LAYER_GAP
    height = 2 * MARGIN + rows * NODE_HEIGHT + max(rows - 1, 0) * ROW_GAP
    lanes = [a.lane for a in arrows if a.lane is not None]
    height = max([height, *(lane + MARGIN for lane in lanes)])
    return Drawing(tuple(boxes[n] for n in nodes), arrows, width, height)


def _lane(source: Box, target: Box, boxes: Iterable[Box]) -> int | None:
    """Where an arrow from `source` to `target` runs round the boxes of the layers
    between (half a row gap below the lowest of them), when one of those stands
    across the band its straight way would cross; None when nothing is in its way."""
    between = [b for b in boxes if source.slot.layer < b.slot.layer < target.slot.layer]
    ends = (source.y + NODE_HEIGHT // 2, target.y + NODE_HEIGHT // 2)
    if not any(b.y <= max(ends) and b.y + NODE_HEIGHT >= min(ends) for b in between):
        return None
    return max(b.y + NODE_HEIGHT for b in between) + ROW_GAP // 2
