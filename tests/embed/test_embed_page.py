"""``GET /embed`` and ``POST /embed/run`` over HTTP: parameters, the page they make, the fragment."""

from __future__ import annotations

from html.parser import HTMLParser
from urllib.parse import parse_qs, urlsplit

import pytest
import torch
from fastapi.testclient import TestClient

from app.gallery import EXAMPLES, get_example
from app.web.permalink import decode_code, encode_code

CLONE = get_example("clone-vs-detach").code
TOKEN = encode_code(CLONE)


class Tags(HTMLParser):
    """Start tags with their attributes, and the text inside <textarea>."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.textarea = ""
        self._in_textarea = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_textarea = tag == "textarea"

    def handle_endtag(self, tag):
        if tag == "textarea":  # as browsers read it: the newline right after <textarea> is dropped
            self.textarea = self.textarea.removeprefix("\n")
        self._in_textarea = False

    def handle_data(self, data):
        if self._in_textarea:
            self.textarea += data

    def find(self, **attrs) -> list[dict]:
        return [a for _, a in self.tags if all(a.get(k) == v for k, v in attrs.items())]


def parse(html: str) -> Tags:
    tags = Tags()
    tags.feed(html)
    return tags


def open_link(html: str) -> tuple[str, dict[str, list[str]]]:
    (link,) = parse(html).find(**{"data-testid": "open"})
    parts = urlsplit(link["href"])
    return parts.path, parse_qs(parts.query)


@pytest.mark.parametrize(("query", "says"), [
    ("view=table", "view must be one of both, memory, graph"),
    ("theme=blue", "theme must be one of light, dark"),
    ("readonly=maybe", "readonly must be 1 or 0"),
    ("autorun=2", "autorun must be 1 or 0"),
    ("step=0", "step must be a whole number from 1"),
    ("step=-3", "step must be a whole number from 1"),
    ("step=two", "step must be a whole number from 1"),
    ("step=" + "9" * 5000, "step must be a whole number from 1"),
    (f"code={TOKEN}&s=abcdefghij", "Give only one of code, s or example"),
    ("code=AAAAA", "not valid base64url"),
    ("code=_w", "not valid compressed data"),
    ("code=" + TOKEN[:-6], "cut short"),
    ("s=NOT_AN_ID!", "s (a short-link id) must be"),
    ("example=no-such-example", "There is no example"),
])
def test_bad_parameters_answer_a_clear_400_page(client: TestClient, query: str, says: str) -> None:
    response = client.get(f"/embed?{query}")
    assert response.status_code == 400
    assert response.headers["content-type"].startswith("text/html")
    assert says in response.text
    (box,) = parse(response.text).find(**{"data-testid": "embed-error"})
    assert box["data-status"] == "400"
    assert "frame-ancestors *" in response.headers["content-security-policy"]  # shown inside the frame


def test_a_rejected_value_is_quoted_escaped_and_short(client: TestClient) -> None:
    response = client.get("/embed", params={"view": "<script>alert(1)</script>" + "x" * 500})
    assert response.status_code == 400
    assert "<script>alert" not in response.text and "&lt;script&gt;alert(1)" in response.text
    assert "x" * 60 not in response.text


def test_too_long_code_is_refused(client: TestClient) -> None:
    big = "x = 1\n" * 5000  # 30 KB, over the 20 KB limit
    response = client.get("/embed", params={"code": encode_code(big)})
    assert response.status_code == 400 and "longer than 20 KB" in response.text


def test_unknown_short_link_is_404(client: TestClient) -> None:
    response = client.get("/embed?s=aaaaaaaaaa")
    assert response.status_code == 404 and "does not exist" in response.text


def test_defaults_show_the_first_example_with_an_editor_and_a_run_button(client: TestClient) -> None:
    response = client.get("/embed")
    assert response.status_code == 200
    tags = parse(response.text)
    assert tags.textarea == EXAMPLES[0].code.rstrip("\n")  # no empty last line in a small editor
    (area,) = tags.find(id="code")
    assert "readonly" not in area
    assert tags.find(**{"data-testid": "run"})  # no autorun: the reader starts it
    (run,) = tags.find(id="run")
    assert "hx-trigger" not in run
    (html,) = [a for tag, a in tags.tags if tag == "html"]
    assert html["data-theme"] == "light"
    assert tags.find(name="view", value="both")
    assert open_link(response.text) == ("/", {"example": [EXAMPLES[0].slug]})


def test_code_step_view_theme_readonly_autorun(client: TestClient) -> None:
    response = client.get(f"/embed?code={TOKEN}&step=2&view=graph&theme=dark&readonly=1&autorun=1")
    assert response.status_code == 200
    tags = parse(response.text)
    assert tags.textarea == CLONE.rstrip("\n")
    (area,) = tags.find(id="code")
    assert "readonly" in area
    assert not tags.find(**{"data-testid": "run"})  # read-only and run on load: nothing to press
    (run,) = tags.find(id="run")
    assert run["hx-trigger"] == "load" and run["hx-post"] == "/embed/run"
    assert tags.find(name="view", value="graph") and tags.find(name="step", value="2")
    (html,) = [a for tag, a in tags.tags if tag == "html"]
    assert html["data-theme"] == "dark"
    path, query = open_link(response.text)
    assert path == "/" and query["step"] == ["2"]
    assert decode_code(query["code"][0], 20 * 1024) == CLONE  # "Open in playground" keeps the code
    (link,) = tags.find(**{"data-testid": "open"})
    assert link["target"] == "_blank" and "noopener" in link["rel"]  # the playground refuses frames


def test_bare_flags_mean_yes(client: TestClient) -> None:
    tags = parse(client.get(f"/embed?code={TOKEN}&readonly&autorun").text)
    (area,) = tags.find(id="code")
    assert "readonly" in area and tags.find(id="run", **{"hx-trigger": "load"})


def test_short_link_source(client: TestClient) -> None:
    made = client.post("/api/links", json={"code": CLONE})
    assert made.status_code == 200
    link_id = made.json()["id"]
    response = client.get(f"/embed?s={link_id.upper()}&step=3")
    assert response.status_code == 200
    assert parse(response.text).textarea == CLONE.rstrip("\n")
    path, query = open_link(response.text)
    assert path == "/" and query["step"] == ["3"] and decode_code(query["code"][0], 20 * 1024) == CLONE


def test_a_leading_blank_line_survives(client: TestClient) -> None:
    code = "\n\nx = torch.ones(2)\n"
    response = client.get("/embed", params={"code": encode_code(code)})
    assert parse(response.text).textarea == "\n\nx = torch.ones(2)"  # line numbers stay right


def test_hostile_code_stays_text_in_the_page(client: TestClient) -> None:
    code = 'x = torch.ones(2)  # </textarea><script>alert(1)</script>\n'
    response = client.get("/embed", params={"code": encode_code(code)})
    assert response.status_code == 200
    assert "<script>alert(1)" not in response.text
    assert parse(response.text).textarea == code.rstrip("\n")


def _fragment(client: TestClient, code: str, **form: str):
    return client.post("/embed/run", data={"code": code, **form})


def test_fragment_shows_the_chosen_views_at_the_chosen_step(client: TestClient) -> None:
    both = _fragment(client, CLONE, view="both", step="")
    assert both.status_code == 200, both.text
    assert 'data-testid="memory-view"' in both.text and 'data-testid="graph-view"' in both.text
    # torch is the oracle for the node the graph draws
    clone_fn = type(torch.tensor([1.0], requires_grad=True).clone().grad_fn).__name__
    assert clone_fn == "CloneBackward0" and clone_fn in both.text
    assert "Step 4 of 4" in both.text
    memory = _fragment(client, CLONE, view="memory", step="2")
    assert 'data-testid="memory-view"' in memory.text and 'data-testid="graph-view"' not in memory.text
    assert "Step 2 of 4" in memory.text
    graph = _fragment(client, CLONE, view="graph", step="1")
    assert 'data-testid="graph-view"' in graph.text and 'data-testid="memory-view"' not in graph.text
    assert "Step 1 of 4" in graph.text
    assert "frame-ancestors *" in graph.headers["content-security-policy"]


def test_fragment_refuses_a_bad_view_and_empty_code(client: TestClient) -> None:
    assert _fragment(client, CLONE, view="all").status_code == 400
    empty = _fragment(client, "   ", view="both")
    assert empty.status_code == 200 and "There is no code to run" in empty.text


def test_fragment_escapes_hostile_names_and_output(client: TestClient) -> None:
    code = ('d = {"<img src=x onerror=alert(1)>": torch.ones(2)}\n'
            'print("<script>alert(1)</script>")\n')
    response = _fragment(client, code, view="both")
    assert response.status_code == 200
    assert "<script>alert(1)" not in response.text and "<img src=x" not in response.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in response.text
