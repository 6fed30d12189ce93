"""Checks shared by the tests of Agnitra's HTML pages (bench, profile, inspect, optimize)."""

from __future__ import annotations

from html.parser import HTMLParser


class _AttributeCollector(HTMLParser):
    """Every tag and (name, value) attribute of a page; script bodies are not parsed as tags."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attributes: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attributes.extend((name, value or "") for name, value in attrs)


def parse_page(page: str) -> _AttributeCollector:
    collector = _AttributeCollector()
    collector.feed(page)
    collector.close()
    return collector


def assert_self_contained(page: str) -> None:
    """No src/href to the network, no <link>, no @import or remote url(): the page works offline."""
    parsed = parse_page(page)
    linked = [(name, value) for name, value in parsed.attributes if name in ("src", "href")]
    remote = [(name, value) for name, value in linked if "http://" in value or "https://" in value or value.strip().startswith("//")]
    assert remote == [], f"page links out: {remote}"
    assert "link" not in parsed.tags
    assert "@import" not in page and "url(http" not in page
