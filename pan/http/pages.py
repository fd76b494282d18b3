"""The HTML pages people look at: a repository's and a worker's `/debug` (also their `/`).

Rendered from the Jinja2 templates in ``pan/http/templates`` (autoescaped), with
the data the JSON routes give; each page refreshes itself, and the
repository's page links to every publisher's own page.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from aiohttp import web
from jinja2 import Environment, PackageLoader, select_autoescape

REFRESH_S = 5


@cache
def _environment() -> Environment:
    return Environment(loader=PackageLoader("pan.http", "templates"), autoescape=select_autoescape(["html"]))


def render(template: str, **values: Any) -> web.Response:
    html = _environment().get_template(template).render(refresh_s=REFRESH_S, **values)
    return web.Response(text=html, content_type="text/html", charset="utf-8")


def endpoint_link(host: str, port: int, scheme: str = "http") -> dict[str, str]:
    """An address as the pages show it and the link to its own page."""
    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return {"endpoint": shown, "url": f"{scheme}://{shown}/debug"}


def flat(values: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """Nested counters as (dotted key, value) rows, for a two-column table."""
    rows: list[tuple[str, Any]] = []
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            rows.extend(flat(value, f"{name}."))
        else:
            rows.append((name, value))
    return rows
