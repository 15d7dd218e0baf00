"""``GET /render.svg`` and ``app.render.svg``: well-formed, self-contained, escaped, and true to torch."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest
import torch
from fastapi.testclient import TestClient

from app.budget import Budget, BudgetExceeded, use_budget
from app.gallery import EXAMPLES, get_example
from app.render import build_explorer, fmt
from app.render.svg import render_svg
from app.render.svg_canvas import DARK, LIGHT, THEMES
from app.web.permalink import encode_code
from tests.render.conftest import trace

SVG = "{http://www.w3.org/2000/svg}"
CLONE = get_example("clone-vs-detach").code
HOSTILE = (
    'd = {"<script>": torch.ones(2)}\n'
    'print("<script>alert(2)</script> & </svg><svg onload=alert(3)>")\n'
    'print("bell \\x07 nul \\x00 esc \\x1b[31m")\n'
    'raise ValueError("<b>bold</b> & ]]>")\n'
)


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    return root


def texts(root: ET.Element) -> list[str]:
    return ["".join(el.itertext()) for el in root.iter(f"{SVG}text")]


def assert_self_contained(root: ET.Element) -> None:
    """Nothing an <img> would fetch or run: no scripts, no foreign content, no links, no handlers."""
    for el in root.iter():
        tag = el.tag.removeprefix(SVG)
        assert tag in {"svg", "title", "defs", "marker", "path", "g", "rect", "text"}, tag
        for name, value in el.attrib.items():
            assert not name.lower().startswith("on"), name
            assert "href" not in name, name
            assert "url(" not in value or value == "url(#ax-arrow)", value
            assert "http" not in value and "data:" not in value, value
        if tag == "text" and "font-family" in el.attrib:
            assert el.attrib["font-family"] in ("monospace", "sans-serif")
    assert root.attrib["font-family"] == "monospace"


def assert_fits(root: ET.Element) -> None:
    """Monospace text drawn outside the graph's group ends inside the picture (widths are estimated)."""
    width = float(root.attrib["width"])
    for el in root.findall(f"{SVG}text"):
        if "font-family" in el.attrib:  # sans-serif titles: no exact width to check
            continue
        x, size, chars = float(el.attrib["x"]), float(el.attrib["font-size"]), len("".join(el.itertext()))
        anchor = el.attrib.get("text-anchor", "start")
        start = {"start": x, "middle": x - chars * 0.3 * size, "end": x - chars * 0.6 * size}[anchor]
        assert start >= 0 and start + chars * 0.6 * size <= width + 1, "".join(el.itertext())


def svg_of(code: str, step: int | None = None, which: str = "both", theme: str = "light") -> str:
    return render_svg(build_explorer(trace(code), code, step), step, which, theme)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.slug)
def test_every_gallery_step_is_well_formed_and_self_contained(example) -> None:
    view = build_explorer(trace(example.code), example.code)
    for step in range(view.step_count):
        for which, theme in (("both", "light"), ("memory", "dark"), ("graph", "light")):
            root = parse(render_svg(view, step, which, theme))
            assert_self_contained(root)
            assert_fits(root)
            assert float(root.attrib["width"]) >= 560 and float(root.attrib["height"]) > 100


def test_clone_vs_detach_matches_torch() -> None:
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    c, d = x.clone(), x.detach()
    root = parse(svg_of(CLONE))
    words = texts(root)
    assert "Step 4 of 4 · after line 4 ran" in words
    assert type(c.grad_fn).__name__ in words  # CloneBackward0, a node of the graph
    assert "AccumulateGrad" in words
    for name in ("x", "c", "d"):
        assert name in words  # memory rows and graph boxes
    assert words.count("3 × float32 · 12 B") == 2  # two storages: clone copied, detach shared
    assert not [w for w in words if re.fullmatch(r"[tsn]\d+", w)]  # no internal id in the picture
    assert d.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    cells = [w for w in words if re.fullmatch(r"-?\d+\.\d*", w)]
    assert cells == ["1.", "2.", "3.", "1.", "2.", "3."] == [f"{v:g}." for v in x.tolist() + c.tolist()]


def test_a_step_draws_that_step_only() -> None:
    first = texts(parse(svg_of(CLONE, step=0)))
    assert "Step 1 of 4 · after line 1 ran" in first
    assert "x" in first and "c" not in first and "CloneBackward0" not in first
    second = texts(parse(svg_of(CLONE, step=1)))
    assert "CloneBackward0" in second and "d" not in second


def test_view_and_theme() -> None:
    memory = texts(parse(svg_of(CLONE, which="memory")))
    assert "MEMORY" in memory and "AUTOGRAD GRAPH" not in memory and "CloneBackward0" not in memory
    graph = texts(parse(svg_of(CLONE, which="graph")))
    assert "AUTOGRAD GRAPH" in graph and "MEMORY" not in graph and "CloneBackward0" in graph
    assert f'fill="{DARK["bg"]}"' in svg_of(CLONE, theme="dark")
    assert f'fill="{LIGHT["bg"]}"' in svg_of(CLONE, theme="light")


