"""The page and the fragment as the server renders them: escaping, CSP, hooks, permalinks."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.gallery import EXAMPLES
from app.schema import DeltaTrace
from app.web.main import create_app
from app.web.permalink import encode_code
from tests.render.conftest import trace

TEST_IDS = {"code", "run", "gallery", "memory-view", "graph-view", "step-prev", "step-next", "step-slider",
            "tensor-detail"}
HOSTILE = (
    'd = {"<img src=x onerror=alert(1)>": torch.ones(2)}\n'
    'print("<script>alert(1)</script>")\n'
    'raise ValueError("<b>bold</b> & </script>")\n'
)


class Engine:
    """A runner that traces in-process: real engine data without the sandbox."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def run(self, code: str) -> DeltaTrace:
        self.calls.append(code)
        return trace(code)


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.scripts: dict[str, str] = {}  # data-role or id -> the script's text
        self._script: str | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append((tag, attrs))
        self._script = (attrs.get("data-role") or attrs.get("id") or "") if tag == "script" else None

    def handle_endtag(self, tag):
        self._script = None

    def handle_data(self, data):
        if self._script is not None:
            self.scripts[self._script] = self.scripts.get(self._script, "") + data

    @property
    def payload(self) -> dict:
        return json.loads(self.scripts["run-data"])


def parse(html: str) -> Tags:
    tags = Tags()
    tags.feed(html)
    return tags


@pytest.fixture
def engine() -> Engine:
    return Engine()


@pytest.fixture
def client(engine: Engine, tmp_path):
    with TestClient(create_app(Settings(data_dir=tmp_path), runner=engine)) as test_client:
        yield test_client


def test_page_has_the_hooks_and_a_strict_csp(client: TestClient) -> None:
    response = client.get("/")
    assert response.status_code == 200
    assert response.headers["content-security-policy"].startswith("default-src 'self'")
    tags = parse(response.text)
    scripts = [a for t, a in tags.tags if t == "script"]
    assert all(a.get("src", "").startswith("/static/") or a.get("type") == "application/json"
               for a in scripts)
    assert not any("style" in a for _, a in tags.tags)  # the CSP forbids inline styles
    ids = {a["data-testid"] for _, a in tags.tags if "data-testid" in a}
    assert {"code", "run", "gallery"} <= ids
    gallery = json.loads(tags.scripts["gallery-data"])
    assert [g["slug"] for g in gallery] == [e.slug for e in EXAMPLES]


def test_fragment_has_both_views_and_every_hook(client: TestClient) -> None:
    code = EXAMPLES[0].code
    response = client.post("/run", data={"code": code})
    assert response.status_code == 200
    tags = parse(response.text)
    ids = {a["data-testid"] for _, a in tags.tags if "data-testid" in a}
    assert TEST_IDS - {"code", "run", "gallery"} <= ids
    payload = tags.payload
    assert payload["count"] == len(trace(code).steps) and payload["code"] == code
    assert payload["initial"] == payload["count"] - 1
    keys = {int(a["data-k"]) for _, a in tags.tags if "data-k" in a}
    assert {k for k, _ in payload["vis"]} <= keys  # every tracked element is on the page


def test_user_strings_are_text_never_markup(client: TestClient) -> None:
    response = client.post("/run", data={"code": HOSTILE})
    html = response.text
    tags = parse(html)
    ours = [a for t, a in tags.tags if t == "b" and ("data-k" in a or a.get("class") == "cv")]
    assert [t for t, a in tags.tags if t in ("img", "b")] == ["b"] * len(ours)  # none the user wrote
    assert {a.get("type") for t, a in tags.tags if t == "script"} == {"application/json"}
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # the print, as text
    assert "&lt;img src=x onerror=alert(1)&gt;" in html  # the variable name, as text
    assert "&lt;b&gt;bold&lt;/b&gt; &amp; &lt;/script&gt;" in html  # the error, as text
    for raw_json in tags.scripts.values():
        assert "<" not in raw_json and ">" not in raw_json  # tojson escapes them: no way out
    payload = tags.payload
    assert "<script>alert(1)</script>" in payload["stdout"]
    assert payload["errorText"] == "ValueError here: its message is in the red box with the run"


