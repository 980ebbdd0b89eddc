"""Points the Colab badges and the notebooks' install cells at this repository.

The one place that names the repository is ``[project.urls] Repository`` in pyproject.toml
(``https://github.com/OWNER/REPO`` until a maintainer fills it in). This script copies it
into the README's "Open in Colab" badges and into every notebook's ``REPO_URL`` line:

    python notebooks/set_repository.py            # rewrite the badges and REPO_URL from pyproject.toml
    python notebooks/set_repository.py --check    # exit 1 if they disagree with it (the tests run this)

With the placeholder left in pyproject.toml, ``REPO_URL`` stays empty (Colab then installs an
uploaded wheel) and the badges keep ``OWNER/REPO``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLACEHOLDER = "https://github.com/OWNER/REPO"
_BADGE = re.compile(r"https://colab\.research\.google\.com/github/[^/\s)]+/[^/\s)]+/blob/main/notebooks/")
_REPO_LINE = re.compile(r'^REPO_URL = "[^"]*"', re.M)


def repository_url(pyproject: Path = ROOT / "pyproject.toml") -> str:
    urls = tomllib.loads(pyproject.read_text()).get("project", {}).get("urls", {})
    url = urls.get("Repository")
    if not url:
        raise SystemExit(f"{pyproject}: [project.urls] has no Repository entry")
    url = url.rstrip("/").removesuffix(".git")
    if not re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", url):
        raise SystemExit(f"{pyproject}: Repository must look like https://github.com/OWNER/NAME, not {url!r}")
    return url


def expected(url: str) -> tuple[str, str]:
    """(badge prefix, REPO_URL value) for a repository URL."""
    path = url.removeprefix("https://github.com/")
    return (f"https://colab.research.google.com/github/{path}/blob/main/notebooks/",
            "" if url == PLACEHOLDER else url + ".git")


def rewrite(url: str, check: bool) -> list[str]:
    """Rewrites (or, with ``check``, only compares) the README and the notebooks; returns the files that differ."""
    badge, repo_url = expected(url)
    stale = []
    readme = ROOT / "README.md"
    text = readme.read_text()
    new = _BADGE.sub(badge, text)
    if new != text:
        stale.append(str(readme.relative_to(ROOT)))
        if not check:
            readme.write_text(new)
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = json.loads(path.read_text())
        changed = False
        for cell in nb["cells"]:
            src = "".join(cell["source"])
            if cell["cell_type"] != "code" or not _REPO_LINE.search(src):
                continue
            new_src = _REPO_LINE.sub(f'REPO_URL = "{repo_url}"', src)
            if new_src != src:
                cell["source"] = new_src.splitlines(keepends=True)
                changed = True
        if changed:
            stale.append(str(path.relative_to(ROOT)))
            if not check:
                path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report files that disagree with pyproject.toml")
    args = parser.parse_args(argv)
    url = repository_url()
    stale = rewrite(url, args.check)
    if args.check:
        for name in stale:
            print(f"{name}: does not match [project.urls] Repository = {url}")
        return 1 if stale else 0
    print(f"{len(stale)} file(s) rewritten for {url}" if stale else f"already pointing at {url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