def test_hostile_names_prints_and_errors_are_text() -> None:
    svg = svg_of(HOSTILE)
    root = parse(svg)  # control characters were replaced: still well-formed XML
    assert_self_contained(root)
    assert "<script" not in svg and "<svg onload" not in svg and "<b>" not in svg
    words = "\n".join(texts(root))
    assert "d['<script>']" in words  # the dict entry's name, as text
    assert "<script>alert(2)</script> & </svg><svg onload=alert(3)>" in words  # the print
    assert "<b>bold</b> & ]]>" in words  # the error message
    assert "\x00" not in svg and "\x1b" not in svg and "\x07" not in svg


# ---------- 2-D tensors as their shape (app/render/grid.py), drawn in the image ----------

GRID_CODE = """\
w = torch.arange(12.).reshape(3, 4)
t = w.t()
s = w[1:, ::2]
w[2, 0] = -1.0
"""


GRID_LEGEND = "@5: in a grid, the storage cell the element lives in"


def _torch_steps(code: str) -> list[dict[str, tuple[torch.Tensor, list[list[int]]]]]:
    """The snippet's matrices after each of its lines, as torch has them: a copy of each one's values
    at that moment, and the storage cell torch says each element lives in."""
    scope: dict = {"torch": torch}
    seen = []
    for line in code.splitlines():
        exec(line, scope)  # noqa: S102 - our own lines, the oracle for the image
        matrices = {name: v for name, v in scope.items() if isinstance(v, torch.Tensor) and v.dim() == 2}
        seen.append({name: (v.clone(), [[_address(v, r, c) for c in range(m)] for r in range(n)])
                     for name, v in matrices.items() for n, m in [v.shape]})
    return seen


def _address(tensor: torch.Tensor, r: int, c: int) -> int:
    """The storage cell torch says ``tensor[r, c]`` lives in."""
    return (tensor[r, c].data_ptr() - tensor.untyped_storage().data_ptr()) // tensor.element_size()


def svg_grids(root: ET.Element) -> dict[str, tuple[list[list[str]], list[list[int]], list[str]]]:
    """Each grid the image draws, read by position as a reader reads it: (values, storage cells, the
    notes under its caption) by tensor name. A column is the header number above it, a row the
    number left of it; a cell's value sits above its "@n"."""
    grids = {}
    for group in root.iter(f"{SVG}g"):
        if group.attrib.get("role") != "group":
            continue
        items = [("".join(el.itertext()), float(el.attrib["x"]), float(el.attrib["y"]),
                  el.attrib.get("text-anchor")) for el in group.iter(f"{SVG}text")]
        name, notes = items[0][0], [text for text, _x, _y, anchor in items[2:] if anchor is None]
        centred = [(text, x, y) for text, x, y, anchor in items if anchor == "middle"]
        header_y = min(y for _text, _x, y in centred)
        columns = {x: int(text) for text, x, y in centred if y == header_y}
        rows = {y: int(text) for text, _x, y, anchor in items if anchor == "end"}
        at = {(x, y): text for text, x, y in centred}
        values = [[""] * len(columns) for _ in rows]
        cells = [[-1] * len(columns) for _ in rows]
        for text, x, y in centred:
            if text.startswith("@"):
                r = rows[min(rows, key=lambda row_y: abs(row_y - y))]  # a row's number is centred on it
                cells[r][columns[x]] = int(text[1:])
                values[r][columns[x]] = at.get((x, y - 12), "")  # the value above it
        grids[name] = (values, cells, notes)
    return grids


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_grids_draw_each_tensor_as_torch_indexes_it(theme: str) -> None:
    view = build_explorer(trace(GRID_CODE), GRID_CODE)
    expected = _torch_steps(GRID_CODE)
    for step in range(view.step_count):  # w alone, with t = w.t(), with the slice, after the write
        root = parse(render_svg(view, step, "memory", theme))
        grids = svg_grids(root)
        assert sorted(grids) == sorted(expected[step]), step
        for name, (tensor, addresses) in expected[step].items():
            values, cells, notes = grids[name]
            rows, cols = tensor.shape
            assert values == [[fmt.scalar(tensor[r, c].item()) for c in range(cols)] for r in range(rows)]
            assert cells == addresses and notes == []
    # the write is marked in each grid that reads its cell: w[2, 0], t[0, 2], s[1, 0] are storage cell 8
    last = parse(render_svg(view, view.step_count - 1, "memory", theme))
    marked = [rect for group in last.iter(f"{SVG}g") if group.attrib.get("role") == "group"
              for rect in group.iter(f"{SVG}rect") if rect.attrib["fill"] == THEMES[theme]["changed"]]
    assert len(marked) == 3