def test_a_failed_run_keeps_its_steps_and_names_the_line(client: TestClient) -> None:
    code = "a = torch.ones(2)\nb = a * 2\nc = a @ torch.ones(3)\n"
    tags = parse(client.post("/run", data={"code": code}).text)
    (error,) = [a for _, a in tags.tags if a.get("data-testid") == "error"]
    assert error["data-kind"] == "runtime" and error["data-line"] == "3"
    assert tags.payload["count"] == 2


def test_textarea_line_endings_and_limits(client: TestClient, engine: Engine) -> None:
    client.post("/run", data={"code": "a = 1\r\nb = 2\r\n"})
    assert engine.calls == ["a = 1\nb = 2\n"]
    too_long = client.post("/run", data={"code": "#" * (21 * 1024)})
    assert "longer than 20 KB" in too_long.text and len(engine.calls) == 1
    empty = client.post("/run", data={"code": "   "})
    assert "no code to run" in empty.text and len(engine.calls) == 1


def test_permalink_opens_the_code_and_the_step(client: TestClient) -> None:
    code = "x = torch.ones(2)\ny = x * 2  # <tag>\n"
    response = client.get("/", params={"code": encode_code(code), "step": "2"})
    tags = parse(response.text)
    (run,) = [a for t, a in tags.tags if a.get("id") == "run"]
    assert json.loads(run["hx-vals"]) == {"step": 2} and run["hx-trigger"] == "load"
    assert "y = x * 2  # &lt;tag&gt;" in response.text
    fragment = client.post("/run", data={"code": code, "step": "1"})
    assert parse(fragment.text).payload["initial"] == 0


def test_example_by_slug(client: TestClient) -> None:
    example = EXAMPLES[3]
    response = client.get("/", params={"example": example.slug})
    assert f'value="{example.slug}" selected' in response.text


def test_htmx_is_served_from_the_npm_package(client: TestClient) -> None:
    response = client.get("/static/vendor/htmx.min.js")
    assert response.status_code == 200 and "htmx" in response.text[:2000]
    assert client.get("/static/explorer.js").status_code == 200


class Canned:
    def __init__(self, result: DeltaTrace) -> None:
        self.result = result

    async def run(self, code: str) -> DeltaTrace:
        return self.result


@pytest.mark.parametrize(("kind", "sentence"), [
    ("internal", "went wrong on our side"),
    ("rejected", "was not run"),
])
def test_sandbox_verdicts_read_as_plain_sentences(kind: str, sentence: str, tmp_path) -> None:
    from app.schema import RunError

    error = RunError(kind=kind, type="SandboxError", message="The details <here>.", line=None)
    canned = Canned(DeltaTrace(ok=False, steps=[], error=error))
    with TestClient(create_app(Settings(data_dir=tmp_path), runner=canned)) as client:
        html = client.post("/run", data={"code": "x = 1"}).text
    (box,) = [a for _, a in parse(html).tags if a.get("data-testid") == "error"]
    assert box["data-kind"] == kind
    assert sentence in html and "The details &lt;here&gt;." in html
    assert "SandboxError" not in html  # the sandbox's verdicts are sentences, not exception names


def test_a_run_cut_at_the_step_limit_says_so(tmp_path) -> None:
    from app.engine import EngineLimits, trace_delta

    loop = "for i in range(10000):\n    x = i\n"
    result = DeltaTrace.model_validate(trace_delta(loop, EngineLimits(max_steps=1000)))
    assert result.truncated
    settings = Settings(data_dir=tmp_path, max_steps=1000)
    with TestClient(create_app(settings, runner=Canned(result))) as client:
        html = client.post("/run", data={"code": "..."}).text
    tags = parse(html)
    (notice,) = [a for _, a in tags.tags if a.get("data-testid") in ("notice", "error")]
    assert notice["data-cause"] == "steps" and "went past the limit of 1,000 steps" in html
    assert "the steps after step 999 were not recorded" in html
    assert tags.payload["count"] == 1000


