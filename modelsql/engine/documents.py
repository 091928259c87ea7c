"""The documents generated from the code: ``docs/statements.md`` (:mod:`modelsql.engine.statement_docs`),
``docs/options.md`` and README's option tables (:mod:`modelsql.engine.options.docs`), ``docs/errors.md``
(:func:`modelsql.errors.codes_markdown`). ``python -m modelsql.engine.documents [ROOT] [--check]`` writes them
(``--check`` only says which differ, exit status 1); the tests fail while one differs."""

from __future__ import annotations

import sys
from pathlib import Path

from modelsql.engine.options.docs import options_md, with_readme_tables
from modelsql.engine.statement_docs import statements_md
from modelsql.errors import codes_markdown

__all__ = ["wanted", "main"]


def wanted(root: Path) -> dict[Path, str]:
    """Each generated document under the repository root ``root`` -> the text it should have."""
    readme = root / "README.md"
    return {root / "docs" / "statements.md": statements_md(), root / "docs" / "options.md": options_md(),
            root / "docs" / "errors.md": codes_markdown(), readme: with_readme_tables(readme.read_text())}


def main(argv: list[str]) -> int:
    """Write the documents under the repository root (``argv[0]``, else the current folder); with ``--check``
    only print those that differ and return 1 if any does."""
    check = "--check" in argv
    paths = [a for a in argv if a != "--check"]
    texts = wanted(Path(paths[0] if paths else "."))
    stale = [p for p, text in texts.items() if not p.exists() or p.read_text() != text]
    if not check:
        for p in stale:
            p.write_text(texts[p])
    for p in stale:
        print(("differs: " if check else "wrote ") + str(p))
    return 1 if check and stale else 0


if __name__ == "__main__":  # pragma: no cover - the documents' generator
    sys.exit(main(sys.argv[1:]))
