"""The query parameters ``/embed`` and ``/render.svg`` share, checked strictly.

Both are opened from other people's pages (docs, READMEs), so a mistyped URL gets a clear 400 that
says what is wrong instead of a guess or a 500. Unknown parameters are ignored (docs tools append
their own, e.g. ``utm_*``).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

from fastapi.concurrency import run_in_threadpool
from starlette.datastructures import QueryParams

from app.gallery import EXAMPLES, Example, get_example, localized
from app.i18n import DEFAULT, TAGS, current_tag
from app.i18n import gettext as _
from app.render.compare import code_pair, twin_pair
from app.shortlinks import StoreUnavailable
from app.shortlinks.ids import is_valid_id
from app.web.links import playground_url
from app.web.permalink import PermalinkError, decode_code, decode_pair, encode_code

VIEWS = ("both", "memory", "graph")
THEMES = ("light", "dark")
TRUE = ("", "1", "true", "yes", "on")  # &readonly alone means yes
FALSE = ("0", "false", "no", "off")
MAX_STEP_DIGITS = 7  # int() of thousands of digits is slow (and refused past 4300)


class ParamError(ValueError):
    """A parameter the embed cannot use; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Source:
    """Where the code comes from: exactly one of a permalink token, a short-link id, an example, or
    a gallery pair to compare (bug vs fix), or two permalink tokens to compare (``code`` and
    ``compare_code``)."""

    token: str | None = None
    link_id: str | None = None
    example: str | None = None
    compare: str | None = None
    compare_token: str | None = None  # with ``token``: the second code of a compare

    @property
    def compares(self) -> bool:
        return self.compare is not None or self.compare_token is not None


@dataclass(frozen=True)
class EmbedParams:
    source: Source
    step: int | None  # 0-based; None: the last step
    view: str = "both"
    theme: str = "light"
    readonly: bool = False
    autorun: bool = False
    cuda_on_cpu: bool = False  # &cuda=1: the code's cuda mapped to the CPU (app/engine/cuda_on_cpu.py)


def _choice(params: QueryParams, name: str, allowed: tuple[str, ...]) -> str:
    value = params.get(name, allowed[0]).strip().lower()
    if value not in allowed:
        raise ParamError(400, _("{name} must be one of {allowed} (got {value}).").format(
            name=name, allowed=", ".join(allowed), value=_show(value)))
    return value


def _flag(params: QueryParams, name: str) -> bool:
    if name not in params:
        return False
    value = params[name].strip().lower()
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise ParamError(400, _("{name} must be 1 or 0 (got {value}).").format(name=name, value=_show(value)))


def _step(params: QueryParams) -> int | None:
    raw = params.get("step", "").strip()
    if not raw:
        return None
    if not raw.isdecimal() or len(raw) > MAX_STEP_DIGITS or int(raw) < 1:
        raise ParamError(400, _("step must be a whole number from 1 (got {value}).").format(value=_show(raw)))
    return int(raw) - 1


def _show(value: str) -> str:
    """A rejected value, cut short: error pages quote it (escaped) but never at length."""
    return repr(value if len(value) <= 40 else value[:40] + "…")


def _source(params: QueryParams) -> Source:
    given = [name for name in ("code", "s", "example") if params.get(name, "").strip()]
    if len(given) > 1:
        raise ParamError(400, _("Give only one of code, s or example (got {given}).").format(
            given=", ".join(given)))
    if params.get("compare_code", "").strip():
        if given != ["code"] or params.get("compare", "").strip():
            raise ParamError(400, _("compare_code is compared with code: give both, without s, example "
                                    "or compare."))
        return Source(token=params["code"].strip(), compare_token=params["compare_code"].strip())
    if params.get("compare", "").strip():
        if given:
            raise ParamError(400, _("compare names its own code: give it without {given}.").format(
                given=", ".join(given)))
        slug = params["compare"].strip()
        if twin_pair(slug) is None:
            raise ParamError(400, _("compare must name a gallery example that has a fixed twin (got {name}).")
                             .format(name=_show(slug)))
        return Source(compare=slug)
    if "code" in given:
        return Source(token=params["code"].strip())
    if "s" in given:
        link_id = params["s"].strip().lower()
        if not is_valid_id(link_id):
            raise ParamError(400, _("s (a short-link id) must be letters a-z and digits 2-7."))
        return Source(link_id=link_id)
    slug = params.get("example", "").strip() or EXAMPLES[0].slug
    if get_example(slug) is None:
        raise ParamError(400, _("There is no example {name}.").format(name=_show(slug)))
    return Source(example=slug)


def parse_params(params: QueryParams) -> EmbedParams:
    """Every parameter checked; the first problem raises ``ParamError`` (400)."""
    return EmbedParams(
        source=_source(params), step=_step(params), view=_choice(params, "view", VIEWS),
        theme=_choice(params, "theme", THEMES), readonly=_flag(params, "readonly"),
        autorun=_flag(params, "autorun"), cuda_on_cpu=_flag(params, "cuda"),
    )


async def resolve_code(app_state, source: Source, max_bytes: int) -> str:  # noqa: ANN001 - starlette State
    """The snippet a source names: 400 for a broken token, 404 for an unknown id, 503 when the
    store is down."""
    if source.token is not None:
        try:
            return decode_code(source.token, max_bytes)
        except PermalinkError as error:
            raise ParamError(400, str(error)) from None
    if source.link_id is not None:
        try:
            code = await run_in_threadpool(app_state.links.get, source.link_id)  # blocking database call
        except StoreUnavailable:
            unavailable = _("Short links are unavailable right now; try again in a moment.")
            raise ParamError(503, unavailable) from None
        if code is None:
            raise ParamError(404, _("This short link does not exist here."))
        return code
    example = get_example(source.example or "") or EXAMPLES[0]
    return localized(example).code


def resolve_pair(source: Source, max_bytes: int) -> tuple[Example, Example] | None:
    """The two sides a compare source names (None: the source is not a compare); 400 for a broken
    token, naming which of the two it is."""
    if source.compare is not None:
        return twin_pair(source.compare)
    if source.compare_token is None:
        return None
    try:
        return code_pair(*decode_pair(source.token or "", source.compare_token, max_bytes))
    except PermalinkError as error:
        raise ParamError(400, str(error)) from None


def playground_href(source: Source, code: str, step: int | None, cuda_on_cpu: bool = False) -> str:
    """The playground URL that opens the same code (and step, counted from 1), in the same language
    (English, the default, needs no ``lang=``), with cuda on the CPU when the embed runs it so."""
    if source.compare is not None:
        url = "/compare?" + urlencode({"example": source.compare})
    elif source.compare_token is not None:
        url = "/compare?" + urlencode({"code": source.token, "compare_code": source.compare_token})
    elif source.example is not None:
        url = "/?" + urlencode({"example": source.example})
    elif source.link_id is not None:
        url = playground_url(source.link_id, code)
    else:
        url = "/?" + urlencode({"code": encode_code(code)})
    url = f"{url}&cuda=1" if cuda_on_cpu and not source.compares else url
    url = url if step is None else f"{url}&step={step + 1}"
    tag = current_tag()
    return url if tag == TAGS[DEFAULT] else f"{url}&{urlencode({'lang': tag})}"
