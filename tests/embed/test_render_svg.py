"""``GET /render.svg`` and ``app.render.svg``: well-formed, self-contained, escaped, and true to torch."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest
import torch
from fastapi.testclient import TestClient

from app.gallery import EXAMPLES, get_example
from app.render import build_explorer
from app.render.svg import DARK, LIGHT, render_svg
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
    assert "Step 4 of 4 · line 4" in words
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
    assert "Step 1 of 4 · line 1" in first
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
    assert "Step 2 of 4 · line 2" in words and "CloneBackward0" in words and "d" not in words
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