def test_big_grids_are_windows_and_none_is_drawn_where_it_would_mislead() -> None:
    code = ("x = torch.tensor([1., 2.])\ne = x.expand(40, 2)\nw = torch.zeros(1, 30)\n"
            "big = torch.zeros(10, 20).t()\na = torch.arange(4.).reshape(2, 2)\nv = a.view(torch.int32)\n"
            "c = torch.zeros(2, 2, 2)\n")
    root = parse(svg_of(code, which="memory"))
    assert_fits(root)
    grids = svg_grids(root)
    assert GRID_LEGEND in texts(root)  # what "@n" means, said where a grid is drawn ...
    assert GRID_LEGEND not in texts(parse(svg_of(CLONE)))  # ... and only there (vectors only)
    assert "a" in grids and "v" not in grids and "c" not in grids  # int32 read of float32 cells; 3-D
    values, cells, notes = grids["e"]
    assert len(values) == 16 and values == [["1.", "2."]] * 16 and notes == ["rows 0–15 of 40"]
    assert cells == [[0, 1]] * 16  # stride 0: every row reads the same two cells
    values, cells, notes = grids["w"]
    assert cells == [list(range(12))] and notes == ["columns 0–11 of 30"]
    # 200 elements: no values read, only where each element lives, as torch addresses it
    oracle = torch.zeros(10, 20).t()
    values, cells, notes = grids["big"]
    assert cells == [[_address(oracle, r, c) for c in range(8)] for r in range(6)]
    assert values == [[""] * 8] * 6
    assert notes == ["rows 0–5 of 20 · columns 0–7 of 10",
                     "where each element lives (a storage this big is not read)"]


def test_drawing_stops_when_the_request_has_no_time_left() -> None:
    view = build_explorer(trace(GRID_CODE), GRID_CODE)
    with use_budget(Budget(0.0)), pytest.raises(BudgetExceeded):  # the route answers "Cannot draw this run"
        render_svg(view, None, "memory")


# ---------- over HTTP, through the sandboxed runner ----------

def get_svg(client: TestClient, query: str, **headers: str):
    return client.get(f"/render.svg?{query}", headers=headers)


def test_http_image_of_a_permalink(client: TestClient) -> None:
    response = get_svg(client, f"code={encode_code(CLONE)}&step=2&view=both&theme=light")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "image/svg+xml"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["content-security-policy"].startswith("default-src 'none'")
    root = parse(response.text)
    assert_self_contained(root)
    words = texts(root)
    assert "Step 2 of 4 · after line 2 ran" in words and "CloneBackward0" in words and "d" not in words
    # the same inputs draw the same picture: cacheable, and revalidated without a run
    assert response.headers["cache-control"].startswith("public")
    etag = response.headers["etag"]
    query = f"code={encode_code(CLONE)}&step=2&view=both&theme=light"
    again = get_svg(client, query, **{"If-None-Match": etag})
    assert again.status_code == 304 and again.headers["etag"] == etag
    other = get_svg(client, f"code={encode_code(CLONE)}&step=3&view=both&theme=light")
    assert other.headers["etag"] != etag and "d" in texts(parse(other.text))


def test_http_image_of_an_example_and_a_short_link(client: TestClient) -> None:
    example = get_svg(client, "example=clone-vs-detach&view=graph&theme=dark")
    assert example.status_code == 200 and "CloneBackward0" in texts(parse(example.text))
    made = client.post("/api/links", json={"code": CLONE})
    linked = get_svg(client, f"s={made.json()['id']}&view=memory")
    assert linked.status_code == 200 and "MEMORY" in texts(parse(linked.text))


def test_http_hostile_snippet(client: TestClient) -> None:
    response = get_svg(client, f"code={encode_code(HOSTILE)}")
    assert response.status_code == 200
    assert "<script" not in response.text and "<svg onload" not in response.text
    root = parse(response.text)
    assert_self_contained(root)
    words = "\n".join(texts(root))
    assert "d['<script>']" in words and "<script>alert(2)</script>" in words
    assert "ValueError" in words


@pytest.mark.parametrize(("query", "status", "says"), [
    ("view=all", 400, "view must be one of both, memory, graph"),
    ("theme=sepia", 400, "theme must be one of light, dark"),
    ("step=0", 400, "step must be a whole number from 1"),
    ("code=AAAAA", 400, "not valid base64url"),
    ("s=aaaaaaaaaa", 404, "does not exist"),
    ("code=abc&example=clone-vs-detach", 400, "Give only one of"),
])
def test_http_errors_are_images_that_say_why(client: TestClient, query: str, status: int, says: str) -> None:
    response = get_svg(client, query)
    assert response.status_code == status
    assert response.headers["content-type"] == "image/svg+xml"
    assert response.headers["cache-control"] == "no-store"
    root = parse(response.text)
    assert_self_contained(root)
    assert says in "\n".join(texts(root))


def test_head_says_whether_the_link_is_good_without_a_run(client: TestClient) -> None:
    """HEAD (a link checker, a preview) is answered, not 405: the picture's type and ETag for a good
    link (the ETag GET gives), the error status for a bad one."""
    query = f"code={encode_code(CLONE)}&step=1&view=graph&theme=dark"
    head = client.head(f"/render.svg?{query}")
    assert head.status_code == 200 and head.headers["content-type"] == "image/svg+xml"
    assert head.content == b""
    got = get_svg(client, query)
    assert got.status_code == 200 and got.headers["etag"] == head.headers["etag"]
    assert client.head("/render.svg?code=%%%").status_code == 400
