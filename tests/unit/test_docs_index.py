"""docs/README.md lists every page of docs/ (a new page must be added to the index) and links
only to pages that exist."""

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_docs_index_lists_every_page_and_only_pages_that_exist():
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([^)#]+\.md)(?:#[^)]*)?\)", index))
    pages = {p.name for p in DOCS.glob("*.md")} - {"README.md"}
    assert pages - linked == set(), f"pages of docs/ missing from docs/README.md: {sorted(pages - linked)}"
    assert linked - pages == set(), f"docs/README.md links to pages that do not exist: {sorted(linked - pages)}"