def test_a_stored_short_link_opens_its_code(client: TestClient) -> None:
    created = client.post("/api/links", json={"code": "z = torch.zeros(2)  # stored\n"})
    assert created.status_code == 200
    link_id = created.json()["id"]
    assert "z = torch.zeros(2)  # stored" in client.get("/", params={"s": link_id}).text
    assert "short link does not exist here" in client.get("/", params={"s": "nope"}).text


class Text(HTMLParser):
    """The text a person reads in a fragment (and its title attributes) and the keys of the elements
    that show it, without the payload script, the diagnostics panel and the graph view (their words
    are their own branches')."""

    OTHERS = ("diagnostics", "graph-view")

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.keys: set[int] = set()
        self._skip: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if self._skip or tag == "script" or attrs.get("data-testid") in self.OTHERS:
            self._skip.append(tag)
            return
        if attrs.get("title"):
            self.text.append(attrs["title"])
        if "data-k" in attrs:
            self.keys.add(int(attrs["data-k"]))

    def handle_endtag(self, tag):
        if self._skip and self._skip[-1] == tag:
            self._skip.pop()

    def handle_data(self, data):
        if not self._skip:
            self.text.append(data)


INTERNAL_ID = re.compile(r"\b[tsn]\d+\b")


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.slug)
def test_nothing_meant_for_a_person_names_an_internal_id(client: TestClient, example) -> None:
    html = client.post("/run", data={"code": example.code}).text
    reader = Text()
    reader.feed(html)
    assert not INTERNAL_ID.findall(" ".join(reader.text))
    payload = parse(html).payload
    texts = [value for k, runs in payload["text"] if k in reader.keys for _, _, value in runs]
    texts += [text for label, text in payload["pairs"] if label != "id"]  # the facts panel's "id" row may
    texts += [entry[0] for _, entries in payload["folds"] for entry in entries]
    assert not [t for t in texts if INTERNAL_ID.search(t)]


def test_a_written_fragment_leaves_no_cycle_holding_its_view() -> None:
    """``_memory.html`` defines macros: without ``pages.render`` emptying its contexts the view model
    would live on in a reference cycle until the cyclic collector scanned it all."""
    import gc
    import weakref

    from app.web.pages import render, run_context, run_limits

    code = "x = torch.ones(3, requires_grad=True)\ny = (x * 2).sum()\ny.backward()"
    context = run_context(trace(code), code, None, run_limits(Settings()))
    view = weakref.ref(context["view"])
    enabled = gc.isenabled()
    gc.disable()
    try:
        assert "memory-view" in render("_run.html", **context)
        del context
        assert view() is None
    finally:
        if enabled:
            gc.enable()


def test_the_step_data_is_the_same_json_once_parsed() -> None:
    """``tojson`` writes orjson's compact JSON: the value parsed is what json.dumps wrote, keys sorted;
    what orjson refuses (a lone surrogate a snippet printed) is written by json.dumps as before."""
    from jinja2.utils import htmlsafe_json_dumps

    from app.web.pages import templates, tojson

    value = {"b": [1, 2.5, None, True], "a": {"x": "naïve 中文 </script> & 'q'"},
             "c": {3: "three", 10: "ten"}}
    written = tojson(value)
    assert json.loads(written) == json.loads(json.dumps(value, sort_keys=True))
    assert list(json.loads(written)) == ["a", "b", "c"]
    assert not any(c in written for c in "<>&'")
    assert "</script>" not in templates.from_string("{{ v|tojson }}").render(v=value)
    odd = {"printed": "\ud800"}
    assert tojson(odd) == htmlsafe_json_dumps(odd, sort_keys=True)
    assert json.loads(templates.from_string("{{ v|tojson }}").render(v=odd)) == odd
