#!/usr/bin/env python3
"""Fails on a broken internal link or anchor in the book mdBook rendered (`make docs` runs it).

Hand-written because no tool fits the pinned mdBook: mdBook 0.5 checks no links;
mdbook-linkcheck does not run on 0.5 (it cannot parse 0.5's render context); its maintained
fork mdbook-linkcheck2 (0.13) checks that linked files exist but not anchors ("fragment
resolution isn't implemented", linkcheck2 0.10 src/validation/filesystem.rs) and pulls an HTTP
client stack into a tool we build on every fresh machine; lychee checks anchors but is a far
larger build for what is about 100 lines here. It reads the HTML mdBook wrote, so it sees the
links and heading ids mdBook made, after its `.md` → `.html` rewrite and `{{#include}}`.

Checked: every relative `href` names a file of the book, and its `#fragment` an `id` (or
`name`) in that file; a link to this repository on GitHub (`REPO/blob/main/PATH`,
`REPO/tree/main/PATH`) names a path that exists in the checkout. The Markdown files that point
into the book (README.md, plugins/README.md) are checked too: a relative link names a file of
the checkout, and one into `docs/src/` with a `#fragment` an anchor of the rendered page. Other
external links are not fetched (CI must not depend on the network).

Usage: check-links.py BOOK_DIR CHECKOUT_DIR
"""

import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

REPO = "https://github.com/kubewasm/kubewasm/"
# mdBook's own pages: the print page repeats every chapter with rewritten links, the 404 page
# is written for the site root; neither is a page an author writes.
SKIP = {"print.html", "404.html", "toc.html"}


class Page(HTMLParser):
    """The ids and the links of one HTML page."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids = set()
        self.links = []  # (line, href)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for key in ("id", "name") if tag == "a" else ("id",):
            if attrs.get(key):
                self.ids.add(attrs[key])
        if tag == "a" and attrs.get("href"):
            self.links.append((self.getpos()[0], attrs["href"]))


def parse(path, cache={}):
    if path not in cache:
        page = Page()
        page.feed(path.read_text(encoding="utf-8"))
        cache[path] = page
    return cache[path]


def check(book, checkout):
    errors = []
    pages = sorted(p for p in book.rglob("*.html") if p.name not in SKIP)
    for path in pages:
        rel = path.relative_to(book)
        for line, href in parse(path).links:
            url = urlsplit(href)
            if href.startswith(REPO):
                parts = url.path.split("/")[3:]  # ['', 'kubewasm', 'kubewasm', kind, branch, ...]
                if len(parts) >= 3 and parts[0] in ("blob", "tree"):
                    target = checkout.joinpath(*parts[2:])
                    if not target.exists():
                        errors.append(f"{rel}:{line}: {href}: no {'/'.join(parts[2:])} in the repository")
                continue
            if url.scheme or href.startswith("//") or href.startswith("mailto:"):
                continue
            target = path if not url.path else (path.parent / unquote(url.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                errors.append(f"{rel}:{line}: {href}: no such page")
                continue
            fragment = unquote(url.fragment)
            if fragment and target.suffix == ".html" and fragment not in parse(target).ids:
                errors.append(f"{rel}:{line}: {href}: no anchor #{fragment} in {target.relative_to(book.resolve())}")
    return pages, errors


MARKDOWN = ["README.md", "plugins/README.md"]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def check_markdown(book, checkout):
    errors = []
    for name in MARKDOWN:
        path = checkout / name
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for href in LINK.findall(line):
                url = urlsplit(href)
                if url.scheme or href.startswith("#"):
                    continue
                target = (path.parent / unquote(url.path)).resolve()
                if not target.exists():
                    errors.append(f"{name}:{number}: {href}: no such file")
                    continue
                docs = (checkout / "docs/src").resolve()
                if url.fragment and target.suffix == ".md" and target.is_relative_to(docs):
                    page = book / target.relative_to(docs).with_suffix(".html")
                    if url.fragment not in parse(page).ids:
                        errors.append(f"{name}:{number}: {href}: no anchor #{url.fragment} in the book's page")
    return errors


def main():
    book, checkout = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    pages, errors = check(book, checkout)
    errors += check_markdown(book, checkout)
    if not pages:
        sys.exit(f"check-links: no pages under {book}")
    for error in errors:
        print(f"check-links: {error}", file=sys.stderr)
    if errors:
        sys.exit(f"check-links: {len(errors)} broken link(s) in {len(pages)} pages")
    print(f"check-links: {len(pages)} pages and {', '.join(MARKDOWN)}: every internal link and anchor resolves")


if __name__ == "__main__":
    main()
